//! Spawns of 1..64 children from parent groups of 1..8 over each bootstrap, through the
//! seeded fault-injecting world of `spawn_sim` (spec/spawn.md).

use crate::spawn_sim;

use dynres_core::spawn::{Bootstrap, ContextIds, Ports, Transport};
use spawn_sim::{Faults, Sim};

const CHILDREN: [u32; 10] = [1, 2, 3, 5, 8, 13, 21, 33, 47, 64];

struct Run {
    sim: Sim,
    parent: usize,
    child: usize,
}

fn spawn_once(seed: u64, boot: Bootstrap, faults: Faults) -> Run {
    let mut sim = Sim::new(seed, faults);
    let parent_size = 1 + (seed % 8) as u32;
    let children = CHILDREN[(seed / 8 % CHILDREN.len() as u64) as usize];
    if seed % 3 == 0 {
        // Small MTU: endpoint tables of every size span several segments.
        sim.child_cfg.mtu = 256;
    }
    let mut ports = Ports::new();
    let mut ctx = ContextIds::new(1, 1 << 16);
    let parent = sim.add_spawn(&mut ports, boot, parent_size, children, &mut ctx);
    sim.run();
    let child = sim.child_of(parent).expect("children launched");
    Run { sim, parent, child }
}

fn assert_spawned(run: &Run, seed: u64) {
    let (sim, parent, child) = (&run.sim, run.parent, run.child);
    // SPAWN-4, SPAWN-6, SPAWN-7 on both sides; `get_parent` on every child.
    let pig = sim.assert_group_connected(parent, child);
    let cig = sim.assert_group_connected(child, parent);
    assert_eq!(pig.remote.size, cig.local.size);
    assert!(
        sim.roots[parent].kills.is_empty(),
        "seed {seed}: a successful spawn killed its children"
    );
    assert_eq!(sim.roots[parent].launches, 1);
    assert_eq!(
        sim.roots[parent].ready.len(),
        1,
        "seed {seed}: exactly one Ready"
    );
    assert_eq!(
        sim.roots[child].ready.len(),
        1,
        "seed {seed}: exactly one Ready"
    );
}

#[test]
fn spawn_over_lossy_datagrams_agrees_on_both_sides() {
    let (mut corrupted, mut detected, mut datagrams) = (0, 0, 0);
    for seed in 0..200 {
        let run = spawn_once(seed, Bootstrap::Datagram, Faults::LOSSY);
        assert_spawned(&run, seed);
        let hs = run.sim.roots[run.parent].m.handshake().unwrap();
        assert_eq!(hs.endpoints_via(), Some(Transport::Datagram));
        corrupted += run.sim.stats.corrupted_delivered;
        detected += run.sim.stats.checksum_errors;
        datagrams += run.sim.stats.datagrams;
    }
    // SPAWN-12: corruption happened and every corrupted datagram was caught by the CRC
    // (the world also asserts this per datagram).
    assert!(
        corrupted > 100,
        "the channel corrupted only {corrupted} of {datagrams}"
    );
    assert_eq!(corrupted, detected);
    eprintln!("datagrams {datagrams}, corrupted {corrupted}");
}

#[test]
fn spawn_over_stream_agrees_on_both_sides() {
    for seed in 0..120 {
        let run = spawn_once(seed, Bootstrap::Stream, Faults::NONE);
        assert_spawned(&run, seed);
        assert_eq!(
            run.sim.stats.datagrams, 0,
            "stream bootstrap sends no datagrams"
        );
        let hs = run.sim.roots[run.child].m.handshake().unwrap();
        assert_eq!(hs.endpoints_via(), Some(Transport::Stream));
    }
}

#[test]
fn hybrid_switches_by_group_size() {
    // SPAWN-9: datagram tables up to the threshold, stream above it.
    let threshold = 8;
    let (mut via_dgram, mut via_stream) = (0, 0);
    for seed in 0..160 {
        let run = spawn_once(seed, Bootstrap::Hybrid { threshold }, Faults::LOSSY);
        assert_spawned(&run, seed);
        let p = run.sim.roots[run.parent].m.handshake().unwrap();
        let c = run.sim.roots[run.child].m.handshake().unwrap();
        let ig = p.intergroup().unwrap();
        let want = if ig.local.size.max(ig.remote.size) <= threshold {
            Transport::Datagram
        } else {
            Transport::Stream
        };
        assert_eq!(p.endpoints_via(), Some(want), "seed {seed}");
        assert_eq!(c.endpoints_via(), Some(want), "seed {seed}");
        match want {
            Transport::Datagram => via_dgram += 1,
            Transport::Stream => via_stream += 1,
        }
    }
    assert!(
        via_dgram > 20 && via_stream > 20,
        "both branches exercised: {via_dgram}/{via_stream}"
    );
}

#[test]
fn repeated_spawns_use_unique_context_ids() {
    // SPAWN-5: three concurrent spawns of one job, then disconnect and re-use.
    let mut sim = Sim::new(7, Faults::LOSSY);
    let mut ports = Ports::new();
    let mut ctx = ContextIds::new(1, 1 << 16);
    let parents: Vec<usize> = (0..3)
        .map(|k| sim.add_spawn(&mut ports, Bootstrap::Datagram, 2, 3 + k, &mut ctx))
        .collect();
    sim.run();
    let mut ids: Vec<u32> = parents
        .iter()
        .map(|&p| {
            let c = sim.child_of(p).unwrap();
            sim.assert_group_connected(p, c).local.context_id
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    let first = sim.roots[parents[0]].handle().unwrap().clone();
    let freed = first.local.context_id;
    first.disconnect(&mut ctx).unwrap();
    assert!(!ctx.is_live(freed));
    assert_eq!(
        ctx.allocate().unwrap(),
        freed,
        "the lowest free id comes back"
    );
}
