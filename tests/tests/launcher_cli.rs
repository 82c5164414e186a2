//! The `dynres` CLI against a running job (grow, shrink, status, interrupt), the
//! job's refusal of connections without its secret, and bad input.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use dynres_client::auth::{Peer, encode_hello};
use dynres_tests::job::{Finished, Runtime};

/// Polls `dynres status` until `pred` holds on its output.
fn wait_status(rt: &Runtime, job: &str, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let f = rt.run(&["status", job]);
        assert_eq!(f.code, Some(0), "status failed\n{}", f.dump());
        if pred(&f.stdout) {
            return f.stdout;
        }
        assert!(Instant::now() < deadline, "never saw {what}:\n{}", f.stdout);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The closed-connection check: the peer sees EOF (or a reset) and no hello answer.
fn refused(mut s: UnixStream, hello: &[u8]) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(hello);
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(0) | Err(_))
}

#[test]
fn grow_shrink_and_status_of_a_running_job_and_wrong_secrets_are_refused() {
    let rt = Runtime::new("cli");
    let job = "clijob";
    let child = rt.spawn(&[
        "run",
        "-n",
        "2",
        "--max",
        "6",
        "--job-id",
        job,
        "--example",
        "synthetic",
        "--",
        "--mode",
        "none",
        "-i",
        "1000000",
        "--problem-size",
        "1000",
    ]);
    let dir = rt.wait_for_job(job);

    // Wrong secret on both sockets, then the right secret with a rank the job never
    // launched: all closed without an answer.
    let wrong = "0".repeat(64);
    let c = UnixStream::connect(dir.join("control.sock")).unwrap();
    assert!(refused(c, &encode_hello(&wrong, Peer::Client(0))));
    let c = UnixStream::connect(dir.join("cli.sock")).unwrap();
    assert!(refused(c, &encode_hello(&wrong, Peer::Tool)));
    let secret = std::fs::read_to_string(dir.join("secret")).unwrap();
    let c = UnixStream::connect(dir.join("control.sock")).unwrap();
    assert!(refused(c, &encode_hello(&secret, Peer::Client(999))));
    let c = UnixStream::connect(dir.join("control.sock")).unwrap();
    assert!(refused(c, b"GET / HTTP/1.1\r\n\r\n"));
    // The directory is private.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);

    let g = rt.run(&["grow", job, "+2"]);
    assert_eq!(g.code, Some(0), "{}", g.dump());
    let st = wait_status(&rt, job, "the ADD finalized", |s| {
        s.lines()
            .any(|l| l.contains("ADD") && l.contains("FINALIZED"))
    });
    assert!(st.contains("PROCESSES") && st.contains("PSETS"), "{st}");
    // The application's pset grew to 4 in a new version (phase 2 made it 1).
    let app: Vec<&str> = st
        .lines()
        .find(|l| l.starts_with("mpi://app/app "))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    assert_eq!(app.get(1..3), Some(&["4", "1"][..]), "{st}");
    let s = rt.run(&["shrink", job, "-1"]);
    assert_eq!(s.code, Some(0), "{}", s.dump());
    wait_status(&rt, job, "the SUB finalized", |s| {
        s.lines()
            .any(|l| l.contains("SUB") && l.contains("FINALIZED"))
    });
    let r = rt.run(&["replace", job, "-1", "+1"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    wait_status(&rt, job, "the REPLACE finalized", |s| {
        s.lines()
            .any(|l| l.contains("REPLACE") && l.contains("FINALIZED"))
    });
    // A SUB of every process is refused with one line and a non-zero exit.
    let bad = rt.run(&["shrink", job, "-3"]);
    assert_ne!(bad.code, Some(0), "{}", bad.dump());
    assert_eq!(bad.stderr.trim().lines().count(), 1, "{}", bad.dump());

    // Interrupt: the runtime kills the job and cleans up.
    let pid = child.id() as libc::pid_t;
    // SAFETY: sending a signal to our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    let f = Finished::new(out, rt.dir.clone());
    assert_eq!(f.code, Some(130), "{}", f.dump());
    assert!(f.stderr.contains("refused a connection"), "{}", f.dump());
    f.assert_nothing_left();
}

/// The error lines `dynres` printed: one error, led by `dynres: `; any other line is
/// clap's context for it (missing arguments, usage, tips), never a second error.
fn one_error(f: &Finished, args: &[&str]) -> String {
    let led: Vec<&str> = f
        .stderr
        .lines()
        .filter(|l| l.starts_with("dynres:") || l.starts_with("error:"))
        .collect();
    assert_eq!(led.len(), 1, "{args:?} printed\n{}", f.dump());
    assert!(f.stderr.starts_with("dynres: "), "{args:?}: {}", f.dump());
    f.stderr.clone()
}

#[test]
fn bad_cli_input_gets_one_error_and_a_non_zero_exit() {
    let rt = Runtime::new("badcli");
    // Refused by dynres itself: one line.
    let ours: &[&[&str]] = &[
        &["run", "-n", "0", "--", "true"],
        &["run", "-n", "4", "--max", "2", "--", "true"],
        &["run", "-n", "2", "--slots", "2"],
        &["run", "-n", "1", "--example", "nope"],
        &["grow", "nosuchjob", "+2"],
        &["grow", "nosuchjob", "two"],
        &["shrink", "nosuchjob", "+0"],
        &["status", "../etc"],
    ];
    for args in ours {
        let f = rt.run(args);
        assert!(
            matches!(f.code, Some(c) if c != 0),
            "{args:?} succeeded\n{}",
            f.dump()
        );
        one_error(&f, args);
        assert_eq!(f.stderr.trim().lines().count(), 1, "{args:?}\n{}", f.dump());
    }
    // Refused by clap: the whole message with its hints, exit 2.
    let clap: &[(&[&str], &[&str])] = &[
        (
            &["run"],
            &[
                "dynres: the following required arguments were not provided:",
                "  --np <N>",
                "Usage: dynres run",
            ],
        ),
        (
            &["stauts", "1"],
            &[
                "unrecognized subcommand 'stauts'",
                "a similar subcommand exists: 'status'",
            ],
        ),
        (
            &["run", "-n", "1", "--hots", "a", "--", "true"],
            &["a similar argument exists: '--host'"],
        ),
        (
            &["run", "-n", "2", "--example", "synthetic", "--mode", "none"],
            &[
                "put `--` before the example's arguments: dynres run -n 2 --example synthetic -- --mode none",
            ],
        ),
        (
            &["replace", "nosuchjob", "-1"],
            &["not provided:\n  <ADD>\n"],
        ),
        (&["frobnicate"], &["unrecognized subcommand 'frobnicate'"]),
    ];
    for (args, wants) in clap {
        let f = rt.run(args);
        assert_eq!(f.code, Some(2), "{args:?}\n{}", f.dump());
        let text = one_error(&f, args);
        for want in *wants {
            assert!(text.contains(want), "{args:?}: want {want:?}\n{}", f.dump());
        }
    }
}

/// mpirun's `-np N` is `-n N`, before `--` only (after it, it is the program's).
#[test]
fn np_is_an_alias_of_n() {
    let rt = Runtime::new("np");
    let f = rt.run(&["run", "-np", "2", "--", "sh", "-c", "echo -np $DYNRES_RANK"]);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let mut ranks: Vec<&str> = f.stdout.lines().collect();
    ranks.sort();
    assert_eq!(ranks, ["[rank 0] -np 0", "[rank 1] -np 1"], "{}", f.dump());
}

/// `--example NAME -- --help` prints the example's own help, once and at once (no job
/// started), and `dynres example NAME --help` reaches the example too.
#[test]
fn an_examples_help_is_its_own() {
    let rt = Runtime::new("exhelp");
    for args in [
        &["run", "-n", "2", "--example", "synthetic", "--", "--help"][..],
        &["example", "synthetic", "--help"],
    ] {
        let f = rt.run(args);
        assert_eq!(f.code, Some(0), "{args:?}\n{}", f.dump());
        assert!(
            f.stdout.contains("Usage: synthetic") && f.stdout.contains("--n-start"),
            "{args:?}\n{}",
            f.dump()
        );
        assert_eq!(f.stdout.matches("Usage:").count(), 1, "{}", f.dump());
        assert!(!f.stdout.contains("[rank"), "no job ran\n{}", f.dump());
    }
}

/// `RUST_LOG` sets what dynres logs when `DYNRES_LOG` is unset; `DYNRES_LOG` wins when
/// both are; `--help` names both.
#[test]
fn rust_log_is_honoured_and_dynres_log_wins() {
    let rt = Runtime::new("rustlog");
    let run = |vars: &[(&str, &str)]| {
        let mut c = rt.command(&["run", "-n", "1", "--", "true"]);
        c.env_remove("DYNRES_LOG");
        c.envs(vars.iter().copied());
        let f = Finished::new(c.output().unwrap(), rt.dir.clone());
        assert_eq!(f.code, Some(0), "{vars:?}\n{}", f.dump());
        f
    };
    let has = |f: &Finished, level: &str| f.stderr.contains(&format!(" {level} "));
    let f = run(&[]);
    assert!(has(&f, "INFO") && !has(&f, "DEBUG"), "{}", f.dump());
    let f = run(&[("RUST_LOG", "debug")]);
    assert!(has(&f, "DEBUG"), "{}", f.dump());
    let f = run(&[("RUST_LOG", "debug"), ("DYNRES_LOG", "warn")]);
    assert!(!has(&f, "DEBUG") && !has(&f, "INFO"), "{}", f.dump());
    for args in [&["--help"][..], &["run", "--help"], &["status", "--help"]] {
        let f = rt.run(args);
        assert!(
            f.stdout.contains("DYNRES_LOG") && f.stdout.contains("RUST_LOG"),
            "{args:?}\n{}",
            f.dump()
        );
    }
}

/// `status --json` is one JSON object with the table's content, `list` shows the
/// running job (not one a dead runtime left), and a tool that finds no job says where
/// it looked.
#[test]
fn status_json_list_and_where_tools_look() {
    let rt = Runtime::new("json");
    let job = "jsonjob";
    // What a SIGKILLed runtime leaves: its directory, an unlocked pid file.
    let dead = rt.dir.join("deadjob");
    std::fs::create_dir(&dead).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dead, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(dead.join("pid"), "999999999\n").unwrap();
    let child = rt.spawn(&[
        "run", "-n", "3", "--slots", "3", "--job-id", job, "--", "sleep", "60",
    ]);
    let dir = rt.wait_for_job(job);
    wait_status(&rt, job, "three running processes", |s| {
        s.lines().filter(|l| l.ends_with("running")).count() == 3
    });
    let f = rt.run(&["status", job, "--json"]);
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let v: serde_json::Value =
        serde_json::from_str(&f.stdout).unwrap_or_else(|e| panic!("not JSON: {e}\n{}", f.dump()));
    assert_eq!(v["job"], job, "{v}");
    assert_eq!(v["app"], "app", "{v}");
    let procs = v["processes"].as_array().unwrap();
    let mut ranks: Vec<u64> = procs.iter().map(|p| p["rank"].as_u64().unwrap()).collect();
    ranks.sort();
    assert_eq!(ranks, [0, 1, 2], "{v}");
    for p in procs {
        assert_eq!(p["state"], "running", "{v}");
        assert!(p["pid"].as_u64().is_some_and(|pid| pid > 1), "{v}");
    }
    let world = v["psets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "mpi://WORLD")
        .unwrap_or_else(|| panic!("no WORLD: {v}"));
    assert_eq!(world["size"], 3, "{v}");
    assert!(v["changes"].as_array().is_some_and(Vec::is_empty), "{v}");

    let l = rt.run(&["list"]);
    assert_eq!(l.code, Some(0), "{}", l.dump());
    let lines: Vec<Vec<&str>> = l.stdout.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 1, "only the live job\n{}", l.dump());
    assert_eq!(lines[0][0], job, "{}", l.dump());
    assert!(lines[0][1].parse::<u32>().is_ok(), "{}", l.dump());
    assert_eq!(lines[0][2], dir.display().to_string(), "{}", l.dump());

    let pid = child.id() as libc::pid_t;
    // SAFETY: sending a signal to our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let l = rt.run(&["list"]);
    assert_eq!((l.code, l.stdout.as_str()), (Some(0), ""), "{}", l.dump());
    let root = rt.dir.display().to_string();
    assert!(
        l.stderr.contains(&format!(
            "no running job in {root} (set by DYNRES_RUNTIME_DIR)"
        )),
        "{}",
        l.dump()
    );
    let s = rt.run(&["status", job]);
    assert_eq!(s.code, Some(1), "{}", s.dump());
    assert_eq!(
        s.stderr.trim(),
        format!("dynres: no running job {job} in {root} (set by DYNRES_RUNTIME_DIR)"),
        "{}",
        s.dump()
    );
    // Without DYNRES_RUNTIME_DIR, the message names XDG_RUNTIME_DIR's directory.
    let xdg = rt.scratch();
    let mut c = rt.command(&["status", job]);
    c.env_remove("DYNRES_RUNTIME_DIR")
        .env("XDG_RUNTIME_DIR", &xdg);
    let s = Finished::new(c.output().unwrap(), rt.dir.clone());
    assert!(
        s.stderr.contains(&format!(
            "in {}/dynres (from XDG_RUNTIME_DIR",
            xdg.display()
        )),
        "{}",
        s.dump()
    );
}

#[test]
fn processes_die_with_a_killed_runtime() {
    let rt = Runtime::new("sigkill");
    let job = "killed";
    let mut child = rt.spawn(&[
        "run",
        "-n",
        "2",
        "--job-id",
        job,
        "--slots",
        "2",
        "--example",
        "synthetic",
        "--",
        "--mode",
        "none",
        "-i",
        "1000000",
        "--problem-size",
        "1000",
    ]);
    rt.wait_for_job(job);
    let st = wait_status(&rt, job, "two running processes", |s| {
        s.lines().filter(|l| l.ends_with("running")).count() == 2
    });
    let pids: Vec<u32> = st
        .lines()
        .filter(|l| l.ends_with("running"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect();
    assert_eq!(pids.len(), 2, "{st}");
    child.kill().unwrap();
    child.wait().unwrap();
    let gone = |p: &u32| {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        // Gone, or a zombie waiting for a reaper that is not the runtime.
        stat.is_empty() || stat.split(") ").nth(1).is_some_and(|r| r.starts_with('Z'))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !pids.iter().all(gone) {
        assert!(
            Instant::now() < deadline,
            "processes {pids:?} outlived the runtime"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A SIGKILLed runtime cannot clean up: do it for it.
    for p in &pids {
        if let Ok(d) = std::fs::read_dir("/dev/shm") {
            for e in d.flatten() {
                if e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("dynres-shm-{p}-"))
                {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}

#[test]
fn bad_programs_and_arguments_are_refused_before_anything_starts() {
    use std::os::unix::fs::PermissionsExt;
    let rt = Runtime::new("badprog");
    let scratch = rt.scratch();
    let plain = scratch.join("plain.txt");
    std::fs::write(&plain, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let plain = plain.display().to_string();
    let dir = scratch.display().to_string();
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "-n", "1", "--", "dynres-no-such-program"],
            "`dynres-no-such-program`: not found in PATH",
        ),
        (
            &["run", "-n", "1", "--", "/nonexistent/prog"],
            "/nonexistent/prog",
        ),
        (&["run", "-n", "1", "--", &plain], "not executable"),
        (&["run", "-n", "1", "--", &dir], "directory"),
        (
            &[
                "run",
                "-n",
                "1",
                "--example",
                "synthetic",
                "--",
                "--mode",
                "sideways",
            ],
            "sideways",
        ),
        (
            &[
                "run",
                "-n",
                "1",
                "--example",
                "synthetic",
                "--",
                "--plan",
                "+2,x",
            ],
            "--plan",
        ),
        (
            &["run", "-n", "1", "--example", "check", "--", "extra"],
            "check",
        ),
        (
            &["run", "-n", "1", "--max", "4294967295", "--", "true"],
            "--max",
        ),
        (
            &["run", "-n", "1", "--slots", "4294967295", "--", "true"],
            "--slots",
        ),
        (
            &[
                "run",
                "-n",
                "4294967295",
                "--slots",
                "4294967295",
                "--",
                "true",
            ],
            "-n",
        ),
    ];
    for (args, needle) in cases {
        let f = match rt.run_bounded(rt.command(args), Duration::from_secs(60)) {
            Ok(f) | Err(f) => f,
        };
        assert_eq!(f.code, Some(2), "{args:?}\n{}", f.dump());
        let lines: Vec<&str> = f.stderr.trim().lines().collect();
        assert_eq!(lines.len(), 1, "{args:?} printed\n{}", f.dump());
        assert!(
            lines[0].starts_with("dynres: ") && lines[0].contains(needle),
            "{args:?}: {} (want {needle:?})",
            lines[0]
        );
        assert!(!f.stderr.contains("launched"), "{args:?}\n{}", f.dump());
        let left: Vec<_> = std::fs::read_dir(&rt.dir).unwrap().flatten().collect();
        assert!(left.is_empty(), "{args:?} left {left:?}");
    }
}

/// Issue 28: a hostfile that is a device (`/dev/zero` grew the runtime by 600 MB/s), a
/// FIFO (opening it hung) or a regular file over the 1 MiB limit is refused with one
/// line naming it, and nothing starts.
#[test]
fn a_hostfile_that_is_not_a_small_regular_file_gets_one_line() {
    let rt = Runtime::new("hostfile");
    let scratch = rt.scratch();
    let fifo = scratch.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let big = scratch.join("big");
    std::fs::write(&big, "localhost slots=1\n".repeat(60_000)).unwrap();
    let (fifo, big) = (fifo.display().to_string(), big.display().to_string());
    let cases = [
        (
            "/dev/zero",
            "hostfile /dev/zero: is a character device, not a regular file".to_string(),
        ),
        (
            fifo.as_str(),
            format!("hostfile {fifo}: is a FIFO, not a regular file"),
        ),
        (
            big.as_str(),
            format!("hostfile {big}: is larger than the limit of 1048576 bytes"),
        ),
    ];
    for (file, want) in cases {
        let cmd = rt.command(&["run", "-n", "1", "--hostfile", file, "--", "true"]);
        let f = rt
            .run_bounded(cmd, Duration::from_secs(30))
            .unwrap_or_else(|f| panic!("--hostfile {file} hung\n{}", f.dump()));
        assert!(matches!(f.code, Some(c) if c != 0), "{}", f.dump());
        assert_eq!(f.stderr.trim(), format!("dynres: {want}"), "{}", f.dump());
    }
    assert_eq!(std::fs::read_dir(&rt.dir).unwrap().count(), 0);
}
