//! The runtime link's control messages (`spec/runtime.md` LINK-1..LINK-6, `spec/wire.md`
//! 0x05xx): round trips, documented types, typed errors for malformed frames, no panics
//! on arbitrary or mutated bytes.

use dynres_core::rc::ends::KillCause;
use dynres_core::rc::wire::link::{
    LinkMsg, MAX_ARGS, NodeSetup, PmixSetup, decode_link, encode_link, is_link_type,
};
use dynres_core::rc::wire::{decode_to_master, encode_to_master};
use dynres_core::rc::{ToMaster, wire::decode_to_daemon};
use dynres_core::wire::{WireError, encode_frame};
use dynres_core::{Namespace, ProcessId};
use proptest::collection::vec;
use proptest::prelude::*;

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9/._ -]{0,24}"
}

fn link_msg() -> BoxedStrategy<LinkMsg> {
    let setup = (
        any::<u32>(),
        (text(), text(), "[a-z][a-z0-9]{0,8}", text()),
        vec(text(), 0..5),
        text(),
        (any::<u32>(), any::<u32>()),
        (
            text(),
            any::<bool>(),
            vec((text(), text()), 0..4),
            any::<bool>(),
        ),
        (any::<bool>(), any::<bool>(), text()),
        proptest::option::of(
            (
                text(),
                any::<u32>(),
                vec(text(), 0..4),
                vec(any::<u32>(), 0..6),
            )
                .prop_map(|(namespace, universe, nodes, placement)| PmixSetup {
                    namespace,
                    universe,
                    nodes,
                    placement,
                }),
        ),
    )
        .prop_map(
            |(
                node,
                (job, namespace, app, program),
                args,
                node_addr,
                (shm_spins, heartbeat_ms),
                (cwd, cwd_required, env, bind_core),
                (tag_output, timestamp_output, output_dir),
                pmix,
            )| {
                LinkMsg::Setup(Box::new(NodeSetup {
                    node,
                    job,
                    namespace,
                    app,
                    program,
                    args,
                    node_addr,
                    shm_spins,
                    heartbeat_ms,
                    cwd,
                    cwd_required,
                    env,
                    bind_core,
                    tag_output,
                    timestamp_output,
                    output_dir,
                    pmix,
                }))
            },
        );
    prop_oneof![
        setup,
        Just(LinkMsg::Heartbeat),
        (any::<u32>(), any::<u32>()).prop_map(|(rank, os_pid)| LinkMsg::Started { rank, os_pid }),
        (any::<u32>(), any::<u32>(), any::<u32>(), 0u8..4).prop_map(
            |(rank, os_pid, code, cause)| LinkMsg::Ended {
                rank,
                os_pid,
                code,
                cause: KillCause::from_code(cause).expect("0..4 are causes"),
            }
        ),
        Just(LinkMsg::Shutdown),
        any::<u32>().prop_map(|signal| LinkMsg::Signal { signal }),
        (any::<u32>(), any::<i32>(), text()).prop_map(|(rank, code, message)| {
            LinkMsg::Aborted {
                rank,
                code,
                message,
            }
        }),
    ]
    .boxed()
}

proptest! {
    /// LINK-1: every control message survives the wire unchanged.
    #[test]
    fn link_messages_round_trip(m in link_msg()) {
        prop_assert_eq!(decode_link(&encode_link(&m)).unwrap(), m);
    }

    /// Peer input never panics: arbitrary bytes give a message or a typed error.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..256)) {
        let _ = decode_link(&bytes);
    }

    /// Mutated valid frames give a message or a typed error, never a panic.
    #[test]
    fn mutated_frames_never_panic(m in link_msg(), at in any::<usize>(), to in any::<u8>()) {
        let mut f = encode_link(&m);
        let i = at % f.len();
        f[i] = to;
        let _ = decode_link(&f);
    }
}

#[test]
fn every_control_message_has_its_documented_type() {
    let ty = |f: Vec<u8>| u16::from_be_bytes([f[3], f[4]]);
    let setup = LinkMsg::Setup(Box::new(NodeSetup {
        node: 1,
        job: "j".into(),
        namespace: "job-j".into(),
        app: "app".into(),
        program: "/bin/true".into(),
        args: vec![],
        node_addr: "10.0.0.2".into(),
        shm_spins: 0,
        heartbeat_ms: 1000,
        cwd: "/home/u/run".into(),
        cwd_required: false,
        env: vec![("OMP_NUM_THREADS".into(), "4".into())],
        bind_core: true,
        tag_output: true,
        timestamp_output: false,
        output_dir: String::new(),
        pmix: Some(PmixSetup {
            namespace: "job-j-0123".into(),
            universe: 8,
            nodes: vec!["a".into(), "b".into()],
            placement: vec![0, 0, 1, 1],
        }),
    }));
    let cases = [
        (setup, 0x0501),
        (LinkMsg::Heartbeat, 0x0502),
        (LinkMsg::Started { rank: 0, os_pid: 1 }, 0x0503),
        (
            LinkMsg::Ended {
                rank: 0,
                os_pid: 1,
                code: 137,
                cause: KillCause::NodeEnding,
            },
            0x0504,
        ),
        (LinkMsg::Shutdown, 0x0505),
        (LinkMsg::Signal { signal: 10 }, 0x0506),
        (
            LinkMsg::Aborted {
                rank: 3,
                code: -1,
                message: "bad input".into(),
            },
            0x0507,
        ),
    ];
    for (m, t) in cases {
        let f = encode_link(&m);
        assert_eq!(ty(f.clone()), t, "{m:?}");
        assert!(is_link_type(t));
    }
}

/// LINK-1: the link shares one stream with core's frames, so each decoder must refuse
/// the other's types instead of misreading them.
#[test]
fn link_and_core_frames_are_told_apart() {
    let exited = encode_to_master(&ToMaster::Exited {
        pid: ProcessId::new(Namespace::new("j"), 3),
    });
    assert!(!is_link_type(u16::from_be_bytes([exited[3], exited[4]])));
    assert!(matches!(
        decode_link(&exited),
        Err(WireError::UnknownType { msg_type: 0x0211 })
    ));
    let hb = encode_link(&LinkMsg::Heartbeat);
    assert!(matches!(
        decode_to_master(&hb),
        Err(WireError::UnknownType { msg_type: 0x0502 })
    ));
    assert!(matches!(
        decode_to_daemon(&hb),
        Err(WireError::UnknownType { msg_type: 0x0502 })
    ));
}

#[test]
fn malformed_control_messages_are_typed_errors() {
    // A heartbeat with a body: trailing bytes.
    let mut f = Vec::new();
    encode_frame(&mut f, 0x0502, |b| b.push(0));
    assert!(matches!(
        decode_link(&f),
        Err(WireError::TrailingBytes { extra: 1 })
    ));
    // `Ended` whose kill cause is 7 (NODE-4: 0–3 only).
    let mut f = Vec::new();
    encode_frame(&mut f, 0x0504, |b| {
        b.extend_from_slice(&[0; 12]);
        b.push(7);
    });
    assert!(decode_link(&f).is_err());
    // A setup claiming more arguments than allowed.
    let mut f = Vec::new();
    encode_frame(&mut f, 0x0501, |b| {
        b.extend_from_slice(&0u32.to_be_bytes());
        for _ in 0..4 {
            b.extend_from_slice(&0u32.to_be_bytes()); // job, namespace, app, program
        }
        b.extend_from_slice(&(MAX_ARGS as u32 + 1).to_be_bytes());
    });
    assert!(matches!(
        decode_link(&f),
        Err(WireError::OverLimit {
            what: "arguments",
            ..
        })
    ));
    // An unassigned type in the link's range.
    let mut f = Vec::new();
    encode_frame(&mut f, 0x05ff, |_| {});
    assert!(matches!(
        decode_link(&f),
        Err(WireError::UnknownType { msg_type: 0x05ff })
    ));
}
