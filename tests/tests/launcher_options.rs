//! `dynres run` options an mpirun user reaches for (issue 32): `--timeout`,
//! `--bind-to core`, `--oversubscribe`, `-N`/`--map-by ppr:K:node`, `-v`.

use std::time::Duration;

use dynres_tests::job::Runtime;

/// `--timeout S` ends a job that runs longer: its processes killed, nothing left,
/// exit status 124 (as timeout(1)) and one line that says why.
#[test]
fn timeout_ends_the_job_with_124() {
    let rt = Runtime::new("timeout");
    let cmd = rt.command(&[
        "run",
        "-n",
        "2",
        "--slots",
        "2",
        "--timeout",
        "1",
        "--",
        "sleep",
        "60",
    ]);
    let f = rt
        .run_bounded(cmd, Duration::from_secs(60))
        .unwrap_or_else(|f| panic!("the job outlived its timeout\n{}", f.dump()));
    assert_eq!(f.code, Some(124), "{}", f.dump());
    assert!(f.stderr.contains("job timed out after 1 s"), "{}", f.dump());
    f.assert_nothing_left();
    let quick = rt.run(&["run", "-n", "1", "--timeout", "60", "--", "true"]);
    assert_eq!(
        quick.code,
        Some(0),
        "a job within its time is not touched\n{}",
        quick.dump()
    );
    let bad = rt.run(&["run", "-n", "1", "--timeout", "-3", "--", "true"]);
    assert_eq!(bad.code, Some(2), "{}", bad.dump());
}

/// The CPUs this test process may use, from /proc (the runtime binds within them).
fn allowed() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string();
    let mut out = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()),
            None => out.push(part.parse().unwrap()),
        }
    }
    out
}

/// `--bind-to core`: local rank i runs on the i-th allowed CPU only (cycling), and
/// the log says so per rank; without it, a rank may run on every allowed CPU.
#[test]
fn bind_to_core_pins_each_local_rank_to_its_cpu() {
    let rt = Runtime::new("bind");
    let cpus = allowed();
    let n = cpus.len() + 1;
    let script =
        "echo cpus $DYNRES_LOCAL_RANK $(sed -n 's/^Cpus_allowed_list:\\s*//p' /proc/self/status)";
    let n_s = n.to_string();
    let f = rt.run(&[
        "run",
        "-n",
        &n_s,
        "--oversubscribe",
        "--bind-to",
        "core",
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let mut seen = 0;
    for l in f.stdout.lines() {
        let Some((_, rest)) = l.split_once("] cpus ") else {
            continue;
        };
        let (local, list) = rest.split_once(' ').unwrap();
        let local: usize = local.parse().unwrap();
        assert_eq!(
            list,
            cpus[local % cpus.len()].to_string(),
            "{l}\n{}",
            f.dump()
        );
        assert!(
            f.stderr.contains(&format!(
                "bound to CPU {} (local rank {local})",
                cpus[local % cpus.len()]
            )),
            "no report for local rank {local}\n{}",
            f.dump()
        );
        seen += 1;
    }
    assert_eq!(seen, n, "{}", f.dump());
    let free = rt.run(&["run", "-n", "1", "--", "sh", "-c", script]);
    assert_eq!(free.code, Some(0), "{}", free.dump());
    if cpus.len() > 1 {
        assert!(
            !free.stdout.contains(&format!("cpus 0 {}\n", cpus[0])),
            "unbound by default\n{}",
            free.dump()
        );
    }
}

/// Slots: `--oversubscribe` lets -n pass the cores; `-N K` and `--map-by ppr:K:node`
/// give every host K slots.
#[test]
fn oversubscribe_and_processes_per_node() {
    let rt = Runtime::new("slots");
    let many = (allowed().len() + 3).to_string();
    let refused = rt.run(&["run", "-n", &many, "--", "true"]);
    assert_eq!(
        refused.code,
        Some(2),
        "more than the cores needs a flag\n{}",
        refused.dump()
    );
    let over = rt.run(&["run", "-n", &many, "--oversubscribe", "--", "true"]);
    assert_eq!(over.code, Some(0), "{}", over.dump());
    let n3 = rt.run(&["run", "-N", "3", "-n", "3", "--", "true"]);
    assert_eq!(n3.code, Some(0), "{}", n3.dump());
    assert!(n3.stderr.contains("on 3 slots"), "{}", n3.dump());
    let too_many = rt.run(&["run", "--map-by", "ppr:3:node", "-n", "4", "--", "true"]);
    assert_eq!(too_many.code, Some(2), "{}", too_many.dump());
    let socket = rt.run(&["run", "--map-by", "ppr:2:socket", "-n", "1", "--", "true"]);
    assert_eq!(socket.code, Some(2), "{}", socket.dump());
    assert!(
        socket.stderr.contains("only ppr:K:node"),
        "{}",
        socket.dump()
    );
}

/// `-v` shows the runtime's debug log.
#[test]
fn verbose_shows_debug_lines() {
    let rt = Runtime::new("verbose");
    let run = |args: &[&str]| {
        let mut cmd = rt.command(args);
        cmd.env_remove("DYNRES_LOG").env_remove("RUST_LOG");
        rt.run_bounded(cmd, Duration::from_secs(60))
            .unwrap_or_else(|f| panic!("hung\n{}", f.dump()))
    };
    let quiet = run(&["run", "-n", "1", "--", "true"]);
    let loud = run(&["-v", "run", "-n", "1", "--", "true"]);
    assert_eq!(loud.code, Some(0), "{}", loud.dump());
    assert!(!quiet.stderr.contains("DEBUG"), "{}", quiet.dump());
    assert!(loud.stderr.contains("DEBUG"), "{}", loud.dump());
}

/// Output options: `--no-tag-output` shows lines as they are, `--timestamp-output`
/// starts each with the seconds since the job started, `--output-filename DIR` puts
/// each rank's stdout and stderr in its own files (untagged) and nothing on the
/// terminal.
#[test]
fn output_is_tagged_timestamped_or_filed_as_asked() {
    let rt = Runtime::new("output");
    let script = "echo out $DYNRES_RANK; echo err $DYNRES_RANK >&2";
    let plain = rt.run(&[
        "run",
        "-n",
        "2",
        "--no-tag-output",
        "--timestamp-output",
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(plain.code, Some(0), "{}", plain.dump());
    let mut outs: Vec<&str> = plain.stdout.lines().collect();
    // By the text after the timestamp: the ranks' lines come in either order.
    outs.sort_by_key(|l| l.split_once("] ").map(|(_, t)| t.to_string()));
    assert_eq!(outs.len(), 2, "{}", plain.dump());
    for (l, rank) in outs.iter().zip(["0", "1"]) {
        let (stamp, text) = l.split_once("] ").unwrap_or_else(|| panic!("{l}"));
        assert!(
            stamp.starts_with("[+") && stamp[2..].parse::<f64>().is_ok(),
            "{l}"
        );
        assert_eq!(text, format!("out {rank}"), "untagged: {l}");
    }
    let dir = rt.scratch().join("out");
    let d = dir.display().to_string();
    let filed = rt.run(&[
        "run",
        "-n",
        "2",
        "--output-filename",
        &d,
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(filed.code, Some(0), "{}", filed.dump());
    assert!(
        !filed.stdout.contains("out "),
        "nothing on the terminal\n{}",
        filed.dump()
    );
    for rank in ["0", "1"] {
        let read = |s: &str| std::fs::read_to_string(dir.join(format!("rank.{rank}/{s}"))).unwrap();
        assert_eq!(read("stdout"), format!("out {rank}\n"));
        assert_eq!(read("stderr"), format!("err {rank}\n"));
    }
    let tagged = rt.run(&["run", "-n", "1", "--", "echo", "x"]);
    assert_eq!(
        tagged.stdout,
        "[rank 0] x\n",
        "tagged by default\n{}",
        tagged.dump()
    );
}

/// stdin goes to rank 0 (as mpirun), every other process reads `/dev/null`; rank 0
/// sees the end of input when `dynres run`'s stdin ends.
#[test]
fn stdin_goes_to_rank_0_only() {
    use std::io::Write;
    use std::process::Stdio;
    let rt = Runtime::new("stdin");
    // Rank 0 counts the bytes and says its first line; the others count theirs.
    let script =
        "if [ $DYNRES_RANK = 0 ]; then tee /dev/stderr | wc -c; else echo other $(cat | wc -c); fi";
    let mut cmd = rt.command(&["run", "-n", "2", "--", "sh", "-c", script]);
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    // More than a pipe holds, so the forwarding waits for rank 0 to read.
    let big = "x".repeat(200_000);
    let sent = format!("line one\n{big}\nline three\n");
    input.write_all(sent.as_bytes()).unwrap();
    drop(input);
    let f = dynres_tests::job::wait_bounded(child, rt.dir.clone(), Duration::from_secs(60))
        .unwrap_or_else(|f| panic!("hung\n{}", f.dump()));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    assert!(
        f.stdout.contains(&format!("[rank 0] {}\n", sent.len())),
        "rank 0 got every byte and the end of input\n{}",
        &f.stdout[..f.stdout.len().min(300)]
    );
    assert!(f.stderr.contains("[rank 0] line one\n"), "in order");
    assert!(
        f.stdout.contains("[rank 1] other 0"),
        "{}",
        &f.stdout[..f.stdout.len().min(300)]
    );
}
