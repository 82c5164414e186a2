//! End-to-end tests of the calls: each "process" is a thread with its own transport;
//! groups are `Communicator::from_table` over the threads' addresses.

use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dynres_core::spawn::{
    Addr, Bootstrap, GroupHeader, InterGroup, PortName, Role, SpawnEnv, SpawnError, merge,
};
use dynres_transports::PeerAddrs;

use super::endpoint::encode_sockaddr;
use super::*;
use crate::comm::{Communicator, Transport};
use crate::error::CommError;

/// Every call's timeout: long enough for a loaded machine, short enough that a bug fails.
const T: Duration = Duration::from_secs(5);

static NEXT_CTX: AtomicU32 = AtomicU32::new(1000);

/// Runs `f` on `n` threads that form one group; each thread returns `f`'s result. A
/// thread keeps its transport until every member finished (or 20 s passed), so nobody
/// sends into a closed inbox.
fn group<R, F>(n: usize, f: F) -> Vec<JoinHandle<R>>
where
    R: Send + 'static,
    F: Fn(Communicator) -> R + Send + Sync + 'static,
{
    let f = Arc::new(f);
    let table: Arc<Mutex<Vec<Option<PeerAddrs>>>> = Arc::new(Mutex::new(vec![None; n]));
    let done = Arc::new(AtomicUsize::new(0));
    let ctx = NEXT_CTX.fetch_add(1, Ordering::Relaxed);
    (0..n)
        .map(|i| {
            let (f, table, done) = (f.clone(), table.clone(), done.clone());
            std::thread::spawn(move || {
                let t = Transport::new().expect("transport");
                table.lock().unwrap()[i] = Some(t.local_addrs());
                let start = Instant::now();
                let members = loop {
                    let tab = table.lock().unwrap().clone();
                    if tab.iter().all(Option::is_some) {
                        break tab
                            .into_iter()
                            .enumerate()
                            .map(|(r, a)| (r as u32, a.expect("checked")))
                            .collect::<Vec<_>>();
                    }
                    assert!(
                        start.elapsed() < Duration::from_secs(20),
                        "group never formed"
                    );
                    std::thread::sleep(Duration::from_millis(2));
                };
                let comm = Communicator::from_table(&t, "test", members, i, ctx).unwrap();
                let r = f(comm);
                done.fetch_add(1, Ordering::SeqCst);
                let start = Instant::now();
                while done.load(Ordering::SeqCst) < n && start.elapsed() < Duration::from_secs(20) {
                    std::thread::sleep(Duration::from_millis(2));
                }
                r
            })
        })
        .collect()
}

fn join_all<R>(hs: Vec<JoinHandle<R>>) -> Vec<R> {
    hs.into_iter()
        .map(|h| h.join().expect("a member panicked"))
        .collect()
}

/// What one member saw, for checks across the two groups.
#[derive(Debug)]
struct Seen {
    ig: InterGroup,
    merged_low: (usize, usize, Vec<u32>),
    merged_high: (usize, usize, Vec<u32>),
    expect_low: (usize, Vec<(u64, u32)>),
    expect_high: (usize, Vec<(u64, u32)>),
    merged_rank_sum: f64,
    live_after: usize,
}

/// The checks every member of either group runs once connected. `first` is whether
/// this is the accepting group (it passes `high = false` in the first merge).
fn exercise(ic: InterComm, comm: &Communicator, accepting: bool) -> Seen {
    let me = ic.rank();
    let (n, m) = (ic.local_size(), ic.remote_size());
    assert_eq!(n, comm.size());
    // Point to point, both ways: every rank to every remote rank.
    for q in 0..m {
        ic.send(q, 7, format!("{accepting}:{me}->{q}").as_bytes())
            .unwrap();
    }
    for q in 0..m {
        let got = ic.recv_timeout(q, 7, 64, T).unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            format!("{}:{q}->{me}", !accepting)
        );
    }
    ic.barrier().unwrap();
    // Broadcast from accepting rank 1 to the other group.
    let got = if accepting {
        ic.bcast(Side::Local, 1, b"from-a1").unwrap()
    } else {
        ic.bcast(Side::Remote, 1, b"ignored").unwrap()
    };
    match (accepting, me) {
        (true, 1) | (false, _) => assert_eq!(got, b"from-a1"),
        (true, _) => assert!(got.is_empty()),
    }
    // Each group gets the sum over the other one.
    let mine = if accepting {
        [1.0, me as f64]
    } else {
        [10.0, 100.0 * me as f64]
    };
    let sum = ic.allreduce_sum(&mine).unwrap();
    let tri = |k: usize| (k * (k - 1) / 2) as f64;
    if accepting {
        assert_eq!(sum, vec![10.0 * m as f64, 100.0 * tri(m)]);
    } else {
        assert_eq!(sum, vec![m as f64, tri(m)]);
    }
    // Merge twice with opposite flags; the order must be core's.
    let shape = |c: &Communicator| (c.rank(), c.size(), c.members().to_vec());
    let low = ic.merge(!accepting).unwrap();
    let high = ic.merge(accepting).unwrap();
    let el = merge(ic.intergroup(), !accepting, accepting);
    let eh = merge(ic.intergroup(), accepting, !accepting);
    // The merged communicator works: the sum of merged ranks over everybody.
    let merged_rank_sum = low.allreduce_sum(&[low.rank() as f64]).unwrap()[0];
    high.barrier().unwrap();
    let seen = Seen {
        ig: ic.intergroup().clone(),
        merged_low: shape(&low),
        merged_high: shape(&high),
        expect_low: (el.rank as usize, el.members),
        expect_high: (eh.rank as usize, eh.members),
        merged_rank_sum,
        live_after: 0,
    };
    ic.barrier().unwrap();
    let t = comm.transport().clone();
    let held = usize::from(!accepting);
    assert_eq!(t.context_ids().borrow().live_count(), 1 + held);
    ic.disconnect().unwrap();
    Seen {
        live_after: t.context_ids().borrow().live_count() - held,
        ..seen
    }
}

fn check_pair(acc: &[Seen], con: &[Seen]) {
    let total = acc.len() + con.len();
    for s in acc.iter().chain(con) {
        // SPAWN-15: the group that passed false comes first; core's order exactly.
        assert_eq!(s.merged_low.0, s.expect_low.0);
        assert_eq!(s.merged_high.0, s.expect_high.0);
        let ranks = |v: &[(u64, u32)]| v.iter().map(|(_, r)| *r).collect::<Vec<_>>();
        assert_eq!(s.merged_low.2, ranks(&s.expect_low.1));
        assert_eq!(s.merged_high.2, ranks(&s.expect_high.1));
        assert_eq!(s.merged_low.1, total);
        assert_eq!(s.merged_rank_sum, (total * (total - 1) / 2) as f64);
        // SPAWN-5: disconnect gave the context id back.
        assert_eq!(s.live_after, 0);
    }
    // Everybody agrees on the merged order, and ranks are distinct.
    let mut lows: Vec<usize> = acc.iter().chain(con).map(|s| s.merged_low.0).collect();
    lows.sort();
    assert_eq!(lows, (0..total).collect::<Vec<_>>());
    assert!(
        acc.iter()
            .chain(con)
            .all(|s| s.expect_low.1 == acc[0].expect_low.1)
    );
    // Accepting group first when it passed high = false.
    assert_eq!(acc[0].expect_low.1[0], (acc[0].ig.local.group_id, 0));
    assert_eq!(acc[0].expect_high.1[0], (con[0].ig.local.group_id, 0));
    // SPAWN-4: the same pair of triples everywhere, mirrored between the groups.
    for s in acc {
        assert_eq!(s.ig.local, acc[0].ig.local);
        assert_eq!(s.ig.remote, con[0].ig.local);
        assert_eq!(s.ig.session, con[0].ig.session);
        assert_eq!(s.ig.role, Role::Acceptor);
    }
    for s in con {
        assert_eq!(s.ig.remote, acc[0].ig.local);
        assert_eq!(s.ig.role, Role::Initiator);
    }
}

/// Makes the lowest inter-communicator context id live on `t`.
fn hold_lowest_context(t: &Transport) {
    let ids = t.context_ids().clone();
    let first = ids.borrow().range().start;
    ids.borrow_mut().reserve(first).unwrap();
}

fn accept_connect(boot: Bootstrap) {
    let (tx, rx) = mpsc::channel::<String>();
    let tx = Mutex::new(tx);
    let rx = Mutex::new(rx);
    let acc = group(2, move |comm| {
        let port = (comm.rank() == 0).then(|| open_port(boot).unwrap());
        if let Some(p) = &port {
            tx.lock().unwrap().send(p.name().to_string()).unwrap();
        }
        let ic = accept(&comm, 0, port.as_ref(), T).unwrap();
        if let Some(p) = port {
            close_port(p).unwrap();
        }
        exercise(ic, &comm, true)
    });
    let con = group(3, move |comm| {
        let name = if comm.rank() == 0 {
            rx.lock().unwrap().recv_timeout(T).unwrap()
        } else {
            String::new()
        };
        // The connecting group's context id differs from the accepting group's, so a
        // message sent on the wrong one is never matched.
        hold_lowest_context(&comm.transport().clone());
        let ic = connect(&comm, 0, &name, T).unwrap();
        assert_ne!(
            ic.intergroup().local.context_id,
            ic.intergroup().remote.context_id
        );
        exercise(ic, &comm, false)
    });
    let (acc, con) = (join_all(acc), join_all(con));
    check_pair(&acc, &con);
}

#[test]
fn accept_connect_over_datagrams() {
    accept_connect(Bootstrap::Datagram);
}

#[test]
fn accept_connect_over_a_stream() {
    accept_connect(Bootstrap::Stream);
}

#[test]
fn accept_connect_hybrid_switching_to_the_stream() {
    // Groups of 2 and 3 above a threshold of 1: the tables take the stream (SPAWN-9).
    accept_connect(Bootstrap::Hybrid { threshold: 1 });
}

#[test]
fn accept_connect_hybrid_default_stays_on_datagrams() {
    accept_connect(Bootstrap::DEFAULT_HYBRID);
}

#[test]
fn join_over_a_socket_pair() {
    let (a, b) = UnixStream::pair().unwrap();
    let run = |s: UnixStream, first: bool| {
        std::thread::spawn(move || {
            let t = Transport::new().unwrap();
            if first {
                hold_lowest_context(&t);
            }
            let ic = join(&t, OwnedFd::from(s), T).unwrap();
            assert_ne!(
                ic.intergroup().local.context_id,
                ic.intergroup().remote.context_id
            );
            assert_eq!((ic.local_size(), ic.remote_size(), ic.rank()), (1, 1, 0));
            if first {
                ic.send(0, 1, b"ping").unwrap();
                assert_eq!(ic.recv_timeout(0, 2, 8, T).unwrap(), b"pong");
            } else {
                assert_eq!(ic.recv_timeout(0, 1, 8, T).unwrap(), b"ping");
                ic.send(0, 2, b"pong").unwrap();
            }
            let sum = ic.allreduce_sum(&[if first { 1.0 } else { 2.0 }]).unwrap();
            let merged = ic.merge(first).unwrap();
            let r = (ic.intergroup().clone(), sum, merged.rank());
            ic.barrier().unwrap();
            r
        })
    };
    let (ha, hb) = (run(a, true), run(b, false));
    let (ia, sa, ma) = ha.join().unwrap();
    let (ib, sb, mb) = hb.join().unwrap();
    // SPAWN-14: opposite roles; SPAWN-4: mirrored triples.
    assert_ne!(ia.role, ib.role);
    assert_eq!(ia.remote, ib.local);
    assert_eq!(ib.remote, ia.local);
    assert_eq!((sa, sb), (vec![2.0], vec![1.0]));
    // The side that passed high = false (b) comes first.
    assert_eq!((ma, mb), (1, 0));
}

/// A launcher that runs the children as threads of this process.
#[derive(Default)]
struct FakeLauncher {
    children: Vec<JoinHandle<ChildSeen>>,
    /// Pretend the children died at once: start nothing, report them lost.
    dead: bool,
    /// Refuse to launch.
    refuse: bool,
    /// A stranger (a socket of its own) sends forged Hellos to the parent's port before
    /// the children start: it knows the children's group and size, not the spawn's key.
    stranger: bool,
    /// Forged datagrams the stranger sent.
    forged_sent: usize,
    launches: u32,
    kills: u32,
    envs: Vec<(String, String)>,
    sizes: Vec<u32>,
}

#[derive(Debug)]
struct ChildSeen {
    rank: usize,
    parents: usize,
    sum: Vec<f64>,
    ig: InterGroup,
}

impl ChildLauncher for FakeLauncher {
    fn launch(
        &mut self,
        cmds: &[SpawnCommand],
        env: &[(String, String)],
    ) -> Result<LaunchedGroup, String> {
        self.launches += 1;
        self.envs = env.to_vec();
        self.sizes = cmds.iter().map(|c| c.count).collect();
        if self.refuse {
            return Err("no nodes left".into());
        }
        let count: u32 = cmds.iter().map(|c| c.count).sum();
        if !self.dead {
            let env = SpawnEnv::from_env(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(|e| e.to_string())?;
            if self.stranger {
                self.forged_sent = send_forged_hellos(env.as_ref().expect("spawned"));
            }
            self.children = group(count as usize, move |comm| {
                let ic = get_parent_with(&comm, env.clone(), T).unwrap().unwrap();
                ic.send(0, 5, &[comm.rank() as u8]).unwrap();
                let sum = ic.allreduce_sum(&[10.0]).unwrap();
                let seen = ChildSeen {
                    rank: ic.rank(),
                    parents: ic.remote_size(),
                    sum,
                    ig: ic.intergroup().clone(),
                };
                ic.barrier().unwrap();
                seen
            });
        }
        Ok(LaunchedGroup { id: 1 })
    }

    fn kill(&mut self, _: &LaunchedGroup) {
        self.kills += 1;
    }

    fn lost(&mut self, _: &LaunchedGroup) -> Option<String> {
        self.dead
            .then(|| "child 1 exited with status 9".to_string())
    }
}

/// A stranger's forged Hellos to a spawn's parent port (SPAWN-22): the children's group
/// id and size with a guessed key, from a socket of its own, a few times (datagrams may
/// be reordered, and a flood is what a stranger would send). Returns how many it sent.
fn send_forged_hellos(env: &SpawnEnv) -> usize {
    use dynres_core::spawn::datagram::{DgramFrame, Segment};
    use dynres_core::spawn::{BootKey, HsMsg};
    let to = super::endpoint::decode_sockaddr(&env.parent_port.dgram).unwrap();
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    let header = GroupHeader {
        group_id: env.group_id,
        size: env.size,
        context_id: 1,
    };
    let forged = |key: u8| {
        let payload = HsMsg::Hello {
            session: env.group_id,
            header,
        }
        .encode();
        DgramFrame::Segment(Segment {
            session: env.group_id,
            msg_seq: 0,
            index: 0,
            count: 1,
            payload,
        })
        .encode(&BootKey([key; 32]), Role::Initiator)
    };
    let n = 5;
    for key in 0..n {
        stranger.send_to(&forged(key), to).unwrap();
    }
    usize::from(n)
}

#[test]
fn spawn_connects_parents_and_children() {
    let parents = group(2, |comm| {
        let mut fake = FakeLauncher::default();
        let cmds = [
            SpawnCommand {
                program: "a".into(),
                args: vec![],
                count: 2,
            },
            SpawnCommand {
                program: "b".into(),
                args: vec!["-x".into()],
                count: 1,
            },
        ];
        let ic = if comm.rank() == 0 {
            spawn(&comm, 0, &mut fake, &cmds, T).unwrap()
        } else {
            spawn(&comm, 0, &mut NoLauncher, &[], T).unwrap()
        };
        assert_eq!(ic.remote_size(), 3);
        if ic.rank() == 0 {
            let mut from: Vec<u8> = (0..3).map(|q| ic.recv(q, 5, 1).unwrap()[0]).collect();
            from.sort();
            assert_eq!(from, vec![0, 1, 2]);
        }
        let sum = ic.allreduce_sum(&[1.0]).unwrap();
        let ig = ic.intergroup().clone();
        ic.barrier().unwrap();
        let children = join_all(std::mem::take(&mut fake.children));
        (ig, sum, fake, children)
    });
    let parents = join_all(parents);
    let (root_ig, _, fake, children) = &parents[0];
    // SPAWN-3: one launch of all commands, the port in the environment, no kill.
    assert_eq!((fake.launches, fake.kills), (1, 0));
    assert_eq!(fake.sizes, vec![2, 1]);
    let env = SpawnEnv::from_env(fake.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .unwrap()
        .unwrap();
    assert_eq!(env.size, 3);
    assert_eq!(env.group_id, root_ig.remote.group_id);
    assert_eq!(children.len(), 3);
    for (_, sum, _, _) in &parents {
        assert_eq!(sum, &vec![30.0]);
    }
    for c in children {
        assert_eq!(c.parents, 2);
        assert_eq!(c.sum, vec![2.0]);
        assert_eq!(c.ig.local, root_ig.remote);
        assert_eq!(c.ig.remote, root_ig.local);
        assert!(c.rank < 3);
    }
}

/// SPAWN-22: a stranger who sends forged Hellos to the parent's bootstrap port while a
/// real spawn runs (after the launch, before the children's root says Hello) takes
/// nothing over: the spawn connects its own children. Before issue 28 the first forged
/// Hello opened the parent's handshake and the children were refused.
#[test]
fn a_strangers_forged_hellos_do_not_take_a_spawn_over() {
    let parents = group(2, |comm| {
        let mut fake = FakeLauncher {
            stranger: true,
            ..FakeLauncher::default()
        };
        let cmds = [SpawnCommand {
            program: "a".into(),
            args: vec![],
            count: 2,
        }];
        let ic = if comm.rank() == 0 {
            spawn(&comm, 0, &mut fake, &cmds, T).unwrap()
        } else {
            spawn(&comm, 0, &mut NoLauncher, &[], T).unwrap()
        };
        let sum = ic.allreduce_sum(&[1.0]).unwrap();
        let ig = ic.intergroup().clone();
        ic.barrier().unwrap();
        let children = join_all(std::mem::take(&mut fake.children));
        (ig, sum, fake.forged_sent, children)
    });
    let parents = join_all(parents);
    let (root_ig, _, sent, children) = &parents[0];
    assert_eq!(*sent, 5, "the stranger sent its Hellos");
    assert_eq!(children.len(), 2);
    for (_, sum, _, _) in &parents {
        assert_eq!(sum, &vec![20.0], "the parents talk to the real children");
    }
    for c in children {
        assert_eq!(c.ig.local, root_ig.remote);
        assert_eq!(c.ig.remote, root_ig.local);
    }
}

#[test]
fn not_spawned_means_no_parent_and_sizes_must_match() {
    let out = group(1, |comm| {
        let none = get_parent_with(&comm, None, T).unwrap().is_none();
        let env = SpawnEnv {
            parent_port: PortName::parse("dynres:2:dgram:047f00000100:047f00000100:0:5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a").unwrap(),
            group_id: 5,
            size: 2,
        };
        let wrong = get_parent_with(&comm, Some(env), T);
        (none, matches!(wrong, Err(CommError::InvalidArgument(_))))
    });
    assert_eq!(join_all(out), vec![(true, true)]);
}

fn failing_spawn(fake: FakeLauncher) -> Vec<(Option<SpawnError>, u32, u32, usize)> {
    let fake = Arc::new(Mutex::new(Some(fake)));
    join_all(group(2, move |comm| {
        let mut mine = if comm.rank() == 0 {
            fake.lock().unwrap().take().unwrap()
        } else {
            FakeLauncher::default()
        };
        let cmds = [SpawnCommand {
            program: "a".into(),
            args: vec![],
            count: 2,
        }];
        let r = spawn(&comm, 0, &mut mine, &cmds, T);
        let err = match r {
            Err(CommError::Spawn(e)) => Some(e),
            Err(other) => panic!("untyped failure: {other}"),
            Ok(_) => None,
        };
        let live = comm.transport().context_ids().borrow().live_count();
        (err, mine.launches, mine.kills, live)
    }))
}

#[test]
fn spawn_fails_when_a_child_dies_and_kills_once() {
    // SPAWN-8: the launcher reports a dead child while the parent waits for the
    // children's root; the spawn fails with LaunchFailed everywhere, one kill.
    let fake = FakeLauncher {
        dead: true,
        ..FakeLauncher::default()
    };
    let out = failing_spawn(fake);
    let want = SpawnError::LaunchFailed {
        reason: "child 1 exited with status 9".into(),
    };
    assert_eq!(out[0], (Some(want.clone()), 1, 1, 0));
    assert_eq!(out[1], (Some(want), 0, 0, 0));
}

#[test]
fn spawn_fails_when_the_launch_fails_and_kills_nothing() {
    let fake = FakeLauncher {
        refuse: true,
        ..FakeLauncher::default()
    };
    let out = failing_spawn(fake);
    let want = SpawnError::LaunchFailed {
        reason: "no nodes left".into(),
    };
    assert_eq!(out[0], (Some(want.clone()), 1, 0, 0));
    assert_eq!(out[1], (Some(want), 0, 0, 0));
}

/// Connects a group of two to `name`; returns each member's error and its live
/// context ids afterwards.
fn connect_fails(name: String, timeout: Duration) -> Vec<(CommError, usize)> {
    join_all(group(2, move |comm| {
        let e = connect(&comm, 0, &name, timeout).unwrap_err();
        (e, comm.transport().context_ids().borrow().live_count())
    }))
}

#[test]
fn connect_to_a_closed_port_fails_typed() {
    for boot in [Bootstrap::Datagram, Bootstrap::Stream] {
        let port = open_port(boot).unwrap();
        let name = port.name().to_string();
        close_port(port).unwrap();
        for (e, live) in connect_fails(name, Duration::from_secs(2)) {
            assert_eq!(live, 0, "context id kept after a failure");
            match (boot, e) {
                (
                    Bootstrap::Datagram,
                    CommError::Spawn(
                        SpawnError::Timeout { .. } | SpawnError::PeerUnreachable { .. },
                    ),
                )
                | (Bootstrap::Stream, CommError::Spawn(SpawnError::StreamClosed)) => {}
                (b, e) => panic!("{b:?}: unexpected {e}"),
            }
        }
    }
}

#[test]
fn bad_port_name_fails_every_member() {
    for (e, live) in connect_fails("dynres:9:nonsense".into(), T) {
        assert!(
            matches!(
                e,
                CommError::Spawn(SpawnError::BadPort { .. } | SpawnError::Reported { code: 2, .. })
            ),
            "{e}"
        );
        assert_eq!(live, 0);
    }
}

#[test]
fn stream_closed_mid_handshake_fails_the_connect() {
    // A fake acceptor reads the Hello from the stream and hangs up.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let name = PortName {
        boot: Bootstrap::Stream,
        dgram: encode_sockaddr(&udp.local_addr().unwrap()),
        stream: encode_sockaddr(&listener.local_addr().unwrap()),
        tag: 0,
        key: dynres_core::spawn::BootKey([3; 32]),
    }
    .to_string();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        let mut hello = [0u8; 9];
        s.read_exact(&mut hello).unwrap();
        hello
    });
    let out = connect_fails(name, T);
    let hello = fake.join().unwrap();
    assert_eq!(&hello[..5], &[b'D', b'R', 1, 0x01, 0x01], "a Hello frame");
    for (e, live) in out {
        assert!(
            matches!(e, CommError::Spawn(SpawnError::StreamClosed)),
            "{e}"
        );
        assert_eq!(live, 0);
    }
    drop(udp);
}

#[test]
fn context_ids_are_agreed_across_a_group() {
    // One member already holds the lowest id: the group takes the next one free at all.
    let out = join_all(group(3, |comm| {
        let ids = comm.transport().context_ids().clone();
        let first = ids.borrow().range().start;
        if comm.rank() == 1 {
            ids.borrow_mut().reserve(first).unwrap();
        }
        let (h, eps): (GroupHeader, Vec<Addr>) = super::calls::local_group_for_test(&comm).unwrap();
        (h.context_id - first, eps.len(), ids.borrow().live_count())
    }));
    assert_eq!(out, vec![(1, 3, 1), (1, 3, 2), (1, 3, 1)]);
}

#[test]
fn a_second_accept_refuses_the_first_connections_late_hello() {
    // SPAWN-21: a port accepts twice. A copy of client A's Hello arriving after the
    // first connection is decided (sent here from A's own address, free again once A's
    // connect returned) must not pair the second accept with A; client B, connecting
    // next, is served.
    use dynres_core::spawn::{Handshake, HandshakeConfig, Output};
    let (name_tx, name_rx) = mpsc::channel::<String>();
    let (first_tx, first_rx) = mpsc::channel::<(Vec<dynres_core::spawn::Served>, Addr)>();
    let (again_tx, again_rx) = mpsc::channel::<()>();
    let (name_tx, first_tx) = (Mutex::new(name_tx), Mutex::new(first_tx));
    let again_rx = Mutex::new(again_rx);
    let acc = group(1, move |comm| {
        let port = open_port(Bootstrap::Datagram).unwrap();
        name_tx
            .lock()
            .unwrap()
            .send(port.name().to_string())
            .unwrap();
        let first = accept(&comm, 0, Some(&port), T).unwrap();
        let dgram = port.port_name().dgram.clone();
        first_tx
            .lock()
            .unwrap()
            .send((port.served(), dgram))
            .unwrap();
        again_rx.lock().unwrap().recv_timeout(T).unwrap();
        let second = accept(&comm, 0, Some(&port), T).unwrap();
        close_port(port).unwrap();
        (first.intergroup().clone(), second.intergroup().clone())
    });
    let name = name_rx.recv_timeout(T).unwrap();
    let a_name = name.clone();
    let a = join_all(group(1, move |comm| {
        connect(&comm, 0, &a_name, T).unwrap().intergroup().clone()
    }));
    let (served, port_dgram) = first_rx.recv_timeout(T).unwrap();
    assert_eq!(served.len(), 1, "the first accept opened one connection");
    // A's Hello again, from A's address, queued on the port before the second accept.
    let mut cfg = HandshakeConfig::new(a[0].local, a[0].local_endpoints.clone());
    cfg.session = Some(served[0].session);
    let port_name = PortName::parse(&name).unwrap();
    let mut hs = Handshake::connect(dynres_core::Instant(0), port_name, cfg).unwrap();
    let Some(Output::SendDatagram { bytes, .. }) = hs.poll_output() else {
        panic!("an initiator starts with its Hello");
    };
    let from = super::endpoint::decode_sockaddr(&served[0].from).unwrap();
    let ghost = UdpSocket::bind(from).expect("A's address is free once its connect returned");
    let to = super::endpoint::decode_sockaddr(&port_dgram).unwrap();
    ghost.send_to(&bytes, to).unwrap();
    again_tx.send(()).unwrap();
    let b = join_all(group(1, move |comm| {
        connect(&comm, 0, &name, T).unwrap().intergroup().clone()
    }));
    let (first, second) = join_all(acc).pop().unwrap();
    assert_eq!(first.remote, a[0].local);
    assert_eq!(
        second.remote, b[0].local,
        "the second accept serves B, not A's ghost"
    );
    assert_eq!(second.remote_endpoints, b[0].local_endpoints);
    // Nothing was sent to A's old address: the late Hello opened no connection.
    ghost.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 2048];
    assert!(
        ghost.recv_from(&mut buf).is_err(),
        "a HelloAck went to the ghost"
    );
}
