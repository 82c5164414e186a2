//! The PMI session speaking PMI-2 (`spec/pmi.md` §3.1) against hand-fed daemon
//! replies: the switch from PMI-1's `init`, the commands Slurm's `libpmi2` sends, and
//! hostile input.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use crate::pmi::wire::PmiWireError;
use crate::pmi::wire2::{LEN_FIELD, MAX_MESSAGE, MAX_REPLY_VALUE, parse_message};
use crate::pmi::*;
use crate::process::{Namespace, ProcessId};
use crate::pset::PsetName;
use crate::rc::{ClientReply, ClientRequest, ModexData, RcError, ReqId};
use crate::time::{Duration, Instant};

fn pid(rank: u32) -> ProcessId {
    ProcessId::new(Namespace::new("job"), rank)
}

fn job(rank: u32) -> PmiJob {
    PmiJob {
        pid: pid(rank),
        rank,
        size: 3,
        appnum: 0,
        universe: 5,
        kvsname: "job".into(),
        mapping: Some("(vector,(0,1,3))".into()),
        group: PsetName::world(),
        barrier_timeout: Duration::from_secs(60),
        preput: Vec::new(),
        spawner: None,
    }
}

/// One PMI-2 message as a client frames it (Slurm: left-aligned length).
fn msg(body: &str) -> Vec<u8> {
    let mut v = format!("{:<6}", body.len()).into_bytes();
    v.extend_from_slice(body.as_bytes());
    v
}

/// A reply's body (its length field checked and cut off).
fn body(bytes: &[u8]) -> String {
    let len: usize = core::str::from_utf8(&bytes[..LEN_FIELD])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(len, bytes.len() - LEN_FIELD, "length field of {bytes:?}");
    String::from_utf8(bytes[LEN_FIELD..].to_vec()).unwrap()
}

enum Out {
    Sent(String),
    Req(ReqId, ClientRequest),
    Other(PmiOutput),
}

fn outs(s: &mut PmiSession) -> Vec<Out> {
    core::iter::from_fn(|| s.poll_output())
        .map(|o| match o {
            // The reply to the switching `init` is PMI-1's line.
            PmiOutput::Send(b) if b.starts_with(b"cmd=") => {
                Out::Sent(String::from_utf8(b).unwrap())
            }
            PmiOutput::Send(b) => Out::Sent(body(&b)),
            PmiOutput::Request { req, request } => Out::Req(req, request),
            other => Out::Other(other),
        })
        .collect()
}

/// Feeds `bytes`; returns the replies' bodies and the requests it made.
fn feed(s: &mut PmiSession, bytes: &[u8]) -> (Vec<String>, Vec<(ReqId, ClientRequest)>) {
    s.handle(Instant(0), PmiInput::Received(bytes.to_vec()));
    split(outs(s))
}

fn split(o: Vec<Out>) -> (Vec<String>, Vec<(ReqId, ClientRequest)>) {
    let (mut sent, mut reqs) = (Vec::new(), Vec::new());
    for o in o {
        match o {
            Out::Sent(b) => sent.push(b),
            Out::Req(r, q) => reqs.push((r, q)),
            Out::Other(o) => panic!("unexpected {o:?}"),
        }
    }
    (sent, reqs)
}

fn reply(s: &mut PmiSession, req: ReqId, reply: ClientReply) -> Vec<String> {
    s.handle(Instant(1), PmiInput::Reply { req, reply });
    split(outs(s)).0
}

/// A session switched to PMI-2 and past `fullinit` of its own rank.
fn ready(rank: u32) -> PmiSession {
    let mut s = PmiSession::new(job(rank));
    let (sent, _) = feed(&mut s, b"cmd=init pmi_version=2 pmi_subversion=0\n");
    assert_eq!(
        sent,
        ["cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n"]
    );
    assert!(s.pmi2());
    let (sent, _) = feed(
        &mut s,
        &msg(&format!("cmd=fullinit;pmirank={rank};threaded=FALSE;")),
    );
    assert_eq!(
        sent,
        [format!(
            "cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank={rank};size=3;\
             appnum=0;debugged=FALSE;pmiverbose=FALSE;"
        )]
    );
    s
}

/// PMIS-17, PMIS-18: the start-up Slurm's `PMI2_Init` and the job queries make, the
/// `fullinit` sent in the same read as the `init` line; PMIS-19: no node attribute is
/// found.
#[test]
fn slurm_start_up_is_answered_from_the_job() {
    let mut s = PmiSession::new(job(1));
    let mut bytes = b"cmd=init pmi_version=2 pmi_subversion=0\n".to_vec();
    bytes.extend(msg("cmd=fullinit;pmirank=1;threaded=FALSE;"));
    s.handle(Instant(0), PmiInput::Received(bytes));
    let sent: Vec<Vec<u8>> = core::iter::from_fn(|| s.poll_output())
        .map(|o| match o {
            PmiOutput::Send(b) => b,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        sent[0],
        b"cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n"
    );
    assert!(body(&sent[1]).starts_with("cmd=fullinit-response;rc=0;"));
    let cmds = [
        "cmd=job-getid;",
        "cmd=info-getjobattr;key=PMI_process_mapping;",
        "cmd=info-getjobattr;key=universeSize;",
        "cmd=info-getjobattr;key=PMI_hwloc_xmlfile;",
        "cmd=info-getnodeattr;key=shm;wait=FALSE;",
    ];
    let mut all = Vec::new();
    for c in cmds {
        all.extend(msg(c));
    }
    let (sent, reqs) = feed(&mut s, &all);
    assert!(reqs.is_empty(), "nothing of start-up goes to the daemon");
    assert_eq!(
        sent,
        [
            "cmd=job-getid-response;rc=0;jobid=job;",
            "cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,(0,1,3));",
            "cmd=info-getjobattr-response;rc=0;found=TRUE;value=5;",
            "cmd=info-getjobattr-response;rc=0;found=FALSE;",
            "cmd=info-getnodeattr-response;rc=0;found=FALSE;",
        ]
    );
}

/// A spawn's child learns it was spawned (`spawner-jobid`) and reads its pre-put keys.
#[test]
fn a_spawned_child_is_told_and_reads_its_preput_keys() {
    let mut j = job(0);
    j.spawner = Some("job".into());
    j.preput = vec![("PARENT_ROOT_PORT_NAME".into(), "a;b".into())];
    let mut s = PmiSession::new(j);
    feed(&mut s, b"cmd=init pmi_version=2 pmi_subversion=0\n");
    let (sent, _) = feed(&mut s, &msg("cmd=fullinit;pmirank=0;threaded=FALSE;"));
    assert!(sent[0].contains(";spawner-jobid=job;"), "{sent:?}");
    let (sent, _) = feed(
        &mut s,
        &msg("cmd=kvs-get;jobid=;srcid=-1;key=PARENT_ROOT_PORT_NAME;"),
    );
    assert_eq!(sent, ["cmd=kvs-get-response;rc=0;found=TRUE;value=a;;b;"]);
}

/// PMIS-5 over PMI-2: `kvs-fence` is the modex, exactly as PMI-1's barrier.
#[test]
fn a_fence_is_the_modex_and_makes_every_put_visible() {
    let mut s = ready(1);
    let (sent, _) = feed(&mut s, &msg("cmd=kvs-put;key=card-1;value=x;;y=z;"));
    assert_eq!(sent, ["cmd=kvs-put-response;rc=0;"]);
    let (sent, _) = feed(&mut s, &msg("cmd=kvs-get;jobid=job;srcid=0;key=card-0;"));
    assert_eq!(sent, ["cmd=kvs-get-response;rc=0;found=FALSE;"]);
    let (sent, reqs) = feed(&mut s, &msg("cmd=kvs-fence;"));
    assert!(sent.is_empty(), "no reply before the modex completes");
    let [(req, ClientRequest::Modex { pset, data, .. })] = &reqs[..] else {
        panic!("{reqs:?}")
    };
    assert_eq!(pset, &PsetName::world());
    assert_eq!(data, "card-1=x;y=z\n");
    // PMIS-4: a command sent meanwhile waits.
    let (sent, reqs) = feed(&mut s, &msg("cmd=kvs-get;jobid=;srcid=0;key=card-0;"));
    assert!(sent.is_empty() && reqs.is_empty());
    let entries = vec![
        (pid(0), "card-0=zero\n".to_string()),
        (pid(1), data.clone()),
    ];
    let sent = reply(
        &mut s,
        *req,
        ClientReply::Modex(Ok(ModexData {
            version: 1,
            entries,
        })),
    );
    assert_eq!(
        sent,
        [
            "cmd=kvs-fence-response;rc=0;",
            "cmd=kvs-get-response;rc=0;found=TRUE;value=zero;"
        ]
    );
    // A failed modex is an error reply.
    let (_, reqs) = feed(&mut s, &msg("cmd=kvs-fence;"));
    let sent = reply(
        &mut s,
        reqs[0].0,
        ClientReply::Modex(Err(RcError::NotPermitted(pid(1)))),
    );
    assert!(
        sent[0].starts_with("cmd=kvs-fence-response;rc=-1;errmsg="),
        "{sent:?}"
    );
}

/// PMIS-8 over PMI-2; a threaded client's `thrid` comes back in the reply.
#[test]
fn names_are_the_data_server() {
    let mut s = ready(0);
    let (_, reqs) = feed(
        &mut s,
        &msg("cmd=name-publish;thrid=0x1;name=svc;port=p;;q;infokeycount=0;"),
    );
    assert!(
        matches!(&reqs[..], [(_, ClientRequest::Publish { key, value })] if key == "svc" && value == "p;q")
    );
    let sent = reply(&mut s, reqs[0].0, ClientReply::Published(Ok(())));
    assert_eq!(sent, ["cmd=name-publish-response;thrid=0x1;rc=0;"]);
    let (_, reqs) = feed(&mut s, &msg("cmd=name-lookup;name=svc;infokeycount=0;"));
    assert!(matches!(
        &reqs[..],
        [(_, ClientRequest::Lookup { wait: None, .. })]
    ));
    let sent = reply(&mut s, reqs[0].0, ClientReply::Lookup(Ok("p;q".into())));
    assert_eq!(sent, ["cmd=name-lookup-response;rc=0;value=p;;q;"]);
    let (_, reqs) = feed(&mut s, &msg("cmd=name-unpublish;name=svc;infokeycount=0;"));
    let sent = reply(&mut s, reqs[0].0, ClientReply::Unpublished(Ok(())));
    assert_eq!(sent, ["cmd=name-unpublish-response;rc=0;"]);
    let (_, reqs) = feed(&mut s, &msg("cmd=name-lookup;name=gone;infokeycount=0;"));
    let err = RcError::NotPermitted(pid(0));
    let sent = reply(&mut s, reqs[0].0, ClientReply::Lookup(Err(err)));
    assert!(sent[0].starts_with("cmd=name-lookup-response;rc=-1;errmsg="));
}

/// PMIS-10 over PMI-2: one message, one kernel `Spawn` of all its commands, the
/// pre-put keys in the children's environment, and the children's job id back.
#[test]
fn spawn_is_one_kernel_spawn() {
    let mut s = ready(0);
    let spawn = "cmd=spawn;ncmds=2;preputcount=1;ppkey0=PARENT_ROOT_PORT_NAME;ppval0=tag#0$;\
        subcmd=./child;maxprocs=2;argc=2;argv0=-v;argv1=a;;b;infokeycount=1;infokey0=wdir;\
        infoval0=/tmp;subcmd=other;maxprocs=1;argc=0;";
    let (sent, reqs) = feed(&mut s, &msg(spawn));
    assert!(sent.is_empty());
    let (req, got, env) = super::one_spawn(&reqs);
    assert_eq!(
        got,
        [("./child", vec!["-v", "a;b"], 2), ("other", vec![], 1)]
    );
    assert_eq!(env[0].0, PREPUT_ENV);
    assert_eq!(
        decode_preput(&env[0].1),
        [("PARENT_ROOT_PORT_NAME".to_string(), "tag#0$".to_string())]
    );
    let spawned = crate::rc::Spawned {
        app: "spawn-1".into(),
        procs: vec![pid(3), pid(4), pid(5)],
    };
    let sent = reply(&mut s, req, ClientReply::Spawned(Ok(spawned)));
    assert_eq!(
        sent,
        ["cmd=spawn-response;rc=0;jobid=job-spawn-1;errcodes=0,0,0;"]
    );
    // No slots: an error reply, nothing hangs.
    let (_, reqs) = feed(
        &mut s,
        &msg("cmd=spawn;ncmds=1;preputcount=0;subcmd=x;maxprocs=9;argc=0;"),
    );
    let err = RcError::BadRequest(crate::rc::BadRequest::AlreadyInModex);
    let sent = reply(&mut s, reqs[0].0, ClientReply::Spawned(Err(err)));
    assert!(sent[0].starts_with("cmd=spawn-response;rc=-1;errmsg="));
}

/// PMIS-7 over PMI-2; `finalize` ends the session's service.
#[test]
fn abort_is_reported_and_finalize_ends_the_session() {
    let mut s = ready(0);
    s.handle(
        Instant(0),
        PmiInput::Received(msg("cmd=abort;isworld=TRUE;msg=it;;broke;")),
    );
    assert_eq!(
        s.poll_output(),
        Some(PmiOutput::Aborted {
            code: 1,
            message: "it;broke".into()
        })
    );
    let mut bytes = msg("cmd=finalize;");
    bytes.extend(msg("cmd=job-getid;"));
    let (sent, _) = feed(&mut s, &bytes);
    assert_eq!(sent[0], "cmd=finalize-response;rc=0;");
    assert!(
        sent[1].starts_with("cmd=job-getid-response;rc=-1;"),
        "{sent:?}"
    );
    assert!(s.finalized());
}

/// PMIS-3, PMIS-6, PMIS-18, PMIS-19 (`info-putnodeattr`): refused commands get `rc=-1`
/// and change nothing.
#[test]
fn hostile_commands_are_refused_without_touching_state() {
    // Before fullinit, nothing but fullinit (and abort).
    let mut s = PmiSession::new(job(1));
    feed(&mut s, b"cmd=init pmi_version=2 pmi_subversion=0\n");
    let (sent, reqs) = feed(&mut s, &msg("cmd=kvs-put;key=k;value=v;"));
    assert!(reqs.is_empty());
    assert!(
        sent[0].starts_with("cmd=kvs-put-response;rc=-1;errmsg="),
        "{sent:?}"
    );
    // PMIS-6: another rank, PMI id or job is refused; the socket is rank 1's alone.
    for claim in [
        "cmd=fullinit;pmirank=0;threaded=FALSE;",
        "cmd=fullinit;pmiid=2;",
        "cmd=fullinit;srcid=x;",
        "cmd=fullinit;pmijobid=other;pmirank=1;",
    ] {
        let (sent, _) = feed(&mut s, &msg(claim));
        assert!(
            sent[0].starts_with("cmd=fullinit-response;rc=-1;errmsg="),
            "{claim}: {sent:?}"
        );
    }
    let (sent, _) = feed(&mut s, &msg("cmd=job-getid;"));
    assert!(sent[0].contains("rc=-1"), "still not initialized: {sent:?}");
    let mut s = ready(1);
    let long = "v".repeat(1025);
    let cmds = [
        "cmd=fullinit;pmirank=1;".to_string(),
        "cmd=kvs-get;jobid=other;srcid=0;key=k;".into(),
        "cmd=kvs-put;key=a=b;value=v;".into(),
        "cmd=kvs-put;key=k;value=line\nother=injected;".into(),
        "cmd=kvs-put;key=;value=v;".into(),
        "cmd=kvs-put;key=k;".into(),
        format!("cmd=kvs-put;key=k;value={long};"),
        "cmd=info-putnodeattr;key=k;value=v;".into(),
        "cmd=job-connect;jobid=other;".into(),
        "cmd=job-disconnect;jobid=other;".into(),
        "cmd=spawn;ncmds=2;subcmd=a;maxprocs=1;argc=0;".into(),
        "cmd=spawn;ncmds=1;subcmd=a;maxprocs=0;argc=0;".into(),
        "cmd=spawn;ncmds=1;subcmd=a;maxprocs=1;argc=2;argv0=x;argv0=y;".into(),
        "cmd=spawn;ncmds=1;preputcount=1;ppkey0=a=b;ppval0=v;subcmd=a;maxprocs=1;argc=0;".into(),
        "cmd=spawn;ncmds=1;preputcount=1;ppkey0=k;ppval0=a\nb=c;subcmd=a;maxprocs=1;argc=0;".into(),
        "cmd=no-such-thing;".into(),
        "garbage".into(),
        "cmd=kvs-put;key=k;value=v".into(),
    ];
    for c in &cmds {
        let (sent, reqs) = feed(&mut s, &msg(c));
        assert!(reqs.is_empty(), "{c}");
        assert_eq!(sent.len(), 1, "{c}");
        assert!(sent[0].contains(";rc=-1;errmsg="), "{c}: {}", sent[0]);
        assert!(!s.closed(), "{c}");
    }
    // Nothing of the refused puts travels in the next fence.
    let (_, reqs) = feed(&mut s, &msg("cmd=kvs-fence;"));
    assert!(matches!(&reqs[..], [(_, ClientRequest::Modex { data, .. })] if data.is_empty()));
}

/// PMIS-17: a length field that is not one, or one over the cap, breaks the framing:
/// an error reply, then the socket is closed and nothing more is served.
#[test]
fn bad_length_fields_close_the_session() {
    for bad in [
        b"cmd=job-getid\n".to_vec(),
        b"-1    cmd=job-getid;".to_vec(),
        format!("{:<6}", MAX_MESSAGE + 1).into_bytes(),
        b"999999".to_vec(),
    ] {
        let mut s = ready(0);
        s.handle(Instant(0), PmiInput::Received(bad.clone()));
        let outs: Vec<PmiOutput> = core::iter::from_fn(|| s.poll_output()).collect();
        let [PmiOutput::Send(err), PmiOutput::Close(why)] = &outs[..] else {
            panic!("{bad:?}: {outs:?}")
        };
        assert!(why.breaks_framing(), "{why:?}");
        let c = parse_message(&err[LEN_FIELD..]).unwrap();
        assert_eq!(c.get("rc"), Some("-1"));
        assert!(s.closed());
        s.handle(Instant(0), PmiInput::Received(msg("cmd=job-getid;")));
        assert_eq!(s.poll_output(), None, "nothing is served after the close");
    }
    // A length over the cap is refused at once, before its body is buffered.
    let mut s = ready(0);
    s.handle(Instant(0), PmiInput::Received(b"70000 ".to_vec()));
    assert!(matches!(
        core::iter::from_fn(|| s.poll_output()).last(),
        Some(PmiOutput::Close(PmiWireError::TooLong(_)))
    ));
}

/// The wire switches once, before anything was initialized; PMI-1 then is refused.
#[test]
fn the_wire_switches_only_at_the_first_init() {
    let mut s = PmiSession::new(job(0));
    let (sent, _) = feed(&mut s, b"cmd=init pmi_version=1 pmi_subversion=1\n");
    assert!(sent[0].contains("rc=0"));
    let (sent, _) = feed(&mut s, b"cmd=init pmi_version=2 pmi_subversion=0\n");
    assert!(
        sent[0].starts_with("cmd=response_to_init rc=-1"),
        "{sent:?}"
    );
    assert!(!s.pmi2());
    let mut s = ready(0);
    // `init` on the PMI-2 wire is just an unknown command.
    let (sent, _) = feed(&mut s, &msg("cmd=init;pmi_version=2;"));
    assert!(sent[0].starts_with("cmd=init-response;rc=-1;"), "{sent:?}");
}

/// An error message longer than a PMI-2 client accepts is cut (at a char boundary).
#[test]
fn error_replies_fit_a_pmi2_client() {
    let mut s = ready(0);
    let (sent, _) = feed(&mut s, &msg(&format!("cmd={};", "x".repeat(5000))));
    let c = parse_message(sent[0].as_bytes()).unwrap();
    assert_eq!(c.get("rc"), Some("-1"));
    assert!(c.get("errmsg").unwrap().len() <= MAX_REPLY_VALUE);
    let mut s = PmiSession::new(job(0));
    feed(&mut s, b"cmd=init pmi_version=2 pmi_subversion=0\n");
    let claim = format!("cmd=fullinit;pmiid={};", "é".repeat(1000));
    let (sent, _) = feed(&mut s, &msg(&claim));
    let c = parse_message(sent[0].as_bytes()).unwrap();
    let m = c.get("errmsg").unwrap();
    assert!(m.len() <= MAX_REPLY_VALUE && m.len() > 1000, "{}", m.len());
}
