//! The pset registry on its own: `dynres_registry_*`.

use std::ffi::{c_char, c_int};

use dynres_core::pset::{AttrUpdate, Origin, PsetOp, PsetRegistry};
use dynres_core::{Namespace, ProcessId};

use crate::error::{CapiError, CapiResult, Poison, create_handle, free_handle, guard_handle};
use crate::master::dynres_app_spec;
use crate::types::{
    copy_out, dynres_pset_info, dynres_pset_name, name, need, opt_name, opt_text, put, set_op,
    slice, text,
};

/// A pset registry (opaque): every pset of one job, its members and attributes, and who
/// may do what to it. Members are ranks of the job's namespace.
#[allow(non_camel_case_types)]
pub struct dynres_registry {
    registry: PsetRegistry,
    ns: Namespace,
    poisoned: bool,
}

impl Poison for dynres_registry {
    const WHAT: &'static str = "registry";
    fn poisoned(&mut self) -> &mut bool {
        &mut self.poisoned
    }
}

impl dynres_registry {
    /// A handle on `registry`, whose processes are in namespace `ns`.
    pub fn new(registry: PsetRegistry, ns: Namespace) -> Self {
        dynres_registry {
            registry,
            ns,
            poisoned: false,
        }
    }

    fn pid(&self, rank: u32) -> ProcessId {
        ProcessId::new(self.ns.clone(), rank)
    }
}

/// An empty registry; start it with `dynres_registry_start_job`.
///
/// Ownership: on success `*out` is a new registry owned by the caller, to be freed with
/// `dynres_registry_free`.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_registry_new(out: *mut *mut dynres_registry) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        create_handle(out, || {
            Ok(dynres_registry::new(
                PsetRegistry::new(),
                Namespace::new(""),
            ))
        })
    }
}

/// Frees a registry. NULL is a no-op.
///
/// Ownership: takes `r` (from `dynres_registry_new` or `dynres_master_registry_copy`,
/// not to be used again).
///
/// # Safety
/// `r` is NULL or a live registry not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_registry_free(r: *mut dynres_registry) -> c_int {
    // SAFETY: forwarded.
    unsafe { free_handle(r) }
}

/// Defines the job's initial psets: `mpi://WORLD` and one active `mpi://app/{name}` per
/// application, whose processes get ranks 0, 1, … of `job_namespace` in order (PSET-3).
///
/// Ownership: everything is borrowed for the call. Errors: `DYNRES_ERR_RC_PSET` (started
/// already, an application with no process, a name used twice), `DYNRES_ERR_BAD_NAME`.
///
/// # Safety
/// `r` is NULL or a live registry; `job_namespace` is NULL or NUL-terminated; `apps` is
/// NULL or holds `napps` entries whose names are NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_registry_start_job(
    r: *mut dynres_registry,
    job_namespace: *const c_char,
    apps: *const dynres_app_spec,
    napps: usize,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(r, |r| {
            let ns = Namespace::new(text(job_namespace, "job_namespace")?);
            let mut next = 0u32;
            let mut owned: Vec<(String, Vec<ProcessId>)> = Vec::new();
            for a in slice(apps, napps, "apps")? {
                let first = next;
                next = next
                    .checked_add(a.nprocs)
                    .ok_or_else(|| CapiError::InvalidArgument("more than 2^32 processes".into()))?;
                let procs = (first..next)
                    .map(|k| ProcessId::new(ns.clone(), k))
                    .collect();
                owned.push((text(a.name, "app name")?.to_string(), procs));
            }
            let refs: Vec<(&str, &[ProcessId])> = owned
                .iter()
                .map(|(a, p)| (a.as_str(), p.as_slice()))
                .collect();
            r.registry.start_job(&refs)?;
            r.ns = ns;
            Ok(())
        })
    }
}

/// Defines a runtime pset `name` in `mpi://rte/{app}/…` (not under `rc/`) with the
/// processes `ranks` (PSET-7).
///
/// Ownership: borrowed for the call. Errors: `DYNRES_ERR_RC_PSET` (not permitted, name
/// taken, empty), `DYNRES_ERR_BAD_NAME`.
///
/// # Safety
/// `r` is NULL or a live registry; `name` is NULL or NUL-terminated; `ranks` is NULL or
/// holds `nranks` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_registry_define(
    r: *mut dynres_registry,
    pset: *const c_char,
    ranks: *const u32,
    nranks: usize,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(r, |r| {
            let n = name(pset, "pset")?;
            let procs: Vec<ProcessId> = slice(ranks, nranks, "ranks")?
                .iter()
                .map(|k| r.pid(*k))
                .collect();
            Ok(r.registry.define(n, &procs, &AttrUpdate::none())?)
        })
    }
}

/// Applies the set operation `op` (`DYNRES_OP_*`) to `pset1` and `pset2` atomically
/// (PSET-30..34) and stores the result's name in `*result`. `target` is the preferred
/// result name or NULL. The caller is the runtime if `app` is NULL, else process `rank`
/// of application `app` (which may write only in `mpi://app/{app}/…`, PSET-6).
///
/// Ownership: strings are borrowed for the call. Errors: `DYNRES_ERR_RC_PSET` (nothing
/// changed, PSET-40), `DYNRES_ERR_BAD_NAME`, `DYNRES_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// `r` is NULL or a live registry; strings are NULL or NUL-terminated; `result` is NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_registry_op(
    r: *mut dynres_registry,
    op: i32,
    pset1: *const c_char,
    pset2: *const c_char,
    target: *const c_char,
    app: *const c_char,
    rank: u32,
    result: *mut dynres_pset_name,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(r, |r| {
            need(result, "result")?;
            let origin = match opt_text(app, "app")? {
                None => Origin::Runtime,
                Some(a) => Origin::process(a, r.pid(rank)),
            };
            let op = PsetOp::Set {
                op: set_op(op)?,
                pset1: name(pset1, "pset1")?,
                pset2: name(pset2, "pset2")?,
                target: opt_name(target, "target")?,
                attrs: AttrUpdate::none(),
            };
            let out = r.registry.apply(&origin, &op)?;
            put(result, dynres_pset_name::of(out.results.first()), "result")
        })
    }
}

/// Size and attributes of pset `pset` (as the runtime sees it: `mpi://SELF` has no
/// meaning here).
///
/// # Safety
/// `r` is NULL or a live registry; `pset` is NULL or NUL-terminated; `info` is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_registry_info(
    r: *mut dynres_registry,
    pset: *const c_char,
    info: *mut dynres_pset_info,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(r, |r| {
            let i = r.registry.info(&Origin::Runtime, &name(pset, "pset")?)?;
            put(info, dynres_pset_info::of(i.size, &i.attrs), "info")
        })
    }
}

/// Whether process `rank` is a member of `pset`: `*member` is 1 or 0.
///
/// # Safety
/// `r` is NULL or a live registry; `pset` is NULL or NUL-terminated; `member` is NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_registry_contains(
    r: *mut dynres_registry,
    pset: *const c_char,
    rank: u32,
    member: *mut c_int,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(r, |r| {
            let p = r.registry.get(&name(pset, "pset")?)?;
            let i = r.registry.table().index_of(&r.pid(rank));
            let yes = i.is_some_and(|i| p.members.contains(i));
            put(member, c_int::from(yes), "member")
        })
    }
}

/// The members of `pset` as ranks, in rank-creation order: copied to `ranks` (capacity
/// `cap` entries), their number stored in `*count`. If `cap` is too small the call fails
/// with `DYNRES_ERR_BUFFER_TOO_SMALL` and `*count` is the number needed (`ranks` may be
/// NULL when `cap` is 0).
///
/// # Safety
/// `r` is NULL or a live registry; `pset` is NULL or NUL-terminated; `ranks` is NULL or
/// valid for `cap` writes; `count` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dynres_registry_members(
    r: *mut dynres_registry,
    pset: *const c_char,
    ranks: *mut u32,
    cap: usize,
    count: *mut usize,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        guard_handle(r, |r| -> CapiResult {
            need(count, "count")?;
            let m = r.registry.members(&Origin::Runtime, &name(pset, "pset")?)?;
            let ranks_of: Vec<u32> = m.iter().map(|p| p.rank).collect();
            copy_out(&ranks_of, ranks, cap, count, "ranks")
        })
    }
}
