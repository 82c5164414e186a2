//! The PMI session against hand-fed daemon replies: every rule of `spec/pmi.md` that
//! one session enforces (PMI-2's in `pmi2`).

mod pmi2;

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use super::wire::{MAX_LINE, PmiWireError};
use super::*;
use crate::process::{Namespace, ProcessId};
use crate::pset::PsetName;
use crate::rc::{ClientReply, ClientRequest, ModexData, RcError, ReqId, SpawnWatch};
use crate::time::{Duration, Instant};

fn pid(rank: u32) -> ProcessId {
    ProcessId::new(Namespace::new("job"), rank)
}

fn job(rank: u32, mapping: Option<&str>) -> PmiJob {
    PmiJob {
        pid: pid(rank),
        rank,
        size: 2,
        appnum: 0,
        universe: 4,
        kvsname: "job".into(),
        mapping: mapping.map(Into::into),
        group: PsetName::app_root("main").unwrap(),
        barrier_timeout: Duration::from_secs(60),
        preput: Vec::new(),
        spawner: None,
    }
}

/// Feeds `bytes`; returns the replies (as text) and the requests it made.
fn feed(s: &mut PmiSession, bytes: &[u8]) -> (Vec<String>, Vec<(ReqId, ClientRequest)>) {
    s.handle(Instant(0), PmiInput::Received(bytes.to_vec()));
    drain(s)
}

fn drain(s: &mut PmiSession) -> (Vec<String>, Vec<(ReqId, ClientRequest)>) {
    let (mut sent, mut reqs) = (Vec::new(), Vec::new());
    while let Some(o) = s.poll_output() {
        match o {
            PmiOutput::Send(b) => sent.push(String::from_utf8(b).unwrap()),
            PmiOutput::Request { req, request } => reqs.push((req, request)),
            other => panic!("unexpected {other:?}"),
        }
    }
    (sent, reqs)
}

/// A spawn command as the tests compare it: program, arguments, count.
type Cmd<'a> = (&'a str, Vec<&'a str>, u32);

/// The one kernel `Spawn` among `reqs` (an MPI library's: `SpawnWatch::Job`, SPAWN-24):
/// its request id, each command as (program, args, count), and its environment.
fn one_spawn(reqs: &[(ReqId, ClientRequest)]) -> (ReqId, Vec<Cmd<'_>>, &[(String, String)]) {
    let [
        (
            req,
            ClientRequest::Spawn {
                commands,
                env,
                watch: SpawnWatch::Job,
            },
        ),
    ] = reqs
    else {
        panic!("{reqs:?}")
    };
    let got = commands
        .iter()
        .map(|c| {
            (
                c.program.as_str(),
                c.args.iter().map(String::as_str).collect(),
                c.count,
            )
        })
        .collect();
    (*req, got, env)
}

#[test]
fn mpich_start_up_is_answered_from_the_job() {
    let mut s = PmiSession::new(job(1, Some("(vector,(0,1,2))")));
    let (sent, reqs) = feed(
        &mut s,
        b"cmd=init pmi_version=1 pmi_subversion=1\ncmd=get_maxes\ncmd=get_appnum\n\
          cmd=get_my_kvsname\ncmd=get_universe_size\n\
          cmd=get kvsname=job key=PMI_process_mapping\ncmd=get kvsname=job key=PMI_hwloc_xmlfile\n",
    );
    assert!(reqs.is_empty(), "nothing of start-up goes to the daemon");
    assert_eq!(
        sent,
        [
            "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n",
            "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n",
            "cmd=appnum rc=0 appnum=0\n",
            "cmd=my_kvsname rc=0 kvsname=job\n",
            "cmd=universe_size rc=0 size=4\n",
            "cmd=get_result rc=0 value=(vector,(0,1,2)) found=TRUE\n",
            "cmd=get_result rc=1 found=FALSE msg=key\\ not\\ found\n",
        ]
    );
}

/// PMIS-5, PMIS-4.
#[test]
fn a_barrier_is_the_modex_and_makes_every_put_visible() {
    let mut s = PmiSession::new(job(1, None));
    let (sent, _) = feed(&mut s, b"cmd=put kvsname=job key=card-1 value=a=b\n");
    assert_eq!(sent, ["cmd=put_result rc=0\n"]);
    // PMIS-5: the other rank's key is not there before the barrier.
    let (sent, _) = feed(&mut s, b"cmd=get kvsname=job key=card-0\n");
    assert!(sent[0].starts_with("cmd=get_result rc=1"), "{sent:?}");
    let (sent, reqs) = feed(&mut s, b"cmd=barrier_in\n");
    assert!(sent.is_empty(), "no reply before the modex completes");
    let [(req, ClientRequest::Modex { pset, data, .. })] = &reqs[..] else {
        panic!("{reqs:?}")
    };
    assert!(s.owns(*req));
    assert_eq!(pset, &PsetName::app_root("main").unwrap());
    assert_eq!(data, "card-1=a=b\n");
    // Commands sent meanwhile wait for the barrier's reply (PMIS-4).
    let (sent, reqs) = feed(&mut s, b"cmd=get kvsname=job key=card-0\n");
    assert!(sent.is_empty() && reqs.is_empty());
    let entries = vec![
        (pid(0), "card-0=zero\n".to_string()),
        (pid(1), data.clone()),
    ];
    s.handle(
        Instant(1),
        PmiInput::Reply {
            req: *req,
            reply: ClientReply::Modex(Ok(ModexData {
                version: 1,
                entries,
            })),
        },
    );
    let (sent, _) = drain(&mut s);
    assert_eq!(
        sent,
        [
            "cmd=barrier_out rc=0\n",
            "cmd=get_result rc=0 value=zero found=TRUE\n"
        ]
    );
    // The next barrier carries only what was put since.
    let (_, reqs) = feed(&mut s, b"cmd=barrier_in\n");
    assert!(matches!(&reqs[..], [(_, ClientRequest::Modex { data, .. })] if data.is_empty()));
}

#[test]
fn a_failed_barrier_is_an_error_reply() {
    let mut s = PmiSession::new(job(0, None));
    let (_, reqs) = feed(&mut s, b"cmd=barrier_in\n");
    let err = RcError::NotPermitted(pid(0));
    s.handle(
        Instant(1),
        PmiInput::Reply {
            req: reqs[0].0,
            reply: ClientReply::Modex(Err(err)),
        },
    );
    let (sent, _) = drain(&mut s);
    assert!(
        sent[0].starts_with("cmd=barrier_out rc=-1 msg="),
        "{sent:?}"
    );
}

/// PMIS-8.
#[test]
fn names_are_the_data_server() {
    let mut s = PmiSession::new(job(0, None));
    let (_, reqs) = feed(&mut s, b"cmd=publish_name service=svc port=tag#0$\n");
    assert!(
        matches!(&reqs[..], [(_, ClientRequest::Publish { key, value })] if key == "svc" && value == "tag#0$")
    );
    s.handle(
        Instant(1),
        PmiInput::Reply {
            req: reqs[0].0,
            reply: ClientReply::Published(Ok(())),
        },
    );
    assert_eq!(drain(&mut s).0, ["cmd=publish_result rc=0\n"]);
    let (_, reqs) = feed(&mut s, b"cmd=lookup_name service=svc\n");
    assert!(matches!(
        &reqs[..],
        [(_, ClientRequest::Lookup { wait: None, .. })]
    ));
    s.handle(
        Instant(2),
        PmiInput::Reply {
            req: reqs[0].0,
            reply: ClientReply::Lookup(Ok("tag#0$".into())),
        },
    );
    assert_eq!(drain(&mut s).0, ["cmd=lookup_result rc=0 port=tag#0$\n"]);
    let (_, reqs) = feed(&mut s, b"cmd=unpublish_name service=svc\n");
    assert!(matches!(&reqs[..], [(_, ClientRequest::Unpublish { .. })]));
}

/// PMIS-3, PMIS-6.
#[test]
fn another_kvs_and_bad_puts_are_refused_without_touching_state() {
    let mut s = PmiSession::new(job(0, None));
    let long_value = "v".repeat(1025);
    let cmds = [
        "cmd=put kvsname=other key=k value=v\n".to_string(),
        "cmd=get kvsname=other key=k\n".into(),
        "cmd=put kvsname=job key=a=b value=v\n".into(),
        "cmd=put kvsname=job key=k\n".into(),
        format!("cmd=put kvsname=job key=k value={long_value}\n"),
        "cmd=init pmi_version=3 pmi_subversion=0\n".into(),
        "cmd=initack pmiid=3\n".into(),
        "garbage\n".into(),
        "cmd=spawn\n".into(),
    ];
    for c in &cmds {
        let (sent, reqs) = feed(&mut s, c.as_bytes());
        assert!(reqs.is_empty(), "{c}");
        assert_eq!(sent.len(), 1, "{c}");
        assert!(sent[0].contains("rc=-1 msg="), "{c}: {}", sent[0]);
    }
    // Nothing of that was put.
    let (_, reqs) = feed(&mut s, b"cmd=barrier_in\n");
    assert!(matches!(&reqs[..], [(_, ClientRequest::Modex { data, .. })] if data.is_empty()));
}

/// PMIS-3.
#[test]
fn an_overlong_line_closes_the_session() {
    let mut s = PmiSession::new(job(0, None));
    s.handle(Instant(0), PmiInput::Received(vec![b'x'; MAX_LINE + 1]));
    let outs: Vec<PmiOutput> = core::iter::from_fn(|| s.poll_output()).collect();
    assert!(matches!(
        outs.last(),
        Some(PmiOutput::Close(PmiWireError::TooLong(_)))
    ));
    assert!(s.closed());
    s.handle(Instant(0), PmiInput::Received(b"cmd=get_appnum\n".to_vec()));
    assert_eq!(s.poll_output(), None, "nothing is served after the close");
}

/// PMIS-4: while a barrier is open, well-formed commands sent ahead wait in the
/// session, but no more than `MAX_AHEAD` bytes of them: then the socket is closed.
#[test]
fn commands_sent_ahead_of_an_open_call_are_bounded() {
    let mut s = PmiSession::new(job(0, None));
    let (_, reqs) = feed(&mut s, b"cmd=barrier_in\n");
    assert_eq!(reqs.len(), 1, "the barrier is open");
    let ahead = b"cmd=get_appnum\n".repeat(1000);
    let (sent, _) = feed(&mut s, &ahead);
    assert!(sent.is_empty() && !s.closed(), "served in order, later");
    for _ in 0..=session::MAX_AHEAD / ahead.len() {
        s.handle(Instant(0), PmiInput::Received(ahead.clone()));
    }
    let outs: Vec<PmiOutput> = core::iter::from_fn(|| s.poll_output()).collect();
    assert!(
        matches!(
            outs.last(),
            Some(PmiOutput::Close(PmiWireError::TooLong(_)))
        ),
        "{:?}",
        outs.last()
    );
    assert!(s.closed());
}

/// PMIS-7.
#[test]
fn abort_is_reported_and_finalize_ends_the_session() {
    let mut s = PmiSession::new(job(0, None));
    s.handle(
        Instant(0),
        PmiInput::Received(b"cmd=abort exitcode=7 message=bad\\ input\n".to_vec()),
    );
    assert_eq!(
        s.poll_output(),
        Some(PmiOutput::Aborted {
            code: 7,
            message: "bad input".into()
        })
    );
    let (sent, _) = feed(&mut s, b"cmd=finalize\ncmd=get_appnum\n");
    assert_eq!(sent[0], "cmd=finalize_ack rc=0\n");
    assert!(sent[1].starts_with("cmd=appnum rc=-1"), "{sent:?}");
    assert!(s.finalized());
}

#[test]
fn too_much_put_before_a_barrier_is_refused_and_a_barrier_resets_it() {
    let mut s = PmiSession::new(job(0, None));
    let value = "v".repeat(1000);
    let (mut accepted, mut refused) = (0usize, 0usize);
    for i in 0..(MAX_PUT_BYTES / 1000 + 10) {
        let key = format!("k{i:05}");
        let (sent, _) = feed(
            &mut s,
            format!("cmd=put key={key} value={value}\n").as_bytes(),
        );
        if sent[0].contains("rc=-1") {
            refused += 1;
        } else {
            accepted += key.len() + value.len();
        }
    }
    assert!(
        refused > 0 && accepted <= MAX_PUT_BYTES,
        "{refused} {accepted}"
    );
    assert!(
        accepted + 1006 > MAX_PUT_BYTES,
        "refused before the limit: {accepted}"
    );
    let (_, reqs) = feed(&mut s, b"cmd=barrier_in\n");
    let (req, _) = reqs[0];
    s.handle(
        Instant(1),
        PmiInput::Reply {
            req,
            reply: ClientReply::Modex(Ok(ModexData {
                version: 1,
                entries: vec![],
            })),
        },
    );
    let _ = drain(&mut s);
    let (sent, _) = feed(&mut s, b"cmd=put key=after value=1\n");
    assert_eq!(sent, ["cmd=put_result rc=0\n"]);
}

/// PMIS-10: the segments of a spawn make one kernel `Spawn` with the pre-put keys in
/// the children's environment; slots refused are an error reply.
#[test]
fn spawn_segments_make_one_kernel_spawn() {
    let mut s = PmiSession::new(job(0, None));
    let first = b"mcmd=spawn\nnprocs=2\nexecname=./child\ntotspawns=2\nspawnssofar=1\n\
        argcnt=2\narg1=-v\narg2=a b\npreput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\n\
        preput_val_0=tag#0$port\ninfo_num=0\nendcmd\n";
    let (sent, reqs) = feed(&mut s, first);
    assert!(
        sent.is_empty() && reqs.is_empty(),
        "one reply, after the last segment"
    );
    let second =
        b"mcmd=spawn\nnprocs=1\nexecname=other\ntotspawns=2\nspawnssofar=2\nargcnt=0\nendcmd\n";
    let (sent, reqs) = feed(&mut s, second);
    assert!(sent.is_empty());
    let (req, got, env) = one_spawn(&reqs);
    assert_eq!(
        got,
        [("./child", vec!["-v", "a b"], 2), ("other", vec![], 1)]
    );
    assert_eq!(env.len(), 1);
    assert_eq!(env[0].0, PREPUT_ENV);
    assert_eq!(
        decode_preput(&env[0].1),
        [(
            "PARENT_ROOT_PORT_NAME".to_string(),
            "tag#0$port".to_string()
        )]
    );
    let spawned = crate::rc::Spawned {
        app: "spawn-1".into(),
        procs: vec![pid(2), pid(3), pid(4)],
    };
    s.handle(
        Instant(1),
        PmiInput::Reply {
            req,
            reply: ClientReply::Spawned(Ok(spawned)),
        },
    );
    assert_eq!(drain(&mut s).0, ["cmd=spawn_result rc=0\n"]);
    // No slots: MPI_Comm_spawn gets an error, nothing hangs.
    let one = b"mcmd=spawn\nnprocs=9\nexecname=x\ntotspawns=1\nspawnssofar=1\nargcnt=0\nendcmd\n";
    let (_, reqs) = feed(&mut s, one);
    let err = RcError::BadRequest(crate::rc::BadRequest::AlreadyInModex);
    s.handle(
        Instant(2),
        PmiInput::Reply {
            req: reqs[0].0,
            reply: ClientReply::Spawned(Err(err)),
        },
    );
    assert!(drain(&mut s).0[0].starts_with("cmd=spawn_result rc=-1 msg="));
    // A segment out of order is refused and forgets the partial spawn.
    let (sent, reqs) = feed(
        &mut s,
        b"mcmd=spawn\nnprocs=1\nexecname=x\ntotspawns=2\nspawnssofar=2\nargcnt=0\nendcmd\n",
    );
    assert!(
        reqs.is_empty() && sent[0].starts_with("cmd=spawn_result rc=-1"),
        "{sent:?}"
    );
}

/// PMIS-10: a child sees its spawner's pre-put keys from the start.
#[test]
fn a_child_reads_its_spawners_preput_keys() {
    let mut j = job(0, None);
    j.preput = decode_preput(&encode_preput(&[(
        "PARENT_ROOT_PORT_NAME".into(),
        "p q".into(),
    )]));
    let mut s = PmiSession::new(j);
    let (sent, _) = feed(&mut s, b"cmd=get kvsname=job key=PARENT_ROOT_PORT_NAME\n");
    assert_eq!(sent, ["cmd=get_result rc=0 value=p\\ q found=TRUE\n"]);
}
