//! `pingpong`: 1 B ping-pong between the two processes of a job, through the
//! communicator and over a bare TCP socket in the same run (alternating rounds), for
//! `dynres-bench`. Member 0 prints one line:
//! `pingpong: device=tcp comm_us=… raw_us=… ratio=… samples=…` — medians of half a
//! round trip, in µs.
//!
//! The raw socket is `std::net::TcpStream` with `TCP_NODELAY`, blocking, listening on
//! the node's address (`DYNRES_NODE_ADDR`) like the communicator's TCP device; run the
//! two processes with different `DYNRES_HOST_ID`s to measure TCP rather than shared
//! memory.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

use super::check::device_name;
use dynres_client::Session;
use dynres_client::comm::{Communicator, Transport, node_addr};
use dynres_client::error::CommError;
use dynres_transports::TransportError;

/// The ping-pong's parameters.
#[derive(Parser, Debug, Clone)]
#[command(name = "pingpong", about = "1 B ping-pong: communicator vs raw TCP")]
pub struct Args {
    /// Round trips per round and per method.
    #[arg(short = 'i', long = "iterations", default_value_t = 2000)]
    pub iterations: u32,
    /// Rounds (each: communicator, then raw TCP).
    #[arg(short = 'r', long = "rounds", default_value_t = 5)]
    pub rounds: u32,
}

const TAG: u64 = 0x7070;
const KEY: &str = "pingpong/raw";
const WAIT: Duration = Duration::from_secs(30);

/// Checks the arguments without running (see [`super::validate`]).
pub fn validate(args: &[String]) -> Result<(), String> {
    match super::parse_for_check::<Args>("pingpong", args)? {
        Some(a) if a.iterations == 0 || a.rounds == 0 => {
            Err("--iterations and --rounds must be at least 1".into())
        }
        _ => Ok(()),
    }
}

/// Entry point.
pub fn main(args: &[String]) -> ExitCode {
    super::entry("pingpong", args, run)
}

fn io(e: std::io::Error) -> CommError {
    CommError::Transport(TransportError::io("raw tcp baseline", e))
}

/// Accepts one connection, bounded by [`WAIT`].
fn accept_bounded(l: &TcpListener) -> Result<TcpStream, CommError> {
    l.set_nonblocking(true).map_err(io)?;
    let deadline = Instant::now() + WAIT;
    loop {
        match l.accept() {
            Ok((c, _)) => {
                c.set_nonblocking(false).map_err(io)?;
                return Ok(c);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let e = std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "member 0 never connected",
                    );
                    return Err(io(e));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(io(e)),
        }
    }
}

fn run(a: &Args) -> Result<(), CommError> {
    let mut s = Session::init()?;
    let transport = Transport::new()?;
    let app = s.app_pset();
    let comm = Communicator::create(&mut s, &transport, &app)?;
    if comm.size() != 2 {
        return Err(CommError::Malformed("pingpong needs exactly 2 processes"));
    }
    let me = comm.rank();
    let other = 1 - me;
    let device = device_name(comm.device(other)?);
    // The raw baseline: member 1 listens on its node's address, member 0 connects.
    let mut raw = if me == 1 {
        let l = TcpListener::bind(SocketAddr::new(node_addr()?, 0)).map_err(io)?;
        s.publish(KEY, &l.local_addr().map_err(io)?.to_string())?;
        accept_bounded(&l)?
    } else {
        let addr = s.lookup(KEY, Some(WAIT))?;
        let addr: SocketAddr = addr.parse().map_err(|_| CommError::BadAddress(addr))?;
        TcpStream::connect_timeout(&addr, WAIT).map_err(io)?
    };
    raw.set_nodelay(true).map_err(io)?;
    raw.set_read_timeout(Some(WAIT)).map_err(io)?;
    comm.barrier()?;
    if me == 1 {
        s.unpublish(KEY)?;
    }
    let n = a.iterations as usize;
    let (mut via_comm, mut via_raw) = (Vec::new(), Vec::new());
    let mut byte = [0u8; 1];
    for _ in 0..a.rounds {
        for _ in 0..n {
            let t = Instant::now();
            if me == 0 {
                comm.send(other, TAG, &byte)?;
                let got = comm.recv(other, TAG, 1)?;
                if got.len() != 1 {
                    return Err(CommError::Malformed("ping-pong reply length"));
                }
            } else {
                let got = comm.recv(other, TAG, 1)?;
                comm.send(other, TAG, &got)?;
            }
            via_comm.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
        for _ in 0..n {
            let t = Instant::now();
            if me == 0 {
                raw.write_all(&byte).map_err(io)?;
                raw.read_exact(&mut byte).map_err(io)?;
            } else {
                raw.read_exact(&mut byte).map_err(io)?;
                raw.write_all(&byte).map_err(io)?;
            }
            via_raw.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    if me == 0 {
        let (c, r) = (super::median(&mut via_comm), super::median(&mut via_raw));
        let _ = writeln!(
            std::io::stdout(),
            "pingpong: device={device} comm_us={c:.2} raw_us={r:.2} ratio={:.3} samples={}",
            c / r,
            via_comm.len()
        );
    }
    drop(raw);
    comm.leave()?;
    transport.finalize()
}
