//! The spawn handshake alone, no I/O: a parent root (group of 1) spawns 1, 8 or 64
//! children and both roots run to `Ready`, messages handed over in memory without loss.
//! Run: `cargo bench -p dynres-core --bench spawn_handshake -- --warm-up-time 1 --measurement-time 3`

use std::collections::VecDeque;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use dynres_core::spawn::{
    Addr, BootKey, Bootstrap, GroupHeader, Handshake, HandshakeConfig, Input, Output, PortName,
    SpawnConfig, SpawnEnv, SpawnParent,
};
use dynres_core::{Instant, Namespace};

fn eps(group: u64, n: u32) -> Vec<Addr> {
    // 24-byte endpoints: LID, QPNs and a GID prefix, like a UD/RC address.
    (0..n)
        .map(|r| Addr([group.to_be_bytes(), u64::from(r).to_be_bytes(), [0xee; 8]].concat()))
        .collect()
}

fn spawn_handshake(boot: Bootstrap, children: u32) -> usize {
    let now = Instant(0);
    let port = PortName {
        boot,
        dgram: Addr(vec![1]),
        stream: Addr(vec![2]),
        tag: 0,
        key: BootKey([1; 32]),
    };
    let parent_h = GroupHeader {
        group_id: 1,
        size: 1,
        context_id: 1,
    };
    let cfg = SpawnConfig {
        handshake: HandshakeConfig::new(parent_h, eps(1, 1)),
        port,
        maxprocs: children,
        child_namespace: Namespace::new("children"),
        child_group_id: 2,
        key: BootKey([2; 32]),
    };
    let mut parent = SpawnParent::new(now, cfg).expect("valid spawn");
    let mut child: Option<Handshake> = None;
    let (parent_addr, child_addr) = (Addr(vec![1]), Addr(vec![3]));
    // (to_parent, input)
    let mut wire: VecDeque<(bool, Input)> = VecDeque::new();
    let mut ready = 0;
    let mut members = 0;
    loop {
        while let Some(o) = parent.poll_output() {
            match o {
                Output::Launch { env, .. } => {
                    let vars = env.iter().map(|(k, v)| (k.as_str(), v.as_str()));
                    let env = SpawnEnv::from_env(vars).expect("env").expect("spawned");
                    let h = GroupHeader {
                        group_id: env.group_id,
                        size: env.size,
                        context_id: 1,
                    };
                    let cfg = HandshakeConfig::new(h, eps(env.group_id, env.size));
                    child =
                        Some(Handshake::connect(now, env.parent_port, cfg).expect("valid child"));
                }
                Output::SendDatagram { bytes, .. } => wire.push_back((
                    false,
                    Input::Datagram {
                        from: parent_addr.clone(),
                        bytes,
                    },
                )),
                Output::SendStream { bytes } => wire.push_back((false, Input::Stream { bytes })),
                Output::Ready(_) => ready += 1,
                Output::ToMember { msg, .. } => {
                    black_box(msg);
                    members += 1;
                }
                _ => {}
            }
        }
        if let Some(c) = child.as_mut() {
            while let Some(o) = c.poll_output() {
                match o {
                    Output::SendDatagram { bytes, .. } => wire.push_back((
                        true,
                        Input::Datagram {
                            from: child_addr.clone(),
                            bytes,
                        },
                    )),
                    Output::SendStream { bytes } => wire.push_back((true, Input::Stream { bytes })),
                    Output::Ready(_) => ready += 1,
                    Output::ToMember { msg, .. } => {
                        black_box(msg);
                        members += 1;
                    }
                    _ => {}
                }
            }
        }
        match wire.pop_front() {
            Some((true, input)) => parent.handle(now, input.into()).expect("well-formed"),
            Some((false, input)) => child
                .as_mut()
                .expect("child")
                .handle(now, input)
                .expect("well-formed"),
            None => break,
        }
    }
    assert_eq!(ready, 2, "both roots ready");
    members
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("spawn_handshake");
    for (name, boot) in [
        ("datagram", Bootstrap::Datagram),
        ("stream", Bootstrap::Stream),
        ("hybrid32", Bootstrap::DEFAULT_HYBRID),
    ] {
        for children in [1u32, 8, 64] {
            g.bench_with_input(BenchmarkId::new(name, children), &children, |b, &n| {
                b.iter(|| spawn_handshake(boot, black_box(n)))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
