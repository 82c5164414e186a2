//! The client machine: `dynres_client_*`, for a runtime or an MPI library that carries
//! the frames itself. (An application under `dynres run` uses the session instead.)

use std::ffi::{c_char, c_int};

use dynres_core::rc::wire::{decode_reply, encode_client};
use dynres_core::rc::{CallId, Client, ClientCall, ClientInput, ClientOutput};
use dynres_core::{Instant, Namespace, ProcessId};

use crate::action::{self, Encoded, Handle, dynres_action, hand_over};
use crate::calls::{self, dynres_result};
use crate::error::{CapiError, Poison, create_handle, free_handle, guard_handle};
use crate::types::{dynres_change_request, put, text};

/// A client (opaque): the runtime side of one application process.
#[allow(non_camel_case_types)]
pub struct dynres_client {
    client: Client,
    ns: Namespace,
    pending: Option<ClientOutput>,
    poisoned: bool,
}

impl Poison for dynres_client {
    const WHAT: &'static str = "client";
    fn poisoned(&mut self) -> &mut bool {
        &mut self.poisoned
    }
}

impl Handle for dynres_client {
    type Kernel = Client;
    type Extra = Option<dynres_result>;
    fn kernel(&self) -> &Client {
        &self.client
    }
    fn parts(&mut self) -> (&mut Client, &mut Option<ClientOutput>) {
        (&mut self.client, &mut self.pending)
    }
    fn encode(o: &ClientOutput) -> Encoded<Option<dynres_result>> {
        encode(o)
    }
}

fn encode(o: &ClientOutput) -> Encoded<Option<dynres_result>> {
    match o {
        ClientOutput::Request { req, request } => Encoded::new(
            action::DYNRES_ACTION_SEND_REQUEST,
            encode_client(*req, request),
        )
        .with(None),
        ClientOutput::Done { id, result } => {
            let d = calls::describe(result.clone());
            let mut e = Encoded::new(action::DYNRES_ACTION_DONE, d.payload);
            e.action.id = *id;
            e.action.error = d.result.error;
            e.with(Some(d.result))
        }
    }
}

/// The client of process `rank` in the job's namespace `job_namespace`.
///
/// Ownership: `job_namespace` is borrowed for the call. On success `*out` is a new
/// client owned by the caller, to be freed with `dynres_client_free`.
///
/// # Safety
/// `job_namespace` is NULL or NUL-terminated; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_client_new(
    job_namespace: *const c_char,
    rank: u32,
    out: *mut *mut dynres_client,
) -> c_int {
    // SAFETY: forwarded (both).
    unsafe {
        create_handle(out, || {
            let ns = Namespace::new(text(job_namespace, "job_namespace")?);
            Ok(dynres_client {
                client: Client::new(ProcessId::new(ns.clone(), rank)),
                ns,
                pending: None,
                poisoned: false,
            })
        })
    }
}

/// Frees a client. NULL is a no-op.
///
/// Ownership: takes `c` (from `dynres_client_new`, not to be used again).
///
/// # Safety
/// `c` is NULL or a live client not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_client_free(c: *mut dynres_client) -> c_int {
    // SAFETY: forwarded.
    unsafe { free_handle(c) }
}

/// Feeds a reply frame from the daemon (a `DYNRES_ACTION_SEND_TO_CLIENT` payload).
/// Replies to requests the client no longer waits for are ignored.
///
/// Ownership: `frame` is borrowed for the call. Errors: `DYNRES_ERR_WIRE_*`.
///
/// # Safety
/// `c` is NULL or a live client; `frame` is NULL or valid for `len` byte reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_client_handle(
    c: *mut dynres_client,
    frame: *const u8,
    len: usize,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(c, |c| {
            let (req, reply) = decode_reply(action::frame(frame, len)?)?;
            Ok(c.client
                .handle(Instant(now_ns), ClientInput::Reply { req, reply })?)
        })
    }
}

/// Starts call `id` (the caller's name for it, unique among its open calls).
///
/// # Safety
/// `c` is NULL or a live client.
unsafe fn start(
    c: *mut dynres_client,
    id: CallId,
    now_ns: u64,
    call: impl FnOnce(&dynres_client) -> Result<ClientCall, CapiError>,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(c, |c| {
            let call = call(c)?;
            Ok(c.client
                .handle(Instant(now_ns), ClientInput::Call { id, call })?)
        })
    }
}

/// Starts `get_res_change(bound)` as call `id`; `bound` NULL asks for application-level
/// changes, `"mpi://SELF"` for the change that holds the caller. Completes with a
/// `DYNRES_ACTION_DONE` of `DYNRES_CALL_GET_RES_CHANGE`.
///
/// Every `dynres_client_call_*`: strings are borrowed for the call; the call's frames
/// come out of `dynres_client_poll_output`, and so does its completion. Errors at the
/// start (bad arguments, `DYNRES_ERR_RC_CLIENT` for an id in use) start nothing.
///
/// # Safety
/// `c` is NULL or a live client; strings are NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_client_call_get_res_change(
    c: *mut dynres_client,
    id: u64,
    bound: *const c_char,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded (both).
    unsafe { start(c, id, now_ns, |_| calls::get_res_change(bound)) }
}

/// Starts `get_pset_info(pset)` as call `id` (`DYNRES_CALL_PSET_INFO`).
///
/// # Safety
/// As `dynres_client_call_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_client_call_pset_info(
    c: *mut dynres_client,
    id: u64,
    pset: *const c_char,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded (both).
    unsafe { start(c, id, now_ns, |_| calls::pset_info(pset)) }
}

/// Starts the pset operation `op` (`DYNRES_OP_*`) on `pset1` and `pset2` as call `id`
/// (`DYNRES_CALL_PSET_OP`); `target` is the preferred result name (a new version of
/// `pset1` if equal to it), or NULL for a generated name.
///
/// # Safety
/// As `dynres_client_call_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_client_call_pset_op(
    c: *mut dynres_client,
    id: u64,
    op: i32,
    pset1: *const c_char,
    pset2: *const c_char,
    target: *const c_char,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded (both).
    unsafe { start(c, id, now_ns, |_| calls::pset_op(op, pset1, pset2, target)) }
}

/// Starts `publish(key, value)` as call `id` (`DYNRES_CALL_PUBLISH`).
///
/// # Safety
/// As `dynres_client_call_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_client_call_publish(
    c: *mut dynres_client,
    id: u64,
    key: *const c_char,
    value: *const c_char,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded (both).
    unsafe { start(c, id, now_ns, |_| calls::publish(key, value)) }
}

/// Starts `unpublish(key)` as call `id` (`DYNRES_CALL_UNPUBLISH`).
///
/// # Safety
/// As `dynres_client_call_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_client_call_unpublish(
    c: *mut dynres_client,
    id: u64,
    key: *const c_char,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded (both).
    unsafe { start(c, id, now_ns, |_| calls::unpublish(key)) }
}

/// Starts `lookup(key)` as call `id` (`DYNRES_CALL_LOOKUP`), waiting up to `wait_ns`
/// for the key (0: answer at once).
///
/// # Safety
/// As `dynres_client_call_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_client_call_lookup(
    c: *mut dynres_client,
    id: u64,
    key: *const c_char,
    wait_ns: u64,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded (both).
    unsafe { start(c, id, now_ns, |_| calls::lookup(key, wait_ns)) }
}

/// Starts a fence over `pset` as call `id` (`DYNRES_CALL_FENCE`), bounded by
/// `timeout_ns`.
///
/// # Safety
/// As `dynres_client_call_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_client_call_fence(
    c: *mut dynres_client,
    id: u64,
    pset: *const c_char,
    timeout_ns: u64,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded (both).
    unsafe { start(c, id, now_ns, |_| calls::fence(pset, timeout_ns)) }
}

/// Starts `accept_res_change(delta, new_pset, bound)` as call `id`
/// (`DYNRES_CALL_ACCEPT`): non-blocking if `wait_ns` is 0 (answers `PENDING` until the
/// change is decided), else it waits up to `wait_ns` for the decision. `bound` NULL if
/// the change has one bound pset.
///
/// # Safety
/// As `dynres_client_call_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_client_call_accept(
    c: *mut dynres_client,
    id: u64,
    delta: *const c_char,
    new_pset: *const c_char,
    bound: *const c_char,
    wait_ns: u64,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded (both).
    unsafe {
        start(c, id, now_ns, |_| {
            calls::accept(delta, new_pset, bound, wait_ns)
        })
    }
}

/// Starts `confirm_res_change(delta)` by a new process as call `id`
/// (`DYNRES_CALL_CONFIRM`); `timeout_ns` bounds its lookup and its fence, each. It
/// completes once the change is decided, with the pset to derive communication from.
///
/// # Safety
/// As `dynres_client_call_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_client_call_confirm(
    c: *mut dynres_client,
    id: u64,
    delta: *const c_char,
    timeout_ns: u64,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded (both).
    unsafe { start(c, id, now_ns, |_| calls::confirm(delta, timeout_ns)) }
}

/// Starts `request_res_change(req)` as call `id` (`DYNRES_CALL_REQUEST_CHANGE`);
/// `req->app` is required (the caller's own application).
///
/// # Safety
/// As `dynres_client_call_get_res_change`; `req` is NULL or a valid request.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_client_call_request_change(
    c: *mut dynres_client,
    id: u64,
    req: *const dynres_change_request,
    now_ns: u64,
) -> c_int {
    // SAFETY: forwarded (both).
    unsafe { start(c, id, now_ns, |c| calls::request_change(req, &c.ns, None)) }
}

/// The next action, if any, as `dynres_master_poll_output` (same buffer rules):
/// `DYNRES_ACTION_SEND_REQUEST` (a frame for the daemon) or `DYNRES_ACTION_DONE`.
///
/// For `DONE`, `*result` receives the result (it may be NULL if the caller does not
/// want it) and the buffer the variable part: a lookup's value and a NUL
/// (at most `DYNRES_VALUE_MAX + 1` bytes), an accept's removed ranks
/// (`result->accept.nremoved` native-endian `uint32_t`s), or, when `action->error` is
/// not `DYNRES_OK`, the error's message and a NUL (at most 4 KiB).
///
/// # Safety
/// `c` is NULL or a live client; `action` is NULL or writable; `result` is NULL or
/// writable; `buf` is NULL or valid for `cap` byte writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_client_poll_output(
    c: *mut dynres_client,
    action: *mut dynres_action,
    result: *mut dynres_result,
    buf: *mut u8,
    cap: usize,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(c, |c| {
            let extra = hand_over(c, action, buf, cap)?;
            if let (Some(Some(r)), false) = (extra, result.is_null()) {
                put(result, r, "result")?;
            }
            Ok(())
        })
    }
}

/// Clients arm no timers (every wait is bounded by the master): `*armed` is always 0.
///
/// # Safety
/// `c` is NULL or a live client; the other pointers are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_client_poll_timeout(
    c: *mut dynres_client,
    deadline_ns: *mut u64,
    armed: *mut c_int,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { action::poll_timeout(c, deadline_ns, armed) }
}
