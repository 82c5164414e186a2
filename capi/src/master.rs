//! The master machine: `dynres_master_*`.

use std::ffi::{c_char, c_int};

use dynres_core::rc::wire::{decode_to_master, encode_client, encode_reply, encode_to_daemon};
use dynres_core::rc::{Master, MasterConfig, MasterInput, MasterOutput, NodeId};
use dynres_core::slots::NodeSpec;
use dynres_core::{Duration, Instant, Namespace};

use crate::action::{self, Encoded, Handle, dynres_action};
use crate::error::{CapiError, Poison, create_handle, free_handle, guard_handle, rc_code};
use crate::registry::dynres_registry;
use crate::types::{dynres_change_request, name, put, slice, status_code, text, with_nul};

/// A node of the job: its host name and how many processes it may run.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct dynres_node_spec {
    /// Host name (NUL-terminated, borrowed for the call).
    pub name: *const c_char,
    /// Slots.
    pub slots: u32,
}

/// An application of the job and how many processes it starts with.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct dynres_app_spec {
    /// The application's name: its pset is `mpi://app/{name}` (NUL-terminated, borrowed
    /// for the call).
    pub name: *const c_char,
    /// Processes it starts with (at least 1).
    pub nprocs: u32,
}

/// How a master is set up. Every pointer is borrowed for the duration of
/// `dynres_master_new`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct dynres_master_config {
    /// The job's namespace (NUL-terminated).
    pub job_namespace: *const c_char,
    /// Nodes and their slots, in the total order of SLOT-1 (node ids are indices here).
    pub nodes: *const dynres_node_spec,
    /// Entries in `nodes`.
    pub nnodes: usize,
    /// Applications; their processes get ranks 0, 1, … in this order.
    pub apps: *const dynres_app_spec,
    /// Entries in `apps`.
    pub napps: usize,
    /// How long a change may take from announcement to a decision (RC-10), ns.
    pub change_timeout_ns: u64,
    /// How long removed processes get to exit before they are killed (RC-11), ns.
    pub grace_ns: u64,
    /// Most changes queued per application behind the one in flight (RC-15).
    pub max_queued: usize,
}

/// A master (opaque): pset operations, the data server, the resource-change controller
/// and slot allocation of one job.
#[allow(non_camel_case_types)]
pub struct dynres_master {
    master: Master,
    ns: Namespace,
    pending: Option<MasterOutput>,
    poisoned: bool,
}

impl Poison for dynres_master {
    const WHAT: &'static str = "master";
    fn poisoned(&mut self) -> &mut bool {
        &mut self.poisoned
    }
}

impl Handle for dynres_master {
    type Kernel = Master;
    type Extra = ();
    fn kernel(&self) -> &Master {
        &self.master
    }
    fn parts(&mut self) -> (&mut Master, &mut Option<MasterOutput>) {
        (&mut self.master, &mut self.pending)
    }
    fn encode(o: &MasterOutput) -> Encoded {
        encode(o)
    }
}

fn encode(o: &MasterOutput) -> Encoded {
    match o {
        MasterOutput::Send(env) => {
            let mut e = Encoded::new(
                action::DYNRES_ACTION_SEND_TO_DAEMON,
                encode_to_daemon(&env.msg),
            );
            e.action.node = env.to.0;
            e
        }
        MasterOutput::Status { delta, status } => {
            let mut e = Encoded::new(action::DYNRES_ACTION_STATUS, with_nul(delta.as_str()));
            e.action.status = status_code(*status);
            e
        }
        MasterOutput::Aborted { delta, reason } => {
            let mut text = with_nul(delta.as_str());
            text.extend(with_nul(&reason.to_string()));
            Encoded::new(action::DYNRES_ACTION_ABORTED, text)
        }
        MasterOutput::Refused { ticket, error, .. } => {
            let mut e = Encoded::new(action::DYNRES_ACTION_REFUSED, with_nul(&error.to_string()));
            e.action.id = *ticket;
            e.action.error = rc_code(error);
            e
        }
        MasterOutput::Started { ticket, delta } => {
            let mut e = Encoded::new(action::DYNRES_ACTION_STARTED, with_nul(delta.as_str()));
            e.action.id = *ticket;
            e
        }
        MasterOutput::NodeAllocated(n) | MasterOutput::NodeReleased(n) => {
            let kind = if matches!(o, MasterOutput::NodeAllocated(_)) {
                action::DYNRES_ACTION_NODE_ALLOCATED
            } else {
                action::DYNRES_ACTION_NODE_RELEASED
            };
            let mut e = Encoded::new(kind, Vec::new());
            e.action.node = n.0;
            e
        }
        MasterOutput::NeedSlots { slots } => {
            let mut e = Encoded::new(action::DYNRES_ACTION_NEED_SLOTS, Vec::new());
            e.action.id = u64::from(*slots);
            e
        }
        MasterOutput::SpawnedExited(p) => {
            let mut e = Encoded::new(action::DYNRES_ACTION_SPAWNED_EXITED, Vec::new());
            e.action.rank = p.rank;
            e
        }
        MasterOutput::ProcessLost(p) => {
            let mut e = Encoded::new(action::DYNRES_ACTION_PROCESS_LOST, Vec::new());
            e.action.rank = p.rank;
            e
        }
        MasterOutput::ForwardData { ticket, request } => {
            let frame = encode_client(*ticket, request);
            let mut e = Encoded::new(action::DYNRES_ACTION_FORWARD_DATA, frame);
            e.action.id = *ticket;
            e
        }
        MasterOutput::GuestReply { ticket, reply } => {
            let frame = encode_reply(*ticket, reply);
            let mut e = Encoded::new(action::DYNRES_ACTION_GUEST_REPLY, frame);
            e.action.id = *ticket;
            e
        }
    }
}

/// Starts a job: places every application's processes in stack order and queues what
/// the daemons must learn and launch (drain it with `dynres_master_poll_output`).
///
/// Ownership: `cfg` and everything it points to are borrowed for the call. On success
/// `*out` is a new master owned by the caller, to be freed with `dynres_master_free`;
/// on failure `*out` is left unchanged. Errors: `DYNRES_ERR_NULL`,
/// `DYNRES_ERR_INVALID_ARGUMENT`, `DYNRES_ERR_RC_SLOTS` (more processes than slots),
/// `DYNRES_ERR_RC_BAD_REQUEST` (an application with no process, too many slots),
/// `DYNRES_ERR_RC_PSET` (bad or duplicate application names).
///
/// # Safety
/// `cfg` is NULL or valid and its pointers follow `dynres_master_config`'s rules;
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_master_new(
    cfg: *const dynres_master_config,
    out: *mut *mut dynres_master,
) -> c_int {
    // SAFETY: `out` and every pointer of `cfg` are valid or NULL by the caller's
    // promise; each is checked before use.
    unsafe {
        create_handle(out, || {
            let cfg = cfg.as_ref().ok_or(CapiError::Null("cfg"))?;
            let ns = Namespace::new(text(cfg.job_namespace, "cfg.job_namespace")?);
            let nodes = slice(cfg.nodes, cfg.nnodes, "cfg.nodes")?
                .iter()
                .map(|n| {
                    Ok(NodeSpec {
                        name: text(n.name, "node name")?.to_string(),
                        slots: n.slots,
                    })
                })
                .collect::<Result<Vec<_>, CapiError>>()?;
            let apps = slice(cfg.apps, cfg.napps, "cfg.apps")?
                .iter()
                .map(|a| Ok((text(a.name, "app name")?.to_string(), a.nprocs)))
                .collect::<Result<Vec<_>, CapiError>>()?;
            let master = Master::new(MasterConfig {
                namespace: ns.clone(),
                nodes,
                apps,
                change_timeout: Duration::from_nanos(cfg.change_timeout_ns),
                grace: Duration::from_nanos(cfg.grace_ns),
                max_queued: cfg.max_queued,
                // Growth beyond the nodes (RC-21) is not offered at the C boundary.
                grow_wait: None,
                data_server: Default::default(),
            })?;
            Ok(dynres_master {
                master,
                ns,
                pending: None,
                poisoned: false,
            })
        })
    }
}

/// Frees a master. NULL is a no-op (like `free(3)`).
///
/// Ownership: takes `m`, which must come from `dynres_master_new` and not be used
/// again. Queued actions are dropped.
///
/// # Safety
/// `m` is NULL or a live master not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_master_free(m: *mut dynres_master) -> c_int {
    // SAFETY: forwarded.
    unsafe { free_handle(m) }
}

/// Feeds a frame that daemon `node` sent (a `DYNRES_ACTION_SEND_TO_MASTER` payload).
///
/// Ownership: `frame` is borrowed for the call. Errors: `DYNRES_ERR_WIRE_*` for a
/// malformed frame or one of another link (nothing changes), `DYNRES_ERR_RC_BAD_REQUEST`
/// for an unknown node. A client's refused request is not an error here: it is answered
/// with a reply frame.
///
/// # Safety
/// `m` is NULL or a live master; `frame` is NULL or valid for `len` byte reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_master_handle(
    m: *mut dynres_master,
    node: u32,
    frame: *const u8,
    len: usize,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(m, |m| {
            let msg = decode_to_master(action::frame(frame, len)?)?;
            let input = MasterInput::FromDaemon {
                node: NodeId(node),
                msg,
            };
            Ok(m.master.handle(Instant(now_ns), input)?)
        })
    }
}

/// A change requested from outside the application (a tool, a scheduler). `ticket` is
/// the caller's name for it: a later `DYNRES_ACTION_STARTED` or `DYNRES_ACTION_REFUSED`
/// with `id == ticket` tells what became of it, also after it waited in the queue.
///
/// Ownership: `req` and its pointers are borrowed for the call; `req->app` is required.
///
/// # Safety
/// `m` is NULL or a live master; `req` is NULL or a valid request.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_master_request_change(
    m: *mut dynres_master,
    ticket: u64,
    req: *const dynres_change_request,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(m, |m| {
            let r = req.as_ref().ok_or(CapiError::Null("req"))?;
            let req = crate::types::change_request(r, &m.ns, None)?;
            let input = MasterInput::RequestChange { ticket, req };
            Ok(m.master.handle(Instant(now_ns), input)?)
        })
    }
}

/// The timer armed from `dynres_master_poll_timeout` fired (calling it early is
/// harmless: nothing is due yet).
///
/// # Safety
/// `m` is NULL or a live master.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_master_timeout(m: *mut dynres_master, now_ns: u64) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(m, |m| {
            Ok(m.master.handle(Instant(now_ns), MasterInput::Timeout)?)
        })
    }
}

/// The caller's failure detector declares node `node` lost, its daemon and every
/// process on it (RC-17).
///
/// # Safety
/// `m` is NULL or a live master.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_master_node_lost(
    m: *mut dynres_master,
    node: u32,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(m, |m| {
            let input = MasterInput::NodeLost { node: NodeId(node) };
            Ok(m.master.handle(Instant(now_ns), input)?)
        })
    }
}

/// The next action, if any: fills `*action` (kind `DYNRES_ACTION_NONE` when there is
/// none) and copies its payload (a frame or a NUL-terminated text, `action->len` bytes)
/// into `buf`.
///
/// Sizes: a `SEND_TO_DAEMON` frame is as large as what it replicates (a pset of `n`
/// members takes about `n * (namespace length + 8)` bytes), texts are at most 4 KiB;
/// 64 KiB holds every frame of a job of about 5000 processes with a short namespace.
/// If `cap` is too small
/// the call fails with `DYNRES_ERR_BUFFER_TOO_SMALL`, `action->len` is the size needed,
/// and the same action is handed out by the next call. `buf` may be NULL if `cap` is 0.
///
/// Ownership: the payload is copied; nothing is retained from the caller.
///
/// # Safety
/// `m` is NULL or a live master; `action` is NULL or writable; `buf` is NULL or valid
/// for `cap` byte writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_master_poll_output(
    m: *mut dynres_master,
    action: *mut dynres_action,
    buf: *mut u8,
    cap: usize,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { action::poll_output(m, action, buf, cap) }
}

/// When to call `dynres_master_timeout` next: `*armed` is 1 and `*deadline_ns` the time
/// (on the caller's clock of `now_ns`), or `*armed` is 0 and no timer is needed.
///
/// # Safety
/// `m` is NULL or a live master; the other pointers are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_master_poll_timeout(
    m: *mut dynres_master,
    deadline_ns: *mut u64,
    armed: *mut c_int,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { action::poll_timeout(m, deadline_ns, armed) }
}

/// The status (`DYNRES_STATUS_*`) of the change whose delta pset is `delta`
/// (`DYNRES_STATUS_NULL` if the master does not know it, or forgot it, RC-19).
///
/// # Safety
/// `m` is NULL or a live master; `delta` is NULL or NUL-terminated; `status` is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_master_change_status(
    m: *mut dynres_master,
    delta: *const c_char,
    status: *mut i32,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(m, |m| {
            let delta = name(delta, "delta")?;
            put(status, status_code(m.master.status(&delta)), "status")
        })
    }
}

/// A copy of the master's pset registry, for inspection with `dynres_registry_*`
/// (operations on the copy do not reach the master).
///
/// Ownership: on success `*out` is a new registry owned by the caller, to be freed with
/// `dynres_registry_free`.
///
/// # Safety
/// `m` is NULL or a live master; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_master_registry_copy(
    m: *mut dynres_master,
    out: *mut *mut dynres_registry,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(m, |m| {
            crate::types::need(out, "out")?;
            let r = dynres_registry::new(m.master.registry().clone(), m.ns.clone());
            put(out, Box::into_raw(Box::new(r)), "out")
        })
    }
}
