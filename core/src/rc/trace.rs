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

use alloc::string::String;
use alloc::vec::Vec;

use nom::Parser;

use super::input::{DaemonInput, MasterConfig, MasterInput};
use super::msg::{ClientRequest, ToMaster};
use super::types::NodeId;
use super::wire::{
    decode_client, decode_to_daemon, decode_to_master, encode_client, encode_to_daemon,
    encode_to_master,
};
use crate::process::Namespace;
use crate::slots::NodeSpec;
use crate::time::Duration;
use crate::wire::prim::{self, put_bytes, put_str, put_u8, put_u32, put_u64};
use crate::wire::{PResult, WireError, parse_all};

// The target, the hash and the hex words are the generic recorder's (crate::trace);
// re-exported so the launcher's and the tests' paths stay.
pub use crate::trace::{Fnv64, TARGET, fingerprint, hex, unhex};

/// Encodes a master input: tag 1 `FromDaemon` (node, `ToMaster` frame), 2 `RequestChange`
/// (client frame; its request id is the ticket), 3 `Timeout`, 4 `NodeLost` (node),
/// 5 `NodeReturned` (node).
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
            t => Err(nom::Err::Failure(WireError::InvalidValue {
                what: "master input tag",
                value: u64::from(t),
            })),
        }
    })
}

/// Encodes a daemon input: tag 1 `FromMaster` (`ToDaemon` frame), 2 `FromClient` (as a
/// `Forward` frame), 3 `Exited` (as an `Exited` frame).
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
            2 | 3 => match decode_to_master(frame).map_err(nom::Err::Failure)? {
                ToMaster::Forward { from, req, request } if tag == 2 => {
                    DaemonInput::FromClient { from, req, request }
                }
                ToMaster::Exited { pid } if tag == 3 => DaemonInput::Exited { pid },
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
            },
        ))
    })
}
