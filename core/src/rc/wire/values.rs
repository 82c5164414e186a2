//! Small shared values: process ids, pset names, options, booleans, durations, sizes and
//! the resource-change enums.

use alloc::vec::Vec;

use crate::process::{Namespace, ProcRuns, ProcessId, Run, RunsError};
use crate::pset::{MAX_NAME_LEN, NameError, PsetName};
use crate::rc::{RcStatus, RcType};
use crate::time::Duration;
use crate::wire::prim::{put_str, put_u8, put_u32, put_u64, string, u8, u32, u64};
use crate::wire::{PResult, WireError};

use super::{MAX_NAMESPACE_LEN, MAX_PROCS};

/// A parser failure for a field holding a value outside its defined set.
pub(super) fn invalid<T>(what: &'static str, value: u64) -> Result<T, nom::Err<WireError>> {
    Err(nom::Err::Failure(WireError::InvalidValue { what, value }))
}

pub(super) fn put_pid(out: &mut Vec<u8>, p: &ProcessId) {
    put_str(out, p.namespace.as_str());
    put_u32(out, p.rank);
}

pub(super) fn pid(input: &[u8]) -> PResult<'_, ProcessId> {
    let (i, ns) = string("namespace", MAX_NAMESPACE_LEN)(input)?;
    let (i, rank) = u32(i)?;
    Ok((i, ProcessId::new(Namespace::new(ns), rank)))
}

/// A list of processes as its runs (`RC-23`): `seq<namespace | first u32 | count u32>`.
pub(super) fn put_runs(out: &mut Vec<u8>, l: &ProcRuns) {
    put_u32(out, u32::try_from(l.runs().len()).unwrap_or(u32::MAX));
    for r in l.runs() {
        put_str(out, r.namespace.as_str());
        put_u32(out, r.first);
        put_u32(out, r.count);
    }
}

/// Parses what [`put_runs`] writes. At most [`MAX_PROCS`] processes in all (a run is a
/// count, so the bound is on the sum, not only on the runs); runs that are not the
/// canonical form of their list are refused, so each list has one encoding.
pub(super) fn runs<'a>(what: &'static str) -> impl Fn(&'a [u8]) -> PResult<'a, ProcRuns> {
    move |input| {
        let (mut rest, n) = u32(input)?;
        if n as usize > MAX_PROCS {
            return Err(over(what, u64::from(n)));
        }
        let mut list = Vec::with_capacity((n as usize).min(rest.len()));
        let mut total = 0u64;
        for _ in 0..n {
            let (i, ns) = string("namespace", MAX_NAMESPACE_LEN)(rest)?;
            let (i, first) = u32(i)?;
            let (i, count) = u32(i)?;
            total += u64::from(count);
            if total > MAX_PROCS as u64 {
                return Err(over(what, total));
            }
            let namespace = Namespace::new(ns);
            list.push(Run {
                namespace,
                first,
                count,
            });
            rest = i;
        }
        let l = ProcRuns::from_runs(list).map_err(|e| {
            nom::Err::Failure(WireError::Inconsistent {
                what: match e {
                    RunsError::Empty => "a run of no processes",
                    RunsError::PastLastRank => "a run past the largest rank",
                    RunsError::NotCanonical => "a run continuing the one before it",
                },
            })
        })?;
        Ok((rest, l))
    }
}

fn over(what: &'static str, value: u64) -> nom::Err<WireError> {
    nom::Err::Failure(WireError::OverLimit {
        what,
        value,
        max: MAX_PROCS as u64,
    })
}

/// A stable number for each [`NameError`] kind: the `value` of the
/// [`WireError::InvalidValue`] `{ what: "pset name", .. }` a malformed name decodes to.
///
/// `1` missing scheme, `2` unknown domain, `3` missing app, `4` bad character, `5` empty
/// segment, `6` dot segment, `7` segment too long, `8` name too long.
pub fn name_error_code(e: &NameError) -> u64 {
    match e {
        NameError::MissingScheme => 1,
        NameError::UnknownDomain { .. } => 2,
        NameError::MissingApp { .. } => 3,
        NameError::BadChar { .. } => 4,
        NameError::EmptySegment { .. } => 5,
        NameError::DotSegment { .. } => 6,
        NameError::SegmentTooLong { .. } => 7,
        NameError::TooLong { .. } => 8,
    }
}

/// Names travel in their canonical text, so the peer's `parse` returns an equal name.
pub(crate) fn put_name(out: &mut Vec<u8>, n: &PsetName) {
    put_str(out, n.as_str());
}

/// A pset name: length-checked before reading, then validated like any user input,
/// because a peer's bytes are no more trustworthy than an application's string.
pub(crate) fn name(input: &[u8]) -> PResult<'_, PsetName> {
    let (i, text) = string("pset name", MAX_NAME_LEN)(input)?;
    match PsetName::parse(&text) {
        Ok(n) => Ok((i, n)),
        Err(e) => invalid("pset name", name_error_code(&e)),
    }
}

pub(super) fn put_bool(out: &mut Vec<u8>, b: bool) {
    put_u8(out, u8::from(b));
}

pub(super) fn boolean(input: &[u8]) -> PResult<'_, bool> {
    let (i, v) = u8(input)?;
    match v {
        0 => Ok((i, false)),
        1 => Ok((i, true)),
        _ => invalid("bool", u64::from(v)),
    }
}

/// `Option<T>`: tag `0` (none) or `1` followed by the value.
pub(super) fn put_opt<T>(out: &mut Vec<u8>, v: Option<&T>, f: impl FnOnce(&mut Vec<u8>, &T)) {
    match v {
        None => put_u8(out, 0),
        Some(v) => {
            put_u8(out, 1);
            f(out, v);
        }
    }
}

/// Parses an `Option<T>` written by [`put_opt`].
pub(super) fn opt<'a, T>(
    item: impl Fn(&'a [u8]) -> PResult<'a, T>,
) -> impl Fn(&'a [u8]) -> PResult<'a, Option<T>> {
    move |input| {
        let (i, tag) = u8(input)?;
        match tag {
            0 => Ok((i, None)),
            1 => {
                let (i, v) = item(i)?;
                Ok((i, Some(v)))
            }
            _ => invalid("option tag", u64::from(tag)),
        }
    }
}

/// Durations travel as whole nanoseconds, the kernel's own resolution.
pub(super) fn put_duration(out: &mut Vec<u8>, d: Duration) {
    put_u64(out, d.as_nanos());
}

pub(super) fn duration(input: &[u8]) -> PResult<'_, Duration> {
    let (i, ns) = u64(input)?;
    Ok((i, Duration::from_nanos(ns)))
}

/// Sizes travel as `u64` so 32- and 64-bit peers agree on the layout.
pub(super) fn put_usize(out: &mut Vec<u8>, v: usize) {
    put_u64(out, v as u64);
}

/// A `u64` size that must fit this platform's `usize` (`OverLimit` otherwise, e.g. on a
/// 32-bit target).
pub(super) fn size(what: &'static str) -> impl Fn(&[u8]) -> PResult<'_, usize> {
    move |input| {
        let (i, v) = u64(input)?;
        match usize::try_from(v) {
            Ok(n) => Ok((i, n)),
            Err(_) => Err(nom::Err::Failure(WireError::OverLimit {
                what,
                value: v,
                max: usize::MAX as u64,
            })),
        }
    }
}

pub(super) fn put_rc_type(out: &mut Vec<u8>, t: RcType) {
    put_u8(
        out,
        match t {
            RcType::Add => 0,
            RcType::Sub => 1,
            RcType::Replace => 2,
        },
    );
}

pub(super) fn rc_type(input: &[u8]) -> PResult<'_, RcType> {
    let (i, v) = u8(input)?;
    match v {
        0 => Ok((i, RcType::Add)),
        1 => Ok((i, RcType::Sub)),
        2 => Ok((i, RcType::Replace)),
        _ => invalid("rc type", u64::from(v)),
    }
}

pub(crate) fn put_rc_status(out: &mut Vec<u8>, s: RcStatus) {
    put_u8(
        out,
        match s {
            RcStatus::Null => 0,
            RcStatus::Announced => 1,
            RcStatus::Pending => 2,
            RcStatus::Finalized => 3,
            RcStatus::Aborted => 4,
        },
    );
}

pub(crate) fn rc_status(input: &[u8]) -> PResult<'_, RcStatus> {
    let (i, v) = u8(input)?;
    match v {
        0 => Ok((i, RcStatus::Null)),
        1 => Ok((i, RcStatus::Announced)),
        2 => Ok((i, RcStatus::Pending)),
        3 => Ok((i, RcStatus::Finalized)),
        4 => Ok((i, RcStatus::Aborted)),
        _ => invalid("rc status", u64::from(v)),
    }
}
