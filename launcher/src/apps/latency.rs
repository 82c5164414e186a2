//! `latency`: members 0 and 1 of the world communicator ping-pong 1 B and 1 MiB, and
//! member 0 prints `latency <bytes> <µs>` per size: the median over `--rounds` rounds
//! of a round's mean half round trip, after one round of warm-up. `dynres-bench mpi`
//! runs it next to the MPI libraries' `mpi_bench pingpong` (`bin/bench/mpi_bench.c`),
//! which does the same with MPI_Send/MPI_Recv: same sizes, iterations and statistic.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;

use dynres_client::Session;
use dynres_client::comm::{Communicator, Transport};
use dynres_client::error::CommError;

/// The ping-pong's parameters.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "latency",
    about = "1 B and 1 MiB ping-pong between members 0 and 1"
)]
pub struct Args {
    /// Measured rounds per size (each after the same warm-up round).
    #[arg(short = 'r', long = "rounds", default_value_t = 5)]
    pub rounds: u32,
}

const SIZES: [usize; 2] = [1, 1 << 20];
const TAG: u64 = 0x6c61;

/// Round trips per round: as `iters` in `mpi_bench.c`.
fn iters(size: usize) -> u32 {
    if size <= 1024 { 2000 } else { 100 }
}

/// Checks the arguments without running (see [`super::validate`]).
pub fn validate(args: &[String]) -> Result<(), String> {
    match super::parse_for_check::<Args>("latency", args)? {
        Some(a) if a.rounds == 0 => Err("--rounds must be at least 1".into()),
        _ => Ok(()),
    }
}

/// Entry point.
pub fn main(args: &[String]) -> ExitCode {
    super::entry("latency", args, run)
}

fn run(a: &Args) -> Result<(), CommError> {
    let opening = Transport::open_in_background();
    let mut s = Session::init()?;
    let transport = opening.finish()?;
    let world = s.app_pset();
    let comm = Communicator::create(&mut s, &transport, &world)?;
    if comm.size() < 2 {
        return Err(CommError::Malformed("latency needs 2 processes"));
    }
    let me = comm.rank();
    for size in SIZES {
        let data = vec![7u8; size];
        let n = iters(size);
        let mut rounds = Vec::new();
        // Round 0 warms up (connections, pages, caches) and is not counted.
        for r in 0..=a.rounds {
            comm.barrier()?;
            let t = Instant::now();
            for _ in 0..n {
                if me == 0 {
                    comm.send(1, TAG, &data)?;
                    comm.recv(1, TAG, size)?;
                } else if me == 1 {
                    let got = comm.recv(0, TAG, size)?;
                    comm.send(0, TAG, &got)?;
                }
            }
            if r > 0 {
                rounds.push(t.elapsed().as_secs_f64() * 1e6 / f64::from(n) / 2.0);
            }
        }
        if me == 0 {
            let _ = writeln!(
                std::io::stdout(),
                "latency {size} {:.3}",
                super::median(&mut rounds)
            );
        }
    }
    comm.barrier()?;
    transport.finalize()?;
    Ok(())
}
