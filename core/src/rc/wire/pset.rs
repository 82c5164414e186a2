//! Pset values: operations, attributes and outcomes.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use crate::process::ProcessId;
use crate::pset::{AttrUpdate, Attributes, OpOutcome, PsetOp, SetOp, SplitBy};
use crate::wire::PResult;
use crate::wire::prim::{put_seq, put_str, put_u8, put_u32, put_u64, seq, string, u8, u32, u64};

use super::values::{
    boolean, invalid, name, opt, pid, put_bool, put_name, put_opt, put_pid, put_usize, size,
};
use super::{MAX_HINT_LEN, MAX_PROCS, MAX_PSETS, MAX_SCHED_HINTS};

/// Scheduling hints: `u32` count, then `key | value` pairs in ascending key order.
fn put_hints(out: &mut Vec<u8>, hints: &BTreeMap<String, String>) {
    put_u32(out, u32::try_from(hints.len()).unwrap_or(u32::MAX));
    for (k, v) in hints {
        put_str(out, k);
        put_str(out, v);
    }
}

/// Keys must be strictly ascending: a map has no duplicates, and one order makes the
/// encoding canonical (a duplicate would otherwise silently drop a value).
fn hint(input: &[u8]) -> PResult<'_, (String, String)> {
    let (i, k) = string("sched hint key", MAX_HINT_LEN)(input)?;
    let (i, v) = string("sched hint value", MAX_HINT_LEN)(i)?;
    Ok((i, (k, v)))
}

fn hints(input: &[u8]) -> PResult<'_, BTreeMap<String, String>> {
    let (i, pairs) = seq("sched hints", MAX_SCHED_HINTS, hint)(input)?;
    let mut map = BTreeMap::new();
    for (index, (k, v)) in pairs.into_iter().enumerate() {
        if map.last_key_value().is_some_and(|(last, _)| *last >= k) {
            return invalid("sched hint key order", index as u64);
        }
        map.insert(k, v);
    }
    Ok((i, map))
}

pub(super) fn put_attr_update(out: &mut Vec<u8>, u: &AttrUpdate) {
    put_opt(out, u.active.as_ref(), |o, a| put_bool(o, *a));
    put_hints(out, &u.sched);
}

pub(super) fn attr_update(input: &[u8]) -> PResult<'_, AttrUpdate> {
    let (i, active) = opt(boolean)(input)?;
    let (i, sched) = hints(i)?;
    Ok((i, AttrUpdate { active, sched }))
}

pub(super) fn put_attributes(out: &mut Vec<u8>, a: &Attributes) {
    put_u64(out, a.version);
    put_u64(out, a.epoch);
    put_bool(out, a.active);
    put_hints(out, &a.sched);
}

pub(super) fn attributes(input: &[u8]) -> PResult<'_, Attributes> {
    let (i, version) = u64(input)?;
    let (i, epoch) = u64(i)?;
    let (i, active) = boolean(i)?;
    let (i, sched) = hints(i)?;
    Ok((
        i,
        Attributes {
            version,
            epoch,
            active,
            sched,
        },
    ))
}

fn put_set_op(out: &mut Vec<u8>, op: SetOp) {
    put_u8(
        out,
        match op {
            SetOp::Union => 0,
            SetOp::Difference => 1,
            SetOp::Intersection => 2,
        },
    );
}

fn set_op(input: &[u8]) -> PResult<'_, SetOp> {
    let (i, v) = u8(input)?;
    match v {
        0 => Ok((i, SetOp::Union)),
        1 => Ok((i, SetOp::Difference)),
        2 => Ok((i, SetOp::Intersection)),
        _ => invalid("set op", u64::from(v)),
    }
}

fn put_split_by(out: &mut Vec<u8>, by: &SplitBy) {
    match by {
        SplitBy::Sizes(sizes) => {
            put_u8(out, 0);
            put_seq(out, sizes, |o, s| put_usize(o, *s));
        }
        SplitBy::Colours(colours) => {
            put_u8(out, 1);
            put_seq(out, colours, |o, (p, c)| {
                put_pid(o, p);
                put_u32(o, *c);
            });
        }
    }
}

fn colour(input: &[u8]) -> PResult<'_, (ProcessId, u32)> {
    let (i, p) = pid(input)?;
    let (i, c) = u32(i)?;
    Ok((i, (p, c)))
}

fn split_by(input: &[u8]) -> PResult<'_, SplitBy> {
    let (i, tag) = u8(input)?;
    match tag {
        0 => {
            let (i, sizes) = seq("split sizes", MAX_PROCS, size("split size"))(i)?;
            Ok((i, SplitBy::Sizes(sizes)))
        }
        1 => {
            let (i, colours) = seq("split colours", MAX_PROCS, colour)(i)?;
            Ok((i, SplitBy::Colours(colours)))
        }
        _ => invalid("split by", u64::from(tag)),
    }
}

/// One operation: `tag u8` (0 set op, 1 NULL, 2 SPLIT), then its fields in order.
pub(super) fn put_pset_op(out: &mut Vec<u8>, op: &PsetOp) {
    match op {
        PsetOp::Set {
            op,
            pset1,
            pset2,
            target,
            attrs,
        } => {
            put_u8(out, 0);
            put_set_op(out, *op);
            put_name(out, pset1);
            put_name(out, pset2);
            put_opt(out, target.as_ref(), put_name);
            put_attr_update(out, attrs);
        }
        PsetOp::Null { target, attrs } => {
            put_u8(out, 1);
            put_name(out, target);
            put_attr_update(out, attrs);
        }
        PsetOp::Split {
            pset,
            by,
            targets,
            attrs,
        } => {
            put_u8(out, 2);
            put_name(out, pset);
            put_split_by(out, by);
            put_seq(out, targets, put_name);
            put_attr_update(out, attrs);
        }
    }
}

pub(super) fn pset_op(input: &[u8]) -> PResult<'_, PsetOp> {
    let (i, tag) = u8(input)?;
    match tag {
        0 => {
            let (i, op) = set_op(i)?;
            let (i, pset1) = name(i)?;
            let (i, pset2) = name(i)?;
            let (i, target) = opt(name)(i)?;
            let (i, attrs) = attr_update(i)?;
            Ok((
                i,
                PsetOp::Set {
                    op,
                    pset1,
                    pset2,
                    target,
                    attrs,
                },
            ))
        }
        1 => {
            let (i, target) = name(i)?;
            let (i, attrs) = attr_update(i)?;
            Ok((i, PsetOp::Null { target, attrs }))
        }
        2 => {
            let (i, pset) = name(i)?;
            let (i, by) = split_by(i)?;
            let (i, targets) = seq("split targets", MAX_PSETS, name)(i)?;
            let (i, attrs) = attr_update(i)?;
            Ok((
                i,
                PsetOp::Split {
                    pset,
                    by,
                    targets,
                    attrs,
                },
            ))
        }
        _ => invalid("pset op", u64::from(tag)),
    }
}

pub(super) fn put_outcome(out: &mut Vec<u8>, o: &OpOutcome) {
    put_seq(out, &o.results, put_name);
    put_seq(out, &o.recursive, put_name);
    put_seq(out, &o.pruned, put_name);
}

pub(super) fn outcome(input: &[u8]) -> PResult<'_, OpOutcome> {
    let (i, results) = seq("op results", MAX_PSETS, name)(input)?;
    let (i, recursive) = seq("op recursive", MAX_PSETS, name)(i)?;
    let (i, pruned) = seq("op pruned", MAX_PSETS, name)(i)?;
    Ok((
        i,
        OpOutcome {
            results,
            recursive,
            pruned,
        },
    ))
}
