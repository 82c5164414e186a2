//! `spawn`: MPI-2 dynamic processes end to end (`spec/spawn.md`), for the tests and
//! `dynres-bench spawn`. Run under `dynres run --example spawn -- MODE …`:
//!
//! - `parent` (default): the job's processes spawn `--children N` copies of this example
//!   collectively (root 0; `--multiple` splits them over two commands), then check
//!   the inter-communicator both ways: point to point, `allreduce_sum` (each group gets
//!   the other's sum), `bcast` from the parents' root, a merge (parents low, children
//!   high) and an allreduce over it, then disconnect. `--rounds R` repeats it. Member 0
//!   prints `spawn: ok rounds=… children=…` and, per round, `spawn: round=…
//!   ready_us=…` (call → inter-communicator ready).
//!   `--fault all-die` / `root-dies`: the first spawn's children all exit at once, or
//!   their root exits after they wired up their group; that spawn must fail (member
//!   0 prints `spawn: failed as expected: …`) and the clean ones after it must still
//!   find their slots.
//! - `child` is what the spawned processes run (the parent passes it).
//! - `serve FILE` / `connect FILE`: accept / connect between two independent jobs; the
//!   server writes its port name to FILE (atomically) and accepts once. `connect` with
//!   `--timeout-ms` bounds the attempt (a closed port must fail within it).
//!   `serve-closed FILE` writes the name of a port it has already closed.
//! - `join-serve FILE` / `join FILE`: `MPI_Comm_join` over a TCP connection the two
//!   jobs make themselves (the server writes its address to FILE).
//!
//! Every check that fails is an error: the process exits non-zero with one line.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};

use dynres_client::Session;
use dynres_client::comm::{Communicator, Transport, node_addr};
use dynres_client::dpm::{self, InterComm, Side, SpawnCommand};
use dynres_client::error::CommError;

/// What this process does.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Spawn children and check the inter-communicator.
    Parent,
    /// Be a spawned child (the parent passes this).
    Child,
    /// Accept one connection on a new port, whose name goes to FILE.
    Serve,
    /// Open a port, write its name to FILE, close it at once (a connect must fail).
    ServeClosed,
    /// Connect to the port named in FILE.
    Connect,
    /// Listen on TCP, write the address to FILE, join over the accepted socket.
    JoinServe,
    /// Connect over TCP to the address in FILE and join.
    Join,
}

/// Faults the parent can ask of its children.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Fault {
    /// None.
    None,
    /// Every child exits at once, before the handshake.
    AllDie,
    /// The children wire up their group, then their root exits before it connects
    /// back (the others are left waiting in the handshake).
    RootDies,
}

/// The example's parameters.
#[derive(Parser, Debug, Clone)]
#[command(name = "spawn", about = "MPI-2 dynamic processes end to end")]
pub struct Args {
    /// What to do.
    #[arg(value_enum, default_value_t = Mode::Parent)]
    pub mode: Mode,
    /// The rendezvous file (serve/connect/join modes).
    pub file: Option<String>,
    /// Children per spawn.
    #[arg(long, default_value_t = 2)]
    pub children: u32,
    /// Spawns, one after the other (each checked, then disconnected).
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
    /// Split the children over two commands (`MPI_Comm_spawn_multiple`).
    #[arg(long)]
    pub multiple: bool,
    /// A fault to inject.
    #[arg(long, value_enum, default_value_t = Fault::None)]
    pub fault: Fault,
    /// Bound on each spawn / accept / connect / join.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// Only spawn and disconnect (no checks): the spawn-rate loop of the bench.
    #[arg(long)]
    pub quick: bool,
    /// After the last spawn, this many 1 B round trips between parent 0 and child 0
    /// over the inter-communicator, then between parents 0 and 1 over theirs (when
    /// there are two); member 0 prints `spawn: pingpong inter_us=… intra_us=…`
    /// (medians of half a round trip).
    #[arg(long, default_value_t = 0)]
    pub pingpong: u32,
    /// Children wait this long before their root connects back: a slow start, which
    /// keeps the parent's port listening — the window a stranger's forged Hellos have
    /// (the SPAWN-22 end-to-end test).
    #[arg(long, default_value_t = 0)]
    pub connect_delay_ms: u64,
}

const TAG: u64 = 0x5350;

/// Checks the arguments without running (see [`super::validate`]).
pub fn validate(args: &[String]) -> Result<(), String> {
    match super::parse_for_check::<Args>("spawn", args)? {
        Some(a) if a.children == 0 || a.rounds == 0 => {
            Err("--children and --rounds must be at least 1".into())
        }
        Some(a) if a.file.is_none() && !matches!(a.mode, Mode::Parent | Mode::Child) => {
            Err(format!("mode {:?} needs a FILE", a.mode))
        }
        _ => Ok(()),
    }
}

/// Entry point.
pub fn main(args: &[String]) -> ExitCode {
    super::entry("spawn", args, run)
}

fn out(line: &str) {
    let _ = writeln!(std::io::stdout(), "{line}");
}

fn check(ok: bool, what: &'static str) -> Result<(), CommError> {
    if ok {
        Ok(())
    } else {
        Err(CommError::Malformed(what))
    }
}

fn run(a: &Args) -> Result<(), CommError> {
    let mut s = Session::init()?;
    let transport = Transport::new()?;
    let timeout = Duration::from_millis(a.timeout_ms);
    let r = match a.mode {
        Mode::Parent => parent(&mut s, &transport, a, timeout),
        Mode::Child => child(&mut s, &transport, a, timeout),
        Mode::Serve | Mode::ServeClosed | Mode::Connect | Mode::JoinServe | Mode::Join => {
            let file = a.file.as_deref().ok_or(CommError::Malformed("no FILE"))?;
            peer(&transport, a.mode, file, timeout)
        }
    };
    transport.finalize()?;
    r
}

/// The command the children run: this very example, in child mode, with the fault.
fn child_command(a: &Args, count: u32) -> Result<SpawnCommand, CommError> {
    let exe = std::env::current_exe().map_err(|e| CommError::io("find this executable", e))?;
    let mut args = vec![
        "example".to_string(),
        "spawn".to_string(),
        "child".to_string(),
    ];
    args.push(format!("--fault={}", fault_name(a.fault)));
    args.push(format!("--timeout-ms={}", a.timeout_ms));
    if a.quick {
        args.push("--quick".into());
    }
    if a.pingpong > 0 {
        args.push(format!("--pingpong={}", a.pingpong));
    }
    if a.connect_delay_ms > 0 {
        args.push(format!("--connect-delay-ms={}", a.connect_delay_ms));
    }
    Ok(SpawnCommand {
        program: exe.to_string_lossy().into_owned(),
        args,
        count,
    })
}

fn fault_name(f: Fault) -> &'static str {
    match f {
        Fault::None => "none",
        Fault::AllDie => "all-die",
        Fault::RootDies => "root-dies",
    }
}

fn commands(a: &Args, fault: Fault) -> Result<Vec<SpawnCommand>, CommError> {
    let a = Args { fault, ..a.clone() };
    if a.multiple && a.children >= 2 {
        let first = a.children / 2;
        Ok(vec![
            child_command(&a, first)?,
            child_command(&a, a.children - first)?,
        ])
    } else {
        Ok(vec![child_command(&a, a.children)?])
    }
}

fn parent(
    s: &mut Session,
    transport: &Transport,
    a: &Args,
    timeout: Duration,
) -> Result<(), CommError> {
    let app = s.app_pset();
    let comm = Communicator::create(s, transport, &app)?;
    if a.fault != Fault::None {
        let cmds = commands(a, a.fault)?;
        match s.spawn_over(&comm, 0, &cmds, timeout) {
            Ok(_) => return Err(CommError::Malformed("a spawn whose root died succeeded")),
            Err(e) if comm.rank() == 0 => out(&format!("spawn: failed as expected: {e}")),
            Err(_) => {}
        }
    }
    let cmds = commands(a, Fault::None)?;
    let started = Instant::now();
    for round in 0..a.rounds {
        let t = Instant::now();
        let inter = s.spawn_over(&comm, 0, &cmds, timeout)?;
        let ready = t.elapsed();
        check(inter.remote_size() == a.children as usize, "remote size")?;
        if !a.quick {
            exercise(&inter, Side::Local, comm.size(), a.children as usize)?;
        }
        if a.pingpong > 0 && round + 1 == a.rounds {
            pingpong(&inter, Some(&comm), a.pingpong)?;
        }
        inter.disconnect()?;
        if comm.rank() == 0 {
            out(&format!(
                "spawn: round={round} ready_us={}",
                ready.as_micros()
            ));
        }
    }
    if comm.rank() == 0 {
        out(&format!(
            "spawn: ok rounds={} children={} parents={} elapsed_us={}",
            a.rounds,
            a.children,
            comm.size(),
            started.elapsed().as_micros()
        ));
    }
    comm.leave()
}

fn child(
    s: &mut Session,
    transport: &Transport,
    a: &Args,
    timeout: Duration,
) -> Result<(), CommError> {
    std::thread::sleep(Duration::from_millis(a.connect_delay_ms));
    let (world, inter) = match a.fault {
        Fault::None => s
            .get_parent(transport, timeout)?
            .ok_or(CommError::Malformed("child mode without a parent"))?,
        Fault::AllDie => std::process::exit(3),
        Fault::RootDies => {
            // The children wire up their own group, then their root dies before it
            // connects back: the others wait for it in vain and give up.
            let app = s.app_pset();
            let world = Communicator::create(s, transport, &app)?;
            if world.rank() == 0 {
                std::process::exit(3);
            }
            let inter = dpm::get_parent(&world, timeout)?
                .ok_or(CommError::Malformed("child mode without a parent"))?;
            (world, inter)
        }
    };
    if !a.quick {
        let parents = inter.remote_size();
        exercise(&inter, Side::Remote, world.size(), parents)?;
    }
    if a.pingpong > 0 {
        pingpong(&inter, None, a.pingpong)?;
    }
    inter.disconnect()?;
    if world.size() > 1 {
        world.leave()?;
    }
    Ok(())
}

/// The checks both sides run on a fresh inter-communicator: `mine` processes here,
/// `theirs` there; `side` says whether the parents (root of the bcast) are local.
fn exercise(inter: &InterComm, side: Side, mine: usize, theirs: usize) -> Result<(), CommError> {
    check(inter.local_size() == mine, "local size")?;
    check(inter.remote_size() == theirs, "remote size")?;
    let me = inter.rank();
    let parents = side == Side::Local;
    // Point to point: every parent p sends its rank to child p % children, which
    // answers rank + 1000; every child receives from each parent mapped to it.
    if parents {
        let peer = me % theirs;
        inter.send(peer, TAG, &(me as u32).to_le_bytes())?;
        let back = inter.recv(peer, TAG, 4)?;
        check(
            back == (me as u32 + 1000).to_le_bytes(),
            "point-to-point answer",
        )?;
    } else {
        for p in (0..theirs).filter(|p| p % mine == me) {
            let got = inter.recv(p, TAG, 4)?;
            check(got == (p as u32).to_le_bytes(), "point-to-point message")?;
            inter.send(p, TAG, &(p as u32 + 1000).to_le_bytes())?;
        }
    }
    // Inter-communicator allreduce: each group gets the sum over the other's
    // contributions (parents give rank + 1, children 100 × (rank + 1)).
    let mine_value = if parents { me + 1 } else { 100 * (me + 1) } as f64;
    let sum = inter.allreduce_sum(&[mine_value])?;
    let n = theirs as f64;
    let expect = if parents {
        100.0 * n * (n + 1.0) / 2.0
    } else {
        n * (n + 1.0) / 2.0
    };
    check(sum == [expect], "inter-communicator allreduce")?;
    // Broadcast from the parents' root to the children.
    let payload = b"from the parents";
    let root_side = if parents { Side::Local } else { Side::Remote };
    let got = inter.bcast(root_side, 0, if parents && me == 0 { payload } else { b"" })?;
    check(parents || got == payload, "broadcast from the parents")?;
    // Merge: parents low, children high, so the parents come first.
    let merged = inter.merge(!parents)?;
    check(merged.size() == mine + theirs, "merged size")?;
    let my_pos = if parents { me } else { theirs + me };
    check(merged.rank() == my_pos, "merged order: parents first")?;
    let total = merged.allreduce_sum(&[1.0])?;
    check(
        total == [(mine + theirs) as f64],
        "allreduce over the merged group",
    )?;
    merged.barrier()?;
    inter.barrier()
}

/// 1 B round trips: parent 0 ↔ child 0 over `inter`, then (parents only, `intra`)
/// parents 0 ↔ 1 over their own communicator, in the same run.
fn pingpong(inter: &InterComm, intra: Option<&Communicator>, n: u32) -> Result<(), CommError> {
    let parents = intra.is_some();
    let me = inter.rank();
    let mut via_inter = Vec::new();
    if me == 0 {
        for _ in 0..n {
            let t = Instant::now();
            if parents {
                inter.send(0, TAG + 1, &[1])?;
                inter.recv(0, TAG + 1, 1)?;
            } else {
                let b = inter.recv(0, TAG + 1, 1)?;
                inter.send(0, TAG + 1, &b)?;
            }
            via_inter.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    let Some(comm) = intra else {
        return Ok(());
    };
    let mut via_intra = Vec::new();
    if comm.size() >= 2 && comm.rank() < 2 {
        let other = 1 - comm.rank();
        for _ in 0..n {
            let t = Instant::now();
            if comm.rank() == 0 {
                comm.send(other, TAG + 2, &[1])?;
                comm.recv(other, TAG + 2, 1)?;
            } else {
                let b = comm.recv(other, TAG + 2, 1)?;
                comm.send(other, TAG + 2, &b)?;
            }
            via_intra.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    if comm.rank() == 0 {
        let (i, l) = (super::median(&mut via_inter), super::median(&mut via_intra));
        out(&format!(
            "spawn: pingpong inter_us={i:.3} intra_us={l:.3} ratio={:.3} samples={n}",
            i / l
        ));
    }
    Ok(())
}

/// Accept/connect and join between two independent jobs (groups of one each).
fn peer(transport: &Transport, mode: Mode, file: &str, timeout: Duration) -> Result<(), CommError> {
    let io = |what: &'static str| move |e: std::io::Error| CommError::io(what, e);
    let inter = match mode {
        Mode::Serve => {
            let port = dpm::open_port(dynres_core::spawn::Bootstrap::DEFAULT_HYBRID)?;
            publish(file, port.name()).map_err(io("writing the port name"))?;
            let comm = Communicator::solo(transport);
            let inter = dpm::accept(&comm, 0, Some(&port), timeout)?;
            dpm::close_port(port)?;
            inter
        }
        Mode::ServeClosed => {
            let port = dpm::open_port(dynres_core::spawn::Bootstrap::DEFAULT_HYBRID)?;
            let name = port.name().to_string();
            dpm::close_port(port)?;
            publish(file, &name).map_err(io("writing the port name"))?;
            out("spawn: ServeClosed ok");
            return Ok(());
        }
        Mode::Connect => {
            let name = wait_for(file, timeout).map_err(io("reading the port name"))?;
            let comm = Communicator::solo(transport);
            dpm::connect(&comm, 0, name.trim(), timeout)?
        }
        Mode::JoinServe => {
            let l = TcpListener::bind(SocketAddr::new(node_addr()?, 0))
                .map_err(io("listening for the join"))?;
            let addr = l.local_addr().map_err(io("listening for the join"))?;
            publish(file, &addr.to_string()).map_err(io("writing the address"))?;
            let (c, _) = l.accept().map_err(io("accepting the join socket"))?;
            dpm::join(transport, OwnedFd::from(c), timeout)?
        }
        Mode::Join => {
            let addr = wait_for(file, timeout).map_err(io("reading the address"))?;
            let addr: SocketAddr = addr
                .trim()
                .parse()
                .map_err(|_| CommError::BadAddress(addr.clone()))?;
            let c = TcpStream::connect_timeout(&addr, timeout).map_err(io("connecting"))?;
            dpm::join(transport, OwnedFd::from(c), timeout)?
        }
        Mode::Parent | Mode::Child => unreachable!("handled by run"),
    };
    // One message each way and an allreduce: the two sides really talk.
    let acceptor = matches!(mode, Mode::Serve | Mode::JoinServe);
    let mine = if acceptor { 1.0 } else { 2.0 };
    inter.send(0, TAG, &[u8::from(acceptor)])?;
    let got = inter.recv(0, TAG, 1)?;
    check(got == [u8::from(!acceptor)], "message from the other job")?;
    let sum = inter.allreduce_sum(&[mine])?;
    check(sum == [3.0 - mine], "allreduce with the other job")?;
    inter.barrier()?;
    out(&format!("spawn: {mode:?} ok"));
    inter.disconnect()
}

/// Writes `text` to `file` atomically (a reader never sees half of it), readable by
/// this user only: a port name carries the port's key (SPAWN-22).
fn publish(file: &str, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = format!("{file}.tmp.{}", std::process::id());
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    drop(f);
    std::fs::rename(&tmp, file)
}

/// Waits up to `timeout` for `file` to exist and returns its content.
fn wait_for(file: &str, timeout: Duration) -> std::io::Result<String> {
    let deadline = Instant::now() + timeout;
    loop {
        match std::fs::read_to_string(file) {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e),
        }
    }
}
