//! `pingpong`: 1 B ping-pong between the two processes of a job, in the same run
//! (alternating rounds) through the communicator, through the device the communicator
//! uses for the other process (a second instance of it, used alone: the ceiling the
//! communicator is measured against) and over a bare TCP socket, for `dynres-bench`.
//! Member 0 prints one line:
//! `pingpong: device=tcp comm_us=… dev_us=… raw_us=… ratio=… raw_ratio=… aa_ratio=…
//! samples=…` — medians of half a round trip in µs; `ratio` is communicator / device
//! alone, `raw_ratio` communicator / raw TCP, `aa_ratio` the device's second run of
//! each round against its first (an A/A control: the noise of the comparison).
//!
//! The device alone is what `dynres-transports`' ping-pong bench drives: `Device::send`
//! and `Device::recv` on one connection, the receive buffer reused (the communicator
//! reuses its buffer too, through `Communicator::recv_into`). The raw socket is
//! `std::net::TcpStream` with `TCP_NODELAY`, blocking, listening on the node's address
//! (`DYNRES_NODE_ADDR`) like the communicator's TCP device. Run the two processes with
//! equal `DYNRES_HOST_ID`s to measure shared memory, different ones for TCP.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

use super::check::device_name;
use dynres_client::Session;
use dynres_client::comm::{Communicator, Transport, decode_addrs, encode_addrs, node_addr};
use dynres_client::error::CommError;
use dynres_transports::device::accept_blocking;
use dynres_transports::shm::{ShmConfig, ShmDevice};
use dynres_transports::tcp::{TcpConfig, TcpDevice};
use dynres_transports::{
    ConnId, Device, DeviceKind, MsgHeader, PeerAddrs, RecvSpec, TransportError,
};

/// The ping-pong's parameters.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "pingpong",
    about = "1 B ping-pong: communicator vs its device alone vs raw TCP"
)]
pub struct Args {
    /// Round trips per round and per method.
    #[arg(short = 'i', long = "iterations", default_value_t = 2000)]
    pub iterations: u32,
    /// Rounds (each: device alone, communicator, device alone, raw TCP).
    #[arg(short = 'r', long = "rounds", default_value_t = 5)]
    pub rounds: u32,
}

const TAG: u64 = 0x7070;
const KEY: &str = "pingpong/raw";
const KEY_DEV: &str = "pingpong/device";
/// The context of the device-alone messages (any value: nothing else uses that device).
const DEV_CONTEXT: u32 = 7;
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

/// A second device of `kind`, connected to the other member's (member 1 listens,
/// member 0 connects and sends a first message, which also finishes a TCP handshake).
fn device_alone(
    s: &mut Session,
    kind: DeviceKind,
    me: usize,
) -> Result<(Box<dyn Device>, ConnId), CommError> {
    let mut dev: Box<dyn Device> = match kind {
        DeviceKind::Shm => Box::new(ShmDevice::new(ShmConfig::default())?),
        DeviceKind::Tcp => Box::new(TcpDevice::new(TcpConfig {
            bind: SocketAddr::new(node_addr()?, 0),
            ..TcpConfig::default()
        })?),
        DeviceKind::Verbs => {
            return Err(CommError::Malformed(
                "pingpong: no device-alone run for verbs",
            ));
        }
    };
    if me == 1 {
        let mut mine = PeerAddrs::default();
        dev.local_address(&mut mine);
        s.publish(KEY_DEV, &encode_addrs(&mine))?;
        let conn = accept_blocking(dev.as_mut(), WAIT)?;
        dev.recv(dev_spec(conn), vec![0; 1], WAIT)?;
        s.unpublish(KEY_DEV)?;
        Ok((dev, conn))
    } else {
        let theirs = decode_addrs(&s.lookup(KEY_DEV, Some(WAIT))?)?;
        let conn = dev.connect(&theirs)?;
        dev.send(conn, dev_header(), &[0], WAIT)?;
        Ok((dev, conn))
    }
}

/// `n` round trips on the device alone, each one's half appended to `out` in µs.
fn device_round(
    dev: &mut dyn Device,
    conn: ConnId,
    me: usize,
    n: usize,
    mut back: Vec<u8>,
    out: &mut Vec<f64>,
) -> Result<Vec<u8>, CommError> {
    for _ in 0..n {
        let t = Instant::now();
        if me == 0 {
            dev.send(conn, dev_header(), &[0], WAIT)?;
            back = dev.recv(dev_spec(conn), back, WAIT)?.data;
            if back.len() != 1 {
                return Err(CommError::Malformed("ping-pong reply length"));
            }
        } else {
            back = dev.recv(dev_spec(conn), back, WAIT)?.data;
            dev.send(conn, dev_header(), &back, WAIT)?;
        }
        out.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
    Ok(back)
}

fn dev_header() -> MsgHeader {
    MsgHeader {
        source: 0,
        tag: TAG,
        context_id: DEV_CONTEXT,
        len: 1,
    }
}

fn dev_spec(conn: ConnId) -> RecvSpec {
    RecvSpec {
        conn: Some(conn),
        source: None,
        tag: Some(TAG),
        context_id: DEV_CONTEXT,
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
    let kind = comm.device(other)?;
    let device = device_name(kind);
    let (mut dev, conn) = device_alone(&mut s, kind, me)?;
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
    // The device runs twice per round, before and after the communicator: the
    // communicator is compared with both together, and the second against the first
    // (an A/A control) says how far two runs of the same loop differ here.
    let (mut via_dev, mut via_dev2) = (Vec::new(), Vec::new());
    let mut byte = [0u8; 1];
    let mut back = vec![0u8; 1];
    for _ in 0..a.rounds {
        back = device_round(dev.as_mut(), conn, me, n, back, &mut via_dev)?;
        for _ in 0..n {
            let t = Instant::now();
            // The buffer goes round, as in the device-alone loop and an MPI_Recv.
            if me == 0 {
                comm.send(other, TAG, &byte)?;
                back = comm.recv_into(other, TAG, back)?;
                if back.len() != 1 {
                    return Err(CommError::Malformed("ping-pong reply length"));
                }
            } else {
                back = comm.recv_into(other, TAG, back)?;
                comm.send(other, TAG, &back)?;
            }
            via_comm.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
        back = device_round(dev.as_mut(), conn, me, n, back, &mut via_dev2)?;
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
        let aa = super::median(&mut via_dev2) / super::median(&mut via_dev);
        via_dev.append(&mut via_dev2);
        let c = super::median(&mut via_comm);
        let d = super::median(&mut via_dev);
        let r = super::median(&mut via_raw);
        let _ = writeln!(
            std::io::stdout(),
            "pingpong: device={device} comm_us={c:.3} dev_us={d:.3} raw_us={r:.3} \
             ratio={:.3} raw_ratio={:.3} aa_ratio={aa:.3} samples={}",
            c / d,
            c / r,
            via_comm.len()
        );
    }
    drop(raw);
    // Both members are done with the device before either closes it.
    comm.barrier()?;
    dev.finalize()?;
    comm.leave()?;
    transport.finalize()
}
