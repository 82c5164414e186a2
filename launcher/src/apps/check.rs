//! `check`: exercises the client library and the communicator on every process and
//! exits non-zero on the first wrong answer — psets and their attributes, publish /
//! lookup / fence, point-to-point, barrier, broadcast and allreduce.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use dynres_core::pset::PsetName;
use dynres_core::rc::RcError;
use dynres_transports::DeviceKind;

use dynres_client::Session;
use dynres_client::comm::{Communicator, Transport};
use dynres_client::error::{ClientError, CommError};

fn fail(msg: String) -> CommError {
    let _ = writeln!(std::io::stderr(), "check: {msg}");
    CommError::Malformed("check failed")
}

/// A device's name as `check` prints it.
pub fn device_name(kind: DeviceKind) -> &'static str {
    match kind {
        DeviceKind::Shm => "shm",
        DeviceKind::Tcp => "tcp",
        DeviceKind::Verbs => "verbs",
    }
}

fn ensure(ok: bool, msg: impl FnOnce() -> String) -> Result<(), CommError> {
    if ok { Ok(()) } else { Err(fail(msg())) }
}

/// `check` takes no arguments: any is a mistake, not something to ignore.
pub fn validate(args: &[String]) -> Result<(), String> {
    match args.first() {
        None => Ok(()),
        Some(a) => Err(format!("check takes no arguments, got {a:?}")),
    }
}

/// Entry point.
pub fn main(args: &[String]) -> ExitCode {
    if let Err(e) = validate(args) {
        let _ = writeln!(std::io::stderr(), "check: {e}");
        return ExitCode::from(2);
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "check: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), CommError> {
    let mut s = Session::init()?;
    let transport = Transport::new()?;
    let app = s.app_pset();
    let psets = s.list_psets()?;
    let size = psets
        .iter()
        .find(|(n, _)| *n == app)
        .map(|(_, i)| i.size)
        .ok_or_else(|| fail("no app pset".into()))?;
    let world = psets.iter().find(|(n, _)| *n == PsetName::world());
    ensure(world.is_some_and(|(_, i)| i.size == size), || {
        format!("WORLD and app sizes differ: {psets:?}")
    })?;
    let me = psets.iter().find(|(n, _)| *n == PsetName::self_set());
    ensure(me.is_some_and(|(_, i)| i.size == 1), || {
        format!("SELF: {psets:?}")
    })?;

    // Data server: publish never overwrites; reserved keys are refused; a missing key
    // fails at once without a wait.
    let key = format!("check/{}", s.rank());
    s.publish(&key, &format!("v{}", s.rank()))?;
    ensure(
        matches!(
            s.publish(&key, "again"),
            Err(ClientError::Rc(RcError::KeyExists(_)))
        ),
        || "publish overwrote".into(),
    )?;
    ensure(
        matches!(
            s.publish("mpi://app/check:accept", "y"),
            Err(ClientError::Rc(RcError::ReservedKey(_)))
        ),
        || "reserved key published".into(),
    )?;
    ensure(
        matches!(s.lookup("check/none", None), Err(ClientError::Rc(_))),
        || "missing key found".into(),
    )?;
    s.fence(&app, Duration::from_secs(30))?;

    let comm = Communicator::create(&mut s, &transport, &app)?;
    ensure(comm.size() == size, || {
        format!("communicator of {}", comm.size())
    })?;
    for r in comm.members() {
        let v = s.lookup(&format!("check/{r}"), Some(Duration::from_secs(30)))?;
        ensure(v == format!("v{r}"), || format!("lookup of rank {r}: {v}"))?;
    }
    let (n, i) = (comm.size(), comm.rank());
    // Which device reaches each member: shm on the same host, TCP across hosts.
    let routes = (0..n)
        .filter(|j| *j != i)
        .map(|j| Ok(format!("{j}={}", device_name(comm.device(j)?))))
        .collect::<Result<Vec<_>, CommError>>()?;
    if i == 0 && n > 1 {
        let _ = writeln!(
            std::io::stdout(),
            "check: devices from 0: {}",
            routes.join(" ")
        );
    }
    // Ring: send to the right, receive from the left (even ranks send first).
    if n > 1 {
        let (right, left) = ((i + 1) % n, (i + n - 1) % n);
        let payload = vec![i as u8; 100_000];
        let got = if i % 2 == 0 {
            comm.send(right, 7, &payload)?;
            comm.recv(left, 7, 1 << 20)?
        } else {
            let got = comm.recv(left, 7, 1 << 20)?;
            comm.send(right, 7, &payload)?;
            got
        };
        ensure(got == vec![left as u8; 100_000], || {
            format!("ring from {left}")
        })?;
    }
    comm.barrier()?;
    let b = comm.bcast(n - 1, format!("from {}", n - 1).as_bytes())?;
    ensure(b == format!("from {}", n - 1).into_bytes(), || {
        "bcast".into()
    })?;
    let sum = comm.allreduce_sum(&[i as f64, 1.0])?;
    let want = (n * (n - 1) / 2) as f64;
    ensure(sum == [want, n as f64], || format!("allreduce {sum:?}"))?;
    if i == 0 {
        let _ = writeln!(std::io::stdout(), "check: {n} processes ok");
    }
    comm.leave()?;
    transport.finalize()?;
    Ok(())
}
