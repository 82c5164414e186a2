//! accept/connect between two independent jobs, join over a byte stream, merge and
//! disconnect, through the seeded world of `spawn_sim` (spec/spawn.md).

use crate::spawn_sim;

use dynres_core::spawn::{
    Bootstrap, GroupHeader, Handshake, Join, PortName, Ports, Role, SpawnError, merge,
};
use dynres_core::{Instant, Namespace};
use spawn_sim::{Faults, Machine, Sim, endpoints, hs_config};

fn boot_for(seed: u64) -> Bootstrap {
    match seed % 3 {
        0 => Bootstrap::Datagram,
        1 => Bootstrap::Stream,
        _ => Bootstrap::Hybrid { threshold: 4 },
    }
}

#[test]
fn accept_connect_between_independent_jobs() {
    for seed in 0..150 {
        let mut sim = Sim::new(seed, Faults::LOSSY);
        let s = 1 + (seed % 8) as u32;
        let c = 1 + (seed / 8 % 8) as u32;
        let (si, ci) = sim.accept_connect(boot_for(seed), s, c, s % 2 == 0);
        sim.run();
        let sig = sim.assert_group_connected(si, ci);
        let cig = sim.assert_group_connected(ci, si);
        assert_eq!((sig.role, cig.role), (Role::Acceptor, Role::Initiator));
        let want_session = if s % 2 == 0 {
            0xA77E_0000 + u64::from(c)
        } else {
            2
        };
        assert_eq!(sig.session, want_session);

        // SPAWN-15: every process of both groups computes the same merged order.
        let high_s = seed % 2 == 0;
        let high_c = seed % 4 < 2;
        let ms = merge(&sig, high_s, high_c);
        let mc = merge(&cig, high_c, high_s);
        assert_eq!(ms.members, mc.members);
        assert_eq!(ms.endpoints, mc.endpoints);
        assert_eq!(ms.members.len(), (s + c) as usize);
        let mut ranks: Vec<u32> = sim.groups[&1]
            .ready
            .values()
            .map(|ig| merge(ig, high_s, high_c).rank)
            .collect();
        ranks.extend(
            sim.groups[&2]
                .ready
                .values()
                .map(|ig| merge(ig, high_c, high_s).rank),
        );
        ranks.push(ms.rank);
        ranks.push(mc.rank);
        ranks.sort_unstable();
        assert_eq!(
            ranks,
            (0..s + c).collect::<Vec<_>>(),
            "merged ranks are a permutation"
        );
    }
}

#[test]
fn connect_to_a_port_nobody_listens_on_fails_typed() {
    for (seed, boot) in [
        (1, Bootstrap::Datagram),
        (2, Bootstrap::Stream),
        (3, Bootstrap::DEFAULT_HYBRID),
    ] {
        let mut sim = Sim::new(seed, Faults::NONE);
        let port = PortName::parse("dynres:2:dgram:ffff:ffff:9:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a").unwrap();
        let port = PortName { boot, ..port };
        let h = GroupHeader {
            group_id: 2,
            size: 3,
            context_id: 1,
        };
        let eps = endpoints(2, 3, 20);
        let hs =
            Handshake::connect(sim.now, port, hs_config(h, eps.clone(), &sim.child_cfg)).unwrap();
        let ci = sim.add_root(
            "client",
            Machine::Hs(hs),
            h,
            eps,
            Role::Initiator,
            Namespace::new("c"),
        );
        sim.run();
        let e = sim.assert_group_failed(ci);
        match boot {
            Bootstrap::Stream => assert_eq!(e, SpawnError::StreamClosed),
            _ => assert!(matches!(e, SpawnError::PeerUnreachable { .. }), "{e:?}"),
        }
    }
}

#[test]
fn join_over_a_byte_stream() {
    // SPAWN-14: the ends pick opposite roles and agree like any accept/connect.
    for seed in 0..90 {
        let mut sim = Sim::new(seed, Faults::LOSSY);
        let (a, b) = sim.join_pair(boot_for(seed), false);
        sim.run();
        let ia = sim.assert_group_connected(a, b);
        let ib = sim.assert_group_connected(b, a);
        assert_ne!(ia.role, ib.role);
        // Join ports compare as text: "...:d00000:..." < "...:d00001:...", so `a` accepts.
        assert_eq!(ia.role, Role::Acceptor);
    }
}

#[test]
fn join_with_the_same_port_on_both_ends_fails() {
    let mut sim = Sim::new(5, Faults::NONE);
    let (a, b) = sim.join_pair(Bootstrap::Datagram, true);
    sim.run();
    for r in [a, b] {
        assert_eq!(sim.roots[r].failed, vec![SpawnError::JoinSamePort]);
        assert!(sim.roots[r].handle().is_none());
    }
}

#[test]
fn join_rejects_garbage_on_the_join_stream_unchanged() {
    let mut ports = Ports::new();
    let p = ports
        .open_port(
            dynres_core::spawn::Addr(vec![1]),
            dynres_core::spawn::Addr(vec![2]),
            Bootstrap::Stream,
            crate::KEY,
        )
        .unwrap();
    let h = GroupHeader {
        group_id: 1,
        size: 1,
        context_id: 1,
    };
    let mut j = Join::new(
        Instant(0),
        p,
        hs_config(h, endpoints(1, 1, 8), &Default::default()),
    )
    .unwrap();
    let before = j.clone();
    for bad in [
        &b"XX\x01\x01\x06\0\0\0\0"[..],
        b"DR\x01\x01\x01\0\0\0\0",
        b"DR\x01\x01\x06\0\0\0\x04\0\0\0\x09",
    ] {
        assert!(
            j.handle(
                Instant(1),
                dynres_core::spawn::JoinInput::JoinStream {
                    bytes: bad.to_vec()
                }
            )
            .is_err()
        );
        assert_eq!(j, before);
    }
}

/// Moves every datagram `from` queued to `to`, which sees it sent from `addr`; returns
/// the results of `to`'s `handle`.
fn pump(from: &mut Handshake, addr: &[u8], to: &mut Handshake) -> Vec<Result<(), SpawnError>> {
    let mut results = Vec::new();
    while let Some(o) = from.poll_output() {
        if let dynres_core::spawn::Output::SendDatagram { bytes, .. } = o {
            let input = dynres_core::spawn::Input::Datagram {
                from: dynres_core::spawn::Addr(addr.to_vec()),
                bytes,
            };
            results.push(to.handle(Instant(1), input));
        }
    }
    results
}

#[test]
fn a_second_initiator_with_the_same_session_is_refused_and_equal_ids_merge_alike() {
    // SPAWN-10 and spec/spawn.md §10: one connection per accept. Two jobs' groups may
    // share a group id, hence a session; only the address tells them apart. SPAWN-15:
    // on equal group ids and equal `high` flags the acceptor's group comes first.
    let port = PortName::parse(
        "dynres:2:dgram:a0:a1:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
    )
    .unwrap();
    let cfg = spawn_sim::ChildCfg::default();
    let header = |size| GroupHeader {
        group_id: 2,
        size,
        context_id: 1,
    };
    let mut server = Handshake::accept(
        Instant(0),
        port.clone(),
        hs_config(header(2), endpoints(2, 2, 20), &cfg),
    )
    .unwrap();
    let mut a = Handshake::connect(
        Instant(0),
        port.clone(),
        hs_config(header(1), endpoints(2, 1, 20), &cfg),
    )
    .unwrap();
    let mut b_eps = endpoints(2, 1, 20);
    b_eps[0].0[0] = 0xbb;
    let mut b = Handshake::connect(Instant(0), port, hs_config(header(1), b_eps, &cfg)).unwrap();
    assert!(pump(&mut a, b"A", &mut server).iter().all(Result::is_ok));
    let before = server.clone();
    let refused = pump(&mut b, b"B", &mut server);
    assert_eq!(refused, vec![Err(SpawnError::UnknownPeer)]);
    assert_eq!(server, before, "a refused datagram changes nothing");
    for _ in 0..4 {
        pump(&mut server, &[0xa0], &mut a);
        pump(&mut a, b"A", &mut server);
    }
    let (sig, aig) = (server.intergroup().unwrap(), a.intergroup().unwrap());
    assert_eq!(
        (sig.remote, aig.remote),
        (a.config().local, server.config().local)
    );
    assert_eq!(sig.remote_endpoints, a.config().local_endpoints);
    assert!(b.intergroup().is_none());
    for (hs, ha) in [(false, false), (true, true), (false, true), (true, false)] {
        let (ms, ma) = (merge(sig, hs, ha), merge(aig, ha, hs));
        assert_eq!(ms.members, ma.members);
        assert_eq!(ms.endpoints, ma.endpoints);
        let server_first = hs == ha || !hs;
        assert_eq!(ms.rank, if server_first { 0 } else { 1 });
        assert_eq!(ma.rank, if server_first { 2 } else { 0 });
    }
}

#[test]
fn a_later_accept_refuses_a_late_hello_of_the_connection_its_port_served() {
    // SPAWN-21: a port accepts twice. A copy of the first initiator's Hello still on its
    // way when the first connection is Done must not open the second accept's session
    // (a ghost connection: the second initiator would be refused with UnknownPeer and
    // time out). The second initiator's group has the same id, hence the same session
    // and triple: only the address tells the late Hello from it.
    use dynres_core::spawn::{Addr, Input, Output, Phase, Served};
    let port = PortName::parse(
        "dynres:2:dgram:a0:a1:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
    )
    .unwrap();
    let cfg = spawn_sim::ChildCfg::default();
    let header = |context_id| GroupHeader {
        group_id: 2,
        size: 1,
        context_id,
    };
    let server_cfg = |context_id| hs_config(header(context_id), endpoints(1, 1, 20), &cfg);
    let mut first = Handshake::accept(Instant(0), port.clone(), server_cfg(1)).unwrap();
    let mut a = Handshake::connect(
        Instant(0),
        port.clone(),
        hs_config(header(1), endpoints(2, 1, 20), &cfg),
    )
    .unwrap();
    // The Hello queued at `a`: delivered now, and its copy later.
    let hello = match a.clone().poll_output() {
        Some(Output::SendDatagram { bytes, .. }) => bytes,
        other => panic!("an initiator starts with its Hello, not {other:?}"),
    };
    let late = || Input::Datagram {
        from: Addr(b"A".to_vec()),
        bytes: hello.clone(),
    };
    for _ in 0..4 {
        pump(&mut a, b"A", &mut first);
        pump(&mut first, &[0xa0], &mut a);
    }
    assert_eq!((first.phase(), a.phase()), (Phase::Done, Phase::Done));
    let served = first
        .served()
        .expect("a Hello opened the first accept's session");
    assert_eq!(
        served,
        Served {
            from: Addr(b"A".to_vec()),
            session: 2
        }
    );
    assert_eq!(a.served(), None, "an initiator serves nobody");

    let mut second_cfg = server_cfg(2);
    second_cfg.served = vec![served];
    let mut second = Handshake::accept(Instant(1), port.clone(), second_cfg).unwrap();
    let before = second.clone();
    assert_eq!(
        second.handle(Instant(1), late()),
        Err(SpawnError::Unexpected {
            what: "Hello of a connection the port already served"
        })
    );
    assert_eq!(
        second, before,
        "a refused late Hello changes nothing (SPAWN-10)"
    );
    assert_eq!(second.phase(), Phase::Listening);
    assert_eq!(second.served(), None);

    // The genuine second initiator, same session and triple, from another address.
    let mut b = Handshake::connect(
        Instant(1),
        port,
        hs_config(header(1), endpoints(2, 1, 20), &cfg),
    )
    .unwrap();
    for _ in 0..4 {
        assert!(pump(&mut b, b"B", &mut second).iter().all(Result::is_ok));
        pump(&mut second, &[0xa0], &mut b);
    }
    assert_eq!((second.phase(), b.phase()), (Phase::Done, Phase::Done));
    assert_eq!(second.served().map(|s| s.from), Some(Addr(b"B".to_vec())));
    assert_eq!(second.intergroup().unwrap().remote, b.config().local);
    // Once the second connection runs, the late Hello is a stranger's datagram.
    assert_eq!(
        second.handle(Instant(2), late()),
        Err(SpawnError::UnknownPeer)
    );
}
