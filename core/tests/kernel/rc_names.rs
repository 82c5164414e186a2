//! One data server for two jobs (`spec/runtime.md` NAMES-1..3): a master set up with
//! another job's data server forwards its applications' keys and keeps the
//! protocol's; the serving master serves a guest's requests as a client's; answers
//! reach the client only in the request's kind; the inputs round-trip through the
//! trace encoding.

use dynres_core::rc::trace::{
    decode_master_config, decode_master_input, encode_master_config, encode_master_input,
};
use dynres_core::rc::{
    ClientReply, ClientRequest, DataServer, Master, MasterInput, MasterOutput, NodeId, RcError,
    ToDaemon, ToMaster,
};
use dynres_core::{Duration, Instant, Namespace, ProcessId};

use crate::common::config;

fn master(data_server: DataServer) -> Master {
    let mut m = Master::new(dynres_core::rc::MasterConfig {
        data_server,
        ..config(1, 2, 2)
    })
    .unwrap();
    while m.poll_output().is_some() {}
    m
}

fn pid(rank: u32) -> ProcessId {
    ProcessId::new(Namespace::new("job"), rank)
}

fn ask(m: &mut Master, req: u64, request: ClientRequest) -> Vec<MasterOutput> {
    let msg = ToMaster::Forward {
        from: pid(0),
        req,
        request,
    };
    let node = NodeId(0);
    m.handle(Instant(0), MasterInput::FromDaemon { node, msg })
        .unwrap();
    outputs(m)
}

fn outputs(m: &mut Master) -> Vec<MasterOutput> {
    std::iter::from_fn(|| m.poll_output()).collect()
}

/// The replies to clients among `out`, as (request id, reply).
fn replies(out: &[MasterOutput]) -> Vec<(u64, ClientReply)> {
    out.iter()
        .filter_map(|o| match o {
            MasterOutput::Send(env) => match &env.msg {
                ToDaemon::Reply { req, reply, .. } => Some((*req, reply.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn publish(key: &str) -> ClientRequest {
    ClientRequest::Publish {
        key: key.into(),
        value: "v".into(),
    }
}

/// NAMES-1: an application's publish, lookup and unpublish leave the job under fresh
/// tickets; the protocol's reserved keys do not (refused here, as ever).
#[test]
fn a_forwarding_master_sends_application_keys_away_and_keeps_the_protocols() {
    let mut g = master(DataServer::Forwarded);
    let lookup = ClientRequest::Lookup {
        key: "k".into(),
        wait: Some(Duration::from_secs(1)),
    };
    let unpublish = ClientRequest::Unpublish { key: "k".into() };
    let mut tickets = Vec::new();
    for (req, r) in [(1, publish("k")), (2, lookup), (3, unpublish)] {
        let out = ask(&mut g, req, r.clone());
        match &out[..] {
            [MasterOutput::ForwardData { ticket, request }] if *request == r => {
                tickets.push(*ticket)
            }
            other => panic!("{other:?}"),
        }
    }
    tickets.dedup();
    assert_eq!(tickets.len(), 3, "a ticket per request");
    let out = ask(&mut g, 4, publish("mpi://app/x:accept"));
    assert!(
        matches!(
            &replies(&out)[..],
            [(4, ClientReply::Published(Err(RcError::ReservedKey(_))))]
        ),
        "{out:?}"
    );
    assert!(
        !out.iter()
            .any(|o| matches!(o, MasterOutput::ForwardData { .. }))
    );
    // A master with its own data server forwards nothing.
    let mut own = master(DataServer::Own);
    let out = ask(&mut own, 1, publish("k"));
    assert!(matches!(
        &replies(&out)[..],
        [(1, ClientReply::Published(Ok(())))]
    ));
}

/// NAMES-3: the serving job's answer reaches the client in its request's kind; no
/// answer, or one of another kind, is an error of the request's kind; a ticket is
/// answered once.
#[test]
fn a_forwarded_answer_reaches_its_client_only_in_its_kind() {
    let mut g = master(DataServer::Forwarded);
    let ticket = |out: &[MasterOutput]| match out {
        [MasterOutput::ForwardData { ticket, .. }] => *ticket,
        other => panic!("{other:?}"),
    };
    let feed = |g: &mut Master, ticket, reply| {
        g.handle(Instant(0), MasterInput::Forwarded { ticket, reply })
            .unwrap();
        replies(&outputs(g))
    };
    let t = ticket(&ask(&mut g, 1, publish("k")));
    let ok = Some(ClientReply::Published(Ok(())));
    assert_eq!(feed(&mut g, t, ok.clone()), vec![(1, ok.clone().unwrap())]);
    assert_eq!(feed(&mut g, t, ok), vec![], "answered once");
    let lookup = ClientRequest::Lookup {
        key: "k".into(),
        wait: None,
    };
    let t = ticket(&ask(&mut g, 2, lookup.clone()));
    let wrong = Some(ClientReply::Fence(Ok(())));
    assert!(matches!(
        &feed(&mut g, t, wrong)[..],
        [(2, ClientReply::Lookup(Err(RcError::Client(_))))]
    ));
    let t = ticket(&ask(
        &mut g,
        3,
        ClientRequest::Unpublish { key: "k".into() },
    ));
    assert!(matches!(
        &feed(&mut g, t, None)[..],
        [(3, ClientReply::Unpublished(Err(RcError::Client(_))))]
    ));
}

/// NAMES-2: a guest's publish wakes the serving job's own waiting lookup; a guest's
/// lookup waits like a client's; a reserved key and any other request are refused.
#[test]
fn a_guests_requests_are_served_as_a_clients() {
    let mut s = master(DataServer::Own);
    let guest = |s: &mut Master, ticket, request| {
        s.handle(Instant(0), MasterInput::Guest { ticket, request })
            .unwrap();
        outputs(s)
            .into_iter()
            .filter_map(|o| match o {
                MasterOutput::GuestReply { ticket, reply } => Some((ticket, reply)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let wait = Some(Duration::from_secs(5));
    let waiting = ClientRequest::Lookup {
        key: "k".into(),
        wait,
    };
    assert!(ask(&mut s, 1, waiting.clone()).is_empty(), "parked");
    assert_eq!(guest(&mut s, 7, waiting), vec![], "the guest's too");
    s.handle(
        Instant(0),
        MasterInput::Guest {
            ticket: 8,
            request: publish("k"),
        },
    )
    .unwrap();
    let out = outputs(&mut s);
    let own = replies(&out);
    assert_eq!(own, vec![(1, ClientReply::Lookup(Ok("v".into())))]);
    let mut to_guest: Vec<(u64, ClientReply)> = out
        .into_iter()
        .filter_map(|o| match o {
            MasterOutput::GuestReply { ticket, reply } => Some((ticket, reply)),
            _ => None,
        })
        .collect();
    to_guest.sort();
    assert_eq!(
        to_guest,
        vec![
            (7, ClientReply::Lookup(Ok("v".into()))),
            (8, ClientReply::Published(Ok(())))
        ]
    );
    assert!(matches!(
        &guest(&mut s, 9, publish("mpi://app/x:confirm"))[..],
        [(9, ClientReply::Published(Err(RcError::ReservedKey(_))))]
    ));
    let fence = ClientRequest::Fence {
        pset: dynres_core::pset::PsetName::world(),
        timeout: Duration::from_secs(1),
    };
    assert!(matches!(
        &guest(&mut s, 10, fence)[..],
        [(10, ClientReply::Published(Err(RcError::NotPermitted(_))))]
    ));
}

/// The new inputs and the configuration's data server survive the trace encoding
/// (replay), and a configuration recorded before NAMES-1 still decodes as `Own`.
#[test]
fn names_inputs_round_trip_through_the_trace_encoding() {
    let inputs = [
        MasterInput::Guest {
            ticket: 3,
            request: publish("k"),
        },
        MasterInput::Forwarded {
            ticket: 4,
            reply: Some(ClientReply::Lookup(Ok("v".into()))),
        },
        MasterInput::Forwarded {
            ticket: 5,
            reply: None,
        },
    ];
    for i in inputs {
        assert_eq!(decode_master_input(&encode_master_input(&i)).unwrap(), i);
    }
    let cfg = dynres_core::rc::MasterConfig {
        data_server: DataServer::Forwarded,
        ..config(1, 2, 2)
    };
    assert_eq!(
        decode_master_config(&encode_master_config(&cfg)).unwrap(),
        cfg
    );
    let own = config(1, 2, 2);
    let bytes = encode_master_config(&own);
    assert_eq!(
        decode_master_config(&bytes).unwrap().data_server,
        DataServer::Own
    );
    let mut bad = encode_master_config(&cfg);
    *bad.last_mut().unwrap() = 7;
    assert!(decode_master_config(&bad).is_err());
}
