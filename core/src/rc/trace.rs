//! Transition records for trace conformance (`spec/verification.md` §6).
//!
//! The master and every daemon emit one `tracing` event per transition, at target
//! [`TARGET`] and level TRACE: the role, `now`, the input encoded with the wire codec (so
//! it can be fed again), a fingerprint of the outputs the transition queued and one of the
//! machine's state afterwards. A recorded trace replayed against fresh machines must
//! reproduce every fingerprint; [`crate::replay::replay`] (behind `dynres-verification
//! replay FILE...`) does that, for the in-memory harnesses and for launcher runs recorded
//! with `DYNRES_TRACE_FILE`. Encoding happens only when the event is enabled, so tracing
//! off costs one check per transition. The spawn machines' records are in
//! [`crate::spawn::trace`], the line format in [`crate::trace`].
//!
//! The runtime's decision machines are recorded the same way: the master's
//! [`Liveness`](super::liveness::Liveness) (role [`ROLE_LIVENESS`]), a node daemon's
//! [`MasterWatch`](super::liveness::MasterWatch) ([`ROLE_WATCH`]) and the engine's
//! [`GiveBack`](super::giveback::GiveBack) ([`ROLE_GIVEBACK`]) and the master's
//! [`ToolDesk`](super::tools::ToolDesk) ([`ROLE_TOOL_DESK`]); their encodings are at the
//! end of this module.

use alloc::string::String;
use alloc::vec::Vec;

use nom::Parser;

use super::error::RcError;
use super::giveback::GiveBackInput;
use super::input::{DaemonInput, DataServer, MasterConfig, MasterInput};
use super::liveness::{LivenessConfig, LivenessInput, WatchInput};
use super::msg::{ClientRequest, ToMaster};
use super::tools::ToolInput;
use super::types::{AbortReason, NodeId};
use super::wire::{
    decode_client, decode_reply, decode_to_daemon, decode_to_master, encode_client, encode_reply,
    encode_to_daemon, encode_to_master, error, name, put_error, put_name, put_rc_status, rc_status,
};
use crate::process::Namespace;
use crate::slots::NodeSpec;
use crate::time::{Duration, Instant};
use crate::wire::prim::{self, put_bytes, put_str, put_u8, put_u32, put_u64};
use crate::wire::{PResult, WireError, parse_all};

// The target, the hash and the hex words are the generic recorder's (crate::trace);
// re-exported so the launcher's and the tests' paths stay.
pub use crate::trace::{Fnv64, TARGET, fingerprint, hex, unhex};

/// Encodes a master input: tag 1 `FromDaemon` (node, `ToMaster` frame), 2 `RequestChange`
/// (client frame; its request id is the ticket), 3 `Timeout`, 4 `NodeLost` (node),
/// 5 `NodeReturned` (node), 6 `NodeAdded`, 7 `SlotsDenied`, 8 `Guest` (client frame
/// under the ticket), 9 `Forwarded` (ticket, whether an answer came, its reply frame).
pub fn encode_master_input(input: &MasterInput) -> Vec<u8> {
    let mut out = Vec::new();
    match input {
        MasterInput::FromDaemon { node, msg } => {
            put_u8(&mut out, 1);
            put_u32(&mut out, node.0);
            put_bytes(&mut out, &encode_to_master(msg));
        }
        MasterInput::RequestChange { ticket, req } => {
            // The ticket travels as the client frame's request id.
            put_u8(&mut out, 2);
            put_bytes(
                &mut out,
                &encode_client(*ticket, &ClientRequest::RequestChange(req.clone())),
            );
        }
        MasterInput::Timeout => put_u8(&mut out, 3),
        MasterInput::NodeLost { node } => {
            put_u8(&mut out, 4);
            put_u32(&mut out, node.0);
        }
        MasterInput::NodeReturned { node } => {
            put_u8(&mut out, 5);
            put_u32(&mut out, node.0);
        }
        MasterInput::SlotsDenied => put_u8(&mut out, 7),
        MasterInput::NodeAdded { node } => {
            put_u8(&mut out, 6);
            put_str(&mut out, &node.name);
            put_u32(&mut out, node.slots);
        }
        MasterInput::Guest { ticket, request } => {
            put_u8(&mut out, 8);
            put_bytes(&mut out, &encode_client(*ticket, request));
        }
        MasterInput::Forwarded { ticket, reply } => {
            put_u8(&mut out, 9);
            put_u64(&mut out, *ticket);
            prim::put_u8(&mut out, u8::from(reply.is_some()));
            if let Some(r) = reply {
                put_bytes(&mut out, &encode_reply(*ticket, r));
            }
        }
    }
    out
}

/// Decodes [`encode_master_input`].
pub fn decode_master_input(bytes: &[u8]) -> Result<MasterInput, WireError> {
    parse_all(bytes, |i: &[u8]| -> PResult<'_, MasterInput> {
        let (i, tag) = prim::u8(i)?;
        match tag {
            1 => {
                let (i, node) = prim::u32(i)?;
                let (i, frame) = prim::bytes("master input", usize::MAX)(i)?;
                let msg = decode_to_master(frame).map_err(nom::Err::Failure)?;
                Ok((
                    i,
                    MasterInput::FromDaemon {
                        node: NodeId(node),
                        msg,
                    },
                ))
            }
            2 => {
                let (i, frame) = prim::bytes("master input", usize::MAX)(i)?;
                match decode_client(frame).map_err(nom::Err::Failure)? {
                    (ticket, ClientRequest::RequestChange(req)) => {
                        Ok((i, MasterInput::RequestChange { ticket, req }))
                    }
                    _ => Err(nom::Err::Failure(WireError::InvalidValue {
                        what: "master input",
                        value: 2,
                    })),
                }
            }
            3 => Ok((i, MasterInput::Timeout)),
            4 => {
                let (i, node) = prim::u32(i)?;
                Ok((i, MasterInput::NodeLost { node: NodeId(node) }))
            }
            5 => {
                let (i, node) = prim::u32(i)?;
                Ok((i, MasterInput::NodeReturned { node: NodeId(node) }))
            }
            7 => Ok((i, MasterInput::SlotsDenied)),
            6 => {
                let (i, name) = prim::string("node", 255)(i)?;
                let (i, slots) = prim::u32(i)?;
                let node = NodeSpec { name, slots };
                Ok((i, MasterInput::NodeAdded { node }))
            }
            8 => {
                let (i, frame) = prim::bytes("master input", usize::MAX)(i)?;
                let (ticket, request) = decode_client(frame).map_err(nom::Err::Failure)?;
                Ok((i, MasterInput::Guest { ticket, request }))
            }
            9 => {
                let (i, ticket) = prim::u64(i)?;
                let (i, some) = prim::u8(i)?;
                if some == 0 {
                    return Ok((
                        i,
                        MasterInput::Forwarded {
                            ticket,
                            reply: None,
                        },
                    ));
                }
                let (i, frame) = prim::bytes("master input", usize::MAX)(i)?;
                let (_, reply) = decode_reply(frame).map_err(nom::Err::Failure)?;
                let reply = Some(reply);
                Ok((i, MasterInput::Forwarded { ticket, reply }))
            }
            t => Err(nom::Err::Failure(WireError::InvalidValue {
                what: "master input tag",
                value: u64::from(t),
            })),
        }
    })
}

/// Encodes a daemon input: tag 1 `FromMaster` (`ToDaemon` frame), 2 `FromClient` (as a
/// `Forward` frame), 3 `Exited` (as an `Exited` frame), 4 `Timeout` (empty), 5 `Started`
/// (as a `Started` frame).
pub fn encode_daemon_input(input: &DaemonInput) -> Vec<u8> {
    let mut out = Vec::new();
    match input {
        DaemonInput::FromMaster(msg) => {
            put_u8(&mut out, 1);
            put_bytes(&mut out, &encode_to_daemon(msg));
        }
        DaemonInput::FromClient { from, req, request } => {
            put_u8(&mut out, 2);
            let fwd = ToMaster::Forward {
                from: from.clone(),
                req: *req,
                request: request.clone(),
            };
            put_bytes(&mut out, &encode_to_master(&fwd));
        }
        DaemonInput::Exited { pid } => {
            put_u8(&mut out, 3);
            put_bytes(
                &mut out,
                &encode_to_master(&ToMaster::Exited { pid: pid.clone() }),
            );
        }
        DaemonInput::Started { pid } => {
            put_u8(&mut out, 5);
            put_bytes(
                &mut out,
                &encode_to_master(&ToMaster::Started { pid: pid.clone() }),
            );
        }
        // The timer carries no data: an empty frame under its own tag.
        DaemonInput::Timeout => {
            put_u8(&mut out, 4);
            put_bytes(&mut out, &[]);
        }
    }
    out
}

/// Decodes [`encode_daemon_input`].
pub fn decode_daemon_input(bytes: &[u8]) -> Result<DaemonInput, WireError> {
    parse_all(bytes, |i: &[u8]| -> PResult<'_, DaemonInput> {
        let (i, tag) = prim::u8(i)?;
        let (i, frame) = prim::bytes("daemon input", usize::MAX)(i)?;
        let input = match tag {
            1 => DaemonInput::FromMaster(decode_to_daemon(frame).map_err(nom::Err::Failure)?),
            2 | 3 | 5 => match decode_to_master(frame).map_err(nom::Err::Failure)? {
                ToMaster::Forward { from, req, request } if tag == 2 => {
                    DaemonInput::FromClient { from, req, request }
                }
                ToMaster::Exited { pid } if tag == 3 => DaemonInput::Exited { pid },
                ToMaster::Started { pid } if tag == 5 => DaemonInput::Started { pid },
                _ => {
                    return Err(nom::Err::Failure(WireError::InvalidValue {
                        what: "daemon input",
                        value: u64::from(tag),
                    }));
                }
            },
            4 if frame.is_empty() => DaemonInput::Timeout,
            t => {
                return Err(nom::Err::Failure(WireError::InvalidValue {
                    what: "daemon input tag",
                    value: u64::from(t),
                }));
            }
        };
        Ok((i, input))
    })
}

/// Encodes a master configuration (the start of a master's trace).
pub fn encode_master_config(cfg: &MasterConfig) -> Vec<u8> {
    let mut out = Vec::new();
    put_str(&mut out, cfg.namespace.as_str());
    prim::put_seq(&mut out, &cfg.nodes, |o, n| {
        put_str(o, &n.name);
        put_u32(o, n.slots);
    });
    prim::put_seq(&mut out, &cfg.apps, |o, (a, n)| {
        put_str(o, a);
        put_u32(o, *n);
    });
    put_u64(&mut out, cfg.change_timeout.as_nanos());
    put_u64(&mut out, cfg.grace.as_nanos());
    put_u32(&mut out, cfg.max_queued as u32);
    prim::put_u8(&mut out, u8::from(cfg.grow_wait.is_some()));
    put_u64(&mut out, cfg.grow_wait.map_or(0, |d| d.as_nanos()));
    // Last and only when not the default, so traces recorded before NAMES-1 decode.
    if cfg.data_server == DataServer::Forwarded {
        prim::put_u8(&mut out, 1);
    }
    out
}

/// Decodes [`encode_master_config`].
pub fn decode_master_config(bytes: &[u8]) -> Result<MasterConfig, WireError> {
    const MAX: usize = 1 << 16;
    parse_all(bytes, |i: &[u8]| -> PResult<'_, MasterConfig> {
        let (i, ns) = prim::string("namespace", 255)(i)?;
        let (i, nodes) = prim::seq("nodes", MAX, |i| {
            (prim::string("node", 255), prim::u32)
                .parse(i)
                .map(|(i, (name, slots))| (i, NodeSpec { name, slots }))
        })(i)?;
        let (i, apps) = prim::seq("apps", MAX, |i| {
            (prim::string("app", 255), prim::u32).parse(i)
        })(i)?;
        let (i, change_timeout) = prim::u64(i)?;
        let (i, grace) = prim::u64(i)?;
        let (i, max_queued) = prim::u32(i)?;
        let (i, grows) = prim::u8(i)?;
        let (i, grow_wait) = prim::u64(i)?;
        let (i, data_server) = if i.is_empty() {
            (i, DataServer::Own)
        } else {
            match prim::u8(i)? {
                (i, 1) => (i, DataServer::Forwarded),
                (_, v) => {
                    return Err(nom::Err::Failure(WireError::InvalidValue {
                        what: "data server",
                        value: u64::from(v),
                    }));
                }
            }
        };
        let apps: Vec<(String, u32)> = apps;
        Ok((
            i,
            MasterConfig {
                namespace: Namespace::new(ns),
                nodes,
                apps,
                change_timeout: Duration(change_timeout),
                grace: Duration(grace),
                max_queued: max_queued as usize,
                grow_wait: (grows != 0).then_some(Duration(grow_wait)),
                data_server,
            },
        ))
    })
}

// --- the runtime's decision machines (liveness, master watch, give-back) --------------

/// Role name of a [`Liveness`](super::liveness::Liveness)'s events: the master's
/// failure detector, one per process, keyed by nothing.
pub const ROLE_LIVENESS: &str = "liveness";
/// Role name of a [`MasterWatch`](super::liveness::MasterWatch)'s events: a node
/// daemon's watch of its master, keyed by its node number.
pub const ROLE_WATCH: &str = "master-watch";
/// Role name of a [`GiveBack`](super::giveback::GiveBack)'s events, keyed by its
/// instance tag: the engine replaces its machine when the master is gone, and each new
/// one starts its own line.
pub const ROLE_GIVEBACK: &str = "giveback";

fn bad<T>(what: &'static str, value: u64) -> PResult<'static, T> {
    Err(nom::Err::Failure(WireError::InvalidValue { what, value }))
}

fn put_liveness_config(out: &mut Vec<u8>, cfg: &LivenessConfig) {
    put_u64(out, cfg.heartbeat.as_nanos());
    put_u32(out, cfg.silent_beats);
    put_u64(out, cfg.connect_bound.as_nanos());
}

fn liveness_config(i: &[u8]) -> PResult<'_, LivenessConfig> {
    let (i, (heartbeat, silent_beats, connect_bound)) =
        (prim::u64, prim::u32, prim::u64).parse(i)?;
    Ok((
        i,
        LivenessConfig {
            heartbeat: Duration(heartbeat),
            silent_beats,
            connect_bound: Duration(connect_bound),
        },
    ))
}

/// Encodes a [`Liveness`](super::liveness::Liveness)'s construction (its `start`):
/// heartbeat (ns, u64), silent beats (u32), connect bound (ns, u64).
pub fn encode_liveness_config(cfg: &LivenessConfig) -> Vec<u8> {
    let mut out = Vec::new();
    put_liveness_config(&mut out, cfg);
    out
}

/// Decodes [`encode_liveness_config`].
pub fn decode_liveness_config(bytes: &[u8]) -> Result<LivenessConfig, WireError> {
    parse_all(bytes, liveness_config)
}

/// Encodes a liveness input: tag 1 `Launched`, 2 `LaunchFailed`, 3 `AgentExited`,
/// 4 `Authenticated`, 5 `Heard`, 6 `Sent`, 7 `LinkEnded`, 8 `Returned`, 9 `Dropped`
/// (each followed by the node, u32), 10 `Timeout` (nothing more).
pub fn encode_liveness_input(input: &LivenessInput) -> Vec<u8> {
    let (tag, node) = match *input {
        LivenessInput::Launched { node } => (1, Some(node)),
        LivenessInput::LaunchFailed { node } => (2, Some(node)),
        LivenessInput::AgentExited { node } => (3, Some(node)),
        LivenessInput::Authenticated { node } => (4, Some(node)),
        LivenessInput::Heard { node } => (5, Some(node)),
        LivenessInput::Sent { node } => (6, Some(node)),
        LivenessInput::LinkEnded { node } => (7, Some(node)),
        LivenessInput::Returned { node } => (8, Some(node)),
        LivenessInput::Dropped { node } => (9, Some(node)),
        LivenessInput::Timeout => (10, None),
    };
    let mut out = Vec::with_capacity(5);
    put_u8(&mut out, tag);
    if let Some(node) = node {
        put_u32(&mut out, node);
    }
    out
}

/// Decodes [`encode_liveness_input`].
pub fn decode_liveness_input(bytes: &[u8]) -> Result<LivenessInput, WireError> {
    parse_all(bytes, |i: &[u8]| -> PResult<'_, LivenessInput> {
        let (i, tag) = prim::u8(i)?;
        if tag == 10 {
            return Ok((i, LivenessInput::Timeout));
        }
        let make: fn(u32) -> LivenessInput = match tag {
            1 => |node| LivenessInput::Launched { node },
            2 => |node| LivenessInput::LaunchFailed { node },
            3 => |node| LivenessInput::AgentExited { node },
            4 => |node| LivenessInput::Authenticated { node },
            5 => |node| LivenessInput::Heard { node },
            6 => |node| LivenessInput::Sent { node },
            7 => |node| LivenessInput::LinkEnded { node },
            8 => |node| LivenessInput::Returned { node },
            9 => |node| LivenessInput::Dropped { node },
            t => return bad("liveness input tag", u64::from(t)),
        };
        let (i, node) = prim::u32(i)?;
        Ok((i, make(node)))
    })
}

/// Encodes a [`MasterWatch`](super::liveness::MasterWatch)'s construction (its
/// `start`; the node is the line's key): the liveness configuration as in
/// [`encode_liveness_config`], then the instant the link was set up (ns, u64).
pub fn encode_watch_start(cfg: &LivenessConfig, now: Instant) -> Vec<u8> {
    let mut out = Vec::new();
    put_liveness_config(&mut out, cfg);
    put_u64(&mut out, now.as_nanos());
    out
}

/// Decodes [`encode_watch_start`].
pub fn decode_watch_start(bytes: &[u8]) -> Result<(LivenessConfig, Instant), WireError> {
    parse_all(bytes, |i: &[u8]| {
        let (i, (cfg, now)) = (liveness_config, prim::u64).parse(i)?;
        Ok((i, (cfg, Instant(now))))
    })
}

/// Encodes a master watch's input: one byte, 1 `Heard`, 2 `Sent`, 3 `Timeout`.
pub fn encode_watch_input(input: &WatchInput) -> Vec<u8> {
    alloc::vec![match input {
        WatchInput::Heard => 1,
        WatchInput::Sent => 2,
        WatchInput::Timeout => 3,
    }]
}

/// Decodes [`encode_watch_input`].
pub fn decode_watch_input(bytes: &[u8]) -> Result<WatchInput, WireError> {
    parse_all(bytes, |i: &[u8]| -> PResult<'_, WatchInput> {
        let (i, tag) = prim::u8(i)?;
        match tag {
            1 => Ok((i, WatchInput::Heard)),
            2 => Ok((i, WatchInput::Sent)),
            3 => Ok((i, WatchInput::Timeout)),
            t => bad("master watch input tag", u64::from(t)),
        }
    })
}

/// Encodes a [`GiveBack`](super::giveback::GiveBack)'s construction (its `start`): its
/// hold bound (ns, u64).
pub fn encode_giveback_start(bound: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    put_u64(&mut out, bound.as_nanos());
    out
}

/// Decodes [`encode_giveback_start`].
pub fn decode_giveback_start(bytes: &[u8]) -> Result<Duration, WireError> {
    parse_all(bytes, |i: &[u8]| {
        let (i, bound) = prim::u64(i)?;
        Ok((i, Duration(bound)))
    })
}

/// Encodes a give-back input: tag 1 `Released` (node, u32), 2 `Emptying` (one byte,
/// 0 or 1).
pub fn encode_giveback_input(input: &GiveBackInput) -> Vec<u8> {
    let mut out = Vec::with_capacity(5);
    match *input {
        GiveBackInput::Released { node } => {
            put_u8(&mut out, 1);
            put_u32(&mut out, node);
        }
        GiveBackInput::Emptying(others) => {
            put_u8(&mut out, 2);
            put_u8(&mut out, u8::from(others));
        }
    }
    out
}

/// Decodes [`encode_giveback_input`]; a flag other than 0 or 1 is refused, so every
/// accepted encoding is the one its input encodes to.
pub fn decode_giveback_input(bytes: &[u8]) -> Result<GiveBackInput, WireError> {
    parse_all(bytes, |i: &[u8]| -> PResult<'_, GiveBackInput> {
        let (i, tag) = prim::u8(i)?;
        match tag {
            1 => {
                let (i, node) = prim::u32(i)?;
                Ok((i, GiveBackInput::Released { node }))
            }
            2 => match prim::u8(i)? {
                (i, 0) => Ok((i, GiveBackInput::Emptying(false))),
                (i, 1) => Ok((i, GiveBackInput::Emptying(true))),
                (_, f) => bad("give-back emptying flag", u64::from(f)),
            },
            t => bad("give-back input tag", u64::from(t)),
        }
    })
}

// --- the master's tool desk ----------------------------------------------------------

/// Role name of a [`ToolDesk`](super::tools::ToolDesk)'s events: the master's answers to
/// tool requests, one desk per process, keyed by nothing.
pub const ROLE_TOOL_DESK: &str = "tool-desk";

/// Encodes a tool desk's construction (its `start`): the desk has no settings, and a
/// line's words may not be empty, so it is one zero byte.
pub fn encode_tool_desk_start() -> Vec<u8> {
    alloc::vec![0]
}

/// Decodes [`encode_tool_desk_start`]: exactly one zero byte.
pub fn decode_tool_desk_start(bytes: &[u8]) -> Result<(), WireError> {
    parse_all(bytes, |i: &[u8]| -> PResult<'_, ()> {
        match prim::u8(i)? {
            (i, 0) => Ok((i, ())),
            (_, v) => bad("tool desk start", u64::from(v)),
        }
    })
}

/// The error a trace carries for `e`: its wire form read back (`rc::wire::errors`).
/// Errors holding nested errors or static reasons travel as their code and text, and
/// read back as [`RcError::Refused`]; the others read back as themselves. The desk's
/// recorded outputs hash errors in this form, so that replay, fed this form, reproduces
/// them. An error whose wire form does not read back (a key over the wire's limit) is
/// kept as it is: its line then fails to replay, as a typed divergence.
pub fn error_as_recorded(e: &RcError) -> RcError {
    let mut bytes = Vec::new();
    put_error(&mut bytes, e);
    parse_all(&bytes, error).unwrap_or_else(|_| e.clone())
}

/// Encodes a tool desk input: tag 1 `Asked` (ticket u64, wait flag one byte 0 or 1),
/// 2 `Handled` (ticket), 3 `Started` (ticket, delta pset name as on the wire),
/// 4 `Refused` (ticket, the error's wire form, [`error_as_recorded`]), 5 `Aborted`
/// (delta, reason one byte: 1 not decided in time, 2 confirm failed, 3 new process
/// exited, 4 member lost), 6 `Status` (delta, status byte as on the wire).
pub fn encode_tool_input(input: &ToolInput) -> Vec<u8> {
    let mut out = Vec::new();
    match input {
        ToolInput::Asked { ticket, wait } => {
            put_u8(&mut out, 1);
            put_u64(&mut out, *ticket);
            put_u8(&mut out, u8::from(*wait));
        }
        ToolInput::Handled { ticket } => {
            put_u8(&mut out, 2);
            put_u64(&mut out, *ticket);
        }
        ToolInput::Started { ticket, delta } => {
            put_u8(&mut out, 3);
            put_u64(&mut out, *ticket);
            put_name(&mut out, delta);
        }
        ToolInput::Refused { ticket, error } => {
            put_u8(&mut out, 4);
            put_u64(&mut out, *ticket);
            put_error(&mut out, &error_as_recorded(error));
        }
        ToolInput::Aborted { delta, reason } => {
            put_u8(&mut out, 5);
            put_name(&mut out, delta);
            put_u8(&mut out, abort_reason_tag(*reason));
        }
        ToolInput::Status { delta, status } => {
            put_u8(&mut out, 6);
            put_name(&mut out, delta);
            put_rc_status(&mut out, *status);
        }
    }
    out
}

fn abort_reason_tag(reason: AbortReason) -> u8 {
    match reason {
        AbortReason::NotDecidedInTime => 1,
        AbortReason::ConfirmFailed => 2,
        AbortReason::NewProcessExited => 3,
        AbortReason::MemberLost => 4,
    }
}

fn abort_reason(i: &[u8]) -> PResult<'_, AbortReason> {
    let (i, tag) = prim::u8(i)?;
    let reason = match tag {
        1 => AbortReason::NotDecidedInTime,
        2 => AbortReason::ConfirmFailed,
        3 => AbortReason::NewProcessExited,
        4 => AbortReason::MemberLost,
        t => return bad("abort reason", u64::from(t)),
    };
    Ok((i, reason))
}

/// Decodes [`encode_tool_input`]; a wait flag other than 0 or 1, an unknown tag or
/// reason, or bytes that are not the input's own encoding (a pset name in another case,
/// an error not in its recorded form) are refused, so every accepted encoding is the
/// one its input encodes to.
pub fn decode_tool_input(bytes: &[u8]) -> Result<ToolInput, WireError> {
    let input = parse_all(bytes, tool_input)?;
    if encode_tool_input(&input) != bytes {
        return Err(WireError::InvalidValue {
            what: "tool desk input (not in its recorded form)",
            value: bytes.first().copied().map_or(0, u64::from),
        });
    }
    Ok(input)
}

fn tool_input(i: &[u8]) -> PResult<'_, ToolInput> {
    let (i, tag) = prim::u8(i)?;
    match tag {
        1 => {
            let (i, ticket) = prim::u64(i)?;
            match prim::u8(i)? {
                (i, 0) => Ok((
                    i,
                    ToolInput::Asked {
                        ticket,
                        wait: false,
                    },
                )),
                (i, 1) => Ok((i, ToolInput::Asked { ticket, wait: true })),
                (_, f) => bad("tool desk wait flag", u64::from(f)),
            }
        }
        2 => {
            let (i, ticket) = prim::u64(i)?;
            Ok((i, ToolInput::Handled { ticket }))
        }
        3 => {
            let (i, (ticket, delta)) = (prim::u64, name).parse(i)?;
            Ok((i, ToolInput::Started { ticket, delta }))
        }
        4 => {
            let (i, (ticket, error)) = (prim::u64, error).parse(i)?;
            Ok((i, ToolInput::Refused { ticket, error }))
        }
        5 => {
            let (i, (delta, reason)) = (name, abort_reason).parse(i)?;
            Ok((i, ToolInput::Aborted { delta, reason }))
        }
        6 => {
            let (i, (delta, status)) = (name, rc_status).parse(i)?;
            Ok((i, ToolInput::Status { delta, status }))
        }
        t => bad("tool desk input tag", u64::from(t)),
    }
}

#[cfg(test)]
mod runtime_machine_tests {
    use super::*;
    use crate::rc::RcStatus;
    use proptest::prelude::*;

    fn arb_liveness_input() -> impl Strategy<Value = LivenessInput> {
        (0u8..10, any::<u32>()).prop_map(|(tag, node)| match tag {
            0 => LivenessInput::Launched { node },
            1 => LivenessInput::LaunchFailed { node },
            2 => LivenessInput::AgentExited { node },
            3 => LivenessInput::Authenticated { node },
            4 => LivenessInput::Heard { node },
            5 => LivenessInput::Sent { node },
            6 => LivenessInput::LinkEnded { node },
            7 => LivenessInput::Returned { node },
            8 => LivenessInput::Dropped { node },
            _ => LivenessInput::Timeout,
        })
    }

    fn arb_giveback_input() -> impl Strategy<Value = GiveBackInput> {
        prop_oneof![
            any::<u32>().prop_map(|node| GiveBackInput::Released { node }),
            any::<bool>().prop_map(GiveBackInput::Emptying),
        ]
    }

    fn arb_config() -> impl Strategy<Value = LivenessConfig> {
        (any::<u64>(), any::<u32>(), any::<u64>()).prop_map(|(h, s, c)| LivenessConfig {
            heartbeat: Duration(h),
            silent_beats: s,
            connect_bound: Duration(c),
        })
    }

    fn arb_name() -> impl Strategy<Value = crate::pset::PsetName> {
        (0u64..1000, any::<bool>()).prop_map(|(n, app)| {
            let text = if app {
                alloc::format!("mpi://app/a{n}")
            } else {
                alloc::format!("mpi://rte/app/rc/{n}")
            };
            crate::pset::PsetName::parse(&text).expect("a valid name")
        })
    }

    /// Errors a master refuses with: some cross the wire as data, others (nested
    /// errors, static reasons) as their code and text.
    fn arb_error() -> impl Strategy<Value = RcError> {
        use crate::rc::BadRequest;
        use crate::slots::SlotError;
        prop_oneof![
            any::<u32>().prop_map(|slots| RcError::NotGranted { slots }),
            (0usize..64).prop_map(RcError::QueueFull),
            Just(RcError::Timeout),
            arb_name().prop_map(RcError::Aborted),
            (any::<u16>(), "[a-z ]{0,12}")
                .prop_map(|(code, detail)| RcError::Refused { code, detail }),
            (0usize..9, 0usize..9).prop_map(|(wanted, free)| {
                RcError::Slots(SlotError::Exhausted { wanted, free })
            }),
            Just(RcError::BadRequest(BadRequest::RemovesWholeApplication)),
            Just(RcError::Client("not now")),
        ]
    }

    fn arb_status() -> impl Strategy<Value = RcStatus> {
        prop_oneof![
            Just(RcStatus::Null),
            Just(RcStatus::Announced),
            Just(RcStatus::Pending),
            Just(RcStatus::Finalized),
            Just(RcStatus::Aborted),
        ]
    }

    fn arb_reason() -> impl Strategy<Value = AbortReason> {
        prop_oneof![
            Just(AbortReason::NotDecidedInTime),
            Just(AbortReason::ConfirmFailed),
            Just(AbortReason::NewProcessExited),
            Just(AbortReason::MemberLost),
        ]
    }

    fn arb_tool_input() -> impl Strategy<Value = ToolInput> {
        prop_oneof![
            (any::<u64>(), any::<bool>())
                .prop_map(|(ticket, wait)| ToolInput::Asked { ticket, wait }),
            any::<u64>().prop_map(|ticket| ToolInput::Handled { ticket }),
            (any::<u64>(), arb_name())
                .prop_map(|(ticket, delta)| ToolInput::Started { ticket, delta }),
            (any::<u64>(), arb_error())
                .prop_map(|(ticket, error)| ToolInput::Refused { ticket, error }),
            (arb_name(), arb_reason())
                .prop_map(|(delta, reason)| ToolInput::Aborted { delta, reason }),
            (arb_name(), arb_status())
                .prop_map(|(delta, status)| ToolInput::Status { delta, status }),
        ]
    }

    /// The input replay feeds for `i`: itself, a refusal's error in its recorded form.
    fn as_recorded(i: &ToolInput) -> ToolInput {
        match i {
            ToolInput::Refused { ticket, error } => ToolInput::Refused {
                ticket: *ticket,
                error: error_as_recorded(error),
            },
            other => other.clone(),
        }
    }

    /// The desk's start, and an error that crosses the wire as text, which reads back
    /// as a refusal with its code and text.
    #[test]
    fn the_desk_start_and_a_textual_error_round_trip() {
        assert_eq!(decode_tool_desk_start(&encode_tool_desk_start()), Ok(()));
        assert!(decode_tool_desk_start(&[1]).is_err());
        assert!(decode_tool_desk_start(&[0, 0]).is_err());
        let e = RcError::BadRequest(crate::rc::BadRequest::RemovesWholeApplication);
        assert_eq!(
            error_as_recorded(&e),
            RcError::Refused {
                code: RcError::CODE_BAD_REQUEST,
                detail: alloc::string::ToString::to_string(&e),
            }
        );
        let e = RcError::NotGranted { slots: 3 };
        assert_eq!(error_as_recorded(&e), e);
    }

    /// Every watch input, both ways.
    #[test]
    fn every_watch_input_round_trips() {
        for i in [WatchInput::Heard, WatchInput::Sent, WatchInput::Timeout] {
            assert_eq!(decode_watch_input(&encode_watch_input(&i)), Ok(i));
        }
    }

    proptest! {
        /// Every liveness input decodes to itself; so does every construction.
        #[test]
        fn liveness_inputs_and_starts_round_trip(
            i in arb_liveness_input(),
            cfg in arb_config(),
            now in any::<u64>(),
        ) {
            prop_assert_eq!(decode_liveness_input(&encode_liveness_input(&i)), Ok(i));
            prop_assert_eq!(decode_liveness_config(&encode_liveness_config(&cfg)), Ok(cfg));
            let start = encode_watch_start(&cfg, Instant(now));
            prop_assert_eq!(decode_watch_start(&start), Ok((cfg, Instant(now))));
        }

        /// Every give-back input and construction decodes to itself.
        #[test]
        fn giveback_inputs_and_starts_round_trip(i in arb_giveback_input(), b in any::<u64>()) {
            prop_assert_eq!(decode_giveback_input(&encode_giveback_input(&i)), Ok(i));
            let start = encode_giveback_start(Duration(b));
            prop_assert_eq!(decode_giveback_start(&start), Ok(Duration(b)));
        }

        /// Every tool desk input decodes to the input replay feeds for it: itself, a
        /// refusal's error in its recorded form; that form is a fixed point.
        #[test]
        fn tool_inputs_round_trip(i in arb_tool_input()) {
            let recorded = as_recorded(&i);
            prop_assert_eq!(decode_tool_input(&encode_tool_input(&i)), Ok(recorded.clone()));
            prop_assert_eq!(encode_tool_input(&recorded), encode_tool_input(&i));
        }

        /// An encoding with one byte changed or cut short decodes to a typed error or
        /// to an input whose encoding it is, never a panic.
        #[test]
        fn changed_tool_encodings_decode_canonically_or_not_at_all(
            i in arb_tool_input(),
            at in any::<proptest::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let mut b = encode_tool_input(&i);
            let k = at.index(b.len());
            b[k] = byte;
            if let Ok(j) = decode_tool_input(&b) {
                prop_assert_eq!(encode_tool_input(&j), b.clone());
            }
            b.truncate(k);
            prop_assert!(decode_tool_input(&b).is_err());
        }

        /// Arbitrary bytes decode to a typed error or to an input whose encoding they
        /// are: never a panic, and never two encodings of one input.
        #[test]
        fn arbitrary_bytes_decode_canonically_or_not_at_all(
            b in proptest::collection::vec(any::<u8>(), 0..12),
        ) {
            if let Ok(i) = decode_liveness_input(&b) {
                prop_assert_eq!(encode_liveness_input(&i), b.clone());
            }
            if let Ok(i) = decode_watch_input(&b) {
                prop_assert_eq!(encode_watch_input(&i), b.clone());
            }
            if let Ok(i) = decode_giveback_input(&b) {
                prop_assert_eq!(encode_giveback_input(&i), b.clone());
            }
            if let Ok(i) = decode_tool_input(&b) {
                prop_assert_eq!(encode_tool_input(&i), b.clone());
            }
            let _ = decode_tool_desk_start(&b);
            let _ = decode_watch_start(&b);
            let _ = decode_liveness_config(&b);
            let _ = decode_giveback_start(&b);
        }
    }
}
