//! `dynres-bench spawn [REPS]`: MPI-2 spawn through the runtime (`spec/spawn.md` §9),
//! with the `spawn` example. Each measurement is one job; `REPS` jobs per row.
//!
//! - latency `P→C`: `P` parents spawn `C` children, call → inter-communicator ready,
//!   warm (the first spawn of each job is not counted), median over every round;
//! - rate: one parent spawns one child and disconnects, in a loop (`--quick`: no
//!   checks), spawns per second of the loop, with 4 slots for children (a spawn may
//!   wait for the children of earlier ones to exit);
//! - inter-group 1 B ping-pong parent 0 ↔ child 0 against intra-group parents 0 ↔ 1 (both
//!   shared memory on this host), medians of half a round trip, in the same run.

use std::path::Path;

use super::{median, run_dynres};

const ROUNDS: u32 = 12;
const RATE_ROUNDS: u32 = 200;
const PINGPONG: u32 = 20_000;

fn job(
    dynres: &Path,
    tag: &str,
    parents: u32,
    max: u32,
    example: &[String],
) -> Result<String, String> {
    let mut args: Vec<String> = [
        "run",
        "--job-id",
        &format!("bench-spawn-{tag}-{}", std::process::id()),
        "-n",
        &parents.to_string(),
        "--max",
        &max.to_string(),
        "--example",
        "spawn",
        "--",
    ]
    .map(String::from)
    .to_vec();
    args.extend(example.iter().cloned());
    let out = run_dynres(dynres, &args)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn values(stdout: &str, key: &str) -> Vec<f64> {
    stdout
        .lines()
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix(key)))
        .filter_map(|v| v.parse().ok())
        .collect()
}

/// Runs every spawn measurement and prints one table.
pub fn run_all(dynres: &Path, reps: usize) -> std::process::ExitCode {
    match run(dynres, reps) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dynres-bench spawn: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(dynres: &Path, reps: usize) -> Result<(), String> {
    println!("spawn (medians over {reps} job(s); warm: the first spawn of a job is not counted)");
    println!("{:<28} {:>12} {:>10}", "measure", "median", "target");
    for (parents, children, target) in
        [(1u32, 1u32, "≤ 2 ms"), (1, 8, "≤ 10 ms"), (2, 8, "≤ 10 ms")]
    {
        let mut warm = Vec::new();
        for rep in 0..reps {
            let example = [
                "--children".to_string(),
                children.to_string(),
                "--rounds".into(),
                ROUNDS.to_string(),
                "--quick".into(),
            ];
            let tag = format!("lat{parents}-{children}-{rep}");
            // Room for two spawns: the children of the last one may still be exiting
            // (their slots come back when they are gone), which is not spawn latency.
            let out = job(dynres, &tag, parents, parents + 2 * children, &example)?;
            let ready = values(&out, "ready_us=");
            if ready.len() != ROUNDS as usize {
                return Err(format!("{tag}: {} rounds reported:\n{out}", ready.len()));
            }
            warm.extend(ready.into_iter().skip(1).map(|us| us / 1000.0));
        }
        let label = format!("latency {parents}→{children} (ms)");
        println!("{label:<28} {:>12.3} {target:>10}", median(&warm));
    }
    let mut rates = Vec::new();
    for rep in 0..reps {
        let example = [
            "--children".to_string(),
            "1".into(),
            "--rounds".into(),
            RATE_ROUNDS.to_string(),
            "--quick".into(),
        ];
        let out = job(dynres, &format!("rate-{rep}"), 1, 5, &example)?;
        let elapsed = values(&out, "elapsed_us=");
        let us = elapsed
            .first()
            .ok_or_else(|| format!("rate: no elapsed time:\n{out}"))?;
        rates.push(f64::from(RATE_ROUNDS) / (us / 1e6));
    }
    println!(
        "{:<28} {:>12.0} {:>10}",
        "rate 1 child (spawns/s)",
        median(&rates),
        "≥ 500"
    );
    let (mut inter, mut intra, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        let example = [
            "--children".to_string(),
            "1".into(),
            "--quick".into(),
            "--pingpong".into(),
            PINGPONG.to_string(),
        ];
        let out = job(dynres, &format!("pp-{rep}"), 2, 3, &example)?;
        inter.extend(values(&out, "inter_us="));
        intra.extend(values(&out, "intra_us="));
        ratio.extend(values(&out, "ratio="));
    }
    println!(
        "{:<28} {:>12.3} {:>10}",
        "inter-group 1 B (µs)",
        median(&inter),
        ""
    );
    println!(
        "{:<28} {:>12.3} {:>10}",
        "intra-group shm 1 B (µs)",
        median(&intra),
        ""
    );
    println!(
        "{:<28} {:>12.3} {:>10}",
        "ratio inter / intra",
        median(&ratio),
        "≤ 1.5"
    );
    Ok(())
}
