//! The master ↔ daemon link from the master's side (`spec/runtime.md`, LINK-2..5): this
//! test plays the master against a real `dynres daemon` process — it authenticates it
//! (AUTH-1..4), then sends frames a real master would not, or would, and checks what the
//! daemon does with them.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::time::Duration;

use dynres_client::framing::{Frame, FrameReader};
use dynres_core::rc::ends::KillCause;
use dynres_core::rc::wire::link::{LinkMsg, NodeSetup, decode_link, encode_link, is_link_type};
use dynres_core::rc::wire::{decode_to_master, encode_to_daemon};
use dynres_core::rc::{LaunchCommand, NodeLaunch, ToDaemon, ToMaster};
use dynres_core::wire::decode_frame;
use dynres_core::{Namespace, ProcRuns, ProcessId};
use dynres_runtime::hostauth::master_handshake;
use dynres_tests::job::{Finished, Runtime, wait_bounded};

const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const NODE: u32 = 1;

/// A frame from the daemon other than a heartbeat.
#[derive(Debug, PartialEq)]
enum Got {
    /// A link control message.
    Link(LinkMsg),
    /// A message of core's daemon machine.
    Core(ToMaster),
}

/// A daemon for node 1 connected to this test as its master, authenticated.
struct FakeMaster {
    daemon: Child,
    link: TcpStream,
    frames: FrameReader,
}

impl FakeMaster {
    fn start(rt: &Runtime) -> FakeMaster {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let mut daemon = rt
            .command(&["daemon", "--master", &addr, "--node", &NODE.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        writeln!(daemon.stdin.take().unwrap(), "{KEY}").unwrap();
        let (mut link, _) = l.accept().unwrap();
        link.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let node = master_handshake(&mut link, KEY.as_bytes()).expect("the daemon authenticates");
        assert_eq!(node, NODE);
        FakeMaster {
            daemon,
            link,
            frames: FrameReader::new(),
        }
    }

    fn send(&mut self, frame: &[u8]) {
        self.link.write_all(frame).unwrap();
    }

    /// The next frame other than a heartbeat: a link message or a core message.
    fn next(&mut self) -> Got {
        loop {
            let frame = match self
                .frames
                .next(&mut self.link)
                .expect("read")
                .expect("frame")
            {
                Frame::Frame(f) => f,
                Frame::Closed => panic!("the daemon closed the link"),
            };
            let (h, _) = decode_frame(&frame).expect("a frame");
            if is_link_type(h.msg_type) {
                match decode_link(&frame).expect("a link message") {
                    LinkMsg::Heartbeat => continue,
                    m => return Got::Link(m),
                }
            }
            return Got::Core(decode_to_master(&frame).expect("a core frame, unchanged (LINK-3)"));
        }
    }

    fn finish(self, rt: &Runtime) -> Finished {
        drop(self.link);
        wait_bounded(self.daemon, rt.dir.clone(), Duration::from_secs(30))
            .unwrap_or_else(|f| panic!("the daemon did not exit\n{}", f.dump()))
    }
}

fn setup(node: u32, program: &str, args: &[&str]) -> LinkMsg {
    LinkMsg::Setup(Box::new(NodeSetup {
        node,
        job: "linkjob".into(),
        namespace: "job".into(),
        app: "app".into(),
        program: program.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        node_addr: "127.0.0.1".into(),
        shm_spins: 1000,
        // Long enough that neither side's silence matters during the test.
        heartbeat_ms: 10_000,
        cwd: "/".into(),
        cwd_required: false,
        env: vec![],
        bind_core: false,
        tag_output: true,
        timestamp_output: false,
        output_dir: String::new(),
        pmix: None,
    }))
}

/// A spawn of `rank` running `sleep 30`: a process that does not end on its own.
fn spawn_sleep(rank: u32) -> Vec<u8> {
    encode_to_daemon(&ToDaemon::Spawn {
        app: "spawn-0".into(),
        launches: vec![NodeLaunch {
            command: LaunchCommand {
                program: "/bin/sleep".into(),
                args: vec!["30".into()],
                env: vec![],
            },
            procs: vec![pid(rank)],
        }],
    })
}

fn pid(rank: u32) -> ProcessId {
    ProcessId::new(Namespace::new("job"), rank)
}

/// LINK-2: a daemon acts on nothing before `Setup`, and refuses a `Setup` for another
/// node than the one it authenticated as.
#[test]
fn a_daemon_takes_setup_first_and_only_for_its_node() {
    let rt = Runtime::new("link-setup");
    let mut m = FakeMaster::start(&rt);
    m.send(&encode_to_daemon(&ToDaemon::Launch {
        procs: vec![pid(5)],
    }));
    let f = m.finish(&rt);
    assert_ne!(f.code, Some(0), "{}", f.dump());
    assert!(f.stderr.contains("expected Setup first"), "{}", f.dump());

    let mut m = FakeMaster::start(&rt);
    m.send(&encode_link(&setup(NODE + 1, "/bin/true", &[])));
    let f = m.finish(&rt);
    assert_ne!(f.code, Some(0), "{}", f.dump());
    assert!(
        f.stderr.contains("set this daemon up as node 2, not 1"),
        "{}",
        f.dump()
    );
}

/// LINK-3, LINK-4, LINK-5: core's frames pass the daemon unchanged both ways; a process
/// that ends is reported (`Started`, then `Ended` with its code) before core's `Exited`
/// for it; `Shutdown` kills what still runs, reports it as ended by the job (NODE-4),
/// and the daemon exits 0.
#[test]
fn a_daemon_reports_ends_before_exits_and_shuts_down() {
    let rt = Runtime::new("link-ends");
    let mut m = FakeMaster::start(&rt);
    m.send(&encode_link(&setup(NODE, "/bin/sh", &["-c", "exit 3"])));
    m.send(&encode_to_daemon(&ToDaemon::JobData {
        added: [pid(5), pid(6)].into_iter().collect(),
        removed: ProcRuns::new(),
    }));
    m.send(&encode_to_daemon(&ToDaemon::Launch {
        procs: vec![pid(5)],
    }));
    let started = m.next();
    assert!(
        matches!(started, Got::Link(LinkMsg::Started { rank: 5, .. })),
        "{started:?}"
    );
    let ended = m.next();
    assert!(
        matches!(
            ended,
            Got::Link(LinkMsg::Ended {
                rank: 5,
                code: 3,
                cause: KillCause::None,
                ..
            })
        ),
        "LINK-4: Ended with the exit code first: {ended:?}"
    );
    assert_eq!(
        m.next(),
        Got::Core(ToMaster::Exited { pid: pid(5) }),
        "then core's Exited, as the daemon machine wrote it (LINK-3)"
    );

    // A process that does not end on its own, started with a spawn's command.
    m.send(&spawn_sleep(6));
    let started = m.next();
    let os_pid = match started {
        Got::Link(LinkMsg::Started { rank: 6, os_pid }) => os_pid,
        other => panic!("{other:?}"),
    };
    m.send(&encode_link(&LinkMsg::Shutdown));
    let ended = m.next();
    assert!(
        matches!(
            ended,
            Got::Link(LinkMsg::Ended {
                rank: 6,
                cause: KillCause::JobEnding,
                ..
            })
        ),
        "LINK-5: the running process is killed and reported: {ended:?}"
    );
    assert_eq!(m.next(), Got::Core(ToMaster::Exited { pid: pid(6) }));
    let f = m.finish(&rt);
    assert_eq!(f.code, Some(0), "LINK-5: the daemon exits 0\n{}", f.dump());
    let alive = std::fs::read_to_string(format!("/proc/{os_pid}/stat")).unwrap_or_default();
    assert!(
        alive.is_empty() || !alive.contains("(sleep)"),
        "the spawned process is gone: {alive}"
    );
}

/// RT-3, NODE-4: a master that falls silent past the heartbeat bound (HB-2) makes the
/// daemon end its node's processes on its own — reported as `NodeEnding`, a loss for
/// the job, never as a removal or the job's own end. RT-4: a `Signal` from the master
/// reaches the node's processes first.
#[test]
fn a_daemon_that_loses_its_master_reports_its_kills_as_its_own() {
    let rt = Runtime::new("link-silent");
    let mut m = FakeMaster::start(&rt);
    let mut s = setup(
        NODE,
        "/bin/sh",
        &[
            "-c",
            "trap 'echo usr1 > /dev/null; exit 7' USR1; echo up; sleep 30 & wait",
        ],
    );
    if let LinkMsg::Setup(x) = &mut s {
        x.heartbeat_ms = 100;
    }
    m.send(&encode_link(&s));
    m.send(&encode_to_daemon(&ToDaemon::JobData {
        added: [pid(5), pid(6)].into_iter().collect(),
        removed: ProcRuns::new(),
    }));
    m.send(&encode_to_daemon(&ToDaemon::Launch {
        procs: vec![pid(5), pid(6)],
    }));
    for _ in 0..2 {
        let started = m.next();
        assert!(
            matches!(started, Got::Link(LinkMsg::Started { .. })),
            "{started:?}"
        );
    }
    // Keep the link alive while the shells install their traps, then signal them.
    for _ in 0..5 {
        m.send(&encode_link(&LinkMsg::Heartbeat));
        std::thread::sleep(Duration::from_millis(60));
    }
    m.send(&encode_link(&LinkMsg::Signal {
        signal: libc::SIGUSR1 as u32,
    }));
    let mut ended = Vec::new();
    while ended.len() < 2 {
        match m.next() {
            Got::Link(LinkMsg::Ended {
                rank, code, cause, ..
            }) => ended.push((rank, code, cause)),
            Got::Core(ToMaster::Exited { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
    ended.sort();
    assert_eq!(
        ended,
        [(5, 7, KillCause::None), (6, 7, KillCause::None)],
        "RT-4: the master's SIGUSR1 reached both processes"
    );

    // One more, then silence: the daemon ends them on its own account.
    m.send(&encode_to_daemon(&ToDaemon::JobData {
        added: [pid(7)].into_iter().collect(),
        removed: ProcRuns::new(),
    }));
    m.send(&spawn_sleep(7));
    loop {
        match m.next() {
            Got::Link(LinkMsg::Started { rank: 7, .. }) => break,
            Got::Core(ToMaster::Exited { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
    let ended = loop {
        match m.next() {
            Got::Link(m @ LinkMsg::Ended { rank: 7, .. }) => break m,
            Got::Core(ToMaster::Exited { .. }) => {}
            other => panic!("{other:?}"),
        }
    };
    assert!(
        matches!(
            ended,
            LinkMsg::Ended {
                code: 137,
                cause: KillCause::NodeEnding,
                ..
            }
        ),
        "NODE-4: a kill for a silent master is the daemon's own: {ended:?}"
    );
    let f = m.finish(&rt);
    assert_ne!(
        f.code,
        Some(0),
        "RT-3: the daemon exits non-zero\n{}",
        f.dump()
    );
    assert!(f.stderr.contains("lost the master"), "{}", f.dump());
}
