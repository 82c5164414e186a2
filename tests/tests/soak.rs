//! Soak: one job grows by 2 and shrinks by 2 from the CLI, cycle after cycle, and must
//! neither fail nor grow: open fds, threads and RSS of the runtime and shared-memory
//! segments are sampled at the start and the end (issue 10).
//!
//! `DYNRES_SOAK_CYCLES` sets the number of cycles (default 200, what CI runs; the
//! documented long run is 1000: `DYNRES_SOAK_CYCLES=1000 cargo test -p dynres-tests
//! --release --test soak -- --nocapture`). It prints one summary table.

use std::time::{Duration, Instant};

use dynres_tests::job::{Running, Runtime, signal, synthetic_idle};

#[derive(Clone, Copy, Debug)]
struct Sample {
    rss_kib: u64,
    fds: usize,
    threads: usize,
    shm: usize,
    procs: usize,
}

/// The resident set of process `pid`, in KiB.
fn rss_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

fn sample(rt: &Runtime, job: &str, runtime_pid: u32) -> Sample {
    let rss_kib = rss_of(runtime_pid);
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
        fds: least(format!("/proc/{runtime_pid}/fd")),
        threads: least(format!("/proc/{runtime_pid}/task")),
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
    // Warm up (first launches, allocator pools), then take the baseline.
    for _ in 0..5 {
        assert_eq!(rt.run(&["grow", job, "+2"]).code, Some(0));
        assert_eq!(rt.run(&["shrink", job, "-2"]).code, Some(0));
    }
    settle(&rt, job, 2);
    let start = sample(&rt, job, child.id());
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
            half_rss = rss_of(child.id());
        }
        if (i + 1) % 100 == 0 {
            eprintln!(
                "soak: {} of {cycles} cycles, {:.1} s",
                i + 1,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    settle(&rt, job, 2);
    let end = sample(&rt, job, child.id());
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
        "runtime RSS (KiB)",
        start.rss_kib,
        end.rss_kib,
        "runtime fds",
        start.fds,
        end.fds,
        "runtime threads",
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
    // Flat RSS. A leak is linear in the number of changes; allocator arenas and the
    // kernel's bounded histories are not, and fill mostly in the first cycles. So the
    // second half of the run may grow by 192 KiB of noise (measured: 76–176 KiB over
    // 100 cycles in debug builds) plus less than 1 KiB per cycle — over the default
    // 200 cycles that catches a leak of about 1 KiB per change, the 1000-cycle run
    // smaller ones — and the whole run stays under a generous cap.
    let second_half = end.rss_kib.saturating_sub(half_rss);
    let half = (cycles - cycles / 2) as u64;
    eprintln!("runtime RSS at half-time: {half_rss} KiB");
    assert!(
        second_half < 192 + half,
        "runtime RSS grew {second_half} KiB over the last {half} cycles: {half_rss} KiB -> {end:?}"
    );
    let growth = end.rss_kib.saturating_sub(start.rss_kib);
    assert!(
        growth < 1024 + cycles as u64 / 2,
        "runtime RSS grew {growth} KiB over {cycles} cycles: {start:?} -> {end:?}"
    );
}
