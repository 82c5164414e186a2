//! The guide's malleable loop in Rust (`client/examples/malleable.rs`, `docs/guide.md`)
//! does what the guide says: under `dynres run -n 2`, changed from outside with `dynres
//! grow +2`, `shrink -1` and `replace -1 +1`, it goes through sizes 4, 3 and 3 and stops
//! when asked, with nothing left. (The C loop runs the same way in `capi/ci.sh`.)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use dynres_tests::job::{Running, Runtime};

/// The example, built with this test's profile (`cargo build --example`).
fn example() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "-q",
        "-p",
        "dynres-client",
        "--example",
        "malleable",
    ]);
    if dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    assert!(
        cmd.status().expect("run cargo").success(),
        "building the example failed"
    );
    dir.join("examples/malleable")
}

#[test]
fn the_rust_loop_grows_shrinks_and_is_replaced_from_outside() {
    let prog = example();
    let rt = Runtime::new("guide");
    let stop = rt.scratch().join("stop");
    let job = "guide";
    let run = Running::adopt(rt.spawn(&[
        "run",
        "-n",
        "2",
        "--max",
        "6",
        "--job-id",
        job,
        "--",
        &prog.display().to_string(),
        &stop.display().to_string(),
    ]));
    rt.wait_for_job(job);
    rt.wait_status(job, "two running processes", |s| {
        s.lines().filter(|l| l.ends_with("running")).count() == 2
    });
    rt.change(job, "grow", "+2");
    rt.change(job, "shrink", "-1");
    let r = rt.run(&["replace", job, "-1", "+1"]);
    assert!(r.stdout.contains("FINALIZED"), "replace: {}", r.dump());
    std::fs::write(&stop, b"").unwrap();
    let f = run.finish(rt.dir.clone(), Duration::from_secs(60));
    assert_eq!(f.code, Some(0), "{}", f.dump());
    let said: Vec<&str> = f
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("[rank 0] malleable: "))
        .collect();
    assert_eq!(
        said,
        [
            "Add finalized, size 4",
            "Sub finalized, size 3",
            "Replace finalized, size 3",
            "stopped"
        ],
        "{}",
        f.dump()
    );
    f.assert_nothing_left();
}
