//! Behaviour that `verification/nightly.sh`'s cargo-mutants run found untested
//! (spec/verification.md §7): each test names the mutant it catches.

use dynres_core::pset::{AttrUpdate, MemberSet, Origin, PsetName, PsetOp, PsetRegistry, SetOp};
use dynres_core::{Namespace, ProcessId};

fn members(s: &MemberSet) -> Vec<u32> {
    s.iter().collect()
}

/// `members.rs` `MemberSet::remove`: `*word & bit != 0` → `*word | bit != 0` made every
/// index of an allocated word look present.
#[test]
fn removing_a_non_member_of_an_allocated_word_changes_nothing() {
    let mut s: MemberSet = [0, 2, 70].into_iter().collect();
    assert!(!s.remove(1), "1 was never a member");
    assert!(
        !s.remove(71),
        "71 shares a word with 70 but was never a member"
    );
    assert_eq!(s.len(), 3);
    assert_eq!(members(&s), [0, 2, 70]);
    assert!(s.remove(2));
    assert_eq!(s.len(), 2);
    assert_eq!(members(&s), [0, 70]);
}

/// `members.rs` `<MemberSet as Debug>::fmt`: `len > 16` → `len < 16` elided small sets
/// and printed large ones as if complete.
#[test]
fn debug_elides_only_past_sixteen_members() {
    let small: MemberSet = (0..3).collect();
    assert_eq!(format!("{small:?}"), "MemberSet(len=3, {0,1,2})");
    let sixteen = MemberSet::first_n(16);
    assert_eq!(
        format!("{sixteen:?}"),
        "MemberSet(len=16, {0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15})"
    );
    let big = MemberSet::first_n(17);
    assert_eq!(
        format!("{big:?}"),
        "MemberSet(len=17, {0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,…})"
    );
}

/// `members.rs` `lowest_bits`: `word & !rest` → `word ^ !rest` handed a part that ends
/// inside a word every bit outside the word's remaining members.
#[test]
fn split_inside_a_word_hands_out_exactly_the_lowest_members() {
    let s: MemberSet = [1, 3, 4, 9, 40, 63, 64, 130].into_iter().collect();
    let parts = s.split_sizes(&[2, 3, 1, 2]).expect("sizes add up");
    let got: Vec<Vec<u32>> = parts.iter().map(members).collect();
    assert_eq!(got, [vec![1, 3], vec![4, 9, 40], vec![63], vec![64, 130]]);
    for (p, want) in parts.iter().zip([2, 3, 1, 2]) {
        assert_eq!(p.len(), want);
    }
    // Parts are sets like any other: equal to the same members built one by one.
    assert_eq!(parts[1], [4, 9, 40].into_iter().collect::<MemberSet>());
}

fn name(s: &str) -> PsetName {
    PsetName::parse(s).expect("valid pset name")
}

/// `registry.rs` `PsetRegistry::is_pruned` → `true`: a live pset and a name never used
/// are not pruned; only a pruned one is (PSET-35).
#[test]
fn only_pruned_psets_read_as_pruned() {
    let pid = |rank| ProcessId::new(Namespace::new("job"), rank);
    let mut reg = PsetRegistry::new();
    reg.start_job(&[("app1", &[pid(0), pid(1), pid(2)])])
        .expect("job starts");
    let app1 = Origin::process("app1", pid(0));
    reg.apply(
        &app1,
        &PsetOp::Set {
            op: SetOp::Union,
            pset1: name("mpi://app/app1"),
            pset2: name("mpi://SELF"),
            target: Some(name("mpi://app/app1/x")),
            attrs: AttrUpdate::none(),
        },
    )
    .expect("union creates x");
    assert!(!reg.is_pruned(&name("mpi://app/app1")), "mandatory, live");
    assert!(!reg.is_pruned(&name("mpi://app/app1/x")), "live");
    assert!(
        !reg.is_pruned(&name("mpi://app/app1/never")),
        "never created"
    );
    reg.prune(&app1, &name("mpi://app/app1/x"))
        .expect("x prunable");
    assert!(reg.is_pruned(&name("mpi://app/app1/x")));
    assert!(!reg.is_pruned(&name("mpi://app/app1")));
}

/// `query.rs` `delta_epoch` → `1`: the epoch is read from the delta's name (`PSET-4`).
#[test]
fn delta_epoch_reads_the_name() {
    use dynres_core::rc::query::delta_epoch;
    assert_eq!(delta_epoch(&name("mpi://rte/app/rc/7")), 7);
    assert_eq!(delta_epoch(&name("mpi://rte/app/rc/1")), 1);
    assert_eq!(delta_epoch(&name("mpi://rte/other/rc/12345")), 12345);
    assert_eq!(delta_epoch(&name("mpi://app/app/x")), 0, "not a delta");
}

/// `table.rs` `ProcessTable::is_empty` → `true`: a table with an entered process is not
/// empty.
#[test]
fn a_process_table_with_an_entry_is_not_empty() {
    use dynres_core::pset::ProcessTable;
    let mut t = ProcessTable::new();
    assert!(t.is_empty());
    let p = ProcessId::new(Namespace::new("job"), 4);
    assert_eq!(t.intern(&p), Some(0));
    assert!(!t.is_empty());
    assert_eq!(t.len(), 1);
}

/// `spawn/port.rs` `Ports::open_port`: `len > MAX_ADDR` → `len == MAX_ADDR` refused the
/// longest valid address (64 bytes) and accepted longer ones.
#[test]
fn a_port_takes_addresses_of_up_to_64_bytes() {
    use dynres_core::spawn::{Addr, Bootstrap, Ports};
    let mut ports = Ports::new();
    let longest = Addr(vec![7; 64]);
    assert!(
        ports
            .open_port(
                longest.clone(),
                longest.clone(),
                Bootstrap::Stream,
                crate::KEY
            )
            .is_ok()
    );
    let too_long = Addr(vec![7; 65]);
    assert!(
        ports
            .open_port(
                too_long.clone(),
                longest.clone(),
                Bootstrap::Stream,
                crate::KEY
            )
            .is_err()
    );
    assert!(
        ports
            .open_port(longest, too_long, Bootstrap::Datagram, crate::KEY)
            .is_err()
    );
}

/// `rc/wire/errors.rs`: deleting the `CODE_NOT_GRANTED` arm made `NotGranted { slots }`
/// undecodable. Every reply may carry it.
#[test]
fn not_granted_crosses_the_wire() {
    use dynres_core::rc::wire::{decode_reply, encode_reply};
    use dynres_core::rc::{ClientReply, RcError};
    let reply = ClientReply::Lookup(Err(RcError::NotGranted { slots: 12 }));
    let frame = encode_reply(5, &reply);
    assert_eq!(decode_reply(&frame), Ok((5, reply)));
}

/// The port and handshake configuration of the root of a group of `size` (rank `r`'s
/// endpoint is `[r + 1]`), as the spawn tests here set them up.
fn root_config(
    port: &str,
    group_id: u64,
    size: u32,
    context_id: u32,
) -> (
    dynres_core::spawn::PortName,
    dynres_core::spawn::HandshakeConfig,
) {
    use dynres_core::spawn::{Addr, GroupHeader, HandshakeConfig, PortName};
    let header = GroupHeader {
        group_id,
        size,
        context_id,
    };
    let endpoints = (1..=size).map(|r| Addr(vec![r as u8])).collect();
    let port = PortName::parse(port).expect("valid port");
    (port, HandshakeConfig::new(header, endpoints))
}

/// `spawn/handshake.rs` `Handshake::error`: deleting the `Some(Err(e))` arm hid why a
/// failed handshake failed. A connect nobody answers gives up after its retries, and
/// says so.
#[test]
fn a_failed_handshake_reports_its_error() {
    use dynres_core::Instant;
    use dynres_core::spawn::{Handshake, Input, Phase, SpawnError};
    let (port, cfg) = root_config(
        "dynres:2:hybrid-4:d0:50:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        7,
        2,
        1,
    );
    let mut hs = Handshake::connect(Instant(0), port, cfg).expect("valid config");
    assert_eq!(hs.error(), None);
    // Nobody answers: feed every timeout the machine asks for until it gives up.
    for _ in 0..10_000 {
        let Some(at) = hs.poll_timeout() else { break };
        let _ = hs.handle(at, Input::Timeout);
        if hs.phase() == Phase::Failed {
            break;
        }
    }
    assert_eq!(hs.phase(), Phase::Failed);
    assert!(
        matches!(hs.error(), Some(SpawnError::PeerUnreachable { .. })),
        "{:?}",
        hs.error()
    );
}

/// `spawn/datagram.rs` `Reliable::all_acked` → `true`: a message stays unacknowledged,
/// and its segments due for retransmission, until the receiver acknowledged every
/// segment (`SPAWN-13`), not just some.
#[test]
fn a_message_is_acknowledged_only_once_every_segment_is() {
    use dynres_core::Instant;
    use dynres_core::spawn::DatagramConfig;
    use dynres_core::spawn::datagram::Reliable;
    let cfg = DatagramConfig::default();
    let mut a = Reliable::new(7, cfg, crate::KEY, dynres_core::spawn::Role::Initiator);
    let mut b = Reliable::new(7, cfg, crate::KEY, dynres_core::spawn::Role::Acceptor);
    assert!(a.all_acked(), "nothing sent yet");
    // Three segments: two full ones and one byte.
    let msg = vec![5u8; 2 * a.payload_per_segment() + 1];
    a.send(Instant(0), &msg).expect("fits the segment limit");
    assert!(!a.all_acked(), "sent, nothing acknowledged");
    let frames: Vec<Vec<u8>> = core::iter::from_fn(|| a.poll_send()).collect();
    assert_eq!(frames.len(), 3);
    // The receiver gets (and acknowledges) the first two segments only.
    for f in &frames[..2] {
        b.on_datagram(f).expect("well-formed segment");
    }
    for ack in core::iter::from_fn(|| b.poll_send()) {
        a.on_datagram(&ack).expect("well-formed ack");
    }
    assert!(!a.all_acked(), "the last segment is unacknowledged");
    assert!(
        a.next_deadline().is_some(),
        "and still due for retransmission"
    );
    b.on_datagram(&frames[2]).expect("well-formed segment");
    assert_eq!(b.poll_recv(), Some(msg));
    for ack in core::iter::from_fn(|| b.poll_send()) {
        a.on_datagram(&ack).expect("well-formed ack");
    }
    assert!(a.all_acked());
    assert_eq!(a.next_deadline(), None);
}

/// A datagram from session 9's initiator carrying its whole Hello (group 9 of one
/// process) as segment 0 of `count` of session `segment_session`.
fn hello_segment(segment_session: u64, count: u16) -> Vec<u8> {
    use dynres_core::spawn::datagram::{DgramFrame, Segment};
    use dynres_core::spawn::{GroupHeader, HsMsg};
    let hello = HsMsg::Hello {
        session: 9,
        header: GroupHeader {
            group_id: 9,
            size: 1,
            context_id: 7,
        },
    };
    DgramFrame::Segment(Segment {
        session: segment_session,
        msg_seq: 0,
        index: 0,
        count,
        payload: hello.encode(),
    })
    .encode(&crate::KEY, dynres_core::spawn::Role::Initiator)
}

/// `spawn/handshake.rs` `Handshake::on_datagram`: the guard `s.count == 1` → `true` let
/// a listening acceptor open a session on the first segment of a multi-segment message.
/// A Hello is always one segment, so anything else from a stranger is refused and leaves
/// the listener unchanged (`SPAWN-10`), free to answer the real initiator's Hello.
#[test]
fn a_listener_opens_a_session_only_on_a_one_segment_hello() {
    use dynres_core::Instant;
    use dynres_core::spawn::{Addr, Handshake, Input, Output, Phase, SpawnError};
    let (port, cfg) = root_config(
        "dynres:2:dgram:d000:5000:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        1,
        2,
        7,
    );
    let mut hs = Handshake::accept(Instant(0), port, cfg).expect("valid config");
    while hs.poll_output().is_some() {}
    // The whole Hello, but labelled as the first of two segments.
    let segment = |count| hello_segment(9, count);
    let before = hs.clone();
    let stranger = Input::Datagram {
        from: Addr(vec![0xee]),
        bytes: segment(2),
    };
    let r = hs.handle(Instant(1), stranger);
    assert!(matches!(r, Err(SpawnError::Unexpected { .. })), "{r:?}");
    assert_eq!(hs, before, "no state kept for a stranger");
    assert_eq!(hs.poll_output(), None, "not even an acknowledgement");
    let peer = Addr(vec![0xd0]);
    let initiator = Input::Datagram {
        from: peer.clone(),
        bytes: segment(1),
    };
    hs.handle(Instant(2), initiator)
        .expect("a one-segment Hello opens the session");
    assert_eq!(hs.session(), Some(9));
    assert_ne!(hs.phase(), Phase::Listening);
    let outs: Vec<Output> = core::iter::from_fn(|| hs.poll_output()).collect();
    assert!(
        outs.iter()
            .any(|o| matches!(o, Output::SendDatagram { to, .. } if *to == peer)),
        "answered the initiator: {outs:?}"
    );
}

/// `slots.rs` `SlotMap::victims_where`: `k > running` → `k >= running` refused a SUB of
/// every eligible process. A SUB of `k` takes the processes on the `k` highest occupied
/// slots, skipping those already leaving (`SLOT-2`); it is refused only when fewer than
/// `k` are left.
#[test]
fn victims_may_be_every_process_not_yet_leaving() {
    use dynres_core::slots::{NodeSpec, SlotError, SlotMap};
    let pid = |rank| ProcessId::new(Namespace::new("job"), rank);
    let node = |name: &str| NodeSpec {
        name: name.into(),
        slots: 2,
    };
    let mut slots = SlotMap::new(vec![node("n0"), node("n1")]);
    slots
        .place(&[pid(0), pid(1), pid(2), pid(3)])
        .expect("four slots for four processes");
    slots.mark_leaving(&[pid(3)]).expect("pid 3 is placed");
    assert_eq!(slots.victims(3), Ok(vec![pid(2), pid(1), pid(0)]));
    assert_eq!(
        slots.victims(4),
        Err(SlotError::TooFewProcesses {
            wanted: 4,
            running: 3
        })
    );
    // Among one application's processes (here the even ranks) alike.
    let even = |p: &ProcessId| p.rank % 2 == 0;
    assert_eq!(slots.victims_where(2, even), Ok(vec![pid(2), pid(0)]));
    assert!(slots.victims_where(3, even).is_err());
}

/// `process.rs` `<Namespace as Display>::fmt` → `Ok(())` printed no namespace. A process
/// prints as `namespace:rank`, and the refusal of a SPLIT colouring a non-member
/// (`PSET-36`) names that process so.
#[test]
fn a_refused_colouring_names_the_process() {
    use dynres_core::pset::{PsetError, SplitBy};
    let pid = |rank| ProcessId::new(Namespace::new("job-7"), rank);
    assert_eq!(Namespace::new("job-7").to_string(), "job-7");
    assert_eq!(pid(9).to_string(), "job-7:9");
    let mut reg = PsetRegistry::new();
    reg.start_job(&[("app1", &[pid(0), pid(1)]), ("app2", &[pid(9)])])
        .expect("job starts");
    let err = reg
        .apply(
            &Origin::process("app1", pid(0)),
            &PsetOp::Split {
                pset: name("mpi://app/app1"),
                by: SplitBy::Colours(vec![(pid(0), 1), (pid(9), 2)]),
                targets: vec![],
                attrs: AttrUpdate::none(),
            },
        )
        .expect_err("pid 9 is not a member of app1");
    assert!(matches!(&err, PsetError::Process { pid: p, .. } if *p == pid(9)));
    assert_eq!(
        err.to_string(),
        "process job-7:9 is not a member of the pset being split"
    );
}

/// `spawn/join.rs` `Join::step`: `MAX_HELD + 1` → `MAX_HELD - 1` in the refusal of one
/// input too many held before the peer's port arrived. Held inputs are bounded; the
/// refusal is a typed error whose count is the one past the limit, and it leaves the
/// join unchanged (`SPAWN-10`).
#[test]
fn a_join_refuses_inputs_past_its_held_limit() {
    use dynres_core::Instant;
    use dynres_core::spawn::{Input, Join, SpawnError};
    use dynres_core::wire::WireError;
    let (port, cfg) = root_config(
        "dynres:2:stream:d000:5000:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        3,
        1,
        1,
    );
    let mut j = Join::new(Instant(0), port, cfg).expect("a singleton may join");
    // Bootstrap stream bytes before the peer's port: held until the roles are known.
    let early = || Input::Stream { bytes: vec![0xab] };
    let mut held: u64 = 0;
    let err = loop {
        let before = j.clone();
        match j.handle(Instant(1), early().into()) {
            Ok(()) => held += 1,
            Err(e) => {
                assert_eq!(j, before, "a refused input changes nothing");
                break e;
            }
        }
        assert!(held <= 4096, "held inputs are bounded");
    };
    assert!(held > 0, "inputs before the port are held, not refused");
    assert_eq!(
        err,
        SpawnError::Wire(WireError::OverLimit {
            what: "inputs held before the join port",
            value: held + 1,
            max: held,
        })
    );
}

/// `pset/ops.rs` `PsetRegistry::apply_one`: deleting the `results` field of NULL's
/// outcome (leaving the default, no result) hid which pset a NULL updated. NULL names its
/// target as its one result and leaves members and version alone (`PSET-33`).
#[test]
fn null_reports_its_target_as_its_result() {
    let pid = |rank| ProcessId::new(Namespace::new("job"), rank);
    let mut reg = PsetRegistry::new();
    reg.start_job(&[("app1", &[pid(0), pid(1)])])
        .expect("job starts");
    let root = name("mpi://app/app1");
    let before = reg.get(&root).expect("live").clone();
    let out = reg
        .apply(
            &Origin::process("app1", pid(0)),
            &PsetOp::Null {
                target: root.clone(),
                attrs: AttrUpdate::none(),
            },
        )
        .expect("the application may update its root");
    assert_eq!(out.results, std::slice::from_ref(&root));
    assert!(out.recursive.is_empty() && out.pruned.is_empty());
    let after = reg.get(&root).expect("live");
    assert_eq!(after.members, before.members);
    assert_eq!(after.attrs.version, before.attrs.version);
}

/// `pset/ops.rs` `PsetRegistry::apply_split`: deleting `version: 0` from the parts'
/// attributes let them inherit the split pset's version. Parts inherit `S`'s attributes
/// at version 0 (`PSET-36`), whatever version `S` had reached.
#[test]
fn split_parts_start_at_version_zero() {
    use dynres_core::pset::SplitBy;
    let pid = |rank| ProcessId::new(Namespace::new("job"), rank);
    let mut reg = PsetRegistry::new();
    reg.start_job(&[("app1", &[pid(0), pid(1), pid(2), pid(3)])])
        .expect("job starts");
    let app1 = Origin::process("app1", pid(0));
    let root = name("mpi://app/app1");
    // The root without its caller, in place: its members change, so its version rises
    // (PSET-10).
    reg.apply(
        &app1,
        &PsetOp::Set {
            op: SetOp::Difference,
            pset1: root.clone(),
            pset2: name("mpi://SELF"),
            target: Some(root.clone()),
            attrs: AttrUpdate::none(),
        },
    )
    .expect("the root shrinks");
    let v = reg.get(&root).expect("live").attrs.version;
    assert!(v > 0, "the root has a new version");
    let out = reg
        .apply(
            &app1,
            &PsetOp::Split {
                pset: root.clone(),
                by: SplitBy::Sizes(vec![1, 2]),
                targets: vec![],
                attrs: AttrUpdate::none(),
            },
        )
        .expect("the root splits in two");
    assert_eq!(out.results.len(), 2);
    for part in &out.results {
        assert_eq!(reg.get(part).expect("live").attrs.version, 0, "{part}");
    }
}

/// `name.rs` `PsetName::parse`: the guard `ch != '/'` → `true` reported an empty app
/// segment (`mpi://app//x`) as a bad character `/` instead of a missing app name.
#[test]
fn an_empty_app_segment_is_a_missing_app_not_a_bad_character() {
    use dynres_core::pset::NameError;
    // "mpi://app/" is 10 bytes: the app name would start at byte 10.
    assert_eq!(
        PsetName::parse("mpi://app//x"),
        Err(NameError::MissingApp { at: 10 })
    );
    // A character no segment may hold is reported as such, where it is.
    assert_eq!(
        PsetName::parse("mpi://app/!x"),
        Err(NameError::BadChar { ch: '!', at: 10 })
    );
}

/// `spawn/join.rs` `Join::error` → `None` hid why a join failed. A join whose peer
/// wrote the same port fails with `JoinSamePort` (`SPAWN-14`); one whose peer never
/// wrote its port fails at the deadline in the join exchange (`SPAWN-8`); each says so.
#[test]
fn a_failed_join_reports_its_error() {
    use dynres_core::Instant;
    use dynres_core::spawn::{Input, Join, JoinInput, Output, Phase, SpawnError};
    let (port, cfg) = root_config(
        "dynres:2:stream:d0:50:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        3,
        1,
        1,
    );

    let mut j = Join::new(Instant(0), port.clone(), cfg.clone()).expect("a singleton may join");
    assert_eq!(j.error(), None);
    // The peer's JoinPort is this end's own: both ends hold the same port.
    let Some(Output::SendJoin { bytes }) = j.poll_output() else {
        panic!("a join first writes its port");
    };
    j.handle(Instant(1), JoinInput::JoinStream { bytes })
        .expect("a well-formed port");
    assert_eq!(j.error(), Some(&SpawnError::JoinSamePort));

    let mut j = Join::new(Instant(0), port, cfg).expect("a singleton may join");
    let deadline = j.poll_timeout().expect("the join exchange has a deadline");
    j.handle(deadline, Input::Timeout.into())
        .expect("a timeout is taken");
    assert_eq!(
        j.error(),
        Some(&SpawnError::Timeout {
            phase: Phase::JoinExchange
        })
    );
}

/// `spawn/join.rs` `Join::fingerprint` → 0: the state fingerprint of a join's trace
/// lines (spec/verification.md §6) tells its states apart, so a replay notices a join
/// that took a different step (here: deciding the roles, `SPAWN-14`); it leaves out the
/// outputs not yet drained.
#[test]
fn a_join_fingerprint_follows_its_state() {
    use dynres_core::Instant;
    use dynres_core::spawn::{Join, JoinInput, Output};
    let (low, low_cfg) = root_config(
        "dynres:2:stream:d0:50:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        3,
        1,
        1,
    );
    let (high, high_cfg) = root_config(
        "dynres:2:stream:d1:51:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        4,
        1,
        1,
    );
    let mut j = Join::new(Instant(0), low, low_cfg).expect("a singleton may join");
    let fresh = j.fingerprint();
    assert_eq!(j.fingerprint(), fresh, "the same state");
    assert!(matches!(j.poll_output(), Some(Output::SendJoin { .. })));
    assert_eq!(j.fingerprint(), fresh, "draining outputs is not a step");
    let mut peer = Join::new(Instant(0), high, high_cfg).expect("a singleton may join");
    let Some(Output::SendJoin { bytes }) = peer.poll_output() else {
        panic!("a join first writes its port");
    };
    j.handle(Instant(1), JoinInput::JoinStream { bytes })
        .expect("the peer's port");
    assert!(j.handshake().is_some(), "the roles are decided");
    assert_ne!(j.fingerprint(), fresh, "the handshake is state");
}

/// `spawn/join.rs` `Join::on_join_bytes`: the planted-bug guard `JoinCompareTags` →
/// `true` decided the roles by the ports' tags. Two processes' first ports both have tag
/// 0; the ends still take opposite roles, the lower port string accepting (`SPAWN-14`).
#[test]
fn a_join_of_two_first_ports_orders_them_by_their_text() {
    use dynres_core::Instant;
    use dynres_core::spawn::{Join, JoinInput, Output, Role};
    let (low, low_cfg) = root_config(
        "dynres:2:dgram:d0:50:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        3,
        1,
        1,
    );
    let (high, high_cfg) = root_config(
        "dynres:2:dgram:d1:51:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        4,
        1,
        1,
    );
    assert_eq!((low.tag, high.tag), (0, 0), "each its process's first port");
    let mut a = Join::new(Instant(0), low, low_cfg).expect("a singleton may join");
    let mut b = Join::new(Instant(0), high, high_cfg).expect("a singleton may join");
    let port_of = |j: &mut Join| match j.poll_output() {
        Some(Output::SendJoin { bytes }) => bytes,
        other => panic!("a join first writes its port: {other:?}"),
    };
    let (to_b, to_a) = (port_of(&mut a), port_of(&mut b));
    a.handle(Instant(1), JoinInput::JoinStream { bytes: to_a })
        .expect("the peer's port");
    b.handle(Instant(1), JoinInput::JoinStream { bytes: to_b })
        .expect("the peer's port");
    let role = |j: &Join| j.handshake().map(|h| h.role());
    assert_eq!(role(&a), Some(Role::Acceptor), "the lower port accepts");
    assert_eq!(role(&b), Some(Role::Initiator));
}

/// A parent spawning 3 children (group 8) on a datagram port, as its `new` leaves it.
fn listening_parent() -> dynres_core::spawn::SpawnParent {
    spawn_parent(3).expect("a valid spawn")
}

/// A parent spawning `maxprocs` children (group 8) on a datagram port, or why not.
fn spawn_parent(
    maxprocs: u32,
) -> Result<dynres_core::spawn::SpawnParent, dynres_core::spawn::SpawnError> {
    use dynres_core::spawn::{SpawnConfig, SpawnParent};
    use dynres_core::{Instant, Namespace};
    let (port, handshake) = root_config(
        "dynres:2:dgram:d0:50:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        7,
        2,
        1,
    );
    SpawnParent::new(
        Instant(0),
        SpawnConfig {
            handshake,
            port,
            maxprocs,
            child_namespace: Namespace::new("kids"),
            child_group_id: 8,
            key: crate::KEY,
        },
    )
}

/// `spawn/parent.rs` `SpawnParent::handle`: `&&` → `||` before the planted-bug switch
/// `RelaunchOnTimeout` launched the children again whenever the parent's timer fired
/// while it listened. A spawn launches exactly once (`SPAWN-3`); at its deadline, with
/// no child having connected, it fails and kills the children once (`SPAWN-8`).
#[test]
fn a_spawn_launches_once_however_its_timer_fires() {
    use dynres_core::spawn::{Input, Output, Phase, SpawnError};
    let mut p = listening_parent();
    let mut outputs = Vec::new();
    // Feed every timeout the parent asks for until it stops asking.
    for _ in 0..10_000 {
        while let Some(o) = p.poll_output() {
            outputs.push(o);
        }
        let Some(at) = p.poll_timeout() else { break };
        p.handle(at, Input::Timeout.into())
            .expect("a timeout is taken");
    }
    let launches = outputs
        .iter()
        .filter(|o| matches!(o, Output::Launch { .. }))
        .count();
    let kills = outputs
        .iter()
        .filter(|o| matches!(o, Output::Kill { .. }))
        .count();
    assert_eq!((launches, kills), (1, 1), "{outputs:?}");
    assert!(outputs.contains(&Output::Failed(SpawnError::Timeout {
        phase: Phase::Listening
    })));
}

/// `pset/ops.rs` `PsetRegistry::result_name`: the runtime's guard `t.domain() == Rte &&
/// !t.is_delta()` → `true` let a runtime request name its result anywhere. The runtime
/// names results in `mpi://rte/` (not as a delta pset, whose names follow the epoch
/// counter, `PSET-5`) or as a new version of an existing pset; an unknown application
/// name is refused (`PSET-31`, `PSET-6`).
#[test]
fn the_runtime_names_results_only_in_rte_or_as_existing_psets() {
    use dynres_core::pset::PsetError;
    let mut reg = PsetRegistry::new();
    let pid = |r| ProcessId::new(Namespace::new("job"), r);
    let procs: Vec<ProcessId> = (0..3).map(pid).collect();
    reg.start_job(&[("app1", &procs)]).unwrap();
    let union = |target: &str| PsetOp::Set {
        op: SetOp::Union,
        pset1: PsetName::parse("mpi://app/app1").unwrap(),
        pset2: PsetName::parse("mpi://app/app1").unwrap(),
        target: Some(PsetName::parse(target).unwrap()),
        attrs: AttrUpdate::none(),
    };
    for refused in ["mpi://app/app1/mine", "mpi://rte/app1/rc/7"] {
        assert!(
            matches!(
                reg.apply(&Origin::Runtime, &union(refused)),
                Err(PsetError::NotPermitted { .. })
            ),
            "{refused}"
        );
    }
    assert!(
        reg.apply(&Origin::Runtime, &union("mpi://rte/app1/copy"))
            .is_ok()
    );
    assert_eq!(
        reg.members(
            &Origin::Runtime,
            &PsetName::parse("mpi://rte/app1/copy").unwrap()
        )
        .unwrap()
        .len(),
        3
    );
}

/// `spawn/handshake.rs` `Handshake::check_header`: `&&` → `||` let every group size
/// through. A group has 1 to 65536 (`MAX_GROUP`) processes; a Hello announcing 0, or
/// more than that, is a protocol violation, and the acceptor fails the attempt (`SPAWN-8`) instead of
/// expecting a table of that length.
#[test]
fn a_hello_with_an_impossible_group_size_fails_the_accept() {
    use dynres_core::Instant;
    use dynres_core::spawn::datagram::{DgramFrame, Segment};
    use dynres_core::spawn::msg::MAX_GROUP;
    use dynres_core::spawn::{Addr, GroupHeader, Handshake, HsMsg, Input, Phase, SpawnError};
    for size in [0, MAX_GROUP as u32 + 1] {
        let (port, cfg) = root_config(
            "dynres:2:dgram:d000:5000:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
            1,
            2,
            7,
        );
        let mut hs = Handshake::accept(Instant(0), port, cfg).expect("valid config");
        let hello = HsMsg::Hello {
            session: 9,
            header: GroupHeader {
                group_id: 9,
                size,
                context_id: 7,
            },
        }
        .encode();
        let bytes = DgramFrame::Segment(Segment {
            session: 9,
            msg_seq: 0,
            index: 0,
            count: 1,
            payload: hello,
        })
        .encode(&crate::KEY, dynres_core::spawn::Role::Initiator);
        let _ = hs.handle(
            Instant(1),
            Input::Datagram {
                from: Addr(vec![0xd0]),
                bytes,
            },
        );
        assert_eq!(hs.phase(), Phase::Failed, "size {size}");
        assert!(
            matches!(hs.error(), Some(SpawnError::Unexpected { .. })),
            "size {size}: {:?}",
            hs.error()
        );
    }
}

/// The datagrams among `outs`, as inputs from `from`.
fn datagrams_from(
    outs: &[dynres_core::spawn::Output],
    from: &dynres_core::spawn::Addr,
) -> Vec<dynres_core::spawn::Input> {
    use dynres_core::spawn::{Input, Output};
    outs.iter()
        .filter_map(|o| match o {
            Output::SendDatagram { bytes, .. } => Some(Input::Datagram {
                from: from.clone(),
                bytes: bytes.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// `spawn/datagram.rs` `Reliable::send_once` → `Ok(())` sent nothing: a root that gives
/// up on a datagram session sends the peer a best-effort `Abort` (`SPAWN-8`), and the
/// peer fails with the reason at once instead of waiting for its deadline.
#[test]
fn a_cancelled_datagram_root_tells_its_peer_with_an_abort() {
    use dynres_core::Instant;
    use dynres_core::spawn::{AbortReason, Addr, Handshake, Output, Phase, SpawnError};
    let (port, acc_cfg) = root_config(
        "dynres:2:dgram:d000:5000:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        1,
        2,
        7,
    );
    let (_, ini_cfg) = root_config(
        "dynres:2:dgram:d000:5000:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        2,
        2,
        7,
    );
    let initiator_addr = Addr(vec![0xd0]);
    let mut acc = Handshake::accept(Instant(0), port.clone(), acc_cfg).expect("valid config");
    let mut ini = Handshake::connect(Instant(0), port.clone(), ini_cfg).expect("valid config");
    let hello: Vec<Output> = core::iter::from_fn(|| ini.poll_output()).collect();
    for input in datagrams_from(&hello, &initiator_addr) {
        acc.handle(Instant(1), input)
            .expect("the initiator's Hello");
    }
    assert!(acc.session().is_some(), "the acceptor opened the session");
    // Drop the acceptor's answer: the initiator hears only what follows the cancel.
    while acc.poll_output().is_some() {}
    acc.cancel(SpawnError::Timeout {
        phase: Phase::Endpoints,
    });
    let outs: Vec<Output> = core::iter::from_fn(|| acc.poll_output()).collect();
    let abort = datagrams_from(&outs, &port.dgram);
    assert!(!abort.is_empty(), "an Abort datagram to the peer: {outs:?}");
    for input in abort {
        let _ = ini.handle(Instant(2), input);
    }
    assert_eq!(ini.phase(), Phase::Failed);
    assert_eq!(
        ini.error(),
        Some(&SpawnError::Aborted {
            reason: AbortReason::Cancelled
        })
    );
}

/// `spawn/handshake.rs` `Handshake::close_stream`: `stream_up && !stream_closed` → `||`
/// asked the driver to close a bootstrap stream that was never opened. A root on a
/// datagram port has no stream (spec/spawn.md §5: `CloseStream` closes the bootstrap
/// stream); when it fails (`SPAWN-8`) it emits `Failed` and no `CloseStream`.
#[test]
fn a_datagram_root_never_closes_a_stream() {
    use dynres_core::Instant;
    use dynres_core::spawn::{Handshake, Output, SpawnError};
    let (port, cfg) = root_config(
        "dynres:2:dgram:d000:5000:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        1,
        1,
        7,
    );
    let mut hs = Handshake::accept(Instant(0), port, cfg).expect("valid config");
    while hs.poll_output().is_some() {}
    hs.cancel(SpawnError::Config("given up"));
    let outs: Vec<Output> = core::iter::from_fn(|| hs.poll_output()).collect();
    assert_eq!(outs, [Output::Failed(SpawnError::Config("given up"))]);
}

/// `rc/wire/errors.rs` `clip`: an error detail longer than 4096 bytes whose 4096th byte
/// is inside a character is cut before that character (spec/wire.md: "encoders cut a
/// longer text at a character boundary"), so the peer accepts the frame.
#[test]
fn a_refused_detail_is_cut_before_a_character_on_the_limit() {
    use dynres_core::rc::wire::{decode_reply, encode_reply};
    use dynres_core::rc::{ClientReply, RcError};
    // One ASCII byte, then two-byte characters: byte 4096 is the second half of one.
    let detail = format!("a{}", "é".repeat(3000));
    let reply = ClientReply::Fence(Err(RcError::Refused { code: 4, detail }));
    let (_, back) = decode_reply(&encode_reply(3, &reply)).expect("within the limit");
    let ClientReply::Fence(Err(RcError::Refused { detail, .. })) = back else {
        panic!("a refused fence decodes as refused: {back:?}");
    };
    assert_eq!(detail.len(), 4095);
    assert_eq!(detail, format!("a{}", "é".repeat(2047)));
}

/// `pset/ops.rs` `PsetRegistry::apply_set`: `version: 0` deleted from the new pset's
/// attributes let a set operation's result inherit `pset1`'s version. A new pset starts
/// at version 0 (`PSET-10`), whatever version its operand has reached; only its other
/// attributes come from `pset1` (`PSET-31`).
#[test]
fn a_set_operation_result_starts_at_version_zero() {
    let mut reg = PsetRegistry::new();
    let pid = |r| ProcessId::new(Namespace::new("job"), r);
    let procs: Vec<ProcessId> = (0..3).map(pid).collect();
    reg.start_job(&[("app1", &procs)]).unwrap();
    let caller = Origin::process("app1", pid(0));
    let root = PsetName::parse("mpi://app/app1").unwrap();
    let set = |op, target: &PsetName| PsetOp::Set {
        op,
        pset1: root.clone(),
        pset2: PsetName::self_set(),
        target: Some(target.clone()),
        attrs: AttrUpdate::none(),
    };
    // The root, made inactive, loses rank 0: version 1.
    let inactive = PsetOp::Null {
        target: root.clone(),
        attrs: AttrUpdate::active(false),
    };
    reg.apply(&caller, &inactive).unwrap();
    reg.apply(&caller, &set(SetOp::Difference, &root)).unwrap();
    assert_eq!(reg.get(&root).unwrap().attrs.version, 1);
    let copy = PsetName::parse("mpi://app/app1/copy").unwrap();
    reg.apply(&caller, &set(SetOp::Union, &copy)).unwrap();
    let made = reg.get(&copy).unwrap();
    assert_eq!(made.attrs.version, 0, "a new pset starts at version 0");
    assert!(!made.attrs.active, "the rest is inherited from pset1");
}

/// The bytes of every `SendStream` among `outs`, in order.
fn stream_bytes(outs: &[dynres_core::spawn::Output]) -> Vec<u8> {
    use dynres_core::spawn::Output;
    outs.iter()
        .filter_map(|o| match o {
            Output::SendStream { bytes } => Some(bytes.as_slice()),
            _ => None,
        })
        .flatten()
        .copied()
        .collect()
}

/// `spawn/handshake.rs` `Handshake::on_endpoints`: `remote_endpoints.is_some() || phase
/// != Endpoints` → `&&` took the peer's table again. Over a stream, an initiator that
/// has the acceptor's table and is waiting for its `EndpointsAck` (`SPAWN-16`) ignores a
/// repeated `Endpoints` (`SPAWN-11`: a duplicate changes nothing, and is not acknowledged
/// again), and completes with the table it took first.
#[test]
fn a_repeated_endpoint_table_changes_nothing() {
    use dynres_core::Instant;
    use dynres_core::spawn::{Addr, Handshake, HsMsg, Input, Output, Phase};
    let (port, acc_cfg) = root_config(
        "dynres:2:stream:d0:50:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        1,
        2,
        7,
    );
    let (_, ini_cfg) = root_config(
        "dynres:2:stream:d0:50:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        2,
        2,
        7,
    );
    let mut acc = Handshake::accept(Instant(0), port.clone(), acc_cfg).expect("valid config");
    let mut ini = Handshake::connect(Instant(0), port, ini_cfg).expect("valid config");
    let drain = |hs: &mut Handshake| core::iter::from_fn(|| hs.poll_output()).collect::<Vec<_>>();
    drain(&mut acc);
    let hello = stream_bytes(&drain(&mut ini));
    acc.handle(Instant(1), Input::Stream { bytes: hello })
        .expect("the initiator's Hello");
    // The acceptor's HelloAck and its table; the initiator answers with its own table
    // and acknowledges the acceptor's.
    let answer = stream_bytes(&drain(&mut acc));
    ini.handle(Instant(2), Input::Stream { bytes: answer })
        .expect("the acceptor's HelloAck and table");
    let tables = stream_bytes(&drain(&mut ini));
    assert_eq!(
        ini.phase(),
        Phase::Endpoints,
        "waiting for the acceptor's ack"
    );
    let before = ini.fingerprint();
    let again = HsMsg::Endpoints {
        session: ini.session().expect("a session"),
        endpoints: vec![Addr(vec![1]), Addr(vec![2])],
    }
    .seal(&crate::KEY, dynres_core::spawn::Role::Acceptor);
    ini.handle(Instant(3), Input::Stream { bytes: again })
        .expect("a duplicate is harmless");
    assert_eq!(drain(&mut ini), [], "nothing sent for a duplicate");
    assert_eq!(ini.fingerprint(), before, "nor any state changed");
    acc.handle(Instant(4), Input::Stream { bytes: tables })
        .expect("the initiator's table and ack");
    let ack = stream_bytes(&drain(&mut acc));
    ini.handle(Instant(5), Input::Stream { bytes: ack })
        .expect("the acceptor's ack");
    assert_eq!(ini.phase(), Phase::Done);
    let outs = drain(&mut ini);
    assert!(
        outs.iter().any(|o| matches!(o, Output::Ready(ig)
            if ig.remote_endpoints == [Addr(vec![1]), Addr(vec![2])])),
        "{outs:?}"
    );
}

/// `pset/name.rs` `PsetName::parse`: `len > MAX_NAME_LEN` → `>=` refused a name of
/// exactly the limit. A name of up to 255 bytes is valid, one byte more is `TooLong`
/// (`PSET-1`).
#[test]
fn a_pset_name_of_exactly_the_limit_parses() {
    use dynres_core::pset::{MAX_NAME_LEN, MAX_SEGMENT_LEN, NameError};
    // Segments of at most MAX_SEGMENT_LEN bytes, up to exactly MAX_NAME_LEN in all.
    let mut at_limit = String::from("mpi://app/a");
    while at_limit.len() < MAX_NAME_LEN {
        let room = (MAX_NAME_LEN - at_limit.len() - 1).min(MAX_SEGMENT_LEN);
        at_limit.push('/');
        at_limit.push_str(&"x".repeat(room.max(1)));
    }
    assert_eq!(at_limit.len(), MAX_NAME_LEN);
    assert!(PsetName::parse(&at_limit).is_ok());
    let over = format!("{at_limit}x");
    assert_eq!(
        PsetName::parse(&over),
        Err(NameError::TooLong {
            len: MAX_NAME_LEN + 1
        })
    );
}

/// Runs an acceptor and an initiator on one stream port until neither has anything left
/// to say, handing each the other's stream bytes; returns both and every output each
/// produced.
fn stream_handshake_to_the_end() -> (
    dynres_core::spawn::Handshake,
    dynres_core::spawn::Handshake,
    Vec<dynres_core::spawn::Output>,
    Vec<dynres_core::spawn::Output>,
) {
    use dynres_core::Instant;
    use dynres_core::spawn::{Handshake, Input};
    let (port, acc_cfg) = root_config(
        "dynres:2:stream:d0:50:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        1,
        2,
        7,
    );
    let (_, ini_cfg) = root_config(
        "dynres:2:stream:d0:50:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        2,
        3,
        7,
    );
    let mut acc = Handshake::accept(Instant(0), port.clone(), acc_cfg).expect("valid config");
    let mut ini = Handshake::connect(Instant(0), port, ini_cfg).expect("valid config");
    let (mut acc_outs, mut ini_outs) = (Vec::new(), Vec::new());
    for t in 1..100 {
        let a: Vec<_> = core::iter::from_fn(|| acc.poll_output()).collect();
        let i: Vec<_> = core::iter::from_fn(|| ini.poll_output()).collect();
        let (to_ini, to_acc) = (stream_bytes(&a), stream_bytes(&i));
        acc_outs.extend(a);
        ini_outs.extend(i);
        if to_ini.is_empty() && to_acc.is_empty() {
            break;
        }
        if !to_acc.is_empty() {
            acc.handle(Instant(t), Input::Stream { bytes: to_acc })
                .expect("the initiator's bytes");
        }
        if !to_ini.is_empty() {
            ini.handle(Instant(t), Input::Stream { bytes: to_ini })
                .expect("the acceptor's bytes");
        }
    }
    (acc, ini, acc_outs, ini_outs)
}

/// `spawn/handshake.rs` `Handshake::close_stream` (`!self.stream_closed` → `self.stream_closed`:
/// the stream was never closed) and `Handshake::remote` (→ `None`): an initiator that
/// completes over a stream asks its driver to close the bootstrap stream exactly once,
/// after everything it sends (spec/spawn.md §5), and does not ask again when it is
/// cancelled afterwards; both roots then know the other group's header (`SPAWN-2`).
#[test]
fn a_stream_initiator_closes_its_bootstrap_stream_once_and_knows_its_peer() {
    use dynres_core::spawn::{GroupHeader, Output, Phase, SpawnError};
    let (acc, mut ini, _, ini_outs) = stream_handshake_to_the_end();
    assert_eq!((acc.phase(), ini.phase()), (Phase::Done, Phase::Done));
    let closes = |outs: &[Output]| {
        outs.iter()
            .filter(|o| matches!(o, Output::CloseStream))
            .count()
    };
    assert_eq!(closes(&ini_outs), 1, "{ini_outs:?}");
    let close_at = ini_outs
        .iter()
        .position(|o| matches!(o, Output::CloseStream))
        .unwrap();
    let last_send = ini_outs
        .iter()
        .rposition(|o| matches!(o, Output::SendStream { .. }))
        .unwrap();
    assert!(
        last_send < close_at,
        "closed after its last bytes: {ini_outs:?}"
    );
    ini.cancel(SpawnError::Config("revoked"));
    let after: Vec<Output> = core::iter::from_fn(|| ini.poll_output()).collect();
    assert_eq!(closes(&after), 0, "closed once: {after:?}");
    let header = |group_id, size| GroupHeader {
        group_id,
        size,
        context_id: 7,
    };
    assert_eq!(ini.remote(), Some(header(1, 2)));
    assert_eq!(acc.remote(), Some(header(2, 3)));
}

/// `spawn/handshake.rs` `HandshakeConfig::validate`: `mtu < MIN_MTU` → `<=` refused the
/// smallest datagram MTU the layer supports. 128 bytes is accepted, 127 refused
/// (spec/spawn.md §4, `SPAWN-12`).
#[test]
fn a_datagram_mtu_of_exactly_the_minimum_is_accepted() {
    use dynres_core::Instant;
    use dynres_core::spawn::datagram::MIN_MTU;
    use dynres_core::spawn::{Handshake, SpawnError};
    let (port, mut cfg) = root_config(
        "dynres:2:dgram:d000:5000:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        1,
        2,
        7,
    );
    cfg.datagram.mtu = MIN_MTU;
    assert!(Handshake::accept(Instant(0), port.clone(), cfg.clone()).is_ok());
    cfg.datagram.mtu = MIN_MTU - 1;
    assert!(matches!(
        Handshake::accept(Instant(0), port, cfg),
        Err(SpawnError::Config(_))
    ));
}

/// `spawn/parent.rs` `SpawnParent::fingerprint` → 0: the fingerprint stands for the
/// parent's state in trace lines and the model checker (spec/verification.md §6), so it
/// must tell states apart: two parents built alike agree, and a parent whose spawn
/// failed at its deadline no longer matches one still listening.
#[test]
fn a_spawn_parent_fingerprint_follows_its_state() {
    use dynres_core::spawn::{Input, Phase};
    let (mut a, mut b) = (listening_parent(), listening_parent());
    assert_eq!(a.fingerprint(), b.fingerprint());
    let listening = b.fingerprint();
    for _ in 0..10_000 {
        while b.poll_output().is_some() {}
        let Some(at) = b.poll_timeout() else { break };
        b.handle(at, Input::Timeout.into())
            .expect("a timeout is taken");
    }
    assert_eq!(b.handshake().phase(), Phase::Failed);
    assert_ne!(b.fingerprint(), listening);
    assert_ne!(b.fingerprint(), a.fingerprint());
}

/// `pset/name.rs` `<impl Debug for PsetName>::fmt` (→ `Ok(())`, printing nothing): the
/// model checker's counterexamples and the logs show a pset by its name, quoted.
#[test]
fn a_pset_name_debugs_as_its_quoted_text() {
    assert_eq!(format!("{:?}", name("mpi://app/a")), "\"mpi://app/a\"");
}

/// `pset/registry.rs` `PsetRegistry::attribute`: the `mpi_ps_active` arm deleted made
/// the key unknown. Every pset answers the four predefined keys (spec/psets.md §2):
/// `mpi_ps_active` is the activity the application set (`PSET-13`).
#[test]
fn a_pset_answers_its_active_attribute() {
    use dynres_core::pset::{AttrValue, MPI_PS_ACTIVE};
    let pid = |rank| ProcessId::new(Namespace::new("job"), rank);
    let mut reg = PsetRegistry::new();
    reg.start_job(&[("app1", &[pid(0), pid(1)])]).unwrap();
    let root = name("mpi://app/app1");
    let caller = Origin::process("app1", pid(0));
    let active = |reg: &PsetRegistry| reg.attribute(&caller, &root, MPI_PS_ACTIVE);
    assert_eq!(active(&reg), Ok(Some(AttrValue::Bool(true))));
    let inactive = PsetOp::Null {
        target: root.clone(),
        attrs: AttrUpdate::active(false),
    };
    reg.apply(&caller, &inactive).unwrap();
    assert_eq!(active(&reg), Ok(Some(AttrValue::Bool(false))));
}

/// `pset/registry.rs` `PsetRegistry::forget_app`: `&&` → `||` forgot every
/// application's psets, not just the departed one's. Forgetting a spawn's application
/// once its children are gone (`SPAWN-19`) leaves the other applications and WORLD
/// alone.
#[test]
fn forgetting_an_application_keeps_the_others() {
    let pid = |rank| ProcessId::new(Namespace::new("job"), rank);
    let mut reg = PsetRegistry::new();
    reg.start_job(&[("app1", &[pid(0)]), ("spawn-0", &[pid(1)])])
        .unwrap();
    let gone = reg.forget_app("spawn-0");
    assert_eq!(gone, [name("mpi://app/spawn-0")]);
    assert!(reg.get(&name("mpi://app/app1")).is_ok());
    assert!(reg.get(&name("mpi://WORLD")).is_ok());
    assert!(reg.get(&name("mpi://app/spawn-0")).is_err());
}

/// `pset/rollback.rs` `PsetRegistry::roll_back_app`: the guard `then.members ==
/// now.members` → `false` (and its `||` → `&&`) restored every pset of the application,
/// also those the aborted change never touched, as new versions. A rollback restores
/// only psets whose members changed; one whose members are as in the snapshot keeps its
/// version (`PSET-10`: a version rises only when members change) and is not reported as
/// restored (so nothing is replicated for it, `RC-14`).
#[test]
fn a_rollback_leaves_an_unchanged_pset_at_its_version() {
    let pid = |rank| ProcessId::new(Namespace::new("job"), rank);
    let mut reg = PsetRegistry::new();
    reg.start_job(&[("app1", &[pid(0), pid(1), pid(2)])])
        .unwrap();
    let caller = Origin::process("app1", pid(0));
    let root = name("mpi://app/app1");
    let part = name("mpi://app/app1/part");
    let set = |op, pset2: PsetName, target: &PsetName| PsetOp::Set {
        op,
        pset1: root.clone(),
        pset2,
        target: Some(target.clone()),
        attrs: AttrUpdate::none(),
    };
    // `part` = app1 − SELF = {1, 2}, untouched by the change below.
    reg.apply(
        &caller,
        &set(SetOp::Difference, PsetName::self_set(), &part),
    )
    .unwrap();
    let snapshot = reg.clone();
    // The aborted change's phase 2: the root loses rank 0 (its own SELF), version 1.
    reg.apply(
        &caller,
        &set(SetOp::Difference, PsetName::self_set(), &root),
    )
    .unwrap();
    let report = reg.roll_back_app(&snapshot, "app1");
    assert_eq!(report.restored, std::slice::from_ref(&root));
    assert!(report.pruned.is_empty());
    assert_eq!(reg.get(&part).unwrap().attrs.version, 0, "untouched");
    assert_eq!(
        reg.get(&root).unwrap().attrs.version,
        2,
        "restored: a new version"
    );
}

/// `spawn/handshake.rs` `Handshake::on_stream_closed`: the guard `self.stream_up` →
/// `true` failed an acceptor whose bootstrap stream never opened when its driver
/// reported a close. Only an open stream can close (spec/spawn.md §5): a close before
/// any stream byte is the driver's mistake, refused as `Unexpected`, and the acceptor
/// goes on listening; once the initiator's bytes opened the stream, its close fails
/// the handshake with `StreamClosed` (`SPAWN-8`).
#[test]
fn only_an_open_bootstrap_stream_can_close() {
    use dynres_core::Instant;
    use dynres_core::spawn::{Handshake, Input, Phase, SpawnError};
    let (port, acc_cfg) = root_config(
        "dynres:2:stream:d0:50:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        1,
        2,
        7,
    );
    let (_, ini_cfg) = root_config(
        "dynres:2:stream:d0:50:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        2,
        2,
        7,
    );
    let mut acc = Handshake::accept(Instant(0), port.clone(), acc_cfg).expect("valid config");
    let before = acc.phase();
    assert!(matches!(
        acc.handle(Instant(1), Input::StreamClosed),
        Err(SpawnError::Unexpected { .. })
    ));
    assert_eq!(acc.phase(), before, "still listening");
    let mut ini = Handshake::connect(Instant(0), port, ini_cfg).expect("valid config");
    let hello = stream_bytes(&core::iter::from_fn(|| ini.poll_output()).collect::<Vec<_>>());
    acc.handle(Instant(2), Input::Stream { bytes: hello })
        .expect("the initiator's Hello");
    acc.handle(Instant(3), Input::StreamClosed)
        .expect("a close of the open stream");
    assert_eq!(acc.phase(), Phase::Failed);
    assert_eq!(acc.error(), Some(&SpawnError::StreamClosed));
}

/// `spawn/datagram.rs` `DgramFrame::checked`: `len < HEADER_LEN + 4` → `<=` took the
/// shortest checksummed datagram, a header and its CRC-32, for a truncated one. It is
/// checked like any other frame, checksum first (`SPAWN-12`, spec/wire.md "Datagram
/// frames"): corrupted it is `Checksum`; intact it has no room for a tag, so a receiver
/// drops it as forged (`SPAWN-22`) and a plain decode calls it `Truncated`; only a
/// shorter datagram is `Truncated` before its checksum is looked at.
#[test]
fn the_shortest_datagram_frame_is_checked_not_called_truncated() {
    use dynres_core::spawn::crc32;
    use dynres_core::spawn::datagram::DgramFrame;
    use dynres_core::wire::{HEADER_LEN, WireError, encode_frame, types};
    let mut frame = Vec::new();
    encode_frame(&mut frame, types::HELLO, |b| b.extend_from_slice(&[0; 4]));
    let n = frame.len();
    assert_eq!(n, HEADER_LEN + 4);
    let crc = crc32(&frame[..n - 4]);
    frame[n - 4..].copy_from_slice(&crc.to_be_bytes());
    assert_eq!(DgramFrame::decode(&frame), Err(WireError::Truncated));
    let role = dynres_core::spawn::Role::Initiator;
    assert_eq!(
        DgramFrame::open(&frame, &crate::KEY, role),
        Err(dynres_core::spawn::SpawnError::Forged {
            what: "datagram without a tag"
        })
    );
    let mut corrupted = frame.clone();
    corrupted[n - 1] ^= 1;
    assert_eq!(
        DgramFrame::decode(&corrupted),
        Err(WireError::Checksum {
            computed: crc,
            received: crc ^ 1
        })
    );
    assert_eq!(
        DgramFrame::decode(&frame[..n - 1]),
        Err(WireError::Truncated)
    );
}

/// `spawn/datagram.rs` `DgramFrame::decode_with`: `count > MAX_SEGMENTS` → `>=` refused
/// every segment of a message of exactly the limit. A message may have up to 4096
/// segments (`SPAWN-13`, spec/wire.md "Datagram frames"): one that long, sent at the
/// smallest MTU, arrives and is delivered as sent (`SPAWN-12`); one segment more is
/// refused at the sender.
#[test]
fn a_message_of_exactly_the_segment_limit_is_delivered() {
    use dynres_core::Instant;
    use dynres_core::spawn::datagram::{MAX_SEGMENTS, MIN_MTU, Reliable};
    use dynres_core::spawn::{DatagramConfig, SpawnError};
    let cfg = DatagramConfig {
        mtu: MIN_MTU,
        ..DatagramConfig::default()
    };
    let (mut a, mut b) = (
        Reliable::new(3, cfg, crate::KEY, dynres_core::spawn::Role::Initiator),
        Reliable::new(3, cfg, crate::KEY, dynres_core::spawn::Role::Acceptor),
    );
    let per = a.payload_per_segment();
    let msg: Vec<u8> = (0..per * usize::from(MAX_SEGMENTS))
        .map(|i| (i % 251) as u8)
        .collect();
    assert_eq!(
        a.send(Instant(0), &[msg.as_slice(), &[0]].concat()),
        Err(SpawnError::Config(
            "message exceeds the datagram segment limit"
        ))
    );
    a.send(Instant(0), &msg).expect("exactly the limit");
    let frames: Vec<Vec<u8>> = core::iter::from_fn(|| a.poll_send()).collect();
    assert_eq!(frames.len(), usize::from(MAX_SEGMENTS));
    for f in &frames {
        b.on_datagram(f).expect("a segment within the limit");
    }
    assert_eq!(b.poll_recv(), Some(msg));
}

/// A segment of message 0 of session 1: `index` of `count`, carrying `payload`.
fn segment(index: u16, count: u16, payload: &[u8]) -> Vec<u8> {
    segment_of(0, index, count, payload)
}

/// A segment of message `msg_seq` of session 1: `index` of `count`, carrying `payload`.
fn segment_of(msg_seq: u32, index: u16, count: u16, payload: &[u8]) -> Vec<u8> {
    use dynres_core::spawn::datagram::{DgramFrame, Segment};
    DgramFrame::Segment(Segment {
        session: 1,
        msg_seq,
        index,
        count,
        payload: payload.to_vec(),
    })
    .encode(&crate::KEY, dynres_core::spawn::Role::Initiator)
}

/// `spawn/datagram.rs` `Reliable::on_frame`: the guard `p.count != s.count` → `false`
/// took a segment whose count contradicts the message's earlier segments. Such a segment
/// is malformed peer input: a typed error naming the count it carried, and the layer is
/// unchanged (`SPAWN-10`), not even acknowledging it; the message still completes from
/// its consistent segments (`SPAWN-12`).
#[test]
fn a_segment_count_changed_within_a_message_is_refused() {
    use dynres_core::spawn::DatagramConfig;
    use dynres_core::spawn::datagram::Reliable;
    use dynres_core::wire::WireError;
    let mut b = Reliable::new(
        1,
        DatagramConfig::default(),
        crate::KEY,
        dynres_core::spawn::Role::Acceptor,
    );
    b.on_datagram(&segment(0, 3, b"ab")).expect("first segment");
    while b.poll_send().is_some() {}
    let before = b.clone();
    assert_eq!(
        b.on_datagram(&segment(1, 2, b"cd")),
        Err(WireError::InvalidValue {
            what: "segment count changed within a message",
            value: 2,
        }
        .into())
    );
    assert_eq!(b, before, "nothing kept, nothing acknowledged");
    b.on_datagram(&segment(2, 3, b"ef")).expect("consistent");
    b.on_datagram(&segment(1, 3, b"cd")).expect("consistent");
    assert_eq!(b.poll_recv(), Some(b"abcdef".to_vec()));
}

/// `spawn/datagram.rs` `Reliable::on_frame`: `partial.len() + 1` → `- 1` or `* 1` in the
/// refusal of one message too many in reassembly. Reassembly is bounded to 8 messages
/// (`SPAWN-13`); the refusal of a ninth is `OverLimit` counting the messages it would
/// make (9 of at most 8) and leaves the layer unchanged (`SPAWN-10`); once a message
/// completes, the ninth fits.
#[test]
fn reassembly_refuses_the_ninth_message_and_counts_it() {
    use dynres_core::spawn::DatagramConfig;
    use dynres_core::spawn::datagram::{MAX_PARTIAL, Reliable};
    use dynres_core::wire::WireError;
    let mut b = Reliable::new(
        1,
        DatagramConfig::default(),
        crate::KEY,
        dynres_core::spawn::Role::Acceptor,
    );
    let partial = MAX_PARTIAL as u32;
    for seq in 0..partial {
        b.on_datagram(&segment_of(seq, 0, 2, b"x"))
            .expect("room for it");
    }
    let before = b.clone();
    assert_eq!(
        b.on_datagram(&segment_of(partial, 0, 2, b"x")),
        Err(WireError::OverLimit {
            what: "messages in reassembly",
            value: MAX_PARTIAL as u64 + 1,
            max: MAX_PARTIAL as u64,
        }
        .into())
    );
    assert_eq!(b, before);
    b.on_datagram(&segment_of(0, 1, 2, b"y"))
        .expect("completes message 0");
    assert_eq!(b.poll_recv(), Some(b"xy".to_vec()));
    b.on_datagram(&segment_of(partial, 0, 2, b"x"))
        .expect("room again");
}

/// `spawn/group.rs` `Member::step`: deleting the arm that ignores what comes after the
/// outcome let late messages change a decided member. After `Failed` no handle exists
/// (`SPAWN-8`): a late triple and table do not make one. After `Ready` a triple and table
/// of another session are late messages (`SPAWN-11`): no second `Ready`, the handle stays.
#[test]
fn a_decided_member_ignores_late_triples_and_tables() {
    use dynres_core::Instant;
    use dynres_core::spawn::{
        Addr, GroupHeader, Member, MemberMsg, MemberOutput, Role, SpawnError,
    };
    let local = GroupHeader {
        group_id: 1,
        size: 2,
        context_id: 1,
    };
    let remote = GroupHeader {
        group_id: 9,
        size: 1,
        context_id: 5,
    };
    let new_member = || Member::new(Role::Acceptor, 1, local, vec![Addr(vec![1]), Addr(vec![2])]);
    let late = |session| {
        [
            MemberMsg::RemoteGroup {
                session,
                remote,
                data_key: crate::KEY,
            },
            MemberMsg::RemoteEndpoints {
                session,
                endpoints: vec![Addr(vec![3])],
            },
        ]
    };
    // Failed first: the late triple and table are ignored.
    let mut m = new_member();
    m.handle(
        Instant(0),
        MemberMsg::Failed {
            session: 9,
            error: SpawnError::StreamClosed,
        },
    )
    .expect("a failure");
    assert_eq!(
        m.poll_output(),
        Some(MemberOutput::Failed(SpawnError::StreamClosed))
    );
    for msg in late(9) {
        m.handle(Instant(1), msg).expect("ignored");
    }
    assert_eq!(m.poll_output(), None);
    assert!(m.intergroup().is_none());
    assert_eq!(m.error(), Some(&SpawnError::StreamClosed));
    // Ready first: another session's triple and table change nothing.
    let mut m = new_member();
    for msg in late(9) {
        m.handle(Instant(0), msg)
            .expect("the root's triple and table");
    }
    let Some(MemberOutput::Ready(ig)) = m.poll_output() else {
        panic!("ready");
    };
    for msg in late(10) {
        m.handle(Instant(1), msg).expect("ignored");
    }
    assert_eq!(m.poll_output(), None);
    assert_eq!(m.intergroup(), Some(&ig));
    assert_eq!(ig.session, 9);
}

/// `spawn/handshake.rs` `HandshakeConfig::validate`: `n == 0 || n > MAX_GROUP` → `&&`,
/// `n == MAX_GROUP` or `n >= MAX_GROUP`. A local group has 1 to 65536 processes, as many
/// as one endpoint table may list (spec/wire.md `Endpoints`, `SPAWN-7`): a group of
/// 65536 may accept; one of 0 or 65537 is refused as a bad configuration, for its size.
#[test]
fn a_local_group_has_one_to_max_group_processes() {
    use dynres_core::Instant;
    use dynres_core::spawn::msg::MAX_GROUP;
    use dynres_core::spawn::{Handshake, SpawnError};
    let bad_size = Err(SpawnError::Config("local group size must be 1..=65536"));
    for (size, ok) in [(0, false), (MAX_GROUP, true), (MAX_GROUP + 1, false)] {
        let (port, mut cfg) = root_config(
            "dynres:2:dgram:d000:5000:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
            1,
            1,
            7,
        );
        cfg.local.size = size as u32;
        cfg.local_endpoints = vec![dynres_core::spawn::Addr(vec![1]); size];
        let r = Handshake::accept(Instant(0), port, cfg).map(|_| ());
        assert_eq!(r, if ok { Ok(()) } else { bad_size.clone() }, "size {size}");
    }
}

/// `spawn/handshake.rs` `Handshake::fingerprint` → 0 or 1: the fingerprint stands for a
/// handshake's state in trace lines and the model checker (spec/verification.md §6), so
/// it must tell states apart: two acceptors built alike agree, one that took a Hello
/// (`Listening` → `Endpoints`) no longer matches one still listening, and draining its
/// outputs is no step.
#[test]
fn a_handshake_fingerprint_follows_its_state() {
    use dynres_core::Instant;
    use dynres_core::spawn::{Addr, Handshake, Output, Phase};
    let (port, acc_cfg) = root_config(
        "dynres:2:dgram:d000:5000:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        1,
        2,
        7,
    );
    let (_, ini_cfg) = root_config(
        "dynres:2:dgram:d000:5000:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        2,
        2,
        7,
    );
    let mut listening = Handshake::accept(Instant(0), port.clone(), acc_cfg.clone()).unwrap();
    let mut acc = Handshake::accept(Instant(0), port.clone(), acc_cfg).unwrap();
    assert_eq!(acc.fingerprint(), listening.fingerprint());
    let mut ini = Handshake::connect(Instant(0), port, ini_cfg).unwrap();
    let hello: Vec<Output> = core::iter::from_fn(|| ini.poll_output()).collect();
    for input in datagrams_from(&hello, &Addr(vec![0xd0])) {
        acc.handle(Instant(1), input).expect("the Hello");
    }
    assert_eq!(acc.phase(), Phase::Endpoints);
    let answered = acc.fingerprint();
    assert_ne!(answered, listening.fingerprint());
    assert!(acc.poll_output().is_some(), "the answer was queued");
    while acc.poll_output().is_some() {}
    assert_eq!(acc.fingerprint(), answered, "draining outputs is no step");
}

/// `spawn/handshake.rs` `Handshake::open_stream`: `!stream_up && role == Initiator` →
/// `||` opened the bootstrap stream a second time. On a stream port the initiator opens
/// the stream once, first thing, and its Hello, tables and acks all go on it; the
/// acceptor's `HelloAck` choosing the stream for the tables (`SPAWN-9`) opens no other
/// (spec/spawn.md §5, `OpenStream`); the acceptor answers on the stream it was given.
#[test]
fn a_stream_initiator_opens_its_bootstrap_stream_once() {
    use dynres_core::spawn::{Output, Phase, Transport};
    let (acc, ini, acc_outs, ini_outs) = stream_handshake_to_the_end();
    assert_eq!((acc.phase(), ini.phase()), (Phase::Done, Phase::Done));
    assert_eq!(ini.endpoints_via(), Some(Transport::Stream));
    let opens = |outs: &[Output]| {
        outs.iter()
            .filter(|o| matches!(o, Output::OpenStream { .. }))
            .count()
    };
    assert!(
        matches!(ini_outs.first(), Some(Output::OpenStream { .. })),
        "{ini_outs:?}"
    );
    assert_eq!(opens(&ini_outs), 1, "{ini_outs:?}");
    assert_eq!(opens(&acc_outs), 0, "{acc_outs:?}");
}

/// `spawn/handshake.rs` `Handshake::on_datagram`: `phase != Listening || hello transport
/// != Datagram` → `&&` let a datagram open a session where none may be opened: on a
/// stream port (spec/spawn.md §6: the Hello goes on the stream) and on a datagram port
/// whose accept was already cancelled (`Failed` is final, `SPAWN-8`). Both refuse the
/// Hello with a typed error and stay as they were (`SPAWN-10`).
#[test]
fn a_datagram_hello_opens_nothing_off_a_listening_datagram_port() {
    use dynres_core::Instant;
    use dynres_core::spawn::{Addr, Handshake, Input, Phase, SpawnError};
    let outside = Err(SpawnError::Unexpected {
        what: "datagram outside a datagram session",
    });
    let (stream_port, cfg) = root_config(
        "dynres:2:stream:d0:50:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        1,
        2,
        7,
    );
    let on_stream_port = Handshake::accept(Instant(0), stream_port, cfg).unwrap();
    let (dgram_port, cfg) = root_config(
        "dynres:2:dgram:d000:5000:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        1,
        2,
        7,
    );
    let mut cancelled = Handshake::accept(Instant(0), dgram_port, cfg).unwrap();
    cancelled.cancel(SpawnError::Config("given up"));
    for (mut hs, phase) in [
        (on_stream_port, Phase::Listening),
        (cancelled, Phase::Failed),
    ] {
        while hs.poll_output().is_some() {}
        let before = hs.clone();
        let hello = Input::Datagram {
            from: Addr(vec![0xd0]),
            bytes: hello_segment(9, 1),
        };
        assert_eq!(hs.handle(Instant(1), hello), outside, "{phase:?}");
        assert_eq!(hs, before);
        assert_eq!(hs.phase(), phase);
        assert_eq!(hs.session(), None);
        assert_eq!(hs.poll_output(), None, "not even an acknowledgement");
    }
}

/// `spawn/handshake.rs` `Handshake::on_datagram`: the guard `session == s.session` →
/// `true` took a Hello whose datagram carries another session for a Hello (to fail later
/// as a foreign segment). A listener opens a session only on a Hello whose segment is of
/// the Hello's own session; anything else is refused as no Hello, and the listener stays
/// unchanged (`SPAWN-10`), then takes the consistent Hello (`SPAWN-11`).
#[test]
fn a_hello_under_another_session_is_no_hello() {
    use dynres_core::Instant;
    use dynres_core::spawn::{Addr, Handshake, Input, Phase, SpawnError};
    let (port, cfg) = root_config(
        "dynres:2:dgram:d000:5000:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        1,
        2,
        7,
    );
    let mut hs = Handshake::accept(Instant(0), port, cfg).unwrap();
    while hs.poll_output().is_some() {}
    let before = hs.clone();
    let from = Addr(vec![0xd0]);
    let mismatched = Input::Datagram {
        from: from.clone(),
        bytes: hello_segment(8, 1),
    };
    assert_eq!(
        hs.handle(Instant(1), mismatched),
        Err(SpawnError::Unexpected {
            what: "first datagram is not a Hello"
        })
    );
    assert_eq!(hs, before);
    let hello = Input::Datagram {
        from,
        bytes: hello_segment(9, 1),
    };
    hs.handle(Instant(2), hello).expect("a consistent Hello");
    assert_eq!((hs.session(), hs.phase()), (Some(9), Phase::Endpoints));
}

/// `spawn/parent.rs` `SpawnParent::start`: `maxprocs > MAX_GROUP` → `==` let a spawn
/// of more children than a group can hold start. A spawn makes one group of 1 to
/// 65,536 children (`SPAWN-7`); one more is a configuration error.
#[test]
fn a_spawn_of_more_children_than_a_group_holds_is_refused() {
    use dynres_core::spawn::SpawnError;
    use dynres_core::spawn::msg::MAX_GROUP;
    let spawn = |n: usize| spawn_parent(n as u32);
    assert!(matches!(spawn(MAX_GROUP + 1), Err(SpawnError::Config(_))));
    assert!(matches!(spawn(MAX_GROUP + 2), Err(SpawnError::Config(_))));
    assert!(spawn(MAX_GROUP).is_ok());
}

/// `spawn/port.rs` `hex_addr`: `len / 2 > MAX_ADDR` → `>=` refused to parse the name of
/// a port whose address has the longest valid length. A port name carries each address
/// in hex (`SPAWN-1`): one with 64-byte addresses, as `open_port` makes it, parses back to
/// the same port; 65 bytes do not parse.
#[test]
fn a_port_name_with_64_byte_addresses_parses_back() {
    use dynres_core::spawn::{Addr, Bootstrap, PortName, Ports};
    let longest = Addr(vec![0xab; 64]);
    let port = Ports::new()
        .open_port(
            longest.clone(),
            longest,
            Bootstrap::Hybrid { threshold: 4 },
            crate::KEY,
        )
        .expect("64-byte addresses");
    let text = port.to_string();
    assert_eq!(PortName::parse(&text), Ok(port));
    let too_long = text.replacen(&"ab".repeat(64), &"ab".repeat(65), 1);
    assert!(PortName::parse(&too_long).is_err(), "{too_long}");
}

/// `spawn/port.rs` `Ports::close_port`: the guard `p == port` → `true` closed whichever
/// open port had the same tag. Closing names one port exactly (`SPAWN-1`): a name that
/// shares an open port's tag but not its addresses is not open, is refused with
/// `PortNotOpen`, and the open port stays open.
#[test]
fn closing_a_port_needs_its_exact_name() {
    use dynres_core::spawn::{Addr, Bootstrap, PortName, Ports, SpawnError};
    let mut ports = Ports::new();
    let port = ports
        .open_port(Addr(vec![1]), Addr(vec![2]), Bootstrap::Stream, crate::KEY)
        .expect("a port");
    let same_tag = PortName {
        dgram: Addr(vec![9]),
        ..port.clone()
    };
    assert!(matches!(
        ports.close_port(&same_tag),
        Err(SpawnError::PortNotOpen(_))
    ));
    assert!(ports.is_open(&port));
    assert_eq!(ports.close_port(&port), Ok(()));
    assert!(!ports.is_open(&port));
}
