//! Bodies of client requests and replies, without frame or request id: the same bytes
//! follow the request id in a client frame and sit inside `Forward` / `Reply`, so the
//! daemon can pass a request on without re-encoding its fields differently.

use alloc::string::String;
use alloc::vec::Vec;

use crate::process::ProcessId;
use crate::pset::{Attributes, OpOutcome};
use crate::rc::{ClientReply, ClientRequest, ModexData, SpawnWatch};
use crate::wire::prim::{put_seq, put_str, put_u64, seq, string, u64};
use crate::wire::{PResult, WireError};

use super::change::{
    accept_outcome, change_request, put_accept_outcome, put_change_request, put_query_answer,
    query_answer,
};
use super::errors::{put_result, result};
use super::pset::{attributes, outcome, pset_op, put_attributes, put_outcome, put_pset_op};
use super::spawn::{app, commands, env, put_commands, put_env, put_spawned, spawned};
use super::types as t;
use super::values::{
    boolean, duration, name, opt, pid, put_bool, put_duration, put_name, put_opt, put_pid,
    put_usize, size,
};
use super::{MAX_KEY_LEN, MAX_OPS, MAX_PROCS, MAX_VALUE_LEN};

/// The message type of a request.
pub(super) fn request_type(r: &ClientRequest) -> u16 {
    match r {
        ClientRequest::Query { .. } => t::QUERY,
        ClientRequest::PsetInfo { .. } => t::PSET_INFO,
        ClientRequest::PsetOp { .. } => t::PSET_OP,
        ClientRequest::Publish { .. } => t::PUBLISH,
        ClientRequest::Lookup { .. } => t::LOOKUP,
        ClientRequest::Unpublish { .. } => t::UNPUBLISH,
        ClientRequest::Fence { .. } => t::FENCE,
        ClientRequest::Accept { .. } => t::ACCEPT,
        ClientRequest::Confirm { .. } => t::CONFIRM,
        ClientRequest::RequestChange(_) => t::REQUEST_CHANGE,
        ClientRequest::Modex { .. } => t::MODEX,
        ClientRequest::Spawn { .. } => t::SPAWN,
        ClientRequest::KillSpawn { .. } => t::KILL_SPAWN,
    }
}

/// Appends a request's fields (its type travels separately).
pub(super) fn put_request(out: &mut Vec<u8>, r: &ClientRequest) {
    match r {
        ClientRequest::Query { bound } => put_opt(out, bound.as_ref(), put_name),
        ClientRequest::PsetInfo { name } => put_name(out, name),
        ClientRequest::PsetOp { ops } => put_seq(out, ops, put_pset_op),
        ClientRequest::Publish { key, value } => {
            put_str(out, key);
            put_str(out, value);
        }
        ClientRequest::Unpublish { key } => put_str(out, key),
        ClientRequest::Lookup { key, wait } => {
            put_str(out, key);
            put_opt(out, wait.as_ref(), |o, d| put_duration(o, *d));
        }
        ClientRequest::Fence { pset, timeout } => {
            put_name(out, pset);
            put_duration(out, *timeout);
        }
        ClientRequest::Accept {
            delta,
            new_pset,
            bound,
            wait,
        } => {
            put_name(out, delta);
            put_name(out, new_pset);
            put_opt(out, bound.as_ref(), put_name);
            put_opt(out, wait.as_ref(), |o, d| put_duration(o, *d));
        }
        ClientRequest::Confirm { delta, ok } => {
            put_name(out, delta);
            put_bool(out, *ok);
        }
        ClientRequest::RequestChange(req) => put_change_request(out, req),
        ClientRequest::Modex {
            pset,
            data,
            timeout,
        } => {
            put_name(out, pset);
            put_str(out, data);
            put_duration(out, *timeout);
        }
        ClientRequest::Spawn {
            commands,
            env,
            watch,
        } => {
            put_commands(out, commands);
            put_env(out, env);
            put_bool(out, *watch == SpawnWatch::Job);
        }
        ClientRequest::KillSpawn { app } => put_str(out, app),
    }
}

fn key(input: &[u8]) -> PResult<'_, alloc::string::String> {
    string("key", MAX_KEY_LEN)(input)
}

/// Parses the fields of a request of type `msg_type`; any other type is
/// [`WireError::UnknownType`].
pub(super) fn request(msg_type: u16, input: &[u8]) -> PResult<'_, ClientRequest> {
    match msg_type {
        t::QUERY => {
            let (i, bound) = opt(name)(input)?;
            Ok((i, ClientRequest::Query { bound }))
        }
        t::PSET_INFO => {
            let (i, name) = name(input)?;
            Ok((i, ClientRequest::PsetInfo { name }))
        }
        t::PSET_OP => {
            let (i, ops) = seq("pset ops", MAX_OPS, pset_op)(input)?;
            Ok((i, ClientRequest::PsetOp { ops }))
        }
        t::PUBLISH => {
            let (i, key) = key(input)?;
            let (i, value) = string("value", MAX_VALUE_LEN)(i)?;
            Ok((i, ClientRequest::Publish { key, value }))
        }
        t::LOOKUP => {
            let (i, key) = key(input)?;
            let (i, wait) = opt(duration)(i)?;
            Ok((i, ClientRequest::Lookup { key, wait }))
        }
        t::UNPUBLISH => {
            let (i, key) = key(input)?;
            Ok((i, ClientRequest::Unpublish { key }))
        }
        t::FENCE => {
            let (i, pset) = name(input)?;
            let (i, timeout) = duration(i)?;
            Ok((i, ClientRequest::Fence { pset, timeout }))
        }
        t::ACCEPT => {
            let (i, delta) = name(input)?;
            let (i, new_pset) = name(i)?;
            let (i, bound) = opt(name)(i)?;
            let (i, wait) = opt(duration)(i)?;
            Ok((
                i,
                ClientRequest::Accept {
                    delta,
                    new_pset,
                    bound,
                    wait,
                },
            ))
        }
        t::CONFIRM => {
            let (i, delta) = name(input)?;
            let (i, ok) = boolean(i)?;
            Ok((i, ClientRequest::Confirm { delta, ok }))
        }
        t::REQUEST_CHANGE => {
            let (i, req) = change_request(input)?;
            Ok((i, ClientRequest::RequestChange(req)))
        }
        t::MODEX => {
            let (i, pset) = name(input)?;
            let (i, data) = string("value", MAX_VALUE_LEN)(i)?;
            let (i, timeout) = duration(i)?;
            Ok((
                i,
                ClientRequest::Modex {
                    pset,
                    data,
                    timeout,
                },
            ))
        }
        t::SPAWN => {
            let (i, commands) = commands(input)?;
            let (i, env) = env(i)?;
            let (i, job) = boolean(i)?;
            let watch = if job {
                SpawnWatch::Job
            } else {
                SpawnWatch::Handshake
            };
            Ok((
                i,
                ClientRequest::Spawn {
                    commands,
                    env,
                    watch,
                },
            ))
        }
        t::KILL_SPAWN => {
            let (i, app) = app(input)?;
            Ok((i, ClientRequest::KillSpawn { app }))
        }
        other => Err(nom::Err::Failure(WireError::UnknownType {
            msg_type: other,
        })),
    }
}

/// The message type of a reply: its request's type with [`t::REPLY_BIT`] set.
pub(super) fn reply_type(r: &ClientReply) -> u16 {
    match r {
        ClientReply::Query(_) => t::QUERY_REPLY,
        ClientReply::PsetInfo(_) => t::PSET_INFO_REPLY,
        ClientReply::PsetOp(_) => t::PSET_OP_REPLY,
        ClientReply::Published(_) => t::PUBLISH_REPLY,
        ClientReply::Lookup(_) => t::LOOKUP_REPLY,
        ClientReply::Unpublished(_) => t::UNPUBLISH_REPLY,
        ClientReply::Fence(_) => t::FENCE_REPLY,
        ClientReply::Accept(_) => t::ACCEPT_REPLY,
        ClientReply::Confirmed(_) => t::CONFIRM_REPLY,
        ClientReply::ChangeRequested(_) => t::REQUEST_CHANGE_REPLY,
        ClientReply::Modex(_) => t::MODEX_REPLY,
        ClientReply::Spawned(_) => t::SPAWN_REPLY,
        ClientReply::SpawnKilled(_) => t::KILL_SPAWN_REPLY,
    }
}

fn put_size_attrs(out: &mut Vec<u8>, (size, attrs): &(usize, Attributes)) {
    put_usize(out, *size);
    put_attributes(out, attrs);
}

fn size_attrs(input: &[u8]) -> PResult<'_, (usize, Attributes)> {
    let (i, n) = size("pset size")(input)?;
    let (i, attrs) = attributes(i)?;
    Ok((i, (n, attrs)))
}

fn outcomes(input: &[u8]) -> PResult<'_, Vec<OpOutcome>> {
    seq("op outcomes", MAX_OPS, outcome)(input)
}

/// A modex table: `seq<(pid, value)>`.
pub(super) fn put_entries(out: &mut Vec<u8>, entries: &[(ProcessId, String)]) {
    put_seq(out, entries, |o, (p, v)| {
        put_pid(o, p);
        put_str(o, v);
    });
}

/// Parses [`put_entries`].
pub(super) fn entries(input: &[u8]) -> PResult<'_, Vec<(ProcessId, String)>> {
    seq("modex entries", MAX_PROCS, |i| {
        let (i, p) = pid(i)?;
        let (i, v) = string("value", MAX_VALUE_LEN)(i)?;
        Ok((i, (p, v)))
    })(input)
}

fn modex_data(input: &[u8]) -> PResult<'_, ModexData> {
    let (i, version) = u64(input)?;
    let (i, entries) = entries(i)?;
    Ok((i, ModexData { version, entries }))
}

fn unit(input: &[u8]) -> PResult<'_, ()> {
    Ok((input, ()))
}

/// Appends a reply's fields (its type travels separately).
pub(super) fn put_reply(out: &mut Vec<u8>, r: &ClientReply) {
    match r {
        ClientReply::Query(a) => put_query_answer(out, a),
        ClientReply::PsetInfo(r) => put_result(out, r, put_size_attrs),
        ClientReply::PsetOp(r) => put_result(out, r, |o, v| put_seq(o, v, put_outcome)),
        ClientReply::Published(r)
        | ClientReply::Unpublished(r)
        | ClientReply::Fence(r)
        | ClientReply::Confirmed(r)
        | ClientReply::SpawnKilled(r) => put_result(out, r, |_, _| {}),
        ClientReply::Lookup(r) => put_result(out, r, |o, v| put_str(o, v)),
        ClientReply::Accept(r) => put_result(out, r, put_accept_outcome),
        ClientReply::ChangeRequested(r) => {
            put_result(out, r, |o, d| put_opt(o, d.as_ref(), put_name))
        }
        ClientReply::Modex(r) => put_result(out, r, |o, d| {
            put_u64(o, d.version);
            put_entries(o, &d.entries);
        }),
        ClientReply::Spawned(r) => put_result(out, r, put_spawned),
    }
}

/// Parses the fields of a reply of type `msg_type`; any other type is
/// [`WireError::UnknownType`].
pub(super) fn reply(msg_type: u16, input: &[u8]) -> PResult<'_, ClientReply> {
    match msg_type {
        t::QUERY_REPLY => {
            let (i, a) = query_answer(input)?;
            Ok((i, ClientReply::Query(a)))
        }
        t::PSET_INFO_REPLY => {
            let (i, r) = result(size_attrs)(input)?;
            Ok((i, ClientReply::PsetInfo(r)))
        }
        t::PSET_OP_REPLY => {
            let (i, r) = result(outcomes)(input)?;
            Ok((i, ClientReply::PsetOp(r)))
        }
        t::PUBLISH_REPLY => {
            let (i, r) = result(unit)(input)?;
            Ok((i, ClientReply::Published(r)))
        }
        t::LOOKUP_REPLY => {
            let (i, r) = result(string("value", MAX_VALUE_LEN))(input)?;
            Ok((i, ClientReply::Lookup(r)))
        }
        t::UNPUBLISH_REPLY => {
            let (i, r) = result(unit)(input)?;
            Ok((i, ClientReply::Unpublished(r)))
        }
        t::FENCE_REPLY => {
            let (i, r) = result(unit)(input)?;
            Ok((i, ClientReply::Fence(r)))
        }
        t::ACCEPT_REPLY => {
            let (i, r) = result(accept_outcome)(input)?;
            Ok((i, ClientReply::Accept(r)))
        }
        t::CONFIRM_REPLY => {
            let (i, r) = result(unit)(input)?;
            Ok((i, ClientReply::Confirmed(r)))
        }
        t::REQUEST_CHANGE_REPLY => {
            let (i, r) = result(opt(name))(input)?;
            Ok((i, ClientReply::ChangeRequested(r)))
        }
        t::MODEX_REPLY => {
            let (i, r) = result(modex_data)(input)?;
            Ok((i, ClientReply::Modex(r)))
        }
        t::SPAWN_REPLY => {
            let (i, r) = result(spawned)(input)?;
            Ok((i, ClientReply::Spawned(r)))
        }
        t::KILL_SPAWN_REPLY => {
            let (i, r) = result(unit)(input)?;
            Ok((i, ClientReply::SpawnKilled(r)))
        }
        other => Err(nom::Err::Failure(WireError::UnknownType {
            msg_type: other,
        })),
    }
}
