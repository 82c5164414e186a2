//! Soak: one job grows by 2 and shrinks by 2 from the CLI, cycle after cycle, and must
//! neither fail nor grow: open fds, threads and RSS of the job's master (the process
//! that holds the job) and shared-memory segments are sampled at the start and the end
//! (issue 10), RSS at half-time too (issue 28).
//!
//! `DYNRES_SOAK_CYCLES` sets the number of cycles (default 200, what CI runs; the
//! documented long run is 1000: `DYNRES_SOAK_CYCLES=1000 cargo test -p dynres-tests
//! --release --test soak -- --nocapture`). It prints one summary table.

use std::time::{Duration, Instant};

use dynres_tests::job::{Running, Runtime, signal, synthetic_idle};

/// glibc malloc settings for the master, so that its RSS follows its live heap: one
/// arena (no per-thread arenas each keeping its own high-water mark), no per-thread
/// caches of freed blocks, the heap's free top returned at once rather than after
/// 128 KiB, and blocks of 64 KiB and more mapped and unmapped whole (a fixed threshold:
/// glibc's moving one leaves large freed buffers in the heap). Other C libraries ignore
/// the variable; the leak checks then see more noise.
const MALLOC_TUNABLES: &str = "glibc.malloc.arena_max=1:glibc.malloc.tcache_count=0:\
    glibc.malloc.trim_threshold=0:glibc.malloc.mmap_threshold=65536";

#[derive(Clone, Copy, Debug)]
struct Sample {
    rss_kib: u64,
    fds: usize,
    threads: usize,
    shm: usize,
    procs: usize,
}

/// The resident set of process `pid`, in KiB: `/proc/PID/statm`'s second field
/// (resident pages) times the page size.
fn rss_of(pid: u32) -> u64 {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap() / 1024
}

/// The process that holds job `job` — its master, whose memory this test watches: the
/// one that keeps the job directory's `pid` file open (and locked, see
/// `runtime/src/jobdir.rs`). That need not be `spawned`, the process the test
/// started, if `dynres run` runs the job under a supervisor; so the candidates are the
/// pid the file names, `spawned` and the children of `spawned`, and the pid file's
/// word (else `spawned`) stands if none of them is seen holding it.
fn master_pid(rt: &Runtime, job: &str, spawned: u32) -> u32 {
    let pid_file = rt.dir.join(job).join("pid");
    // As the kernel names it in /proc/PID/fd (no symbolic link in the way).
    let pid_file = std::fs::canonicalize(&pid_file).unwrap_or(pid_file);
    let named = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let children = std::fs::read_to_string(format!("/proc/{spawned}/task/{spawned}/children"))
        .unwrap_or_default();
    let holds = |pid: &u32| {
        std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
            fds.flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == pid_file))
        })
    };
    named
        .into_iter()
        .chain([spawned])
        .chain(children.split_whitespace().filter_map(|c| c.parse().ok()))
        .find(holds)
        .unwrap_or(named.unwrap_or(spawned))
}

fn sample(rt: &Runtime, job: &str, master: u32) -> Sample {
    let rss_kib = rss_of(master);
    let count = |dir: String| std::fs::read_dir(dir).map_or(0, |d| d.count());
    let st = rt.run(&["status", job]);
    assert_eq!(st.code, Some(0), "{}", st.dump());
    let pids: Vec<String> = st
        .stdout
        .lines()
        .filter(|l| l.ends_with("running") || l.ends_with("leaving"))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    let shm = std::fs::read_dir("/dev/shm").map_or(0, |d| {
        d.flatten()
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                pids.iter()
                    .any(|p| n.starts_with(&format!("dynres-shm-{p}-")))
            })
            .count()
    });
    // A tool connection (this very `status`) holds an fd and a thread for a moment after
    // its answer: take the least of a few readings, which a leak (permanent) still shows.
    let least = |dir: String| {
        (0..5)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(20));
                count(dir.clone())
            })
            .min()
            .unwrap()
    };
    Sample {
        rss_kib,
        fds: least(format!("/proc/{master}/fd")),
        threads: least(format!("/proc/{master}/task")),
        shm,
        procs: pids.len(),
    }
}

fn percentile(v: &[Duration], p: f64) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Waits until the job is back to `n` running processes and nothing is leaving.
fn settle(rt: &Runtime, job: &str, n: usize) {
    rt.wait_status(job, "the job settled", |s| {
        s.lines().filter(|l| l.ends_with("running")).count() == n
            && !s.lines().any(|l| l.ends_with("leaving"))
    });
}

#[test]
fn soak_grow_and_shrink_cycles() {
    let cycles: usize = std::env::var("DYNRES_SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let rt = Runtime::new("soak");
    let job = "soak";
    let mut args: Vec<String> = ["run", "-n", "2", "--max", "8", "--job-id", job]
        .map(String::from)
        .to_vec();
    args.extend(synthetic_idle());
    let mut child = rt.command(&args.iter().map(String::as_str).collect::<Vec<_>>());
    // Info level: a debug log of thousands of changes would only slow the run. The log
    // goes to a file whole: a pipe's capture keeps only its head and tail.
    child.env("DYNRES_LOG", "info");
    child.env("GLIBC_TUNABLES", MALLOC_TUNABLES);
    let log_path = rt.scratch().join("soak-runtime.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let child = Running::adopt(
        std::os::unix::process::CommandExt::process_group(&mut child, 0)
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    rt.wait_for_job(job);
    settle(&rt, job, 2);
    let master = master_pid(&rt, job, child.id());
    // Warm up (first launches, allocator pools), then take the baseline.
    for _ in 0..5 {
        assert_eq!(rt.run(&["grow", job, "+2"]).code, Some(0));
        assert_eq!(rt.run(&["shrink", job, "-2"]).code, Some(0));
    }
    settle(&rt, job, 2);
    let start = sample(&rt, job, master);
    let mut grow = Vec::with_capacity(cycles);
    let mut failures = Vec::new();
    let t0 = Instant::now();
    let mut half_rss = start.rss_kib;
    for i in 0..cycles {
        let t = Instant::now();
        let g = rt.run(&["grow", job, "+2"]);
        grow.push(t.elapsed());
        let s = rt.run(&["shrink", job, "-2"]);
        for f in [g, s] {
            if f.code != Some(0) || !f.stdout.contains("FINALIZED") {
                failures.push(format!("cycle {i}: {}", f.dump()));
            }
        }
        if failures.len() > 3 {
            break;
        }
        if i + 1 == cycles / 2 {
            // Allocator arenas, buffers and bounded histories fill in the first
            // cycles; a leak keeps growing in the second half too.
            half_rss = rss_of(master);
        }
        if (i + 1) % 100 == 0 {
            eprintln!(
                "soak: {} of {cycles} cycles, {:.1} s, master RSS {} KiB",
                i + 1,
                t0.elapsed().as_secs_f64(),
                rss_of(master)
            );
        }
    }
    settle(&rt, job, 2);
    let end = sample(&rt, job, master);
    signal(child.id(), libc::SIGTERM);
    let mut f = child.finish(rt.dir.clone(), Duration::from_secs(60));
    f.stderr = String::from_utf8_lossy(&std::fs::read(&log_path).unwrap_or_default()).into_owned();
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let n = grow.len().min(100);
    let (first, last) = (&grow[..n], &grow[grow.len() - n..]);
    eprintln!(
        "\nsoak: {cycles} cycles (grow +2, shrink -2), 0 failures, {:.1} s\n\
         {:<22} {:>10} {:>10}\n\
         {:<22} {:>10} {:>10}\n{:<22} {:>10} {:>10}\n{:<22} {:>10} {:>10}\n\
         {:<22} {:>10} {:>10}\n{:<22} {:>10} {:>10}\n\
         grow latency (CLI call to FINALIZED) median / p99: first {n}: {:.1} / {:.1} ms, \
         last {n}: {:.1} / {:.1} ms",
        t0.elapsed().as_secs_f64(),
        "",
        "start",
        "end",
        "master RSS (KiB)",
        start.rss_kib,
        end.rss_kib,
        "master fds",
        start.fds,
        end.fds,
        "master threads",
        start.threads,
        end.threads,
        "shm segments of job",
        start.shm,
        end.shm,
        "processes",
        start.procs,
        end.procs,
        percentile(first, 0.5).as_secs_f64() * 1e3,
        percentile(first, 0.99).as_secs_f64() * 1e3,
        percentile(last, 0.5).as_secs_f64() * 1e3,
        percentile(last, 0.99).as_secs_f64() * 1e3,
    );
    assert_eq!(f.code, Some(130), "{}", f.dump());
    assert_eq!((start.procs, end.procs), (2, 2));
    assert_eq!(end.fds, start.fds, "fds leak: {start:?} -> {end:?}");
    assert_eq!(
        end.threads, start.threads,
        "threads leak: {start:?} -> {end:?}"
    );
    assert_eq!(
        end.shm, start.shm,
        "shm segments leak: {start:?} -> {end:?}"
    );
    // A flat tail of the master's RSS. With `MALLOC_TUNABLES` the RSS follows the live
    // heap to within pages, and the live heap is flat (heaptrack: 210.5 KiB in use after
    // 100 cycles and after 600). What still moves the RSS is not linear in the number of
    // changes — most likely thread stacks glibc caches as the most threads alive at once
    // rises, and the heap's top moving with where long-lived blocks lie: measured in
    // debug builds as up to three steps of about 60 KiB in the first 330 cycles, then
    // ±16 KiB. So the second half may grow by TAIL_KIB (32 pages), however long the
    // run. Issue 28's leak (the process table kept every process, about 0.3 KiB per
    // cycle) grew it by 140-176 KiB from cycle 500 to 1000 (debug) and fails the
    // 1000-cycle run (+4 to +16 KiB since, PSET-24); the default run catches leaks of
    // about 1.3 KiB per cycle, and the kernel test `rc_footprint` pins the tables
    // themselves, exactly. The whole run (after the warm-up) stays under a cap.
    // A second half that starts before the settling is over (the default run's starts
    // at cycle 100) may hold two of those steps: it gets a third more room, so the CI
    // run cannot flake on allocator settling; the long runs keep the tight bound.
    const TAIL_KIB: u64 = 128;
    const SETTLING_KIB: u64 = 192;
    const SETTLED_AFTER: usize = 330;
    const RUN_KIB: u64 = 1024;
    let tail = end.rss_kib.saturating_sub(half_rss);
    let bound = if cycles / 2 >= SETTLED_AFTER {
        TAIL_KIB
    } else {
        SETTLING_KIB
    };
    eprintln!("master RSS at half-time: {half_rss} KiB (tail bound {bound} KiB)");
    assert!(
        tail < bound,
        "master RSS grew {tail} KiB over the last {} cycles: {half_rss} KiB -> {end:?}",
        cycles - cycles / 2
    );
    let growth = end.rss_kib.saturating_sub(start.rss_kib);
    assert!(
        growth < RUN_KIB,
        "master RSS grew {growth} KiB over {cycles} cycles: {start:?} -> {end:?}"
    );
}
