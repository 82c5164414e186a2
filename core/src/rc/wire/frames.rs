//! Top-level frames: one encoder and one decoder per link direction.

use alloc::vec::Vec;

use crate::rc::{ClientReply, ClientRequest, NodeLaunch, ReqId, ToDaemon, ToMaster};
use crate::wire::prim::{put_seq, put_str, put_u16, put_u64, seq, u16, u64};
use crate::wire::{PResult, WireError, decode_frame, encode_frame, parse_all};

use super::MAX_PROCS;
use super::change::{change_info, put_change_info};
use super::errors::{put_result, result};
use super::messages::{
    entries, put_entries, put_reply, put_request, reply, reply_type, request, request_type,
};
use super::pset::{attributes, put_attributes};
use super::spawn::{MAX_SPAWN_COMMANDS, app as spawn_app, launch_command, put_launch_command};
use super::types as t;
use super::values::{
    duration, name, opt, pid, put_duration, put_name, put_opt, put_pid, put_runs, runs,
};

/// Encodes a client → daemon frame: `req u64 | request fields`, typed by the request.
pub fn encode_client(req: ReqId, request: &ClientRequest) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(&mut out, request_type(request), |b| {
        put_u64(b, req);
        put_request(b, request);
    });
    out
}

/// Decodes one frame written by [`encode_client`]; a non-request type is
/// [`WireError::UnknownType`].
pub fn decode_client(frame: &[u8]) -> Result<(ReqId, ClientRequest), WireError> {
    let (h, body) = decode_frame(frame)?;
    parse_all(body, |i| {
        let (i, req) = u64(i)?;
        let (i, r) = request(h.msg_type, i)?;
        Ok((i, (req, r)))
    })
}

/// Encodes a daemon → client reply frame: `req u64 | reply fields`, typed by the reply.
pub fn encode_reply(req: ReqId, reply: &ClientReply) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(&mut out, reply_type(reply), |b| {
        put_u64(b, req);
        put_reply(b, reply);
    });
    out
}

/// Decodes one frame written by [`encode_reply`]; a non-reply type is
/// [`WireError::UnknownType`]. Errors come back as described in
/// [`errors`](super::errors).
pub fn decode_reply(frame: &[u8]) -> Result<(ReqId, ClientReply), WireError> {
    let (h, body) = decode_frame(frame)?;
    parse_all(body, |i| {
        let (i, req) = u64(i)?;
        let (i, r) = reply(h.msg_type, i)?;
        Ok((i, (req, r)))
    })
}

/// Encodes a daemon → master message. `Forward` nests the request as
/// `type u16 | request fields` after `from | req`.
pub fn encode_to_master(msg: &ToMaster) -> Vec<u8> {
    let mut out = Vec::new();
    match msg {
        ToMaster::Forward { from, req, request } => encode_frame(&mut out, t::FORWARD, |b| {
            put_pid(b, from);
            put_u64(b, *req);
            put_u16(b, request_type(request));
            put_request(b, request);
        }),
        ToMaster::Exited { pid } => encode_frame(&mut out, t::EXITED, |b| put_pid(b, pid)),
        ToMaster::Started { pid } => encode_frame(&mut out, t::STARTED, |b| put_pid(b, pid)),
        ToMaster::Modex {
            pset,
            version,
            timeout,
            entries,
        } => encode_frame(&mut out, t::MODEX_BATCH, |b| {
            put_name(b, pset);
            put_u64(b, *version);
            put_duration(b, *timeout);
            put_entries(b, entries);
        }),
    }
    out
}

/// A nested request: its type, then its fields (a non-request type is
/// [`WireError::UnknownType`]).
fn nested_request(input: &[u8]) -> PResult<'_, ClientRequest> {
    let (i, ty) = u16(input)?;
    request(ty, i)
}

/// Decodes one frame written by [`encode_to_master`].
pub fn decode_to_master(frame: &[u8]) -> Result<ToMaster, WireError> {
    let (h, body) = decode_frame(frame)?;
    match h.msg_type {
        t::FORWARD => parse_all(body, |i| {
            let (i, from) = pid(i)?;
            let (i, req) = u64(i)?;
            let (i, request) = nested_request(i)?;
            Ok((i, ToMaster::Forward { from, req, request }))
        }),
        t::EXITED => parse_all(body, |i| {
            let (i, pid) = pid(i)?;
            Ok((i, ToMaster::Exited { pid }))
        }),
        t::STARTED => parse_all(body, |i| {
            let (i, pid) = pid(i)?;
            Ok((i, ToMaster::Started { pid }))
        }),
        t::MODEX_BATCH => parse_all(body, |i| {
            let (i, pset) = name(i)?;
            let (i, version) = u64(i)?;
            let (i, timeout) = duration(i)?;
            let (i, entries) = entries(i)?;
            Ok((
                i,
                ToMaster::Modex {
                    pset,
                    version,
                    timeout,
                    entries,
                },
            ))
        }),
        other => Err(WireError::UnknownType { msg_type: other }),
    }
}

/// Encodes a master → daemon message. `Reply` nests the reply as
/// `type u16 | reply fields` after `to | req`.
pub fn encode_to_daemon(msg: &ToDaemon) -> Vec<u8> {
    let mut out = Vec::new();
    match msg {
        ToDaemon::DefinePset {
            name,
            members,
            attrs,
        } => encode_frame(&mut out, t::DEFINE_PSET, |b| {
            put_name(b, name);
            put_runs(b, members);
            put_attributes(b, attrs);
        }),
        ToDaemon::PrunePset { name } => {
            encode_frame(&mut out, t::PRUNE_PSET, |b| put_name(b, name))
        }
        ToDaemon::JobData { added, removed } => encode_frame(&mut out, t::JOB_DATA, |b| {
            put_runs(b, added);
            put_runs(b, removed);
        }),
        ToDaemon::Change { delta, info } => encode_frame(&mut out, t::CHANGE, |b| {
            put_name(b, delta);
            put_opt(b, info.as_ref(), put_change_info);
        }),
        ToDaemon::Launch { procs } => {
            encode_frame(&mut out, t::LAUNCH, |b| put_seq(b, procs, put_pid))
        }
        ToDaemon::Kill { procs } => encode_frame(&mut out, t::KILL, |b| put_seq(b, procs, put_pid)),
        ToDaemon::Spawn { app, launches } => encode_frame(&mut out, t::SPAWN_LAUNCH, |b| {
            put_str(b, app);
            put_seq(b, launches, |b, l| {
                put_launch_command(b, &l.command);
                put_seq(b, &l.procs, put_pid);
            });
        }),
        ToDaemon::ModexDone {
            pset,
            version,
            result,
        } => encode_frame(&mut out, t::MODEX_DONE, |b| {
            put_name(b, pset);
            put_u64(b, *version);
            put_result(b, result, |o, e| put_entries(o, e));
        }),
        ToDaemon::Reply { to, req, reply } => encode_frame(&mut out, t::REPLY, |b| {
            put_pid(b, to);
            put_u64(b, *req);
            put_u16(b, reply_type(reply));
            put_reply(b, reply);
        }),
    }
    out
}

/// A nested reply: its type, then its fields (a non-reply type is
/// [`WireError::UnknownType`]).
fn nested_reply(input: &[u8]) -> PResult<'_, ClientReply> {
    let (i, ty) = u16(input)?;
    reply(ty, i)
}

fn procs<'a>(what: &'static str) -> impl Fn(&'a [u8]) -> PResult<'a, Vec<crate::ProcessId>> {
    seq(what, MAX_PROCS, pid)
}

/// Decodes one frame written by [`encode_to_daemon`].
pub fn decode_to_daemon(frame: &[u8]) -> Result<ToDaemon, WireError> {
    let (h, body) = decode_frame(frame)?;
    match h.msg_type {
        t::DEFINE_PSET => parse_all(body, |i| {
            let (i, name) = name(i)?;
            let (i, members) = runs("members")(i)?;
            let (i, attrs) = attributes(i)?;
            Ok((
                i,
                ToDaemon::DefinePset {
                    name,
                    members,
                    attrs,
                },
            ))
        }),
        t::PRUNE_PSET => parse_all(body, |i| {
            let (i, name) = name(i)?;
            Ok((i, ToDaemon::PrunePset { name }))
        }),
        t::JOB_DATA => parse_all(body, |i| {
            let (i, added) = runs("added")(i)?;
            let (i, removed) = runs("removed")(i)?;
            Ok((i, ToDaemon::JobData { added, removed }))
        }),
        t::CHANGE => parse_all(body, |i| {
            let (i, delta) = name(i)?;
            let (i, info) = opt(change_info)(i)?;
            Ok((i, ToDaemon::Change { delta, info }))
        }),
        t::LAUNCH => parse_all(body, |i| {
            let (i, procs) = procs("procs")(i)?;
            Ok((i, ToDaemon::Launch { procs }))
        }),
        t::KILL => parse_all(body, |i| {
            let (i, procs) = procs("procs")(i)?;
            Ok((i, ToDaemon::Kill { procs }))
        }),
        t::SPAWN_LAUNCH => parse_all(body, |i| {
            let (i, app) = spawn_app(i)?;
            let (i, launches) = seq("launches", MAX_SPAWN_COMMANDS, |i| {
                let (i, command) = launch_command(i)?;
                let (i, procs) = procs("procs")(i)?;
                Ok((i, NodeLaunch { command, procs }))
            })(i)?;
            Ok((i, ToDaemon::Spawn { app, launches }))
        }),
        t::MODEX_DONE => parse_all(body, |i| {
            let (i, pset) = name(i)?;
            let (i, version) = u64(i)?;
            let (i, result) = result(entries)(i)?;
            Ok((
                i,
                ToDaemon::ModexDone {
                    pset,
                    version,
                    result,
                },
            ))
        }),
        t::REPLY => parse_all(body, |i| {
            let (i, to) = pid(i)?;
            let (i, req) = u64(i)?;
            let (i, reply) = nested_reply(i)?;
            Ok((i, ToDaemon::Reply { to, req, reply }))
        }),
        other => Err(WireError::UnknownType { msg_type: other }),
    }
}
