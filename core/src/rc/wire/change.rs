//! Resource-change values: change requests, replicated change infos, query answers and
//! accept outcomes.

use alloc::vec::Vec;

use crate::process::ProcessId;

use crate::rc::{
    AcceptOutcome, Change, ChangeInfo, ChangeRequest, NamedVictims, QueryAnswer, RcType, Victims,
};
use crate::wire::prim::{put_seq, put_str, put_u32, seq, string, u32};
use crate::wire::{PResult, WireError};

use super::values::{
    boolean, name, opt, pid, put_bool, put_name, put_opt, put_pid, put_rc_status, put_rc_type,
    rc_status, rc_type,
};
use super::{MAX_APP_LEN, MAX_PROCS, MAX_PSETS};

/// `app | kind | add u32 | sub u32 | victims | bound?`: the flat layout of every kind.
/// A kind writes 0, an empty list or `None` in the fields it does not take, and named
/// victims also write their number in `sub`, so [`change_request`] accepts exactly what
/// this writes.
pub(super) fn put_change_request(out: &mut Vec<u8>, r: &ChangeRequest) {
    put_str(out, &r.app);
    put_rc_type(out, r.kind());
    put_u32(out, r.change.adds());
    let victims = r.change.victims();
    put_u32(out, victims.map_or(0, Victims::count));
    let named = match victims {
        Some(Victims::Named(v)) => v.as_slice(),
        Some(Victims::Count(_)) | None => &[],
    };
    put_seq(out, named, put_pid);
    let bound = match &r.change {
        Change::Add { bound, .. } => bound.as_ref(),
        Change::Sub(_) | Change::Replace { .. } => None,
    };
    put_opt(out, bound, put_name);
}

/// A decode failure for a change request's fields that do not fit its kind.
fn inconsistent<T>(what: &'static str) -> PResult<'static, T> {
    Err(nom::Err::Failure(WireError::Inconsistent { what }))
}

/// The victims of a SUB or REPLACE: stack order when none are named, else the named
/// ones, whose number `sub` must repeat.
fn removed(sub: u32, victims: Vec<ProcessId>) -> Result<Victims, nom::Err<WireError>> {
    match NamedVictims::new(victims) {
        None => Ok(Victims::Count(sub)),
        Some(named) if usize::try_from(sub) == Ok(named.len()) => Ok(Victims::Named(named)),
        Some(_) => Err(nom::Err::Failure(WireError::Inconsistent {
            what: "change request: sub is not the number of named victims",
        })),
    }
}

pub(super) fn change_request(input: &[u8]) -> PResult<'_, ChangeRequest> {
    let (i, app) = string("app", MAX_APP_LEN)(input)?;
    let (i, kind) = rc_type(i)?;
    let (i, add) = u32(i)?;
    let (i, sub) = u32(i)?;
    let (i, victims) = seq("victims", MAX_PROCS, pid)(i)?;
    let (i, bound) = opt(name)(i)?;
    // The fields a kind does not take must hold what `put_change_request` writes there,
    // so that every accepted frame re-encodes to the same bytes.
    let change = match kind {
        RcType::Add if sub != 0 => return inconsistent("change request: ADD with sub"),
        RcType::Add if !victims.is_empty() => {
            return inconsistent("change request: ADD with victims");
        }
        RcType::Add => Change::Add { n: add, bound },
        _ if bound.is_some() => {
            return inconsistent("change request: SUB or REPLACE with a bound pset");
        }
        RcType::Sub if add != 0 => return inconsistent("change request: SUB with add"),
        RcType::Sub => Change::Sub(removed(sub, victims)?),
        RcType::Replace => Change::Replace {
            remove: removed(sub, victims)?,
            add,
        },
    };
    Ok((i, ChangeRequest { app, change }))
}

/// `app | kind | delta | sub_delta? | bound | added | removed | status`.
pub(super) fn put_change_info(out: &mut Vec<u8>, c: &ChangeInfo) {
    put_str(out, &c.app);
    put_rc_type(out, c.kind);
    put_name(out, &c.delta);
    put_opt(out, c.sub_delta.as_ref(), put_name);
    put_seq(out, &c.bound, put_name);
    put_seq(out, &c.added, put_pid);
    put_seq(out, &c.removed, put_pid);
    put_rc_status(out, c.status);
}

pub(super) fn change_info(input: &[u8]) -> PResult<'_, ChangeInfo> {
    let (i, app) = string("app", MAX_APP_LEN)(input)?;
    let (i, kind) = rc_type(i)?;
    let (i, delta) = name(i)?;
    let (i, sub_delta) = opt(name)(i)?;
    let (i, bound) = seq("bound psets", MAX_PSETS, name)(i)?;
    let (i, added) = seq("added", MAX_PROCS, pid)(i)?;
    let (i, removed) = seq("removed", MAX_PROCS, pid)(i)?;
    let (i, status) = rc_status(i)?;
    Ok((
        i,
        ChangeInfo {
            app,
            kind,
            delta,
            sub_delta,
            bound,
            added,
            removed,
            status,
        },
    ))
}

/// `kind? | delta? | sub_delta? | incl | status`.
pub(super) fn put_query_answer(out: &mut Vec<u8>, a: &QueryAnswer) {
    put_opt(out, a.kind.as_ref(), |o, k| put_rc_type(o, *k));
    put_opt(out, a.delta.as_ref(), put_name);
    put_opt(out, a.sub_delta.as_ref(), put_name);
    put_bool(out, a.incl);
    put_rc_status(out, a.status);
}

pub(super) fn query_answer(input: &[u8]) -> PResult<'_, QueryAnswer> {
    let (i, kind) = opt(rc_type)(input)?;
    let (i, delta) = opt(name)(i)?;
    let (i, sub_delta) = opt(name)(i)?;
    let (i, incl) = boolean(i)?;
    let (i, status) = rc_status(i)?;
    Ok((
        i,
        QueryAnswer {
            kind,
            delta,
            sub_delta,
            incl,
            status,
        },
    ))
}

/// `status | new_pset | removed`.
pub(super) fn put_accept_outcome(out: &mut Vec<u8>, a: &AcceptOutcome) {
    put_rc_status(out, a.status);
    put_name(out, &a.new_pset);
    put_seq(out, &a.removed, put_pid);
}

pub(super) fn accept_outcome(input: &[u8]) -> PResult<'_, AcceptOutcome> {
    let (i, status) = rc_status(input)?;
    let (i, new_pset) = name(i)?;
    let (i, removed) = seq("removed", MAX_PROCS, pid)(i)?;
    Ok((
        i,
        AcceptOutcome {
            status,
            new_pset,
            removed,
        },
    ))
}
