//! The C boundary as a C caller meets it: NULL pointers, too-small buffers, malformed
//! frames and bad arguments are error codes (never a crash), and nothing is lost or
//! half-done when a call fails.

use std::ffi::{CStr, c_char, c_int};
use std::ptr::{null, null_mut};

use dynres::action::*;
use dynres::calls::*;
use dynres::client::*;
use dynres::daemon::*;
use dynres::error::*;
use dynres::master::*;
use dynres::registry::*;
use dynres::session::*;
use dynres::types::*;
use dynres_core::pset::PsetName;
use dynres_core::rc::wire::{decode_client, decode_to_daemon, encode_reply, encode_to_daemon};
use dynres_core::rc::{
    ClientReply, ClientRequest, QueryAnswer, RcError, RcStatus, RcType, ToDaemon,
};

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated.
    unsafe { CStr::from_ptr(dynres_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn name(code: c_int) -> String {
    // SAFETY: a static NUL-terminated string.
    unsafe { CStr::from_ptr(dynres_error_name(code)) }
        .to_string_lossy()
        .into_owned()
}

/// A master of one node with 4 slots and 2 processes of `app` in namespace `job`.
fn master() -> *mut dynres_master {
    let nodes = [dynres_node_spec {
        name: c"n0".as_ptr(),
        slots: 4,
    }];
    let apps = [dynres_app_spec {
        name: c"app".as_ptr(),
        nprocs: 2,
    }];
    let cfg = dynres_master_config {
        job_namespace: c"job".as_ptr(),
        nodes: nodes.as_ptr(),
        nnodes: 1,
        apps: apps.as_ptr(),
        napps: 1,
        change_timeout_ns: 1_000_000_000,
        grace_ns: 1_000_000_000,
        max_queued: 2,
    };
    let mut m = null_mut();
    // SAFETY: valid config and out pointer.
    assert_eq!(unsafe { dynres_master_new(&cfg, &mut m) }, DYNRES_OK);
    assert!(!m.is_null());
    m
}

#[test]
fn error_codes_follow_the_kernel_codes() {
    let pairs = [
        (DYNRES_ERR_RC_PSET, RcError::CODE_PSET),
        (DYNRES_ERR_RC_SLOTS, RcError::CODE_SLOTS),
        (DYNRES_ERR_RC_BAD_REQUEST, RcError::CODE_BAD_REQUEST),
        (DYNRES_ERR_RC_NO_SUCH_CHANGE, RcError::CODE_NO_SUCH_CHANGE),
        (DYNRES_ERR_RC_ABORTED, RcError::CODE_ABORTED),
        (
            DYNRES_ERR_RC_ALREADY_FINALIZED,
            RcError::CODE_ALREADY_FINALIZED,
        ),
        (DYNRES_ERR_RC_NOT_BOUND, RcError::CODE_NOT_BOUND),
        (
            DYNRES_ERR_RC_NEW_PSET_MISMATCH,
            RcError::CODE_NEW_PSET_MISMATCH,
        ),
        (DYNRES_ERR_RC_QUEUE_FULL, RcError::CODE_QUEUE_FULL),
        (DYNRES_ERR_RC_RESERVED_KEY, RcError::CODE_RESERVED_KEY),
        (DYNRES_ERR_RC_KEY_EXISTS, RcError::CODE_KEY_EXISTS),
        (DYNRES_ERR_RC_NO_SUCH_KEY, RcError::CODE_NO_SUCH_KEY),
        (DYNRES_ERR_RC_TIMEOUT, RcError::CODE_TIMEOUT),
        (DYNRES_ERR_RC_NOT_PERMITTED, RcError::CODE_NOT_PERMITTED),
        (DYNRES_ERR_RC_CLIENT, RcError::CODE_CLIENT),
        (DYNRES_ERR_RC_PROCESS_LOST, RcError::CODE_PROCESS_LOST),
    ];
    for (c, k) in pairs {
        assert_eq!(c, DYNRES_ERR_RC + c_int::from(k));
        assert!(name(c).starts_with("DYNRES_ERR_RC_"), "{c} has a name");
    }
}

#[test]
fn null_pointers_are_error_codes() {
    let mut a = dynres_action::default();
    let mut buf = [0u8; 64];
    let (mut deadline, mut armed) = (0u64, 0 as c_int);
    // SAFETY: for the whole test: NULL where the API allows it to be checked; every
    // non-NULL pointer is valid.
    unsafe {
        // Handles.
        assert_eq!(
            dynres_master_poll_output(null_mut(), &mut a, buf.as_mut_ptr(), 64),
            DYNRES_ERR_NULL
        );
        assert_eq!(last_error(), "master is NULL");
        assert_eq!(dynres_master_timeout(null_mut(), 0), DYNRES_ERR_NULL);
        assert_eq!(dynres_daemon_exited(null_mut(), 0, 0), DYNRES_ERR_NULL);
        assert_eq!(
            dynres_client_call_get_res_change(null_mut(), 1, null(), 0),
            DYNRES_ERR_NULL
        );
        assert_eq!(
            dynres_registry_info(null_mut(), c"mpi://WORLD".as_ptr(), null_mut()),
            DYNRES_ERR_NULL
        );
        assert_eq!(
            dynres_fence(null_mut(), c"mpi://WORLD".as_ptr(), 1),
            DYNRES_ERR_NULL
        );
        assert_eq!(dynres_session_rank(null_mut(), null_mut()), DYNRES_ERR_NULL);
        // Constructors' out pointers and arguments.
        assert_eq!(dynres_master_new(null(), null_mut()), DYNRES_ERR_NULL);
        assert_eq!(
            dynres_daemon_new(0, c"job".as_ptr(), null_mut()),
            DYNRES_ERR_NULL
        );
        let mut d = null_mut();
        assert_eq!(dynres_daemon_new(0, null(), &mut d), DYNRES_ERR_NULL);
        assert!(d.is_null(), "no handle on failure");
        assert_eq!(dynres_registry_new(null_mut()), DYNRES_ERR_NULL);
        assert_eq!(dynres_session_init(null_mut()), DYNRES_ERR_NULL);
        // Frees of NULL are no-ops.
        assert_eq!(dynres_master_free(null_mut()), DYNRES_OK);
        assert_eq!(dynres_daemon_free(null_mut()), DYNRES_OK);
        assert_eq!(dynres_client_free(null_mut()), DYNRES_OK);
        assert_eq!(dynres_registry_free(null_mut()), DYNRES_OK);
        assert_eq!(dynres_session_finalize(null_mut()), DYNRES_OK);

        let m = master();
        assert_eq!(
            dynres_master_poll_output(m, null_mut(), buf.as_mut_ptr(), 64),
            DYNRES_ERR_NULL
        );
        assert_eq!(dynres_master_handle(m, 0, null(), 10, 0), DYNRES_ERR_NULL);
        assert_eq!(
            dynres_master_request_change(m, 1, null(), 0),
            DYNRES_ERR_NULL
        );
        assert_eq!(
            dynres_master_poll_timeout(m, &mut deadline, null_mut()),
            DYNRES_ERR_NULL
        );
        assert_eq!(
            dynres_master_poll_timeout(m, null_mut(), &mut armed),
            DYNRES_ERR_NULL
        );
        assert_eq!(
            dynres_master_change_status(m, null(), &mut 0),
            DYNRES_ERR_NULL
        );
        assert_eq!(dynres_master_registry_copy(m, null_mut()), DYNRES_ERR_NULL);
        let req = dynres_change_request {
            kind: DYNRES_RC_SUB,
            app: null(),
            add: 0,
            sub: 1,
            victims: null(),
            nvictims: 1,
            bound: null(),
        };
        assert_eq!(
            dynres_master_request_change(m, 1, &req, 0),
            DYNRES_ERR_NULL,
            "app"
        );
        let req = dynres_change_request {
            app: c"app".as_ptr(),
            ..req
        };
        assert_eq!(
            dynres_master_request_change(m, 1, &req, 0),
            DYNRES_ERR_NULL,
            "victims"
        );
        assert_eq!(last_error(), "request.victims is NULL");
        // The first action (node 0 allocated) has no payload: no buffer needed.
        assert_eq!(
            dynres_master_poll_output(m, &mut a, null_mut(), 0),
            DYNRES_OK
        );
        assert_eq!(
            (a.kind, a.node, a.len),
            (DYNRES_ACTION_NODE_ALLOCATED, 0, 0)
        );
        // A NULL payload buffer with room claimed is refused, and the action kept.
        assert_eq!(
            dynres_master_poll_output(m, &mut a, null_mut(), 4096),
            DYNRES_ERR_NULL
        );
        assert_eq!(a.kind, DYNRES_ACTION_SEND_TO_DAEMON);
        assert_eq!(
            dynres_master_poll_output(m, &mut a, buf.as_mut_ptr(), 0),
            DYNRES_ERR_BUFFER_TOO_SMALL
        );
        assert_eq!(
            a.kind, DYNRES_ACTION_SEND_TO_DAEMON,
            "the same action is still there"
        );
        dynres_master_free(m);
    }
}

/// Drains a master's actions with a large buffer: (kind, payload) pairs.
fn drain(m: *mut dynres_master) -> Vec<(dynres_action, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let mut a = dynres_action::default();
        // SAFETY: a live master and valid buffers.
        let rc = unsafe { dynres_master_poll_output(m, &mut a, buf.as_mut_ptr(), buf.len()) };
        assert_eq!(rc, DYNRES_OK, "{}", last_error());
        if a.kind == DYNRES_ACTION_NONE {
            return out;
        }
        out.push((a, buf[..a.len].to_vec()));
    }
}

#[test]
fn too_small_buffers_keep_the_action() {
    let m = master();
    let mut small = [0u8; 4];
    let mut a = dynres_action::default();
    // SAFETY: a live master and valid buffers.
    let rc = unsafe { dynres_master_poll_output(m, &mut a, small.as_mut_ptr(), small.len()) };
    assert_eq!((rc, a.kind), (DYNRES_OK, DYNRES_ACTION_NODE_ALLOCATED));
    // SAFETY: a live master and valid buffers.
    let rc = unsafe { dynres_master_poll_output(m, &mut a, small.as_mut_ptr(), small.len()) };
    assert_eq!(rc, DYNRES_ERR_BUFFER_TOO_SMALL);
    assert_eq!(a.kind, DYNRES_ACTION_SEND_TO_DAEMON);
    let needed = a.len;
    assert!(needed > 4);
    assert!(
        last_error().contains(&format!("{needed} needed")),
        "{}",
        last_error()
    );
    // A size query (NULL, 0) answers the same.
    // SAFETY: as above.
    let rc = unsafe { dynres_master_poll_output(m, &mut a, null_mut(), 0) };
    assert_eq!((rc, a.len), (DYNRES_ERR_BUFFER_TOO_SMALL, needed));
    let all = drain(m);
    let (first, bytes) = &all[0];
    assert_eq!(
        (first.kind, first.len, bytes.len()),
        (DYNRES_ACTION_SEND_TO_DAEMON, needed, needed)
    );
    let msg = decode_to_daemon(bytes).expect("a ToDaemon frame");
    assert!(matches!(msg, ToDaemon::DefinePset { .. }), "{msg:?}");
    // The job's start: two processes launched on node 0.
    assert!(all.iter().any(|(a, b)| a.kind == DYNRES_ACTION_SEND_TO_DAEMON
        && matches!(decode_to_daemon(b), Ok(ToDaemon::Launch { ref procs }) if procs.len() == 2)));
    // SAFETY: frees the master made above.
    unsafe { dynres_master_free(m) };

    // The registry's member list: too small stores the count needed.
    let mut r = null_mut();
    let apps = [dynres_app_spec {
        name: c"a".as_ptr(),
        nprocs: 3,
    }];
    let (mut ranks, mut n) = ([0u32; 2], 0usize);
    // SAFETY: valid pointers; the registry is freed at the end.
    unsafe {
        assert_eq!(dynres_registry_new(&mut r), DYNRES_OK);
        assert_eq!(
            dynres_registry_start_job(r, c"job".as_ptr(), apps.as_ptr(), 1),
            DYNRES_OK
        );
        let rc = dynres_registry_members(r, c"mpi://app/a".as_ptr(), ranks.as_mut_ptr(), 2, &mut n);
        assert_eq!((rc, n), (DYNRES_ERR_BUFFER_TOO_SMALL, 3));
        assert_eq!(ranks, [0, 0], "nothing written");
        let mut all = [0u32; 3];
        let rc = dynres_registry_members(r, c"mpi://app/a".as_ptr(), all.as_mut_ptr(), 3, &mut n);
        assert_eq!((rc, n, all), (DYNRES_OK, 3, [0, 1, 2]));
        dynres_registry_free(r);
    }
}

#[test]
fn malformed_frames_are_typed_codes() {
    let m = master();
    drain(m);
    let mut d = null_mut();
    // SAFETY: valid pointers.
    let made = unsafe { dynres_daemon_new(0, c"job".as_ptr(), &mut d) };
    assert_eq!(made, DYNRES_OK);
    let good = encode_to_daemon(&ToDaemon::PrunePset {
        name: PsetName::parse("mpi://rte/app/x").unwrap(),
    });
    let feed_daemon = |f: &[u8]| {
        // SAFETY: a live daemon, a valid frame.
        unsafe { dynres_daemon_handle_master(d, f.as_ptr(), f.len(), 1) }
    };
    assert_eq!(feed_daemon(&good), DYNRES_OK);
    let mut bad = good.clone();
    bad[0] = b'X';
    assert_eq!(feed_daemon(&bad), DYNRES_ERR_WIRE_BAD_MAGIC);
    let mut bad = good.clone();
    bad[2] = 9;
    assert_eq!(feed_daemon(&bad), DYNRES_ERR_WIRE_UNKNOWN_VERSION);
    assert_eq!(
        feed_daemon(&good[..good.len() - 1]),
        DYNRES_ERR_WIRE_LENGTH_MISMATCH
    );
    assert_eq!(feed_daemon(&good[..5]), DYNRES_ERR_WIRE_TRUNCATED);
    assert_eq!(feed_daemon(&[]), DYNRES_ERR_WIRE_TRUNCATED);
    let mut bad = good.clone();
    bad.push(0);
    bad[8] += 1;
    assert_eq!(feed_daemon(&bad), DYNRES_ERR_WIRE_TRAILING_BYTES);
    // A pset name that is no pset name inside a well-formed frame.
    let mut bad = good.clone();
    let at = bad.len() - 1;
    bad[at] = b'/';
    assert_eq!(feed_daemon(&bad), DYNRES_ERR_WIRE_INVALID_VALUE);
    assert!(last_error().contains("pset name"), "{}", last_error());
    // A frame of another link: a daemon-bound frame fed to the master.
    // SAFETY: a live master, a valid frame.
    let rc = unsafe { dynres_master_handle(m, 0, good.as_ptr(), good.len(), 1) };
    assert_eq!(rc, DYNRES_ERR_WIRE_UNKNOWN_TYPE);
    // An unknown node is the kernel's refusal, not a crash.
    let exited = dynres_core::rc::wire::encode_to_master(&dynres_core::rc::ToMaster::Exited {
        pid: dynres_core::ProcessId::new(dynres_core::Namespace::new("job"), 0),
    });
    // SAFETY: as above.
    let rc = unsafe { dynres_master_handle(m, 7, exited.as_ptr(), exited.len(), 1) };
    assert_eq!(rc, DYNRES_ERR_RC_BAD_REQUEST);
    // None of it produced anything.
    assert!(drain(m).is_empty());
    let mut len = 0usize;
    // SAFETY: valid pointers.
    unsafe {
        assert_eq!(dynres_frame_len(good.as_ptr(), 9, &mut len), DYNRES_OK);
        assert_eq!(len, good.len());
        assert_eq!(
            dynres_frame_len(good.as_ptr(), 4, &mut len),
            DYNRES_ERR_WIRE_TRUNCATED
        );
        assert_eq!(
            dynres_frame_len(b"XY".as_ptr(), 2, &mut len),
            DYNRES_ERR_WIRE_BAD_MAGIC
        );
        dynres_daemon_free(d);
        dynres_master_free(m);
    }
}

#[test]
fn bad_arguments_start_nothing() {
    let mut c = null_mut();
    // SAFETY: valid pointers; the client is freed at the end.
    unsafe {
        assert_eq!(dynres_client_new(c"job".as_ptr(), 3, &mut c), DYNRES_OK);
        let rc = dynres_client_call_fence(c, 1, c"mpi://nope".as_ptr(), 1, 0);
        assert_eq!(rc, DYNRES_ERR_BAD_NAME, "{}", last_error());
        let rc = dynres_client_call_pset_op(
            c,
            1,
            42,
            c"mpi://WORLD".as_ptr(),
            c"mpi://SELF".as_ptr(),
            null(),
            0,
        );
        assert_eq!(rc, DYNRES_ERR_INVALID_ARGUMENT);
        let not_utf8: [c_char; 3] = [0xff_u8 as c_char, 0x41, 0];
        let rc = dynres_client_call_publish(c, 1, not_utf8.as_ptr(), c"v".as_ptr(), 0);
        assert_eq!(rc, DYNRES_ERR_INVALID_ARGUMENT);
        assert_eq!(last_error(), "key is not UTF-8");
        let req = dynres_change_request {
            kind: 9,
            app: c"app".as_ptr(),
            add: 1,
            sub: 0,
            victims: null(),
            nvictims: 0,
            bound: null(),
        };
        assert_eq!(
            dynres_client_call_request_change(c, 1, &req, 0),
            DYNRES_ERR_INVALID_ARGUMENT
        );
        // Nothing was started: no request to send.
        let mut a = dynres_action::default();
        assert_eq!(
            dynres_client_poll_output(c, &mut a, null_mut(), null_mut(), 0),
            DYNRES_OK
        );
        assert_eq!(a.kind, DYNRES_ACTION_NONE);
        // A call id in use is the kernel's refusal.
        assert_eq!(
            dynres_client_call_lookup(c, 5, c"k".as_ptr(), 0, 0),
            DYNRES_OK
        );
        assert_eq!(
            dynres_client_call_lookup(c, 5, c"k".as_ptr(), 0, 0),
            DYNRES_ERR_RC_CLIENT
        );
        dynres_client_free(c);
    }
}

#[test]
fn a_client_call_goes_out_as_a_frame_and_comes_back_as_a_result() {
    let mut c = null_mut();
    let mut buf = vec![0u8; 4096];
    let mut a = dynres_action::default();
    let mut r = dynres_result::default();
    // SAFETY: valid pointers; the client is freed at the end.
    unsafe {
        assert_eq!(dynres_client_new(c"job".as_ptr(), 3, &mut c), DYNRES_OK);
        let rc = dynres_client_call_get_res_change(c, 77, c"mpi://SELF".as_ptr(), 5);
        assert_eq!(rc, DYNRES_OK);
        let rc = dynres_client_poll_output(c, &mut a, &mut r, buf.as_mut_ptr(), buf.len());
        assert_eq!((rc, a.kind), (DYNRES_OK, DYNRES_ACTION_SEND_REQUEST));
        let (req, request) = decode_client(&buf[..a.len]).expect("a request frame");
        assert_eq!(
            request,
            ClientRequest::Query {
                bound: Some(PsetName::self_set())
            }
        );
        let delta = PsetName::parse("mpi://rte/app/rc/4").unwrap();
        let reply = encode_reply(
            req,
            &ClientReply::Query(QueryAnswer {
                kind: Some(RcType::Add),
                delta: Some(delta.clone()),
                sub_delta: None,
                incl: true,
                status: RcStatus::Announced,
            }),
        );
        assert_eq!(
            dynres_client_handle(c, reply.as_ptr(), reply.len(), 6),
            DYNRES_OK
        );
        let rc = dynres_client_poll_output(c, &mut a, &mut r, buf.as_mut_ptr(), buf.len());
        assert_eq!(
            (rc, a.kind, a.id, a.error),
            (DYNRES_OK, DYNRES_ACTION_DONE, 77, DYNRES_OK)
        );
        assert_eq!(r.call, DYNRES_CALL_GET_RES_CHANGE);
        let q = r.res_change;
        assert_eq!(
            (q.kind, q.status, q.incl),
            (DYNRES_RC_ADD, DYNRES_STATUS_ANNOUNCED, 1)
        );
        let got = CStr::from_ptr(q.delta.name.as_ptr()).to_str().unwrap();
        assert_eq!(got, delta.as_str());
        assert_eq!(q.sub_delta.name[0], 0, "no sub delta");

        // A refused lookup: the error code and its message as the payload.
        assert_eq!(
            dynres_client_call_lookup(c, 78, c"k".as_ptr(), 0, 7),
            DYNRES_OK
        );
        dynres_client_poll_output(c, &mut a, &mut r, buf.as_mut_ptr(), buf.len());
        let (req, _) = decode_client(&buf[..a.len]).unwrap();
        let reply = encode_reply(
            req,
            &ClientReply::Lookup(Err(RcError::NoSuchKey("k".into()))),
        );
        assert_eq!(
            dynres_client_handle(c, reply.as_ptr(), reply.len(), 8),
            DYNRES_OK
        );
        let rc = dynres_client_poll_output(c, &mut a, &mut r, buf.as_mut_ptr(), 3);
        assert_eq!(
            rc, DYNRES_ERR_BUFFER_TOO_SMALL,
            "the message does not fit in 3 bytes"
        );
        let rc = dynres_client_poll_output(c, &mut a, &mut r, buf.as_mut_ptr(), buf.len());
        assert_eq!((rc, a.kind, a.id), (DYNRES_OK, DYNRES_ACTION_DONE, 78));
        assert_eq!(
            (a.error, r.error, r.call),
            (
                DYNRES_ERR_RC_NO_SUCH_KEY,
                DYNRES_ERR_RC_NO_SUCH_KEY,
                DYNRES_CALL_LOOKUP
            )
        );
        let msg = CStr::from_bytes_with_nul(&buf[..a.len])
            .unwrap()
            .to_str()
            .unwrap();
        assert_eq!(msg, "key \"k\" is not published");
        dynres_client_free(c);
    }
}

#[test]
fn a_session_outside_dynres_run_is_an_env_error() {
    // This test process was not started by `dynres run`.
    assert!(std::env::var_os("DYNRES_SOCKET").is_none());
    let mut s = null_mut();
    // SAFETY: a valid out pointer.
    let rc = unsafe { dynres_session_init(&mut s) };
    assert_eq!(rc, DYNRES_ERR_ENV);
    assert!(s.is_null());
    assert!(last_error().contains("DYNRES_"), "{}", last_error());
}

/// The C change request stays a bag of fields; it becomes the kernel's enum by kind. The
/// fields a kind does not take are ignored (as the master always ignored them), named
/// victims win over `sub`, and victims named for an ADD are the bad request the master
/// used to refuse, now refused by the call itself with the same code and text.
#[test]
fn a_c_change_request_becomes_the_kernel_enum() {
    use dynres_core::rc::{ChangeRequest, NamedVictims};
    use dynres_core::{Namespace, ProcessId};
    let ns = Namespace::new("job");
    let ranks = [1u32, 0];
    let named = NamedVictims::new(ranks.map(|r| ProcessId::new(ns.clone(), r)).to_vec())
        .expect("two victims");
    let bag = dynres_change_request {
        kind: DYNRES_RC_SUB,
        app: c"app".as_ptr(),
        add: 7,
        sub: 0,
        victims: ranks.as_ptr(),
        nvictims: ranks.len(),
        bound: c"mpi://app/app".as_ptr(),
    };
    let convert = |r: &dynres_change_request| {
        // SAFETY: every pointer of `r` is NULL or valid for the call.
        unsafe { change_request(r, &ns, None) }.map_err(|e| (e.code(), e.to_string()))
    };
    assert_eq!(
        convert(&bag),
        Ok(ChangeRequest::sub_named("app", named.clone()))
    );
    let replace = dynres_change_request {
        kind: DYNRES_RC_REPLACE,
        ..bag
    };
    assert_eq!(
        convert(&replace),
        Ok(ChangeRequest::replace_named("app", named, 7))
    );
    let stack = dynres_change_request {
        sub: 2,
        victims: null(),
        nvictims: 0,
        ..bag
    };
    assert_eq!(convert(&stack), Ok(ChangeRequest::sub("app", 2)));
    let add = dynres_change_request {
        kind: DYNRES_RC_ADD,
        sub: 3,
        ..stack
    };
    let bound = PsetName::parse("mpi://app/app").expect("a name");
    assert_eq!(convert(&add), Ok(ChangeRequest::add_to("app", 7, bound)));
    let add_with_victims = dynres_change_request {
        kind: DYNRES_RC_ADD,
        ..bag
    };
    let refused = Err((
        DYNRES_ERR_RC_BAD_REQUEST,
        "bad change request: only SUB and REPLACE take victims".to_string(),
    ));
    assert_eq!(convert(&add_with_victims), refused);
    // Through the master's entry point: the code, and nothing started or refused later.
    let m = master();
    drain(m);
    // SAFETY: a live master and a valid request.
    let rc = unsafe { dynres_master_request_change(m, 1, &add_with_victims, 0) };
    assert_eq!(rc, DYNRES_ERR_RC_BAD_REQUEST, "{}", last_error());
    assert_eq!(Err((rc, last_error())), refused);
    assert!(drain(m).is_empty(), "nothing announced");
    // SAFETY: live, freed once.
    unsafe { dynres_master_free(m) };
}
