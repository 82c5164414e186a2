//! The daemon machine: `dynres_daemon_*`.

use std::ffi::{c_char, c_int};

use dynres_core::rc::wire::{decode_client, decode_to_daemon, encode_reply, encode_to_master};
use dynres_core::rc::{Daemon, DaemonInput, DaemonOutput, NodeId};
use dynres_core::{Instant, Namespace, ProcessId};

use crate::action::{self, Encoded, Handle, dynres_action};
use crate::error::{Poison, create_handle, free_handle, guard_handle};
use crate::types::{ranks_bytes, text};

/// A daemon (opaque): one per node; answers queries from its replica, forwards the
/// rest to the master, launches, kills and reports local processes.
#[allow(non_camel_case_types)]
pub struct dynres_daemon {
    daemon: Daemon,
    ns: Namespace,
    pending: Option<DaemonOutput>,
    poisoned: bool,
}

impl Poison for dynres_daemon {
    const WHAT: &'static str = "daemon";
    fn poisoned(&mut self) -> &mut bool {
        &mut self.poisoned
    }
}

impl Handle for dynres_daemon {
    type Kernel = Daemon;
    type Extra = ();
    fn kernel(&self) -> &Daemon {
        &self.daemon
    }
    fn parts(&mut self) -> (&mut Daemon, &mut Option<DaemonOutput>) {
        (&mut self.daemon, &mut self.pending)
    }
    fn encode(o: &DaemonOutput) -> Encoded {
        encode(o)
    }
}

fn encode(o: &DaemonOutput) -> Encoded {
    match o {
        DaemonOutput::ToMaster(msg) => {
            Encoded::new(action::DYNRES_ACTION_SEND_TO_MASTER, encode_to_master(msg))
        }
        DaemonOutput::ToClient { to, req, reply } => {
            let mut e = Encoded::new(
                action::DYNRES_ACTION_SEND_TO_CLIENT,
                encode_reply(*req, reply),
            );
            e.action.rank = to.rank;
            e
        }
        DaemonOutput::Launch { procs } => {
            Encoded::new(action::DYNRES_ACTION_LAUNCH, ranks_bytes(procs))
        }
        DaemonOutput::Kill { procs } => {
            Encoded::new(action::DYNRES_ACTION_KILL, ranks_bytes(procs))
        }
        DaemonOutput::Spawn {
            app,
            command,
            procs,
        } => Encoded::new(
            action::DYNRES_ACTION_SPAWN,
            spawn_bytes(app, command, procs),
        ),
    }
}

/// The payload of `DYNRES_ACTION_SPAWN` (see there). Strings cannot hold NUL: the
/// master refuses such spawns.
fn spawn_bytes(
    app: &str,
    command: &dynres_core::rc::LaunchCommand,
    procs: &[dynres_core::ProcessId],
) -> Vec<u8> {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX).to_ne_bytes();
    let mut out = Vec::new();
    out.extend(count(procs.len()));
    out.extend(ranks_bytes(procs));
    out.extend(count(command.args.len()));
    out.extend(count(command.env.len()));
    let strings = [app, command.program.as_str()]
        .into_iter()
        .map(String::from)
        .chain(command.args.iter().cloned())
        .chain(command.env.iter().map(|(k, v)| format!("{k}={v}")));
    for s in strings {
        out.extend(s.as_bytes());
        out.push(0);
    }
    out
}

/// A daemon for node `node` of the job whose namespace is `job_namespace`, with an
/// empty replica (the master's frames fill it).
///
/// Ownership: `job_namespace` is borrowed for the call. On success `*out` is a new
/// daemon owned by the caller, to be freed with `dynres_daemon_free`.
///
/// # Safety
/// `job_namespace` is NULL or NUL-terminated; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_daemon_new(
    node: u32,
    job_namespace: *const c_char,
    out: *mut *mut dynres_daemon,
) -> c_int {
    // SAFETY: forwarded (both).
    unsafe {
        create_handle(out, || {
            Ok(dynres_daemon {
                daemon: Daemon::new(NodeId(node)),
                ns: Namespace::new(text(job_namespace, "job_namespace")?),
                pending: None,
                poisoned: false,
            })
        })
    }
}

/// Frees a daemon. NULL is a no-op.
///
/// Ownership: takes `d` (from `dynres_daemon_new`, not to be used again).
///
/// # Safety
/// `d` is NULL or a live daemon not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_daemon_free(d: *mut dynres_daemon) -> c_int {
    // SAFETY: forwarded.
    unsafe { free_handle(d) }
}

/// Feeds a frame from the master (a `DYNRES_ACTION_SEND_TO_DAEMON` payload), in the
/// order the master sent them.
///
/// Ownership: `frame` is borrowed for the call. Errors: `DYNRES_ERR_WIRE_*`.
///
/// # Safety
/// `d` is NULL or a live daemon; `frame` is NULL or valid for `len` byte reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_daemon_handle_master(
    d: *mut dynres_daemon,
    frame: *const u8,
    len: usize,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(d, |d| {
            let msg = decode_to_daemon(action::frame(frame, len)?)?;
            Ok(d.daemon
                .handle(Instant(now_ns), DaemonInput::FromMaster(msg))?)
        })
    }
}

/// Feeds a request frame from the local process `rank` (a `DYNRES_ACTION_SEND_REQUEST`
/// payload of its client). The caller vouches for the rank (it authenticated the
/// connection).
///
/// Ownership: `frame` is borrowed for the call. Errors: `DYNRES_ERR_WIRE_*`;
/// `DYNRES_ERR_RC_NOT_PERMITTED` if `rank` does not run here (a refusal for the client
/// is queued all the same).
///
/// # Safety
/// `d` is NULL or a live daemon; `frame` is NULL or valid for `len` byte reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_daemon_handle_client(
    d: *mut dynres_daemon,
    rank: u32,
    frame: *const u8,
    len: usize,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(d, |d| {
            let (req, request) = decode_client(action::frame(frame, len)?)?;
            let from = ProcessId::new(d.ns.clone(), rank);
            let input = DaemonInput::FromClient { from, req, request };
            Ok(d.daemon.handle(Instant(now_ns), input)?)
        })
    }
}

/// The local process `rank` exited (or was killed).
///
/// # Safety
/// `d` is NULL or a live daemon.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_daemon_exited(
    d: *mut dynres_daemon,
    rank: u32,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(d, |d| {
            let pid = ProcessId::new(d.ns.clone(), rank);
            Ok(d.daemon
                .handle(Instant(now_ns), DaemonInput::Exited { pid })?)
        })
    }
}

/// The next action, if any, as `dynres_master_poll_output` (same buffer rules): frames
/// for the master or a client, or the ranks to launch or kill.
///
/// # Safety
/// `d` is NULL or a live daemon; `action` is NULL or writable; `buf` is NULL or valid
/// for `cap` byte writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_daemon_poll_output(
    d: *mut dynres_daemon,
    action: *mut dynres_action,
    buf: *mut u8,
    cap: usize,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { action::poll_output(d, action, buf, cap) }
}

/// Daemons arm no timers (every deadline is the master's): `*armed` is always 0. Here
/// so that a driver treats every machine alike.
///
/// # Safety
/// `d` is NULL or a live daemon; the other pointers are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_daemon_poll_timeout(
    d: *mut dynres_daemon,
    deadline_ns: *mut u64,
    armed: *mut c_int,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { action::poll_timeout(d, deadline_ns, armed) }
}
