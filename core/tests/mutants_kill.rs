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
            .open_port(longest.clone(), longest.clone(), Bootstrap::Stream)
            .is_ok()
    );
    let too_long = Addr(vec![7; 65]);
    assert!(
        ports
            .open_port(too_long.clone(), longest.clone(), Bootstrap::Stream)
            .is_err()
    );
    assert!(
        ports
            .open_port(longest, too_long, Bootstrap::Datagram)
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

/// `spawn/handshake.rs` `Handshake::error`: deleting the `Some(Err(e))` arm hid why a
/// failed handshake failed. A connect nobody answers gives up after its retries, and
/// says so.
#[test]
fn a_failed_handshake_reports_its_error() {
    use dynres_core::Instant;
    use dynres_core::spawn::{
        Addr, GroupHeader, Handshake, HandshakeConfig, Input, Phase, PortName, SpawnError,
    };
    let port = PortName::parse("dynres:1:hybrid-4:d0:50:0").expect("valid port");
    let h = GroupHeader {
        group_id: 7,
        size: 2,
        context_id: 1,
    };
    let cfg = HandshakeConfig::new(h, vec![Addr(vec![1]), Addr(vec![2])]);
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
