//! The application calls, built once from C arguments and read back once into C
//! results: the kernel client (`dynres_client_call_*`) and the session
//! (`dynres_get_res_change`, …) share both halves.

use std::ffi::c_char;

use dynres_core::pset::{AttrUpdate, PsetOp};
use dynres_core::rc::{CallResult, ClientCall, RcError};
use dynres_core::{Duration, Namespace};

use crate::error::{CapiError, rc_code};
use crate::types::{
    dynres_accept_result, dynres_change_request, dynres_pset_info, dynres_pset_name,
    dynres_res_change, name, opt_name, ranks_bytes, set_op, text, with_nul,
};

/// Result of `get_res_change`.
pub const DYNRES_CALL_GET_RES_CHANGE: i32 = 1;
/// Result of `get_pset_info`.
pub const DYNRES_CALL_PSET_INFO: i32 = 2;
/// Result of a pset operation.
pub const DYNRES_CALL_PSET_OP: i32 = 3;
/// Result of `publish`.
pub const DYNRES_CALL_PUBLISH: i32 = 4;
/// Result of `unpublish`.
pub const DYNRES_CALL_UNPUBLISH: i32 = 5;
/// Result of `lookup`.
pub const DYNRES_CALL_LOOKUP: i32 = 6;
/// Result of `fence`.
pub const DYNRES_CALL_FENCE: i32 = 7;
/// Result of `accept_res_change` (blocking or not).
pub const DYNRES_CALL_ACCEPT: i32 = 8;
/// Result of `confirm_res_change`.
pub const DYNRES_CALL_CONFIRM: i32 = 9;
/// Result of `request_res_change`.
pub const DYNRES_CALL_REQUEST_CHANGE: i32 = 10;
/// Result of a modex (`MODEX-1..6`). C callers cannot start one; the code exists so
/// that every result the kernel's client can report has one.
pub const DYNRES_CALL_MODEX: i32 = 11;
/// `Spawn` (the runtime part of a spawn; not offered to C callers yet).
pub const DYNRES_CALL_SPAWN: i32 = 12;
/// `KillSpawn` (not offered to C callers yet).
pub const DYNRES_CALL_KILL_SPAWN: i32 = 13;

/// A completed call of the kernel client (the `DYNRES_ACTION_DONE` action).
///
/// Only the member named by `call` is meaningful, and only when `error` is
/// `DYNRES_OK`. Variable-sized parts go to the caller's buffer instead (see
/// `dynres_client_poll_output`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct dynres_result {
    /// `DYNRES_CALL_*`: which call completed.
    pub call: i32,
    /// `DYNRES_OK`, or the call's error code (`DYNRES_ERR_RC_*`).
    pub error: i32,
    /// `DYNRES_CALL_REQUEST_CHANGE`: 1 if the request was queued behind another change.
    pub queued: i32,
    /// `DYNRES_CALL_GET_RES_CHANGE`: the answer.
    pub res_change: dynres_res_change,
    /// `DYNRES_CALL_ACCEPT`: the outcome.
    pub accept: dynres_accept_result,
    /// `DYNRES_CALL_PSET_INFO`: size and attributes.
    pub pset_info: dynres_pset_info,
    /// `DYNRES_CALL_CONFIRM`: the new pset; `DYNRES_CALL_REQUEST_CHANGE`: the delta
    /// pset (`""` if queued); `DYNRES_CALL_PSET_OP`: the result pset.
    pub pset: dynres_pset_name,
}

/// A call's result in C form: the fixed part, the variable part (a lookup's value and a
/// NUL; an accept's removed ranks as `uint32_t`s; an error's message and a NUL) and the
/// kernel's error, if any.
pub struct Described {
    /// The fixed part.
    pub result: dynres_result,
    /// The variable part.
    pub payload: Vec<u8>,
    /// The kernel's error.
    pub error: Option<RcError>,
}

/// Converts a call's result.
pub fn describe(r: CallResult) -> Described {
    let mut out = dynres_result::default();
    let mut payload = Vec::new();
    let (call, error) = match r {
        CallResult::ResChange(a) => {
            out.res_change = dynres_res_change::of(&a);
            (DYNRES_CALL_GET_RES_CHANGE, None)
        }
        CallResult::PsetInfo(r) => (
            DYNRES_CALL_PSET_INFO,
            r.map(|(size, attrs)| out.pset_info = dynres_pset_info::of(size, &attrs))
                .err(),
        ),
        CallResult::PsetOp(r) => (
            DYNRES_CALL_PSET_OP,
            r.map(|outs| {
                let first = outs.first().and_then(|o| o.results.first());
                out.pset = dynres_pset_name::of(first);
            })
            .err(),
        ),
        CallResult::Published(r) => (DYNRES_CALL_PUBLISH, r.err()),
        CallResult::Unpublished(r) => (DYNRES_CALL_UNPUBLISH, r.err()),
        CallResult::Fence(r) => (DYNRES_CALL_FENCE, r.err()),
        CallResult::Lookup(r) => (DYNRES_CALL_LOOKUP, r.map(|v| payload = with_nul(&v)).err()),
        CallResult::Accept(r) => (
            DYNRES_CALL_ACCEPT,
            r.map(|a| {
                out.accept = dynres_accept_result::of(&a);
                payload = ranks_bytes(&a.removed);
            })
            .err(),
        ),
        CallResult::Confirm(r) => (
            DYNRES_CALL_CONFIRM,
            r.map(|p| out.pset = dynres_pset_name::of(Some(&p))).err(),
        ),
        CallResult::Modex(r) => (DYNRES_CALL_MODEX, r.err()),
        CallResult::Spawned(r) => (DYNRES_CALL_SPAWN, r.err()),
        CallResult::SpawnKilled(r) => (DYNRES_CALL_KILL_SPAWN, r.err()),
        CallResult::ChangeRequested(r) => (
            DYNRES_CALL_REQUEST_CHANGE,
            r.map(|d| {
                out.queued = i32::from(d.is_none());
                out.pset = dynres_pset_name::of(d.as_ref());
            })
            .err(),
        ),
    };
    out.call = call;
    if let Some(e) = &error {
        out.error = rc_code(e);
        payload = with_nul(&e.to_string());
    }
    Described {
        result: out,
        payload,
        error,
    }
}

fn wait(ns: u64) -> Option<Duration> {
    (ns > 0).then_some(Duration::from_nanos(ns))
}

/// `get_res_change(bound)`; `bound` NULL asks for application-level changes.
///
/// # Safety
/// Strings are NULL or NUL-terminated.
pub unsafe fn get_res_change(bound: *const c_char) -> Result<ClientCall, CapiError> {
    Ok(ClientCall::GetResChange {
        // SAFETY: forwarded.
        bound: unsafe { opt_name(bound, "bound") }?,
    })
}

/// `get_pset_info(pset)`.
///
/// # Safety
/// As [`get_res_change`].
pub unsafe fn pset_info(pset: *const c_char) -> Result<ClientCall, CapiError> {
    Ok(ClientCall::PsetInfo {
        // SAFETY: forwarded.
        name: unsafe { name(pset, "pset") }?,
    })
}

/// `pset_create_op(op, pset1, pset2)` with an optional result name.
///
/// # Safety
/// As [`get_res_change`].
pub unsafe fn pset_op(
    op: i32,
    pset1: *const c_char,
    pset2: *const c_char,
    target: *const c_char,
) -> Result<ClientCall, CapiError> {
    // SAFETY: forwarded: the caller's contract covers each pointer.
    let pset1 = unsafe { name(pset1, "pset1") }?;
    // SAFETY: as `pset1`.
    let pset2 = unsafe { name(pset2, "pset2") }?;
    // SAFETY: as `pset1`.
    let target = unsafe { opt_name(target, "target") }?;
    let op = PsetOp::Set {
        op: set_op(op)?,
        pset1,
        pset2,
        target,
        attrs: AttrUpdate::none(),
    };
    Ok(ClientCall::PsetOp { ops: vec![op] })
}

/// `publish(key, value)`.
///
/// # Safety
/// As [`get_res_change`].
pub unsafe fn publish(key: *const c_char, value: *const c_char) -> Result<ClientCall, CapiError> {
    // SAFETY: forwarded: the caller's contract covers both pointers.
    let key = unsafe { text(key, "key") }?.to_string();
    // SAFETY: as `key`.
    let value = unsafe { text(value, "value") }?.to_string();
    Ok(ClientCall::Publish { key, value })
}

/// `unpublish(key)`.
///
/// # Safety
/// As [`get_res_change`].
pub unsafe fn unpublish(key: *const c_char) -> Result<ClientCall, CapiError> {
    Ok(ClientCall::Unpublish {
        // SAFETY: forwarded.
        key: unsafe { text(key, "key") }?.to_string(),
    })
}

/// `lookup(key)`, waiting up to `wait_ns` (0: answer at once).
///
/// # Safety
/// As [`get_res_change`].
pub unsafe fn lookup(key: *const c_char, wait_ns: u64) -> Result<ClientCall, CapiError> {
    Ok(ClientCall::Lookup {
        // SAFETY: forwarded.
        key: unsafe { text(key, "key") }?.to_string(),
        wait: wait(wait_ns),
    })
}

/// `fence(pset)` bounded by `timeout_ns`.
///
/// # Safety
/// As [`get_res_change`].
pub unsafe fn fence(pset: *const c_char, timeout_ns: u64) -> Result<ClientCall, CapiError> {
    Ok(ClientCall::Fence {
        // SAFETY: forwarded.
        pset: unsafe { name(pset, "pset") }?,
        timeout: Duration::from_nanos(timeout_ns),
    })
}

/// `accept_res_change`: non-blocking when `wait_ns` is 0.
///
/// # Safety
/// As [`get_res_change`].
pub unsafe fn accept(
    delta: *const c_char,
    new_pset: *const c_char,
    bound: *const c_char,
    wait_ns: u64,
) -> Result<ClientCall, CapiError> {
    // SAFETY: forwarded: the caller's contract covers each pointer.
    let delta = unsafe { name(delta, "delta") }?;
    // SAFETY: as `delta`.
    let new_pset = unsafe { name(new_pset, "new_pset") }?;
    // SAFETY: as `delta`.
    let bound = unsafe { opt_name(bound, "bound") }?;
    Ok(ClientCall::Accept {
        delta,
        new_pset,
        bound,
        wait: wait(wait_ns),
    })
}

/// `confirm_res_change(delta)`; `timeout_ns` bounds its lookup and its fence, each.
///
/// # Safety
/// As [`get_res_change`].
pub unsafe fn confirm(delta: *const c_char, timeout_ns: u64) -> Result<ClientCall, CapiError> {
    Ok(ClientCall::Confirm {
        // SAFETY: forwarded.
        delta: unsafe { name(delta, "delta") }?,
        timeout: Duration::from_nanos(timeout_ns),
    })
}

/// `request_res_change(req)`; a NULL `req->app` is `app`.
///
/// # Safety
/// `req` is NULL or a valid request whose pointers follow its rules.
pub unsafe fn request_change(
    req: *const dynres_change_request,
    ns: &Namespace,
    app: Option<&str>,
) -> Result<ClientCall, CapiError> {
    // SAFETY: NULL or valid by the caller's promise.
    let req = unsafe { req.as_ref() }.ok_or(CapiError::Null("request"))?;
    // SAFETY: forwarded.
    Ok(ClientCall::RequestChange(unsafe {
        crate::types::change_request(req, ns, app)
    }?))
}
