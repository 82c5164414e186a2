//! The client library for C and Fortran applications started by `dynres run`: blocking
//! calls over the job's control socket (the launcher's `Session`).

use std::ffi::{c_char, c_int};

use dynres_client::ClientError;
use dynres_client::Session;
use dynres_core::rc::ClientCall;

use crate::calls::{self, Described};
use crate::error::{CapiError, CapiResult, Poison, create_handle, free_handle, guard_handle};
use crate::types::{
    copy_out, dynres_accept_result, dynres_change_request, dynres_pset_info, dynres_pset_name,
    dynres_res_change, need, put,
};

/// A process' session with its runtime (opaque). One call at a time: a session must
/// not be used from two threads at once.
#[allow(non_camel_case_types)]
pub struct dynres_session {
    session: Session,
    /// Ranks removed by the change of the last successful accept.
    removed: Vec<u32>,
    poisoned: bool,
}

impl Poison for dynres_session {
    const WHAT: &'static str = "session";
    fn poisoned(&mut self) -> &mut bool {
        &mut self.poisoned
    }
}

impl dynres_session {
    /// Makes `call`, blocking, and checks that its result is of kind `expected`.
    fn run(&mut self, expected: i32, call: ClientCall) -> Result<Described, CapiError> {
        let d = calls::describe(self.session.call(call)?);
        if d.result.call != expected {
            return Err(ClientError::Unexpected("a call").into());
        }
        match d.error {
            Some(e) => Err(CapiError::Rc(e)),
            None => Ok(d),
        }
    }
}

/// Connects to the runtime that started this process, from the variables `dynres run`
/// sets (`DYNRES_SOCKET`, `DYNRES_SECRET`, `DYNRES_NAMESPACE`, `DYNRES_RANK`,
/// `DYNRES_APP`). The process is killed if the runtime dies.
///
/// Ownership: on success `*out` is a new session owned by the caller, to be ended with
/// `dynres_session_finalize`. Errors: `DYNRES_ERR_ENV` (not started by `dynres run`),
/// `DYNRES_ERR_IO`, `DYNRES_ERR_CONNECTION_REFUSED`.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_session_init(out: *mut *mut dynres_session) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        create_handle(out, || {
            Ok(dynres_session {
                session: Session::init()?,
                removed: Vec::new(),
                poisoned: false,
            })
        })
    }
}

/// Ends a session: closes the connection and frees it. NULL is a no-op.
///
/// Ownership: takes `s` (from `dynres_session_init`, not to be used again).
///
/// # Safety
/// `s` is NULL or a live session not finalized before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_session_finalize(s: *mut dynres_session) -> c_int {
    // SAFETY: forwarded.
    unsafe { free_handle(s) }
}

/// This process' rank in the job's namespace.
///
/// # Safety
/// `s` is NULL or a live session; `rank` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_session_rank(s: *mut dynres_session, rank: *mut u32) -> c_int {
    // SAFETY: forwarded.
    unsafe { guard_handle(s, |s| put(rank, s.session.rank(), "rank")) }
}

/// `mpi://app/{app}`: the pset of this process' application.
///
/// # Safety
/// `s` is NULL or a live session; `pset` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_session_app_pset(
    s: *mut dynres_session,
    pset: *mut dynres_pset_name,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(s, |s| {
            let p = s.session.app_pset();
            put(pset, dynres_pset_name::of(Some(&p)), "pset")
        })
    }
}

/// `get_res_change(bound)` (thesis Lst. 6.1): `bound` NULL asks for changes of the
/// application, `"mpi://SELF"` for the change that holds this process.
///
/// Every blocking call: strings are borrowed for the call, results are written to the
/// caller's structs; a refusal by the runtime is its `DYNRES_ERR_RC_*` code with the
/// message in `dynres_last_error()`.
///
/// # Safety
/// `s` is NULL or a live session; strings are NULL or NUL-terminated; `out` is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_get_res_change(
    s: *mut dynres_session,
    bound: *const c_char,
    out: *mut dynres_res_change,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(s, |s| {
            need(out, "out")?;
            let d = s.run(
                calls::DYNRES_CALL_GET_RES_CHANGE,
                calls::get_res_change(bound)?,
            )?;
            put(out, d.result.res_change, "out")
        })
    }
}

/// Size and attributes of `pset` (`get_pset_info`).
///
/// # Safety
/// As `dynres_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_get_pset_info(
    s: *mut dynres_session,
    pset: *const c_char,
    out: *mut dynres_pset_info,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(s, |s| {
            need(out, "out")?;
            let d = s.run(calls::DYNRES_CALL_PSET_INFO, calls::pset_info(pset)?)?;
            put(out, d.result.pset_info, "out")
        })
    }
}

/// `pset_create_op(op, pset1, pset2)` (Lst. 6.2), applied atomically by the master:
/// `op` is `DYNRES_OP_*`, `target` the preferred result name (naming it like `pset1`
/// makes a new version of `pset1`) or NULL. `*result` receives the result's name.
///
/// # Safety
/// As `dynres_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_pset_op(
    s: *mut dynres_session,
    op: i32,
    pset1: *const c_char,
    pset2: *const c_char,
    target: *const c_char,
    result: *mut dynres_pset_name,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(s, |s| {
            need(result, "result")?;
            let call = calls::pset_op(op, pset1, pset2, target)?;
            let d = s.run(calls::DYNRES_CALL_PSET_OP, call)?;
            put(result, d.result.pset, "result")
        })
    }
}

fn accept(s: &mut dynres_session, call: ClientCall, out: *mut dynres_accept_result) -> CapiResult {
    need(out, "out")?;
    let d = s.run(calls::DYNRES_CALL_ACCEPT, call)?;
    s.removed = d
        .payload
        .chunks_exact(4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    // SAFETY: checked non-NULL; writable by the caller's promise.
    unsafe { put(out, d.result.accept, "out") }
}

/// Non-blocking `accept_res_change` (Lst. 6.5) by the root of a bound pset: `status` is
/// `DYNRES_STATUS_PENDING` until the change is decided; call again to poll. `bound`
/// NULL if the change has one bound pset. The removed ranks are then available from
/// `dynres_session_removed`.
///
/// # Safety
/// As `dynres_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_accept_res_change(
    s: *mut dynres_session,
    delta: *const c_char,
    new_pset: *const c_char,
    bound: *const c_char,
    out: *mut dynres_accept_result,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(s, |s| {
            accept(s, calls::accept(delta, new_pset, bound, 0)?, out)
        })
    }
}

/// Blocking `accept_res_change`: waits up to `wait_ns` (more than 0) for the decision,
/// then answers (`DYNRES_STATUS_PENDING` if still undecided).
///
/// # Safety
/// As `dynres_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_accept_res_change_blocking(
    s: *mut dynres_session,
    delta: *const c_char,
    new_pset: *const c_char,
    bound: *const c_char,
    wait_ns: u64,
    out: *mut dynres_accept_result,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(s, |s| {
            if wait_ns == 0 {
                return Err(CapiError::InvalidArgument(
                    "a blocking accept needs wait_ns > 0".into(),
                ));
            }
            accept(s, calls::accept(delta, new_pset, bound, wait_ns)?, out)
        })
    }
}

/// The ranks the change of the last successful accept removes (empty before any
/// accept): copied to `ranks` (capacity `cap`), their number stored in `*count`. Too
/// small: `DYNRES_ERR_BUFFER_TOO_SMALL` with `*count` the number needed (`ranks` may be
/// NULL when `cap` is 0). Broadcast them so that removed processes finalize and exit.
///
/// # Safety
/// `s` is NULL or a live session; `ranks` is NULL or valid for `cap` writes; `count` is
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_session_removed(
    s: *mut dynres_session,
    ranks: *mut u32,
    cap: usize,
    count: *mut usize,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { guard_handle(s, |s| copy_out(&s.removed, ranks, cap, count, "ranks")) }
}

/// `confirm_res_change(delta)` (Lst. 6.6) by a process the change added: `timeout_ns`
/// bounds its lookup and its fence, each. Returns once the change is decided, with the
/// pset to derive communication from in `*new_pset`.
///
/// # Safety
/// As `dynres_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_confirm_res_change(
    s: *mut dynres_session,
    delta: *const c_char,
    timeout_ns: u64,
    new_pset: *mut dynres_pset_name,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(s, |s| {
            need(new_pset, "new_pset")?;
            let d = s.run(
                calls::DYNRES_CALL_CONFIRM,
                calls::confirm(delta, timeout_ns)?,
            )?;
            put(new_pset, d.result.pset, "new_pset")
        })
    }
}

/// `request_res_change(req)`: asks the runtime for a change of this application
/// (`req->app` NULL) and stores the delta pset in `*delta` and 0 in `*queued`, or `""`
/// and 1 if the request waits behind another change.
///
/// # Safety
/// As `dynres_get_res_change`; `req` is NULL or a valid request.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_request_res_change(
    s: *mut dynres_session,
    req: *const dynres_change_request,
    delta: *mut dynres_pset_name,
    queued: *mut c_int,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(s, |s| {
            need(delta, "delta")?;
            need(queued, "queued")?;
            let app = s.session.app().to_string();
            let ns = s.session.pid().namespace.clone();
            let call = calls::request_change(req, &ns, Some(&app))?;
            let d = s.run(calls::DYNRES_CALL_REQUEST_CHANGE, call)?;
            put(delta, d.result.pset, "delta")?;
            put(queued, d.result.queued, "queued")
        })
    }
}

/// Publishes `key = value` on the job's data server (never overwrites:
/// `DYNRES_ERR_RC_KEY_EXISTS`). Keys and values are at most 4096 bytes.
///
/// # Safety
/// As `dynres_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_publish(
    s: *mut dynres_session,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(s, |s| {
            s.run(calls::DYNRES_CALL_PUBLISH, calls::publish(key, value)?)
                .map(|_| ())
        })
    }
}

/// Removes a key this application published (`DYNRES_ERR_RC_NO_SUCH_KEY` if none).
///
/// # Safety
/// As `dynres_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_unpublish(s: *mut dynres_session, key: *const c_char) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(s, |s| {
            s.run(calls::DYNRES_CALL_UNPUBLISH, calls::unpublish(key)?)
                .map(|_| ())
        })
    }
}

/// Looks `key` up, waiting up to `wait_ns` for it to be published (0: answer at once;
/// `DYNRES_ERR_RC_NO_SUCH_KEY` or `DYNRES_ERR_RC_TIMEOUT` when it is not there). The
/// value and a NUL are copied to `value` (capacity `cap` bytes; `DYNRES_VALUE_MAX + 1`
/// always suffices) and its length without the NUL stored in `*len`. Too small:
/// `DYNRES_ERR_BUFFER_TOO_SMALL`, `*len` the length, nothing copied; look it up again.
///
/// # Safety
/// As `dynres_get_res_change`; `value` is NULL or valid for `cap` writes; `len` is NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_lookup(
    s: *mut dynres_session,
    key: *const c_char,
    wait_ns: u64,
    value: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(s, |s| {
            need(len, "len")?;
            let d = s.run(calls::DYNRES_CALL_LOOKUP, calls::lookup(key, wait_ns)?)?;
            let text = d.payload.len().saturating_sub(1);
            let mut n = 0usize;
            let r = copy_out(&d.payload, value.cast::<u8>(), cap, &mut n, "value");
            put(len, text, "len")?;
            r
        })
    }
}

/// A barrier over the members of `pset`, bounded by `timeout_ns`
/// (`DYNRES_ERR_RC_TIMEOUT`).
///
/// # Safety
/// As `dynres_get_res_change`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_fence(
    s: *mut dynres_session,
    pset: *const c_char,
    timeout_ns: u64,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(s, |s| {
            s.run(calls::DYNRES_CALL_FENCE, calls::fence(pset, timeout_ns)?)
                .map(|_| ())
        })
    }
}
