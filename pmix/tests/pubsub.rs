//! `MPI_Publish_name`/`MPI_Lookup_name` between two ranks through the server's
//! Publish and Lookup requests, and a lookup whose completion the host drops.

mod common;

use common::{Seen, assert_all_exited_0, harness};
use dynres_pmix::Value;

#[test]
fn publish_then_lookup() {
    let Some(h) = harness() else { return };
    let _serial = h
        .serial
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let exe = h.build("pubsub", include_str!("programs/pubsub.c"));
    let exits = h.run_job("pubsub", &exe, 2, &[]);
    for e in &exits {
        print!("{}:{} exit {:?}: {}", e.ns, e.rank, e.code, e.stdout);
    }
    assert_all_exited_0(&exits);
    assert!(
        exits[0].stdout.contains("rank 0 published rc=0"),
        "{:?}",
        exits[0].stdout
    );
    assert!(
        exits[1]
            .stdout
            .contains("rank 1 looked up rc=0 port=dynres-port-42"),
        "{:?}",
        exits[1].stdout
    );
    let seen = h.seen();
    println!("harness saw: {seen:?}");
    let published = seen.iter().any(|s| {
        matches!(s, Seen::Publish(ns, 0, entries)
            if ns == "pubsub" && entries.iter().any(|(_, v)| *v == Value::Str("dynres-port-42".into())))
    });
    assert!(published, "no Publish of the port from pubsub:0: {seen:?}");
    let looked_up = seen
        .iter()
        .any(|s| matches!(s, Seen::Lookup(ns, 1, keys, _) if ns == "pubsub" && keys.iter().any(|k| k.contains("dynres-svc"))));
    assert!(
        looked_up,
        "no Lookup of the service from pubsub:1: {seen:?}"
    );
}

#[test]
fn a_dropped_lookup_fails_the_call() {
    let Some(h) = harness() else { return };
    let _serial = h
        .serial
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let exe = h.build("lookup_fails", include_str!("programs/lookup_fails.c"));
    h.drop_lookups_of("dropped");
    let exits = h.run_job("dropped", &exe, 1, &[]);
    for e in &exits {
        print!("{}:{} exit {:?}: {}", e.ns, e.rank, e.code, e.stdout);
    }
    assert_all_exited_0(&exits);
    assert!(
        exits[0].stdout.contains("success=0"),
        "the lookup did not fail: {:?}",
        exits[0].stdout
    );
    let seen = h.seen();
    println!("harness saw: {seen:?}");
    assert!(
        seen.contains(&Seen::LookupDropped("dropped".into(), 0)),
        "the harness never dropped a lookup: {seen:?}"
    );
}
