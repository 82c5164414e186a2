//! The C-visible value types shared by the kernel API and the client API, and the
//! helpers that read the caller's arguments and write into the caller's memory.

use std::ffi::{CStr, c_char, c_int};

use dynres_core::pset::{Attributes, MAX_NAME_LEN, PsetName, SetOp};
use dynres_core::rc::{
    AcceptResult, BadRequest, Change, ChangeRequest, NamedVictims, QueryAnswer, RcError, RcStatus,
    RcType, Victims,
};
use dynres_core::{Namespace, ProcessId};

use crate::error::{CapiError, CapiResult};

/// Bytes of a [`dynres_pset_name`]: the longest pset name (255 bytes) and its NUL.
pub const DYNRES_PSET_NAME_CAP: usize = 256;
const _: () = assert!(DYNRES_PSET_NAME_CAP == MAX_NAME_LEN + 1);

/// Longest value [`crate::session::dynres_lookup`] can return, without its NUL.
pub const DYNRES_VALUE_MAX: usize = 4096;
const _: () = assert!(DYNRES_VALUE_MAX == dynres_core::rc::wire::MAX_VALUE_LEN);

/// Bytes of a frame header: a frame is `DYNRES_FRAME_HEADER_LEN` bytes of header
/// (magic, version, type, body length) and the body.
pub const DYNRES_FRAME_HEADER_LEN: usize = 9;
const _: () = assert!(DYNRES_FRAME_HEADER_LEN == dynres_core::wire::HEADER_LEN);

/// `get_res_change` found no change (`MPI_RC_NULL`).
pub const DYNRES_RC_NONE: i32 = 0;
/// A change that adds processes.
pub const DYNRES_RC_ADD: i32 = 1;
/// A change that removes processes.
pub const DYNRES_RC_SUB: i32 = 2;
/// A change that removes some processes and adds others.
pub const DYNRES_RC_REPLACE: i32 = 3;

/// Status of a change: none.
pub const DYNRES_STATUS_NULL: i32 = 0;
/// Announced: the application must adapt.
pub const DYNRES_STATUS_ANNOUNCED: i32 = 1;
/// Accepted by a root, waiting for confirmations or further accepts.
pub const DYNRES_STATUS_PENDING: i32 = 2;
/// Applied (final).
pub const DYNRES_STATUS_FINALIZED: i32 = 3;
/// Given up, job data rolled back (final).
pub const DYNRES_STATUS_ABORTED: i32 = 4;

/// Pset operation `A ∪ B`.
pub const DYNRES_OP_UNION: i32 = 1;
/// Pset operation `A ∖ B`.
pub const DYNRES_OP_DIFFERENCE: i32 = 2;
/// Pset operation `A ∩ B`.
pub const DYNRES_OP_INTERSECTION: i32 = 3;

/// A pset name, NUL-terminated, in a fixed array (`""` when there is none).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct dynres_pset_name {
    /// The name's bytes and a NUL.
    pub name: [c_char; DYNRES_PSET_NAME_CAP],
}

impl Default for dynres_pset_name {
    fn default() -> Self {
        dynres_pset_name {
            name: [0; DYNRES_PSET_NAME_CAP],
        }
    }
}

impl dynres_pset_name {
    /// The name `n` (which fits: pset names are at most 255 bytes).
    pub fn of(n: Option<&PsetName>) -> Self {
        let mut out = Self::default();
        let bytes = n.map_or(&[][..], |n| n.as_str().as_bytes());
        for (d, s) in out.name.iter_mut().zip(bytes.iter().take(MAX_NAME_LEN)) {
            *d = *s as c_char;
        }
        out
    }
}

/// What `get_res_change` answers (thesis Lst. 6.1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct dynres_res_change {
    /// `DYNRES_RC_NONE`, `_ADD`, `_SUB` or `_REPLACE`.
    pub kind: i32,
    /// `DYNRES_STATUS_*` of the change (`DYNRES_STATUS_NULL` when there is none).
    pub status: i32,
    /// 1 if the caller is in a delta pset of the change, else 0.
    pub incl: i32,
    /// The delta pset (the added processes for ADD and REPLACE, the removed for SUB).
    pub delta: dynres_pset_name,
    /// REPLACE only: the delta pset of the removed processes.
    pub sub_delta: dynres_pset_name,
}

impl dynres_res_change {
    /// The C form of an answer.
    pub fn of(a: &QueryAnswer) -> Self {
        dynres_res_change {
            kind: a.kind.map_or(DYNRES_RC_NONE, rc_type_code),
            status: status_code(a.status),
            incl: c_int::from(a.incl),
            delta: dynres_pset_name::of(a.delta.as_ref()),
            sub_delta: dynres_pset_name::of(a.sub_delta.as_ref()),
        }
    }
}

/// What an accept learns (thesis Lst. 6.5).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct dynres_accept_result {
    /// `DYNRES_STATUS_PENDING` until decided, then `DYNRES_STATUS_FINALIZED`.
    pub status: i32,
    /// 1 once finalized if the caller was removed: it must finalize and exit.
    pub terminate: i32,
    /// How many processes the change removes (their ranks are handed over separately).
    pub nremoved: u64,
    /// The pset to derive communication from.
    pub new_pset: dynres_pset_name,
}

impl dynres_accept_result {
    /// The C form of an accept's result.
    pub fn of(a: &AcceptResult) -> Self {
        dynres_accept_result {
            status: status_code(a.status),
            terminate: c_int::from(a.terminate),
            nremoved: a.removed.len() as u64,
            new_pset: dynres_pset_name::of(Some(&a.new_pset)),
        }
    }
}

/// Size and attributes of a pset (`mpi_size`, `mpi_ps_version`, `mpi_ps_epoch`,
/// `mpi_ps_active`; the `mpi_ps_sched_*` hints are not offered in C).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct dynres_pset_info {
    /// `mpi_size`: the number of members.
    pub size: u64,
    /// `mpi_ps_version`: +1 whenever the members change.
    pub version: u64,
    /// `mpi_ps_epoch`: the latest change that changed the members.
    pub epoch: u64,
    /// `mpi_ps_active`: 1 if the application manages the pset.
    pub active: i32,
}

impl dynres_pset_info {
    /// The C form of a size and attributes.
    pub fn of(size: usize, a: &Attributes) -> Self {
        dynres_pset_info {
            size: size as u64,
            version: a.version,
            epoch: a.epoch,
            active: c_int::from(a.active),
        }
    }
}

/// A request to change an application's resources (`request_res_change`, or a tool's
/// request to the master). Every pointer is borrowed for the duration of the call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct dynres_change_request {
    /// `DYNRES_RC_ADD`, `DYNRES_RC_SUB` or `DYNRES_RC_REPLACE`.
    pub kind: i32,
    /// The application (NUL-terminated). In the client API NULL means the caller's own.
    pub app: *const c_char,
    /// Processes to add (ADD, REPLACE).
    pub add: u32,
    /// Processes to remove when no victims are named (SUB, REPLACE).
    pub sub: u32,
    /// Ranks (in the job's namespace) to remove, or NULL when `nvictims` is 0: empty
    /// means the highest slots (stack order).
    pub victims: *const u32,
    /// Entries in `victims`.
    pub nvictims: usize,
    /// For ADD: the malleable pset to bind to, or NULL to let the runtime pick.
    pub bound: *const c_char,
}

/// `DYNRES_STATUS_*` of a status.
pub fn status_code(s: RcStatus) -> i32 {
    match s {
        RcStatus::Null => DYNRES_STATUS_NULL,
        RcStatus::Announced => DYNRES_STATUS_ANNOUNCED,
        RcStatus::Pending => DYNRES_STATUS_PENDING,
        RcStatus::Finalized => DYNRES_STATUS_FINALIZED,
        RcStatus::Aborted => DYNRES_STATUS_ABORTED,
    }
}

/// `DYNRES_RC_*` of a change type.
pub fn rc_type_code(t: RcType) -> i32 {
    match t {
        RcType::Add => DYNRES_RC_ADD,
        RcType::Sub => DYNRES_RC_SUB,
        RcType::Replace => DYNRES_RC_REPLACE,
    }
}

/// The set operation of a `DYNRES_OP_*` constant.
pub fn set_op(op: i32) -> Result<SetOp, CapiError> {
    match op {
        DYNRES_OP_UNION => Ok(SetOp::Union),
        DYNRES_OP_DIFFERENCE => Ok(SetOp::Difference),
        DYNRES_OP_INTERSECTION => Ok(SetOp::Intersection),
        _ => Err(CapiError::InvalidArgument(format!(
            "pset operation {op} is not DYNRES_OP_UNION, _DIFFERENCE or _INTERSECTION"
        ))),
    }
}

/// A required NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives the call.
pub unsafe fn text<'a>(p: *const c_char, what: &'static str) -> Result<&'a str, CapiError> {
    if p.is_null() {
        return Err(CapiError::Null(what));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's promise.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| CapiError::InvalidArgument(format!("{what} is not UTF-8")))
}

/// An optional string argument: NULL is `None`.
///
/// # Safety
/// As [`text`].
pub unsafe fn opt_text<'a>(
    p: *const c_char,
    what: &'static str,
) -> Result<Option<&'a str>, CapiError> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded.
    unsafe { text(p, what) }.map(Some)
}

/// A required pset-name argument.
///
/// # Safety
/// As [`text`].
pub unsafe fn name(p: *const c_char, what: &'static str) -> Result<PsetName, CapiError> {
    // SAFETY: forwarded.
    Ok(PsetName::parse(unsafe { text(p, what) }?)?)
}

/// An optional pset-name argument: NULL is `None`.
///
/// # Safety
/// As [`text`].
pub unsafe fn opt_name(
    p: *const c_char,
    what: &'static str,
) -> Result<Option<PsetName>, CapiError> {
    // SAFETY: forwarded.
    match unsafe { opt_text(p, what) }? {
        Some(t) => Ok(Some(PsetName::parse(t)?)),
        None => Ok(None),
    }
}

/// A borrowed array argument: NULL is allowed only for `n == 0`.
///
/// # Safety
/// `p` is NULL or points to `n` readable elements that outlive the call.
pub unsafe fn slice<'a, T>(
    p: *const T,
    n: usize,
    what: &'static str,
) -> Result<&'a [T], CapiError> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(CapiError::Null(what));
    }
    if n > isize::MAX as usize / std::mem::size_of::<T>().max(1) {
        return Err(CapiError::InvalidArgument(format!(
            "{what}: count {n} too large"
        )));
    }
    // SAFETY: non-NULL, `n` elements by the caller's promise, size checked above.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Writes `v` through a required output pointer.
///
/// # Safety
/// `p` is NULL or valid for a write of `T`.
pub unsafe fn put<T>(p: *mut T, v: T, what: &'static str) -> CapiResult {
    if p.is_null() {
        return Err(CapiError::Null(what));
    }
    // SAFETY: non-NULL and writable by the caller's promise.
    unsafe { p.write(v) };
    Ok(())
}

/// Checks that an output pointer is not NULL before anything is done (so a call with a
/// side effect does not happen when its result could not be handed over).
pub fn need<T>(p: *mut T, what: &'static str) -> CapiResult {
    if p.is_null() {
        return Err(CapiError::Null(what));
    }
    Ok(())
}

/// Copies `items` into the caller's array `out` of capacity `cap` and stores the count
/// in `*count`. Too small: stores the count needed and fails with
/// [`CapiError::TooSmall`], writing nothing else. `out` may be NULL when `cap` is 0
/// (a size query).
///
/// # Safety
/// `out` is NULL or valid for `cap` writes of `T`; `count` is NULL or writable.
pub unsafe fn copy_out<T: Copy>(
    items: &[T],
    out: *mut T,
    cap: usize,
    count: *mut usize,
    what: &'static str,
) -> CapiResult {
    // SAFETY: forwarded.
    unsafe { put(count, items.len(), "count")? };
    if items.len() > cap {
        return Err(CapiError::TooSmall {
            what,
            needed: items.len(),
            capacity: cap,
        });
    }
    if items.is_empty() {
        return Ok(());
    }
    if out.is_null() {
        return Err(CapiError::Null(what));
    }
    // SAFETY: `out` holds at least `cap >= items.len()` elements by the caller's promise.
    unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), out, items.len()) };
    Ok(())
}

/// `text` and a NUL, as bytes.
pub fn with_nul(text: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(text.len() + 1);
    v.extend(text.bytes().map(|b| if b == 0 { b'?' } else { b }));
    v.push(0);
    v
}

/// Ranks as native-endian `uint32_t`s, the layout of a C `uint32_t[]`.
pub fn ranks_bytes(procs: &[ProcessId]) -> Vec<u8> {
    procs.iter().flat_map(|p| p.rank.to_ne_bytes()).collect()
}

/// Converts a C change request; `default_app` stands in for a NULL `app`.
///
/// # Safety
/// `r`'s pointers follow [`dynres_change_request`]'s rules.
pub unsafe fn change_request(
    r: &dynres_change_request,
    ns: &Namespace,
    default_app: Option<&str>,
) -> Result<ChangeRequest, CapiError> {
    let kind = match r.kind {
        DYNRES_RC_ADD => RcType::Add,
        DYNRES_RC_SUB => RcType::Sub,
        DYNRES_RC_REPLACE => RcType::Replace,
        k => {
            return Err(CapiError::InvalidArgument(format!(
                "change kind {k} is not DYNRES_RC_ADD, _SUB or _REPLACE"
            )));
        }
    };
    // SAFETY: the caller's promise about `r`'s pointers.
    let app = match (unsafe { opt_text(r.app, "request.app") }?, default_app) {
        (Some(a), _) | (None, Some(a)) => a.to_string(),
        (None, None) => return Err(CapiError::Null("request.app")),
    };
    // SAFETY: as above.
    let victims = unsafe { slice(r.victims, r.nvictims, "request.victims") }?
        .iter()
        .map(|rank| ProcessId::new(ns.clone(), *rank))
        .collect();
    // SAFETY: as above. Read for every kind, so a malformed name is refused whatever the
    // kind (as before the request became an enum).
    let bound = unsafe { opt_name(r.bound, "request.bound") }?;
    // The C struct is a bag of fields: the ones a kind does not take are ignored, as the
    // master always ignored them, except victims named for an ADD, which the master
    // refused; that refusal is now the call's own, with the same code and text.
    let victims = match NamedVictims::new(victims) {
        None => Victims::Count(r.sub),
        Some(named) => Victims::Named(named),
    };
    let change = match (kind, victims) {
        (RcType::Add, Victims::Named(_)) => {
            return Err(RcError::BadRequest(BadRequest::VictimsWithoutRemoval).into());
        }
        (RcType::Add, Victims::Count(_)) => Change::Add { n: r.add, bound },
        (RcType::Sub, victims) => Change::Sub(victims),
        (RcType::Replace, remove) => Change::Replace { remove, add: r.add },
    };
    Ok(ChangeRequest { app, change })
}
