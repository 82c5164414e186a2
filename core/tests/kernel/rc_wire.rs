//! The resource-change wire codec (`spec/wire.md`, 0x02xx–0x04xx): round trips of every
//! message variant, exact typed errors for malformed frames, and no panics on arbitrary
//! or mutated bytes.

use std::collections::BTreeMap;

use dynres_core::pset::{
    AttrUpdate, Attributes, OpOutcome, PsetError, PsetName, PsetOp, SetOp, SplitBy,
};
use dynres_core::rc::BadRequest;
use dynres_core::rc::wire::{
    MAX_OPS, MAX_PROCS, decode_client, decode_reply, decode_to_daemon, decode_to_master,
    encode_client, encode_reply, encode_to_daemon, encode_to_master, types as ty,
};
use dynres_core::rc::{
    AcceptOutcome, Change, ChangeInfo, ChangeRequest, ClientReply, ClientRequest, LaunchCommand,
    ModexData, NamedVictims, NodeLaunch, QueryAnswer, RcError, RcStatus, RcType, ReqId,
    SpawnCommand, SpawnWatch, Spawned, ToDaemon, ToMaster, Victims,
};
use dynres_core::slots::SlotError;
use dynres_core::wire::{HEADER_LEN, WireError, encode_frame};
use dynres_core::{Duration, Namespace, ProcRuns, ProcessId};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;

// ---------------------------------------------------------------- strategies

fn segment() -> impl Strategy<Value = String> {
    // Never "." or "..": the first character is not a dot.
    "[A-Za-z0-9_-][A-Za-z0-9._-]{0,7}"
}

fn pset_name() -> BoxedStrategy<PsetName> {
    prop_oneof![
        1 => Just(PsetName::world()),
        1 => Just(PsetName::self_set()),
        6 => (any::<bool>(), segment(), vec(segment(), 0..3)).prop_map(|(rte, app, path)| {
            let mut text = format!("mpi://{}/{app}", if rte { "rte" } else { "app" });
            for s in path {
                text.push('/');
                text.push_str(&s);
            }
            PsetName::parse(&text).expect("the strategy builds valid names")
        }),
    ]
    .boxed()
}

fn pid() -> impl Strategy<Value = ProcessId> {
    ("[a-z0-9.]{1,8}", any::<u32>()).prop_map(|(ns, r)| ProcessId::new(Namespace::new(ns), r))
}

fn pids() -> impl Strategy<Value = Vec<ProcessId>> {
    vec(pid(), 0..4)
}

/// Lists with runs in them: few namespaces, ranks close together, some at the top.
fn run_list() -> impl Strategy<Value = ProcRuns> {
    let rank = prop_oneof![0u32..8, (u32::MAX - 3)..=u32::MAX];
    let p = (prop_oneof![Just("j"), Just("k")], rank)
        .prop_map(|(ns, r)| ProcessId::new(Namespace::new(ns), r));
    vec(p, 0..12).prop_map(|v| v.into_iter().collect())
}

fn names() -> impl Strategy<Value = Vec<PsetName>> {
    vec(pset_name(), 0..3)
}

fn text() -> impl Strategy<Value = String> {
    ".{0,12}"
}

fn duration() -> impl Strategy<Value = Duration> {
    any::<u64>().prop_map(Duration::from_nanos)
}

fn hints() -> impl Strategy<Value = BTreeMap<String, String>> {
    btree_map("mpi_ps_sched_[a-z]{0,6}|.{0,6}", text(), 0..3)
}

fn attr_update() -> BoxedStrategy<AttrUpdate> {
    (option::of(any::<bool>()), hints())
        .prop_map(|(active, sched)| AttrUpdate { active, sched })
        .boxed()
}

fn attributes() -> BoxedStrategy<Attributes> {
    (any::<u64>(), any::<u64>(), any::<bool>(), hints())
        .prop_map(|(version, epoch, active, sched)| Attributes {
            version,
            epoch,
            active,
            sched,
        })
        .boxed()
}

fn pset_op() -> BoxedStrategy<PsetOp> {
    let set_op = prop_oneof![
        Just(SetOp::Union),
        Just(SetOp::Difference),
        Just(SetOp::Intersection)
    ];
    let split_by = prop_oneof![
        vec(0usize..100_000, 0..4).prop_map(SplitBy::Sizes),
        vec((pid(), any::<u32>()), 0..3).prop_map(SplitBy::Colours),
    ];
    prop_oneof![
        (
            set_op,
            pset_name(),
            pset_name(),
            option::of(pset_name()),
            attr_update()
        )
            .prop_map(|(op, pset1, pset2, target, attrs)| PsetOp::Set {
                op,
                pset1,
                pset2,
                target,
                attrs
            }),
        (pset_name(), attr_update()).prop_map(|(target, attrs)| PsetOp::Null { target, attrs }),
        (pset_name(), split_by, names(), attr_update()).prop_map(|(pset, by, targets, attrs)| {
            PsetOp::Split {
                pset,
                by,
                targets,
                attrs,
            }
        }),
    ]
    .boxed()
}

fn rc_type() -> impl Strategy<Value = RcType> {
    prop_oneof![Just(RcType::Add), Just(RcType::Sub), Just(RcType::Replace)]
}

fn rc_status() -> impl Strategy<Value = RcStatus> {
    prop_oneof![
        Just(RcStatus::Null),
        Just(RcStatus::Announced),
        Just(RcStatus::Pending),
        Just(RcStatus::Finalized),
        Just(RcStatus::Aborted),
    ]
}

fn victims() -> BoxedStrategy<Victims> {
    prop_oneof![
        any::<u32>().prop_map(Victims::Count),
        vec(pid(), 1..4).prop_map(|v| Victims::Named(NamedVictims::new(v).expect("1..4"))),
    ]
    .boxed()
}

fn change_request() -> BoxedStrategy<ChangeRequest> {
    let change = prop_oneof![
        (any::<u32>(), option::of(pset_name())).prop_map(|(n, bound)| Change::Add { n, bound }),
        victims().prop_map(Change::Sub),
        (victims(), any::<u32>()).prop_map(|(remove, add)| Change::Replace { remove, add }),
    ];
    (segment(), change)
        .prop_map(|(app, change)| ChangeRequest { app, change })
        .boxed()
}

fn change_info() -> BoxedStrategy<ChangeInfo> {
    (
        segment(),
        rc_type(),
        pset_name(),
        option::of(pset_name()),
        names(),
        pids(),
        pids(),
        rc_status(),
    )
        .prop_map(
            |(app, kind, delta, sub_delta, bound, added, removed, status)| ChangeInfo {
                app,
                kind,
                delta,
                sub_delta,
                bound,
                added,
                removed,
                status,
            },
        )
        .boxed()
}

/// Every `RcError` variant, with both kinds of payload.
fn rc_error() -> BoxedStrategy<RcError> {
    prop_oneof![
        pset_name().prop_map(|n| RcError::from(PsetError::NotFound(n))),
        (pset_name(), 0usize..9).prop_map(|(name, index)| RcError::from(PsetError::InBatch {
            index,
            source: Box::new(PsetError::NotPermitted {
                name,
                why: "rte domain"
            }),
        })),
        (any::<u32>(), any::<u32>()).prop_map(|(w, f)| RcError::Slots(SlotError::Exhausted {
            wanted: w as usize,
            free: f as usize
        })),
        pid().prop_map(|p| RcError::Slots(SlotError::NotPlaced(p))),
        Just(RcError::BadRequest(BadRequest::EmptyChange)),
        pset_name().prop_map(RcError::NoSuchChange),
        pset_name().prop_map(RcError::Aborted),
        pset_name().prop_map(RcError::AlreadyFinalized),
        (pset_name(), pset_name()).prop_map(|(delta, bound)| RcError::NotBound { delta, bound }),
        (pset_name(), pset_name()).prop_map(|(delta, new_pset)| RcError::NewPsetMismatch {
            delta,
            new_pset,
            why: "does not contain the delta"
        }),
        any::<u32>().prop_map(|n| RcError::QueueFull(n as usize)),
        text().prop_map(RcError::ReservedKey),
        text().prop_map(RcError::KeyExists),
        text().prop_map(RcError::NoSuchKey),
        Just(RcError::Timeout),
        pid().prop_map(RcError::NotPermitted),
        pid().prop_map(RcError::ProcessLost),
        (pset_name(), any::<u64>()).prop_map(|(pset, version)| RcError::Stale { pset, version }),
        Just(RcError::Client("accept before query")),
        (any::<u16>(), text()).prop_map(|(code, detail)| RcError::Refused { code, detail }),
    ]
    .boxed()
}

fn result<T: std::fmt::Debug + Clone>(
    ok: impl Strategy<Value = T>,
) -> impl Strategy<Value = Result<T, RcError>> {
    prop_oneof![ok.prop_map(Ok), rc_error().prop_map(Err)]
}

fn client_request() -> BoxedStrategy<ClientRequest> {
    prop_oneof![
        option::of(pset_name()).prop_map(|bound| ClientRequest::Query { bound }),
        pset_name().prop_map(|name| ClientRequest::PsetInfo { name }),
        vec(pset_op(), 0..4).prop_map(|ops| ClientRequest::PsetOp { ops }),
        (text(), text()).prop_map(|(key, value)| ClientRequest::Publish { key, value }),
        (text(), option::of(duration()))
            .prop_map(|(key, wait)| ClientRequest::Lookup { key, wait }),
        text().prop_map(|key| ClientRequest::Unpublish { key }),
        (pset_name(), duration())
            .prop_map(|(pset, timeout)| ClientRequest::Fence { pset, timeout }),
        (
            pset_name(),
            pset_name(),
            option::of(pset_name()),
            option::of(duration())
        )
            .prop_map(|(delta, new_pset, bound, wait)| ClientRequest::Accept {
                delta,
                new_pset,
                bound,
                wait
            }),
        (pset_name(), any::<bool>()).prop_map(|(delta, ok)| ClientRequest::Confirm { delta, ok }),
        change_request().prop_map(ClientRequest::RequestChange),
        (pset_name(), text(), duration()).prop_map(|(pset, data, timeout)| {
            ClientRequest::Modex {
                pset,
                data,
                timeout,
            }
        }),
        (vec(spawn_command(), 0..3), env(), any::<bool>()).prop_map(|(commands, env, job)| {
            let watch = if job {
                SpawnWatch::Job
            } else {
                SpawnWatch::Handshake
            };
            ClientRequest::Spawn {
                commands,
                env,
                watch,
            }
        }),
        text().prop_map(|app| ClientRequest::KillSpawn { app }),
    ]
    .boxed()
}

fn spawn_command() -> impl Strategy<Value = SpawnCommand> {
    (text(), vec(text(), 0..3), any::<u32>()).prop_map(|(program, args, count)| SpawnCommand {
        program,
        args,
        count,
    })
}

fn env() -> impl Strategy<Value = Vec<(String, String)>> {
    vec((text(), text()), 0..3)
}

fn launch_command() -> impl Strategy<Value = LaunchCommand> {
    (text(), vec(text(), 0..3), env()).prop_map(|(program, args, env)| LaunchCommand {
        program,
        args,
        env,
    })
}

/// A modex table.
fn entries() -> impl Strategy<Value = Vec<(ProcessId, String)>> {
    vec((pid(), text()), 0..5)
}

fn client_reply() -> BoxedStrategy<ClientReply> {
    let answer = (
        option::of(rc_type()),
        option::of(pset_name()),
        option::of(pset_name()),
        any::<bool>(),
        rc_status(),
    )
        .prop_map(|(kind, delta, sub_delta, incl, status)| QueryAnswer {
            kind,
            delta,
            sub_delta,
            incl,
            status,
        });
    let outcome = (names(), names(), names()).prop_map(|(results, recursive, pruned)| OpOutcome {
        results,
        recursive,
        pruned,
    });
    let accept =
        (rc_status(), pset_name(), pids()).prop_map(|(status, new_pset, removed)| AcceptOutcome {
            status,
            new_pset,
            removed,
        });
    prop_oneof![
        answer.prop_map(ClientReply::Query),
        result((0usize..1 << 40, attributes())).prop_map(ClientReply::PsetInfo),
        result(vec(outcome, 0..3)).prop_map(ClientReply::PsetOp),
        result(Just(())).prop_map(ClientReply::Published),
        result(text()).prop_map(ClientReply::Lookup),
        result(Just(())).prop_map(ClientReply::Unpublished),
        result(Just(())).prop_map(ClientReply::Fence),
        result(accept).prop_map(ClientReply::Accept),
        result(Just(())).prop_map(ClientReply::Confirmed),
        result(option::of(pset_name())).prop_map(ClientReply::ChangeRequested),
        result(
            (any::<u64>(), entries()).prop_map(|(version, entries)| ModexData { version, entries })
        )
        .prop_map(ClientReply::Modex),
        result((text(), pids()).prop_map(|(app, procs)| Spawned { app, procs }))
            .prop_map(ClientReply::Spawned),
        result(Just(())).prop_map(ClientReply::SpawnKilled),
    ]
    .boxed()
}

fn to_master() -> BoxedStrategy<ToMaster> {
    prop_oneof![
        (pid(), any::<ReqId>(), client_request())
            .prop_map(|(from, req, request)| ToMaster::Forward { from, req, request }),
        pid().prop_map(|pid| ToMaster::Exited { pid }),
        pid().prop_map(|pid| ToMaster::Started { pid }),
        (pset_name(), any::<u64>(), duration(), entries()).prop_map(
            |(pset, version, timeout, entries)| ToMaster::Modex {
                pset,
                version,
                timeout,
                entries,
            }
        ),
    ]
    .boxed()
}

fn to_daemon() -> BoxedStrategy<ToDaemon> {
    prop_oneof![
        (pset_name(), run_list(), attributes()).prop_map(|(name, members, attrs)| {
            ToDaemon::DefinePset {
                name,
                members,
                attrs,
            }
        }),
        pset_name().prop_map(|name| ToDaemon::PrunePset { name }),
        (run_list(), run_list()).prop_map(|(added, removed)| ToDaemon::JobData { added, removed }),
        (pset_name(), option::of(change_info()))
            .prop_map(|(delta, info)| ToDaemon::Change { delta, info }),
        pids().prop_map(|procs| ToDaemon::Launch { procs }),
        pids().prop_map(|procs| ToDaemon::Kill { procs }),
        (
            text(),
            proptest::collection::vec(
                (launch_command(), pids())
                    .prop_map(|(command, procs)| NodeLaunch { command, procs }),
                0..3
            )
        )
            .prop_map(|(app, launches)| ToDaemon::Spawn { app, launches }),
        (pset_name(), any::<u64>(), result(entries())).prop_map(|(pset, version, result)| {
            ToDaemon::ModexDone {
                pset,
                version,
                result,
            }
        }),
        (pid(), any::<ReqId>(), client_reply()).prop_map(|(to, req, reply)| ToDaemon::Reply {
            to,
            req,
            reply
        }),
    ]
    .boxed()
}

// ---------------------------------------------------------------- the documented mapping

/// What an error looks like after the wire: errors with nested errors or static reasons
/// become `Refused { code, detail }` (`spec/wire.md`); the rest are unchanged.
fn wire_error(e: &RcError) -> RcError {
    match e {
        RcError::Pset(_)
        | RcError::Slots(_)
        | RcError::BadRequest(_)
        | RcError::NewPsetMismatch { .. }
        | RcError::Client(_) => RcError::Refused {
            code: e.code(),
            detail: e.to_string(),
        },
        other => other.clone(),
    }
}

fn wire_result<T: Clone>(r: &Result<T, RcError>) -> Result<T, RcError> {
    r.clone().map_err(|e| wire_error(&e))
}

fn wire_reply(r: &ClientReply) -> ClientReply {
    match r {
        ClientReply::Query(a) => ClientReply::Query(a.clone()),
        ClientReply::PsetInfo(r) => ClientReply::PsetInfo(wire_result(r)),
        ClientReply::PsetOp(r) => ClientReply::PsetOp(wire_result(r)),
        ClientReply::Published(r) => ClientReply::Published(wire_result(r)),
        ClientReply::Lookup(r) => ClientReply::Lookup(wire_result(r)),
        ClientReply::Unpublished(r) => ClientReply::Unpublished(wire_result(r)),
        ClientReply::Fence(r) => ClientReply::Fence(wire_result(r)),
        ClientReply::Accept(r) => ClientReply::Accept(wire_result(r)),
        ClientReply::Confirmed(r) => ClientReply::Confirmed(wire_result(r)),
        ClientReply::ChangeRequested(r) => ClientReply::ChangeRequested(wire_result(r)),
        ClientReply::Modex(r) => ClientReply::Modex(wire_result(r)),
        ClientReply::Spawned(r) => ClientReply::Spawned(wire_result(r)),
        ClientReply::SpawnKilled(r) => ClientReply::SpawnKilled(wire_result(r)),
    }
}

fn wire_to_daemon(m: &ToDaemon) -> ToDaemon {
    match m {
        ToDaemon::Reply { to, req, reply } => ToDaemon::Reply {
            to: to.clone(),
            req: *req,
            reply: wire_reply(reply),
        },
        ToDaemon::ModexDone {
            pset,
            version,
            result,
        } => ToDaemon::ModexDone {
            pset: pset.clone(),
            version: *version,
            result: wire_result(result),
        },
        other => other.clone(),
    }
}

// ---------------------------------------------------------------- round trips

proptest! {
    #[test]
    fn client_requests_round_trip(req in any::<ReqId>(), r in client_request()) {
        prop_assert_eq!(decode_client(&encode_client(req, &r)), Ok((req, r)));
    }

    #[test]
    fn replies_round_trip_modulo_refused(req in any::<ReqId>(), r in client_reply()) {
        let decoded = decode_reply(&encode_reply(req, &r));
        prop_assert_eq!(&decoded, &Ok((req, wire_reply(&r))));
        // The wire image is a fixed point, and `code()` survives the wire.
        let (_, back) = decoded.unwrap();
        prop_assert_eq!(decode_reply(&encode_reply(req, &back)), Ok((req, back)));
    }

    #[test]
    fn errors_keep_their_code(e in rc_error()) {
        let r = ClientReply::Fence(Err(e.clone()));
        let Ok((_, ClientReply::Fence(Err(back)))) = decode_reply(&encode_reply(1, &r)) else {
            panic!("a fence error reply must decode to a fence error reply");
        };
        prop_assert_eq!(back.code(), e.code());
        prop_assert_eq!(back, wire_error(&e));
    }

    #[test]
    fn to_master_round_trips(m in to_master()) {
        prop_assert_eq!(decode_to_master(&encode_to_master(&m)), Ok(m));
    }

    #[test]
    fn to_daemon_round_trips_modulo_refused(m in to_daemon()) {
        prop_assert_eq!(decode_to_daemon(&encode_to_daemon(&m)), Ok(wire_to_daemon(&m)));
    }
}

// ---------------------------------------------------------------- exact layout

#[test]
fn query_frame_layout_is_as_specified() {
    let bytes = encode_client(7, &ClientRequest::Query { bound: None });
    let mut want = vec![b'D', b'R', 1, 0x02, 0x01, 0, 0, 0, 9];
    want.extend_from_slice(&7u64.to_be_bytes());
    want.push(0); // bound: none
    assert_eq!(bytes, want);

    let reply = encode_reply(7, &ClientReply::Fence(Err(RcError::Timeout)));
    let mut want = vec![b'D', b'R', 1, 0x04, 0x83, 0, 0, 0, 11];
    want.extend_from_slice(&7u64.to_be_bytes());
    want.extend_from_slice(&[1, 0, 13]); // Err, code 13 (Timeout)
    assert_eq!(reply, want);
}

#[test]
fn every_variant_has_its_documented_type() {
    let n = PsetName::world();
    let p = ProcessId::new(Namespace::new("j"), 0);
    let types = |frame: Vec<u8>| u16::from_be_bytes([frame[3], frame[4]]);
    let requests = [
        (ClientRequest::Query { bound: None }, 0x0201),
        (
            ClientRequest::Accept {
                delta: n.clone(),
                new_pset: n.clone(),
                bound: None,
                wait: None,
            },
            0x0202,
        ),
        (
            ClientRequest::Confirm {
                delta: n.clone(),
                ok: true,
            },
            0x0203,
        ),
        (
            ClientRequest::RequestChange(ChangeRequest::add("a", 1)),
            0x0204,
        ),
        (ClientRequest::PsetOp { ops: vec![] }, 0x0301),
        (ClientRequest::PsetInfo { name: n.clone() }, 0x0302),
        (
            ClientRequest::Publish {
                key: "k".into(),
                value: "v".into(),
            },
            0x0401,
        ),
        (
            ClientRequest::Lookup {
                key: "k".into(),
                wait: None,
            },
            0x0402,
        ),
        (
            ClientRequest::Fence {
                pset: n.clone(),
                timeout: Duration::ZERO,
            },
            0x0403,
        ),
        (
            ClientRequest::Modex {
                pset: n.clone(),
                data: "d".into(),
                timeout: Duration::ZERO,
            },
            0x0405,
        ),
        (
            ClientRequest::Spawn {
                commands: vec![],
                env: vec![],
                watch: SpawnWatch::Job,
            },
            0x0205,
        ),
        (ClientRequest::KillSpawn { app: "a".into() }, 0x0206),
    ];
    for (r, t) in requests {
        assert_eq!(types(encode_client(0, &r)), t, "{r:?}");
    }
    let replies = [
        (ClientReply::Query(QueryAnswer::none()), 0x0281),
        (ClientReply::Accept(Err(RcError::Timeout)), 0x0282),
        (ClientReply::Confirmed(Ok(())), 0x0283),
        (ClientReply::ChangeRequested(Ok(None)), 0x0284),
        (ClientReply::PsetOp(Ok(vec![])), 0x0381),
        (ClientReply::PsetInfo(Err(RcError::Timeout)), 0x0382),
        (ClientReply::Published(Ok(())), 0x0481),
        (ClientReply::Lookup(Ok("v".into())), 0x0482),
        (ClientReply::Fence(Ok(())), 0x0483),
        (ClientReply::Modex(Err(RcError::Timeout)), 0x0485),
        (ClientReply::Spawned(Err(RcError::Timeout)), 0x0285),
        (ClientReply::SpawnKilled(Ok(())), 0x0286),
    ];
    for (r, t) in replies {
        assert_eq!(types(encode_reply(0, &r)), t, "{r:?}");
    }
    let forward = ToMaster::Forward {
        from: p.clone(),
        req: 0,
        request: ClientRequest::Query { bound: None },
    };
    assert_eq!(types(encode_to_master(&forward)), 0x0210);
    assert_eq!(
        types(encode_to_master(&ToMaster::Exited { pid: p.clone() })),
        0x0211
    );
    assert_eq!(
        types(encode_to_master(&ToMaster::Started { pid: p.clone() })),
        0x0213
    );
    let batch = ToMaster::Modex {
        pset: n.clone(),
        version: 1,
        timeout: Duration::ZERO,
        entries: vec![(p.clone(), "d".into())],
    };
    assert_eq!(types(encode_to_master(&batch)), 0x0212);
    let daemon = [
        (
            ToDaemon::Reply {
                to: p.clone(),
                req: 0,
                reply: ClientReply::Fence(Ok(())),
            },
            0x0220,
        ),
        (
            ToDaemon::Change {
                delta: n.clone(),
                info: None,
            },
            0x0221,
        ),
        (
            ToDaemon::JobData {
                added: ProcRuns::new(),
                removed: ProcRuns::new(),
            },
            0x0222,
        ),
        (ToDaemon::Launch { procs: vec![] }, 0x0223),
        (ToDaemon::Kill { procs: vec![] }, 0x0224),
        (
            ToDaemon::Spawn {
                app: "a".into(),
                launches: vec![NodeLaunch {
                    command: LaunchCommand {
                        program: "p".into(),
                        args: vec![],
                        env: vec![],
                    },
                    procs: vec![],
                }],
            },
            0x0226,
        ),
        (
            ToDaemon::ModexDone {
                pset: n.clone(),
                version: 1,
                result: Ok(vec![]),
            },
            0x0225,
        ),
        (
            ToDaemon::DefinePset {
                name: n.clone(),
                members: ProcRuns::new(),
                attrs: Attributes::new(0, false),
            },
            0x0310,
        ),
        (ToDaemon::PrunePset { name: n }, 0x0311),
    ];
    for (m, t) in daemon {
        assert_eq!(types(encode_to_daemon(&m)), t, "{m:?}");
    }
    assert_eq!(ty::QUERY_REPLY, ty::QUERY | ty::REPLY_BIT);
}

// ---------------------------------------------------------------- malformed input

fn frame(msg_type: u16, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    encode_frame(&mut v, msg_type, |b| b.extend_from_slice(body));
    v
}

fn be32(n: u32) -> [u8; 4] {
    n.to_be_bytes()
}

/// A length-prefixed string field.
fn s(text: &[u8]) -> Vec<u8> {
    let mut v = be32(text.len() as u32).to_vec();
    v.extend_from_slice(text);
    v
}

/// A client frame body: request id 1, then `fields`.
fn client_body(fields: &[&[u8]]) -> Vec<u8> {
    let mut v = 1u64.to_be_bytes().to_vec();
    for f in fields {
        v.extend_from_slice(f);
    }
    v
}

fn one_of_each() -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
    let n = PsetName::parse("mpi://app/A/x").unwrap();
    let p = ProcessId::new(Namespace::new("job"), 3);
    let client = encode_client(
        9,
        &ClientRequest::Accept {
            delta: n.clone(),
            new_pset: n.clone(),
            bound: Some(n.clone()),
            wait: Some(Duration::from_millis(5)),
        },
    );
    let reply = encode_reply(
        9,
        &ClientReply::PsetOp(Ok(vec![OpOutcome {
            results: vec![n.clone()],
            recursive: vec![],
            pruned: vec![n.clone()],
        }])),
    );
    let master = encode_to_master(&ToMaster::Forward {
        from: p.clone(),
        req: 2,
        request: ClientRequest::PsetOp {
            ops: vec![PsetOp::Null {
                target: n.clone(),
                attrs: AttrUpdate::active(true).with_sched("mpi_ps_sched_x", "1"),
            }],
        },
    });
    let daemon = encode_to_daemon(&ToDaemon::Reply {
        to: p,
        req: 2,
        reply: ClientReply::Accept(Err(RcError::NotBound {
            delta: n.clone(),
            bound: n,
        })),
    });
    (client, reply, master, daemon)
}

type Decoder = fn(&[u8]) -> Result<(), WireError>;

fn decoders() -> [(&'static str, Decoder); 4] {
    [
        ("client", |b| decode_client(b).map(drop)),
        ("reply", |b| decode_reply(b).map(drop)),
        ("to_master", |b| decode_to_master(b).map(drop)),
        ("to_daemon", |b| decode_to_daemon(b).map(drop)),
    ]
}

#[test]
fn truncation_at_every_prefix_is_a_typed_error() {
    let (c, r, m, d) = one_of_each();
    for ((name, decode), good) in decoders().into_iter().zip([c, r, m, d]) {
        assert_eq!(decode(&good), Ok(()), "{name}");
        let body_len = (good.len() - HEADER_LEN) as u32;
        for cut in 0..good.len() {
            let want = if cut < HEADER_LEN {
                WireError::Truncated
            } else {
                WireError::LengthMismatch {
                    declared: body_len,
                    actual: cut - HEADER_LEN,
                }
            };
            assert_eq!(decode(&good[..cut]), Err(want), "{name} cut at {cut}");
        }
        // A consistent header around a cut body: the body parser itself runs short.
        let msg_type = u16::from_be_bytes([good[3], good[4]]);
        for cut in 0..good.len() - HEADER_LEN {
            let refr = frame(msg_type, &good[HEADER_LEN..HEADER_LEN + cut]);
            assert_eq!(
                decode(&refr),
                Err(WireError::Truncated),
                "{name} body cut at {cut}"
            );
        }
        // One byte too many inside the body.
        let mut long = good[HEADER_LEN..].to_vec();
        long.push(0);
        assert_eq!(
            decode(&frame(msg_type, &long)),
            Err(WireError::TrailingBytes { extra: 1 }),
            "{name} trailing"
        );
        let mut bad_magic = good.clone();
        bad_magic[1] = b'X';
        assert_eq!(
            decode(&bad_magic),
            Err(WireError::BadMagic { found: *b"DX" }),
            "{name}"
        );
        let mut bad_version = good.clone();
        bad_version[2] = 2;
        assert_eq!(
            decode(&bad_version),
            Err(WireError::UnknownVersion { version: 2 }),
            "{name}"
        );
        let mut bad_type = good.clone();
        bad_type[3..5].copy_from_slice(&0x02ffu16.to_be_bytes());
        assert_eq!(
            decode(&bad_type),
            Err(WireError::UnknownType { msg_type: 0x02ff }),
            "{name}"
        );
    }
}

#[test]
fn frames_on_the_wrong_link_are_unknown_types() {
    let (c, r, m, d) = one_of_each();
    assert_eq!(
        decode_reply(&c),
        Err(WireError::UnknownType { msg_type: 0x0202 })
    );
    assert_eq!(
        decode_client(&r),
        Err(WireError::UnknownType { msg_type: 0x0381 })
    );
    assert_eq!(
        decode_to_daemon(&m),
        Err(WireError::UnknownType { msg_type: 0x0210 })
    );
    assert_eq!(
        decode_to_master(&d),
        Err(WireError::UnknownType { msg_type: 0x0220 })
    );
    // A nested message of the wrong kind: a reply type inside Forward, a request type
    // inside Reply.
    let mut fwd = s(b"job");
    fwd.extend_from_slice(&be32(3));
    fwd.extend_from_slice(&5u64.to_be_bytes());
    let mut inner_reply = fwd.clone();
    inner_reply.extend_from_slice(&ty::QUERY_REPLY.to_be_bytes());
    inner_reply.push(0);
    assert_eq!(
        decode_to_master(&frame(ty::FORWARD, &inner_reply)),
        Err(WireError::UnknownType { msg_type: 0x0281 })
    );
    let mut inner_request = fwd;
    inner_request.extend_from_slice(&ty::QUERY.to_be_bytes());
    inner_request.push(0);
    assert_eq!(
        decode_to_daemon(&frame(ty::REPLY, &inner_request)),
        Err(WireError::UnknownType { msg_type: 0x0201 })
    );
}

#[test]
fn malformed_fields_are_exact_typed_errors() {
    let world = s(b"mpi://WORLD");
    let inv = |what, value| WireError::InvalidValue { what, value };
    let over = |what, value, max| WireError::OverLimit { what, value, max };
    let cases: Vec<(&str, u16, Vec<u8>, WireError)> = vec![
        (
            "option tag",
            ty::QUERY,
            client_body(&[&[2]]),
            inv("option tag", 2),
        ),
        (
            "bool",
            ty::CONFIRM,
            client_body(&[&world, &[7]]),
            inv("bool", 7),
        ),
        (
            "name without scheme",
            ty::PSET_INFO,
            client_body(&[&s(b"hello")]),
            inv("pset name", 1),
        ),
        (
            "name with unknown domain",
            ty::PSET_INFO,
            client_body(&[&s(b"mpi://job/x")]),
            inv("pset name", 2),
        ),
        (
            "name with a dot segment",
            ty::PSET_INFO,
            client_body(&[&s(b"mpi://app/a/..")]),
            inv("pset name", 6),
        ),
        (
            "name too long",
            ty::PSET_INFO,
            client_body(&[&s(&[b'a'; 256])]),
            over("pset name", 256, 255),
        ),
        (
            "name not UTF-8",
            ty::PSET_INFO,
            client_body(&[&s(&[0xff, 0xfe])]),
            WireError::NotUtf8,
        ),
        (
            "too many ops",
            ty::PSET_OP,
            client_body(&[&be32(MAX_OPS as u32 + 1)]),
            over("pset ops", MAX_OPS as u64 + 1, MAX_OPS as u64),
        ),
        (
            "pset op tag",
            ty::PSET_OP,
            client_body(&[&be32(1), &[3]]),
            inv("pset op", 3),
        ),
        (
            "set op tag",
            ty::PSET_OP,
            client_body(&[&be32(1), &[0, 9]]),
            inv("set op", 9),
        ),
        (
            "split-by tag",
            ty::PSET_OP,
            client_body(&[&be32(1), &[2], &world, &[5]]),
            inv("split by", 5),
        ),
        (
            "too many split sizes",
            ty::PSET_OP,
            client_body(&[&be32(1), &[2], &world, &[0], &be32(u32::MAX)]),
            over("split sizes", u64::from(u32::MAX), MAX_PROCS as u64),
        ),
        (
            "too many sched hints",
            ty::PSET_OP,
            client_body(&[&be32(1), &[1], &world, &[0], &be32(65)]),
            over("sched hints", 65, 64),
        ),
        (
            "sched hints out of order",
            ty::PSET_OP,
            client_body(&[
                &be32(1),
                &[1],
                &world,
                &[0],
                &be32(2),
                &s(b"b"),
                &s(b""),
                &s(b"a"),
                &s(b""),
            ]),
            inv("sched hint key order", 1),
        ),
        (
            "duplicate sched hint",
            ty::PSET_OP,
            client_body(&[
                &be32(1),
                &[1],
                &world,
                &[0],
                &be32(3),
                &s(b"a"),
                &s(b"1"),
                &s(b"b"),
                &s(b"2"),
                &s(b"b"),
                &s(b"3"),
            ]),
            inv("sched hint key order", 2),
        ),
        (
            "key too long",
            ty::PUBLISH,
            client_body(&[&be32(4097)]),
            over("key", 4097, 4096),
        ),
        (
            "value not UTF-8",
            ty::PUBLISH,
            client_body(&[&s(b"k"), &s(&[0xc0])]),
            WireError::NotUtf8,
        ),
        (
            "rc type tag",
            ty::REQUEST_CHANGE,
            client_body(&[&s(b"app"), &[3]]),
            inv("rc type", 3),
        ),
        (
            "too many victims",
            ty::REQUEST_CHANGE,
            client_body(&[
                &s(b"app"),
                &[1],
                &be32(0),
                &be32(1),
                &be32(MAX_PROCS as u32 + 1),
            ]),
            over("victims", MAX_PROCS as u64 + 1, MAX_PROCS as u64),
        ),
        (
            "namespace too long",
            ty::REQUEST_CHANGE,
            client_body(&[&s(b"app"), &[1], &be32(0), &be32(1), &be32(1), &be32(256)]),
            over("namespace", 256, 255),
        ),
    ];
    for (what, msg_type, body, want) in cases {
        assert_eq!(decode_client(&frame(msg_type, &body)), Err(want), "{what}");
    }

    let reply_cases: Vec<(&str, u16, Vec<u8>, WireError)> = vec![
        (
            "result tag",
            ty::FENCE_REPLY,
            client_body(&[&[2]]),
            inv("result tag", 2),
        ),
        (
            "rc status",
            ty::ACCEPT_REPLY,
            client_body(&[&[0, 5]]),
            inv("rc status", 5),
        ),
        (
            "error with a bad name",
            ty::ACCEPT_REPLY,
            client_body(&[&[1], &RcError::CODE_ABORTED.to_be_bytes(), &s(b"mpi://")]),
            inv("pset name", 2),
        ),
        (
            "error detail too long",
            ty::FENCE_REPLY,
            client_body(&[&[1], &[0, 1], &be32(4097)]),
            over("error detail", 4097, 4096),
        ),
        (
            "too many op outcomes",
            ty::PSET_OP_REPLY,
            client_body(&[&[0], &be32(1025)]),
            over("op outcomes", 1025, 1024),
        ),
    ];
    for (what, msg_type, body, want) in reply_cases {
        assert_eq!(decode_reply(&frame(msg_type, &body)), Err(want), "{what}");
    }

    assert_eq!(
        decode_to_daemon(&frame(ty::LAUNCH, &be32(MAX_PROCS as u32 + 1))),
        Err(over("procs", MAX_PROCS as u64 + 1, MAX_PROCS as u64))
    );
    assert_eq!(
        decode_to_daemon(&frame(
            ty::CHANGE,
            &[&world[..], &[1], &s(b"a"), &[9]].concat()
        )),
        Err(inv("rc type", 9))
    );
    // RC-23: runs are bounded by the processes they spell, and canonical.
    let run = |first: u32, count: u32| [&s(b"j")[..], &be32(first), &be32(count)].concat();
    let job_data = |runs: &[Vec<u8>]| {
        let mut b = be32(runs.len() as u32).to_vec();
        b.extend(runs.concat());
        b.extend(be32(0));
        frame(ty::JOB_DATA, &b)
    };
    let half = MAX_PROCS as u32 / 2;
    assert_eq!(
        decode_to_daemon(&job_data(&[run(0, half), run(half + 1, half + 1)])),
        Err(over("added", MAX_PROCS as u64 + 1, MAX_PROCS as u64)),
        "a few runs of many processes"
    );
    let bad = |what| Err(WireError::Inconsistent { what });
    assert_eq!(
        decode_to_daemon(&job_data(&[run(0, 0)])),
        bad("a run of no processes")
    );
    assert_eq!(
        decode_to_daemon(&job_data(&[run(u32::MAX, 2)])),
        bad("a run past the largest rank")
    );
    assert_eq!(
        decode_to_daemon(&job_data(&[run(0, 2), run(2, 1)])),
        bad("a run continuing the one before it")
    );
    let ok = decode_to_daemon(&job_data(&[run(0, 2), run(3, 1)]));
    let want: ProcRuns = [0, 1, 3]
        .map(|r| ProcessId::new(Namespace::new("j"), r))
        .into_iter()
        .collect();
    assert_eq!(
        ok,
        Ok(ToDaemon::JobData {
            added: want,
            removed: ProcRuns::new()
        })
    );
    assert_eq!(
        decode_to_daemon(&frame(ty::PRUNE_PSET, &s(b"mpi://app/a//b"))),
        Err(inv("pset name", 5))
    );
    assert_eq!(
        decode_to_master(&frame(ty::EXITED, &[&s(b"j")[..], &[0, 0]].concat())),
        Err(WireError::Truncated)
    );
}

#[test]
fn textual_and_unknown_error_codes_arrive_as_refused() {
    let e = RcError::from(PsetError::NotFound(PsetName::world()));
    let (_, back) = decode_reply(&encode_reply(3, &ClientReply::PsetOp(Err(e.clone())))).unwrap();
    assert_eq!(
        back,
        ClientReply::PsetOp(Err(RcError::Refused {
            code: RcError::CODE_PSET,
            detail: "no pset named mpi://WORLD".into(),
        }))
    );
    // A code this kernel does not know (a newer peer's) with a text payload.
    let body = client_body(&[&[1], &999u16.to_be_bytes(), &s(b"new failure")]);
    assert_eq!(
        decode_reply(&frame(ty::CONFIRM_REPLY, &body)),
        Ok((
            1,
            ClientReply::Confirmed(Err(RcError::Refused {
                code: 999,
                detail: "new failure".into(),
            }))
        ))
    );
    // Long texts are cut to the limit on a character boundary, so encoding never
    // produces a frame the peer rejects.
    let long = RcError::Refused {
        code: 4,
        detail: "é".repeat(3000),
    };
    let (_, back) = decode_reply(&encode_reply(3, &ClientReply::Fence(Err(long)))).unwrap();
    let ClientReply::Fence(Err(RcError::Refused { code, detail })) = back else {
        panic!("a refused fence must decode as refused");
    };
    assert_eq!((code, detail.len()), (4, 4096));
}

// ---------------------------------------------------------------- no panics

fn all_decoders_agree_with_themselves(bytes: &[u8]) -> Result<(), TestCaseError> {
    // Whatever decodes is a fixed point of encode ∘ decode.
    if let Ok((req, r)) = decode_client(bytes) {
        prop_assert_eq!(decode_client(&encode_client(req, &r)), Ok((req, r)));
    }
    if let Ok((req, r)) = decode_reply(bytes) {
        prop_assert_eq!(decode_reply(&encode_reply(req, &r)), Ok((req, r)));
    }
    if let Ok(m) = decode_to_master(bytes) {
        prop_assert_eq!(decode_to_master(&encode_to_master(&m)), Ok(m));
    }
    if let Ok(m) = decode_to_daemon(bytes) {
        prop_assert_eq!(decode_to_daemon(&encode_to_daemon(&m)), Ok(m));
    }
    Ok(())
}

fn any_frame() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        (any::<ReqId>(), client_request()).prop_map(|(q, r)| encode_client(q, &r)),
        (any::<ReqId>(), client_reply()).prop_map(|(q, r)| encode_reply(q, &r)),
        to_master().prop_map(|m| encode_to_master(&m)),
        to_daemon().prop_map(|m| encode_to_daemon(&m)),
    ]
    .boxed()
}

proptest! {
    // Cheap cases: run more of them than the default 256.
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..256)) {
        all_decoders_agree_with_themselves(&bytes)?;
    }

    #[test]
    fn arbitrary_bodies_never_panic(
        msg_type in prop_oneof![0x0200u16..0x0230, 0x0300u16..0x0390, 0x0400u16..0x0490],
        body in vec(any::<u8>(), 0..128),
    ) {
        all_decoders_agree_with_themselves(&frame(msg_type, &body))?;
    }

    #[test]
    fn mutated_frames_never_panic(
        good in any_frame(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        keep_header in any::<bool>(),
    ) {
        let mut bytes = good;
        let start = if keep_header { HEADER_LEN } else { 0 };
        for (at, v) in edits {
            if bytes.len() > start {
                let i = start + at.index(bytes.len() - start);
                bytes[i] = v;
            }
        }
        all_decoders_agree_with_themselves(&bytes)?;
    }
}

/// Every set operation survives the wire in a `PsetOp` request (`wire/pset.rs`
/// `set_op`: its `1` arm deleted refused `DIFFERENCE`, which the proptest above draws
/// only now and then with few cases).
#[test]
fn every_set_operation_round_trips() {
    let a = PsetName::parse("mpi://app/a").unwrap();
    let b = PsetName::parse("mpi://app/a/b").unwrap();
    for op in [SetOp::Union, SetOp::Difference, SetOp::Intersection] {
        let r = ClientRequest::PsetOp {
            ops: vec![PsetOp::Set {
                op,
                pset1: a.clone(),
                pset2: b.clone(),
                target: None,
                attrs: AttrUpdate::none(),
            }],
        };
        assert_eq!(decode_client(&encode_client(1, &r)), Ok((1, r)), "{op:?}");
    }
}

// ------------------------------------------------- change requests: the flat layout

/// A change request as the wire lays it out (and as the kernel's type was before it
/// became an enum by kind): every field present whatever the kind.
#[derive(Clone, Debug)]
struct Flat {
    app: String,
    kind: u8,
    add: u32,
    sub: u32,
    victims: Vec<ProcessId>,
    bound: Option<PsetName>,
}

impl Flat {
    /// The layout of `spec/wire.md` written out by hand, independently of the kernel's
    /// encoder: `app | kind | add u32 | sub u32 | victims | bound?`.
    fn client_frame(&self, req: ReqId) -> Vec<u8> {
        let mut body = req.to_be_bytes().to_vec();
        body.extend(s(self.app.as_bytes()));
        body.push(self.kind);
        body.extend(be32(self.add));
        body.extend(be32(self.sub));
        body.extend(be32(self.victims.len() as u32));
        for p in &self.victims {
            body.extend(s(p.namespace.as_str().as_bytes()));
            body.extend(be32(p.rank));
        }
        match &self.bound {
            None => body.push(0),
            Some(b) => {
                body.push(1);
                body.extend(s(b.as_str().as_bytes()));
            }
        }
        frame(ty::REQUEST_CHANGE, &body)
    }

    /// What the enum is written as: the fields a kind does not take hold 0, nothing or
    /// `None`; named victims repeat their number in `sub`.
    fn of(r: &ChangeRequest) -> Flat {
        let flat = |kind, add, (sub, victims), bound| Flat {
            app: r.app.clone(),
            kind,
            add,
            sub,
            victims,
            bound,
        };
        match &r.change {
            Change::Add { n, bound } => flat(0, *n, (0, vec![]), bound.clone()),
            Change::Sub(v) => flat(1, 0, sub_of(v), None),
            Change::Replace { remove, add } => flat(2, *add, sub_of(remove), None),
        }
    }

    /// The reason the decoder must give for a combination the enum cannot represent, or
    /// `None` for one it can.
    fn inconsistency(&self) -> Option<&'static str> {
        let named = !self.victims.is_empty();
        match self.kind {
            0 if self.sub != 0 => Some("change request: ADD with sub"),
            0 if named => Some("change request: ADD with victims"),
            0 => None,
            _ if self.bound.is_some() => Some("change request: SUB or REPLACE with a bound pset"),
            1 if self.add != 0 => Some("change request: SUB with add"),
            _ if named && self.sub as usize != self.victims.len() => {
                Some("change request: sub is not the number of named victims")
            }
            _ => None,
        }
    }
}

fn sub_of(v: &Victims) -> (u32, Vec<ProcessId>) {
    match v {
        Victims::Count(n) => (*n, vec![]),
        Victims::Named(v) => (v.len() as u32, v.as_slice().to_vec()),
    }
}

/// Any combination of fields, valid or not; small counts so that `sub` often equals the
/// number of victims and 0 is common.
fn flat() -> BoxedStrategy<Flat> {
    let count = || prop_oneof![0..3u32, any::<u32>()];
    (
        segment(),
        0..3u8,
        count(),
        count(),
        vec(pid(), 0..3),
        option::of(pset_name()),
    )
        .prop_map(|(app, kind, add, sub, victims, bound)| Flat {
            app,
            kind,
            add,
            sub,
            victims,
            bound,
        })
        .boxed()
}

fn request_of(frame: &[u8]) -> Result<ChangeRequest, WireError> {
    match decode_client(frame)? {
        (_, ClientRequest::RequestChange(r)) => Ok(r),
        (_, other) => panic!("not a change request: {other:?}"),
    }
}

proptest! {
    /// Every change request is written exactly as the flat layout with the fields of
    /// the other kinds zeroed: the bytes did not change when the type became an enum.
    #[test]
    fn change_requests_keep_the_flat_layout(req in any::<ReqId>(), r in change_request()) {
        let bytes = encode_client(req, &ClientRequest::RequestChange(r.clone()));
        prop_assert_eq!(&bytes, &Flat::of(&r).client_frame(req));
        prop_assert_eq!(request_of(&bytes), Ok(r));
    }

    /// Any combination of fields either decodes and re-encodes to the very same bytes,
    /// or is refused with the typed error naming what does not fit.
    #[test]
    fn flat_change_requests_decode_exactly_or_are_inconsistent(req in any::<ReqId>(), f in flat()) {
        let bytes = f.client_frame(req);
        match (request_of(&bytes), f.inconsistency()) {
            (Ok(r), None) => {
                prop_assert_eq!(encode_client(req, &ClientRequest::RequestChange(r)), bytes);
            }
            (Err(e), Some(what)) => prop_assert_eq!(e, WireError::Inconsistent { what }),
            (got, want) => prop_assert!(false, "{:?}: got {:?}, want {:?}", f, got, want),
        }
    }
}

/// Each combination the enum cannot represent is refused with its own typed error, in
/// every message that carries a change request.
#[test]
fn inconsistent_change_requests_are_typed_errors() {
    let p = ProcessId::new(Namespace::new("job"), 1);
    let base = Flat {
        app: "app".into(),
        kind: 0,
        add: 1,
        sub: 0,
        victims: vec![],
        bound: None,
    };
    let cases = [
        (
            "ADD with sub",
            Flat {
                sub: 1,
                ..base.clone()
            },
        ),
        (
            "ADD with victims",
            Flat {
                victims: vec![p.clone()],
                ..base.clone()
            },
        ),
        (
            "SUB or REPLACE with a bound pset",
            Flat {
                kind: 1,
                add: 0,
                sub: 1,
                bound: Some(PsetName::world()),
                ..base.clone()
            },
        ),
        (
            "SUB or REPLACE with a bound pset",
            Flat {
                kind: 2,
                sub: 1,
                bound: Some(PsetName::world()),
                ..base.clone()
            },
        ),
        (
            "SUB with add",
            Flat {
                kind: 1,
                add: 1,
                sub: 1,
                ..base.clone()
            },
        ),
        (
            "sub is not the number of named victims",
            Flat {
                kind: 1,
                add: 0,
                sub: 0,
                victims: vec![p.clone()],
                ..base.clone()
            },
        ),
        (
            "sub is not the number of named victims",
            Flat {
                kind: 2,
                sub: 2,
                victims: vec![p.clone()],
                ..base.clone()
            },
        ),
    ];
    for (what, f) in cases {
        let what = format!("change request: {what}");
        let want = |e: WireError| matches!(e, WireError::Inconsistent { what: w } if w == what);
        let client = f.client_frame(7);
        let got = request_of(&client).expect_err(&what);
        assert!(want(got.clone()), "{what}: {got:?}");
        // The same body forwarded to the master.
        let forward = encode_to_master(&ToMaster::Forward {
            from: p.clone(),
            req: 2,
            request: ClientRequest::RequestChange(ChangeRequest::add("app", 1)),
        });
        let good = encode_client(
            7,
            &ClientRequest::RequestChange(ChangeRequest::add("app", 1)),
        );
        let good_body = &good[HEADER_LEN + 8..];
        let bad_body = &client[HEADER_LEN + 8..];
        let at = forward.len() - good_body.len();
        let mut body = forward[HEADER_LEN..at].to_vec();
        body.extend_from_slice(bad_body);
        let got = decode_to_master(&frame(ty::FORWARD, &body)).expect_err(&what);
        assert!(want(got.clone()), "{what} (forwarded): {got:?}");
    }
    // And the valid neighbours of those cases decode.
    for f in [
        base.clone(),
        Flat {
            kind: 1,
            add: 0,
            sub: 1,
            victims: vec![p.clone()],
            ..base.clone()
        },
        Flat {
            kind: 2,
            add: 0,
            sub: 1,
            victims: vec![p.clone()],
            ..base.clone()
        },
        Flat {
            kind: 1,
            add: 0,
            sub: 3,
            ..base.clone()
        },
        Flat {
            bound: Some(PsetName::world()),
            ..base.clone()
        },
    ] {
        assert_eq!(f.inconsistency(), None);
        request_of(&f.client_frame(1)).unwrap_or_else(|e| panic!("{f:?}: {e}"));
    }
}

/// The constructors write what they wrote before the enum: the named-victim requests
/// of the tests and models (`sub` repeats the number of victims).
#[test]
fn constructors_write_the_documented_bytes() {
    let p = ProcessId::new(Namespace::new("job"), 2);
    let flat = |kind, add, sub, victims: Vec<ProcessId>, bound| Flat {
        app: "app".into(),
        kind,
        add,
        sub,
        victims,
        bound,
    };
    let cases = [
        (ChangeRequest::add("app", 4), flat(0, 4, 0, vec![], None)),
        (
            ChangeRequest::add_to("app", 4, PsetName::world()),
            flat(0, 4, 0, vec![], Some(PsetName::world())),
        ),
        (ChangeRequest::sub("app", 2), flat(1, 0, 2, vec![], None)),
        (
            ChangeRequest::replace("app", 1, 3),
            flat(2, 3, 1, vec![], None),
        ),
        (
            ChangeRequest::sub_named("app", p.clone().into()),
            flat(1, 0, 1, vec![p.clone()], None),
        ),
        (
            ChangeRequest::replace_named("app", p.clone().into(), 2),
            flat(2, 2, 1, vec![p], None),
        ),
    ];
    for (r, f) in cases {
        let bytes = encode_client(5, &ClientRequest::RequestChange(r.clone()));
        assert_eq!(bytes, f.client_frame(5), "{r:?}");
    }
}
