//! `dynres-bench hosts`: the runtime across hosts against one host, in the same run
//! (issue 11): a job of 16 processes over 4 hosts from start to end, and an ADD of 8
//! processes onto a second host to FINALIZED.

use std::path::Path;
use std::process::{ExitCode, Output};

use super::{median, run_dynres};

/// A launch agent that runs the daemon here, whatever the host (`AGENT HOST CMD…`): an
/// executable script in the temporary directory, removed on drop.
struct LocalAgent(std::path::PathBuf);

impl LocalAgent {
    fn new() -> std::io::Result<LocalAgent> {
        use std::os::unix::fs::PermissionsExt;
        let p = std::env::temp_dir().join(format!("dynres-bench-agent-{}", std::process::id()));
        std::fs::write(&p, "#!/bin/sh\nshift\nexec \"$@\"\n")?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
        Ok(LocalAgent(p))
    }
}

impl Drop for LocalAgent {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs `dynres ARGS` to its end; returns its output and its wall time in ms.
fn run(dynres: &Path, args: &[String]) -> Result<(Output, f64), String> {
    let t = std::time::Instant::now();
    let out = run_dynres(dynres, args)?;
    Ok((out, t.elapsed().as_secs_f64() * 1e3))
}

/// ANNOUNCED → FINALIZED (phases 1 + 2 + 3, in ms) of the first and of the last
/// `add{k}` in the CSV: the first is the first launch onto a node (its daemon's first
/// processes), the last one a steady state.
fn add_ms(out: &Output, k: u32) -> Option<(f64, f64)> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let adds: Vec<f64> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("[rank 0] "))
        .map(|r| r.split(',').collect::<Vec<_>>())
        .filter(|c| c.len() >= 8 && c[7] == format!("add{k}:finalized"))
        .map(|c| (3..6).map(|i| c[i].parse::<f64>().unwrap_or(0.0)).sum())
        .collect();
    // A "later" ADD must be another one than the first (see the job's arguments).
    if adds.len() < 2 {
        eprintln!(
            "dynres-bench: only {} add{k} finalized; no later ADD to report",
            adds.len()
        );
    }
    Some((*adds.first()?, *adds.get(1..)?.last()?))
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Runs the hosts benchmark.
pub fn run_all(dynres: &Path, reps: usize) -> ExitCode {
    let agent = match std::env::var("DYNRES_BENCH_AGENT") {
        Ok(a) => (a, None),
        Err(_) => match LocalAgent::new() {
            Ok(t) => (t.0.display().to_string(), Some(t)),
            Err(e) => {
                eprintln!("dynres-bench: cannot write the launch agent: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let (agent, _keep) = agent;
    let prefix = std::env::var("DYNRES_BENCH_SUBNET").unwrap_or_else(|_| "127.0.0".into());
    let hosts = |n: u32, slots: u32| {
        (1..=n)
            .map(|i| format!("{prefix}.{i}:{slots}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let job = |tag: &str, rep: usize| format!("benchh-{}-{tag}-{rep}", std::process::id());
    let (mut one16, mut four16) = (vec![], vec![]);
    let (mut one_first, mut two_first, mut one_add, mut two_add) = (vec![], vec![], vec![], vec![]);
    for rep in 0..reps {
        // A whole job of 16 clients that start, form their communicator, run one
        // iteration and exit: `dynres run` to its end, wall time.
        let sleep = strs(&[
            "--example",
            "synthetic",
            "--",
            "--mode",
            "none",
            "-i",
            "1",
            "--problem-size",
            "1000",
        ]);
        // 16 processes on one host, then over 4 hosts of 4 slots.
        let mut a = strs(&[
            "run",
            "-n",
            "16",
            "--slots",
            "16",
            "--job-id",
            &job("one", rep),
        ]);
        a.extend(sleep.clone());
        let mut b = strs(&["run", "-n", "16", "--job-id", &job("four", rep), "--host"]);
        b.push(hosts(4, 4));
        b.extend(strs(&["--launch-agent", &agent]));
        b.extend(sleep);
        // ADD of 8 from 2: on one host, and onto a second host. Two ADDs (iterations 2
        // and 6), with iterations long enough that the 8 processes the SUB between them
        // removed have exited (SLOT-3) before the second asks for their slots —
        // otherwise it is refused and "later" silently measures the first again.
        let synth = strs(&[
            "--example",
            "synthetic",
            "--",
            "--mode",
            "step",
            "--n-start",
            "2",
            "--n-limit",
            "10",
            "--n-delta",
            "8",
            "-f",
            "2",
            "-b",
            "-i",
            "9",
            "--problem-size",
            "2000000",
        ]);
        let mut c = strs(&[
            "run",
            "-n",
            "2",
            "--slots",
            "10",
            "--job-id",
            &job("add1", rep),
        ]);
        c.extend(synth.clone());
        let mut d = strs(&["run", "-n", "2", "--job-id", &job("add2", rep), "--host"]);
        d.push(format!("{prefix}.1:2,{prefix}.2:8"));
        d.extend(strs(&["--launch-agent", &agent]));
        d.extend(synth);
        let r = (|| -> Result<(), String> {
            one16.push(run(dynres, &a)?.1);
            four16.push(run(dynres, &b)?.1);
            if let Some((first, last)) = add_ms(&run(dynres, &c)?.0, 8) {
                one_first.push(first);
                one_add.push(last);
            }
            if let Some((first, last)) = add_ms(&run(dynres, &d)?.0, 8) {
                two_first.push(first);
                two_add.push(last);
            }
            Ok(())
        })();
        if let Err(e) = r {
            eprintln!("dynres-bench: {e}");
            return ExitCode::FAILURE;
        }
    }
    println!(
        "dynres-bench hosts: {reps} runs each; medians in ms (hosts {prefix}.N, agent {agent})"
    );
    println!("| measure | one host | across hosts | ratio |");
    println!("|---|---|---|---|");
    for (name, one, many) in [
        (
            "job of 16 processes, start to end (1 host / 4 hosts × 4)",
            &one16,
            &four16,
        ),
        (
            "first ADD 8 → FINALIZED (same host / onto a 2nd host)",
            &one_first,
            &two_first,
        ),
        (
            "later ADD 8 → FINALIZED (same host / onto a 2nd host)",
            &one_add,
            &two_add,
        ),
    ] {
        let (x, y) = (median(one), median(many));
        println!("| {name} | {x:.2} | {y:.2} | {:.2} |", y / x);
    }
    ExitCode::SUCCESS
}
