//! `dynres-bench pmi [REPS]`: an unmodified MPI program (MPICH 5, `pmi_bench.c`) under
//! `dynres run` — through its PMI-1 server (`spec/pmi.md`) — and under MPICH's own
//! `mpiexec` (Hydra), same machine, same run (issue 31, goal 5): whole-job start of a
//! hello at n = 1, 2, 4, 8, 16; spawn 1→1 and 1→8 latency (one `MPI_Comm_spawn` plus
//! the merge with its children, measured inside the parent); and the spawn rate (1→1
//! spawns one after the other). Each repetition runs every case on both launchers, the
//! order alternating; the table gives medians and mpiexec / dynres ratios (above 1:
//! dynres is faster). Settings, the same for both: `FI_PROVIDER=shm`,
//! `MPIR_CVAR_CH4_NETMOD=ofi`; dynres gets `--slots` for every process the case starts.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use crate::median;

/// Process counts of the hello.
const HELLO_N: [u32; 5] = [1, 2, 4, 8, 16];
/// Spawns per job in the spawn cases.
const SPAWNS: u32 = 5;
/// Spawns per job in the rate case.
const RATE_SPAWNS: u32 = 10;

#[derive(Clone, Copy, PartialEq)]
enum Case {
    Hello(u32),
    Spawn(u32),
    Rate,
}

impl Case {
    fn label(self) -> String {
        match self {
            Case::Hello(n) => format!("job start, hello, n = {n} (ms)"),
            Case::Spawn(n) => format!("spawn 1→{n} + merge (ms)"),
            Case::Rate => format!("spawn rate, {RATE_SPAWNS} × 1→1 (spawns/s)"),
        }
    }

    /// Processes the case may run at once (dynres' slots).
    fn slots(self) -> u32 {
        match self {
            Case::Hello(n) => n,
            // The children of a disconnected spawn may still be exiting when the next
            // one starts: room for two rounds.
            Case::Spawn(n) => 1 + 2 * n,
            Case::Rate => 3,
        }
    }

    fn args(self, program: &Path) -> Vec<String> {
        let p = program.display().to_string();
        match self {
            Case::Hello(_) => vec![p, "hello".into()],
            Case::Spawn(n) => vec![p, "spawn".into(), n.to_string(), SPAWNS.to_string()],
            Case::Rate => vec![p, "spawn".into(), "1".into(), RATE_SPAWNS.to_string()],
        }
    }

    fn np(self) -> u32 {
        match self {
            Case::Hello(n) => n,
            _ => 1,
        }
    }
}

/// MPICH's prefix (`DYNRES_BENCH_MPICH`, else `target/mpi-venvs/mpich`).
fn prefix() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("DYNRES_BENCH_MPICH") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.join("mpi-venvs/mpich"))
}

/// Builds `pmi_bench.c` with MPICH's mpicc into `work`.
fn build(prefix: &Path, work: &Path) -> Result<PathBuf, String> {
    let mpicc = prefix.join("bin/mpicc");
    if !mpicc.exists() {
        return Err(format!(
            "{} not found (set DYNRES_BENCH_MPICH to the venv of `pip install mpich==5.0.2`)",
            mpicc.display()
        ));
    }
    let src = work.join("pmi_bench.c");
    std::fs::write(&src, include_str!("pmi_bench.c")).map_err(|e| format!("write source: {e}"))?;
    let program = work.join("pmi_bench");
    let out = Command::new(&mpicc)
        .args(["-O2", "-o"])
        .arg(&program)
        .arg(&src)
        .output()
        .map_err(|e| format!("{}: {e}", mpicc.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{} failed: {}", mpicc.display(), err.trim()));
    }
    Ok(program)
}

/// The command of `case` under dynres (`mpiexec` `None`) or MPICH's launcher.
fn command(dynres: &Path, mpiexec: Option<&Path>, program: &Path, case: Case) -> Command {
    let n = case.np().to_string();
    let mut c = match mpiexec {
        None => {
            let mut c = Command::new(dynres);
            c.args(["run", "-n", &n, "--slots", &case.slots().to_string()]);
            c
        }
        Some(m) => {
            let mut c = Command::new(m);
            c.args(["-n", &n]);
            c
        }
    };
    c.args(case.args(program))
        .env("FI_PROVIDER", "shm")
        .env("MPIR_CVAR_CH4_NETMOD", "ofi");
    c
}

/// Runs `cmd`: wall milliseconds and stdout, or why it failed.
fn timed(mut cmd: Command) -> Result<(f64, String), String> {
    let what = format!("{cmd:?}");
    let t = Instant::now();
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{what} failed ({}): {}", out.status, err.trim()));
    }
    Ok((ms, String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// The value of `case` from one run: wall time, spawn latencies or the rate.
fn values(case: Case, ms: f64, out: &str) -> Vec<f64> {
    let fields = |key: &str| -> Vec<f64> {
        out.lines()
            .filter_map(|l| {
                let l = l.trim_start_matches("[rank 0] ");
                l.strip_prefix(key)?.split_whitespace().last()?.parse().ok()
            })
            .collect()
    };
    match case {
        Case::Hello(_) => vec![ms],
        Case::Spawn(_) => fields("spawn ").into_iter().map(|us| us / 1e3).collect(),
        Case::Rate => fields("total ")
            .into_iter()
            .map(|us| f64::from(RATE_SPAWNS) / (us / 1e6))
            .collect(),
    }
}

/// The side-by-side run.
pub fn run_all(dynres: &Path, reps: usize) -> ExitCode {
    let work = std::env::temp_dir().join(format!("dynres-bench-pmi-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&work) {
        eprintln!("dynres-bench: {}: {e}", work.display());
        return ExitCode::FAILURE;
    }
    let Some(prefix) = prefix() else {
        eprintln!("dynres-bench: cannot locate this binary");
        return ExitCode::FAILURE;
    };
    let program = match build(&prefix, &work) {
        Ok(p) => p,
        Err(why) => {
            println!("MPICH 5.0.2: skipped: {why}");
            return ExitCode::SUCCESS;
        }
    };
    let mpiexec = prefix.join("bin/mpiexec");
    let mut cases: Vec<Case> = HELLO_N.iter().map(|&n| Case::Hello(n)).collect();
    cases.extend([Case::Spawn(1), Case::Spawn(8), Case::Rate]);
    let mut cols: [std::collections::BTreeMap<String, Vec<f64>>; 2] = Default::default();
    for rep in 0..reps {
        for &case in &cases {
            for k in 0..2 {
                let s = (k + rep) % 2;
                let launcher = (s == 1).then_some(mpiexec.as_path());
                match timed(command(dynres, launcher, &program, case)) {
                    Ok((ms, out)) => cols[s]
                        .entry(case.label())
                        .or_default()
                        .extend(values(case, ms, &out)),
                    Err(e) => {
                        eprintln!("dynres-bench: {e}");
                        let _ = std::fs::remove_dir_all(&work);
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    println!(
        "\ndynres-bench pmi: MPICH 5.0.2's pmi_bench under dynres run and under mpiexec \
         (Hydra); {reps} repetitions, launchers alternating; medians; ratio = how many \
         times better dynres is (time: mpiexec / dynres; rate: dynres / mpiexec); {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("| measure | dynres | mpiexec | dynres better by |\n|---|---|---|---|");
    for case in cases {
        let label = case.label();
        let med = |s: usize| cols[s].get(&label).map_or(f64::NAN, |v| median(v));
        let (d, m) = (med(0), med(1));
        let better = if case == Case::Rate { d / m } else { m / d };
        println!("| {label} | {d:.2} | {m:.2} | {better:.2}× |");
    }
    ExitCode::SUCCESS
}
