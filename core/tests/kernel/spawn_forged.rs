//! Strangers on the bootstrap (spec/spawn.md SPAWN-22): a forged, foreign or replayed
//! message is dropped and counted, never opens, steers or ends a handshake, and the real
//! peer still completes. Before issue 28 the first Hello from any address opened a
//! spawn's handshake and a Hello naming another group failed the spawn, so every test
//! here failed: one datagram of a local stranger who read the group id off `ps` took the
//! spawn over.

use crate::spawn_sim;

use dynres_core::Instant;
use dynres_core::spawn::datagram::{DgramFrame, Segment};
use dynres_core::spawn::{
    Addr, BootKey, Bootstrap, ContextIds, GroupHeader, Handshake, HsMsg, Input, Output, Phase,
    Ports, Role, SpawnError,
};
use spawn_sim::{Faults, Launcher, Sim, endpoints, hs_config};

/// A world with one spawn of `children` by a parent group of 2; keys salted by `salt`.
fn spawn_world(seed: u64, boot: Bootstrap, children: u32, salt: u8) -> (Sim, usize) {
    let mut sim = Sim::new(seed, Faults::NONE);
    sim.launcher = Launcher::Normal;
    sim.key_salt = salt;
    let mut ports = Ports::new();
    let mut ctx = ContextIds::new(1, 1 << 16);
    let p = sim.add_spawn(&mut ports, boot, 2, children, &mut ctx);
    (sim, p)
}

/// The (group id, size) the parent at `p` launched.
fn launched(sim: &Sim, p: usize) -> (u64, u32) {
    let hs = sim.roots[p].m.handshake().expect("a handshake");
    hs.config()
        .expect_remote
        .expect("a spawn expects its children")
}

/// A one-segment Hello of group `group` of `size` (session = group id, as a child's),
/// sealed with `key` as an initiator: exactly what a child would send, but for the key.
fn hello(group: u64, size: u32, key: &BootKey) -> Vec<u8> {
    let payload = HsMsg::Hello {
        session: group,
        header: GroupHeader {
            group_id: group,
            size,
            context_id: 1,
        },
    }
    .encode();
    DgramFrame::Segment(Segment {
        session: group,
        msg_seq: 0,
        index: 0,
        count: 1,
        payload,
    })
    .encode(key, Role::Initiator)
}

fn forged_count(sim: &Sim, root: usize) -> u32 {
    sim.roots[root].m.handshake().expect("a handshake").forged()
}

/// A stranger who knows the children's group id and size (the old ids were predictable)
/// but not the spawn's key sends Hellos before the children start: from its own address,
/// and from the address the child root will use. Each is dropped and counted; the real
/// children connect.
#[test]
fn a_forged_hello_before_the_childrens_is_dropped_and_the_spawn_succeeds() {
    for boot in [Bootstrap::Datagram, Bootstrap::DEFAULT_HYBRID] {
        let (mut sim, p) = spawn_world(7, boot, 3, 0);
        let (group, size) = launched(&sim, p);
        let guessed = BootKey([0x42; 32]);
        // The child root will be root 1 of the world, at datagram address d0 00 01:
        // known in advance, as a real child's is (`ss`).
        let child_addr = Addr(vec![0xd0, 0, 1]);
        for from in [Addr(vec![0xee, 0xee]), child_addr] {
            sim.inject_datagram(p, from, hello(group, size, &guessed));
        }
        sim.run();
        let c = sim.child_of(p).expect("launched");
        sim.assert_group_connected(p, c);
        sim.assert_group_connected(c, p);
        assert_eq!(forged_count(&sim, p), 2, "{boot:?}");
    }
}

/// Even a sender holding the spawn's key cannot end the spawn with a Hello of a group it
/// did not launch (wrong id, wrong size): dropped and counted (SPAWN-3, SPAWN-22).
#[test]
fn a_hello_of_another_group_is_dropped_even_under_the_spawns_key() {
    let (mut sim, p) = spawn_world(8, Bootstrap::Datagram, 2, 0);
    let (group, size) = launched(&sim, p);
    let key = sim.spawn_key(p);
    sim.inject_datagram(p, Addr(vec![0xee]), hello(group + 1, size, &key));
    sim.inject_datagram(p, Addr(vec![0xef]), hello(group, size + 1, &key));
    sim.run();
    let c = sim.child_of(p).expect("launched");
    sim.assert_group_connected(p, c);
    assert_eq!(forged_count(&sim, p), 2);
}

/// A Hello recorded from another spawn — same children's group id and size, the same
/// port address, but that spawn's key — is worthless to a replayer: the parent drops it
/// and counts it, and its own children connect.
#[test]
fn a_hello_replayed_from_another_spawn_is_dropped() {
    let (mut a, pa) = spawn_world(9, Bootstrap::Datagram, 2, 0);
    a.run();
    let ca = a.child_of(pa).expect("launched");
    a.assert_group_connected(pa, ca);
    let recorded = a
        .delivered_log
        .iter()
        .find(|(to, _, bytes)| {
            *to == pa
                && matches!(
                    DgramFrame::decode(bytes),
                    Ok(DgramFrame::Segment(s))
                        if matches!(HsMsg::decode(&s.payload), Ok(HsMsg::Hello { .. }))
                )
        })
        .map(|(_, from, bytes)| (from.clone(), bytes.clone()))
        .expect("spawn a's child said Hello");
    // The same spawn again in another run of the driver: another key.
    let (mut b, pb) = spawn_world(9, Bootstrap::Datagram, 2, 1);
    assert_eq!(
        launched(&a, pa),
        launched(&b, pb),
        "the same group and size"
    );
    b.inject_datagram(pb, recorded.0, recorded.1);
    b.run();
    let cb = b.child_of(pb).expect("launched");
    b.assert_group_connected(pb, cb);
    assert_eq!(forged_count(&b, pb), 1);
}

/// An acceptor and an initiator on a datagram port keyed `key`, the initiator's Hello
/// taken: `(acceptor, initiator, initiator's address, acceptor's outputs)`.
/// The triple of singleton group `group_id` (context id 1).
fn single(group_id: u64) -> GroupHeader {
    GroupHeader {
        group_id,
        size: 1,
        context_id: 1,
    }
}

/// A port of bootstrap `boot` keyed [`crate::KEY`], and the acceptor (group 1) on it.
fn listening(boot: Bootstrap) -> (dynres_core::spawn::PortName, Handshake) {
    let mut ports = Ports::new();
    let port = ports
        .open_port(Addr(vec![0xa0]), Addr(vec![0xa1]), boot, crate::KEY)
        .expect("a port");
    let acc = Handshake::accept(Instant(0), port.clone(), single_config(1)).expect("accept");
    (port, acc)
}

/// The configuration of singleton group `g`'s root.
fn single_config(g: u64) -> dynres_core::spawn::HandshakeConfig {
    hs_config(
        single(g),
        endpoints(g, 1, 16),
        &spawn_sim::ChildCfg::default(),
    )
}

fn opened_connection(boot: Bootstrap) -> (Handshake, Handshake, Addr, Vec<Output>) {
    let (port, mut acc) = listening(boot);
    let mut ini = Handshake::connect(Instant(0), port, single_config(2)).expect("connect");
    let ini_addr = Addr(vec![0xb0]);
    let outs: Vec<Output> = std::iter::from_fn(|| ini.poll_output()).collect();
    for o in outs {
        if let Output::SendDatagram { bytes, .. } = o {
            let from = ini_addr.clone();
            acc.handle(Instant(1), Input::Datagram { from, bytes })
                .expect("the initiator's Hello");
        }
    }
    let acc_out = std::iter::from_fn(|| acc.poll_output()).collect();
    (acc, ini, ini_addr, acc_out)
}

/// Once a session is open, forged frames carrying the session's own id — an `Abort` the
/// stranger claims the initiator sent (from the initiator's address), a `HelloAck` and an
/// acknowledgement claimed from the acceptor — are refused as forged, change nothing but
/// the count, and the connection completes.
#[test]
fn forged_messages_inside_an_open_session_change_nothing() {
    let (mut acc, mut ini, ini_addr, acc_out) = opened_connection(Bootstrap::Datagram);
    assert_eq!(acc.phase(), Phase::Endpoints);
    let session = acc.session().expect("a session");
    let wrong = BootKey([0x42; 32]);
    let seg = |msg: HsMsg, key: &BootKey, sender| {
        DgramFrame::Segment(Segment {
            session,
            msg_seq: 7,
            index: 0,
            count: 1,
            payload: msg.encode(),
        })
        .encode(key, sender)
    };
    let abort = HsMsg::Abort {
        session,
        reason: dynres_core::spawn::AbortReason::Cancelled,
    };
    // Under a guessed key, and the acceptor's own frame reflected back to it.
    for bytes in [
        seg(abort.clone(), &wrong, Role::Initiator),
        seg(abort, &crate::KEY, Role::Acceptor),
    ] {
        let before = acc.clone();
        let r = acc.handle(
            Instant(2),
            Input::Datagram {
                from: ini_addr.clone(),
                bytes,
            },
        );
        assert!(matches!(r, Err(SpawnError::Forged { .. })), "{r:?}");
        assert!(acc.eq_except_forged(&before));
        assert_eq!(acc.forged(), before.forged() + 1);
    }
    let ack = HsMsg::HelloAck {
        session,
        header: GroupHeader {
            group_id: 66,
            size: 1,
            context_id: 1,
        },
        endpoints_via: dynres_core::spawn::Transport::Datagram,
    };
    let port_addr = Addr(vec![0xa0]);
    let forged_ack = DgramFrame::Ack {
        session,
        msg_seq: 0,
        index: 0,
    }
    .encode(&wrong, Role::Acceptor);
    for bytes in [seg(ack, &wrong, Role::Acceptor), forged_ack] {
        let before = ini.clone();
        let from = port_addr.clone();
        let r = ini.handle(Instant(2), Input::Datagram { from, bytes });
        assert!(matches!(r, Err(SpawnError::Forged { .. })), "{r:?}");
        assert!(ini.eq_except_forged(&before));
    }
    assert_eq!(ini.forged(), 2);
    assert_eq!(ini.phase(), Phase::AwaitHelloAck);
    // The real exchange completes.
    let mut to_ini: Vec<Vec<u8>> = acc_out
        .into_iter()
        .filter_map(|o| match o {
            Output::SendDatagram { bytes, .. } => Some(bytes),
            _ => None,
        })
        .collect();
    for _ in 0..10 {
        for bytes in std::mem::take(&mut to_ini) {
            let from = port_addr.clone();
            let _ = ini.handle(Instant(3), Input::Datagram { from, bytes });
        }
        for o in std::iter::from_fn(|| ini.poll_output()) {
            if let Output::SendDatagram { bytes, .. } = o {
                let from = ini_addr.clone();
                let _ = acc.handle(Instant(3), Input::Datagram { from, bytes });
            }
        }
        for o in std::iter::from_fn(|| acc.poll_output()) {
            if let Output::SendDatagram { bytes, .. } = o {
                to_ini.push(bytes);
            }
        }
    }
    assert_eq!((acc.phase(), ini.phase()), (Phase::Done, Phase::Done));
    assert_eq!(acc.forged(), 2);
}

/// On a stream port, a frame without the peer's tag — a Hello sealed under a guessed
/// key — rejects the input: counted, the machine otherwise unchanged (its reader
/// keeps nothing of it), and the real initiator's Hello is then taken.
#[test]
fn a_forged_stream_frame_is_refused_and_the_real_hello_taken() {
    let (port, mut acc) = listening(Bootstrap::Stream);
    let forged = HsMsg::Hello {
        session: 2,
        header: single(2),
    }
    .seal(&BootKey([0x42; 32]), Role::Initiator);
    let before = acc.clone();
    let r = acc.handle(Instant(1), Input::Stream { bytes: forged });
    assert!(matches!(r, Err(SpawnError::Forged { .. })), "{r:?}");
    assert!(acc.eq_except_forged(&before));
    assert_eq!((acc.forged(), acc.phase()), (1, Phase::Listening));
    let mut ini = Handshake::connect(Instant(0), port, single_config(2)).expect("connect");
    for o in std::iter::from_fn(|| ini.poll_output()) {
        if let Output::SendStream { bytes } = o {
            acc.handle(Instant(2), Input::Stream { bytes })
                .expect("the real Hello");
        }
    }
    assert_eq!(acc.phase(), Phase::Endpoints);
    assert_eq!(acc.remote(), Some(single(2)));
}

/// The stranger's test of SPAWN-22 through a whole world: children whose parent's port
/// a stranger floods with forged Hellos (one per millisecond of the launch) connect all
/// the same, on every bootstrap.
#[test]
fn a_flood_of_forged_hellos_does_not_stop_a_spawn() {
    for (seed, boot) in [
        (11, Bootstrap::Datagram),
        (12, Bootstrap::Stream),
        (13, Bootstrap::Hybrid { threshold: 1 }),
    ] {
        let (mut sim, p) = spawn_world(seed, boot, 4, 0);
        let (group, size) = launched(&sim, p);
        for i in 0..20u8 {
            sim.inject_datagram(
                p,
                Addr(vec![0xee, i]),
                hello(group, size, &BootKey([i; 32])),
            );
        }
        sim.run();
        let c = sim.child_of(p).expect("launched");
        sim.assert_group_connected(p, c);
        assert_eq!(forged_count(&sim, p), 20, "{boot:?}");
    }
}

/// SPAWN-23: every rank of both groups holds the same data-plane key (checked for each
/// connection by `assert_group_connected`), a key that is neither the bootstrap key nor
/// another connection's: two spawns in one world (their own keys and children), and the
/// first again in a world with other keys, give three different keys.
#[test]
fn each_connection_has_its_own_data_key() {
    let mut keys = Vec::new();
    for salt in [0, 1] {
        let (mut sim, p) = spawn_world(21, Bootstrap::Datagram, 2, salt);
        let mut spawns = vec![p];
        if salt == 0 {
            let mut ports = Ports::new();
            let mut ctx = ContextIds::new(1, 1 << 16);
            spawns.push(sim.add_spawn(&mut ports, Bootstrap::Datagram, 2, 2, &mut ctx));
        }
        sim.run();
        for p in spawns {
            let c = sim.child_of(p).expect("launched");
            let ig = sim.assert_group_connected(p, c);
            assert_ne!(ig.data_key, sim.spawn_key(p));
            keys.push(ig.data_key);
        }
    }
    let distinct: std::collections::BTreeSet<_> = keys.iter().collect();
    assert_eq!(distinct.len(), 3, "{keys:?}");
}
