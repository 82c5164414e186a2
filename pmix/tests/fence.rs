//! A fence with data collection, and a direct modex: bare PMIx clients (built against
//! the system's libpmix) of a job with one more process on a node that never starts.
//! libpmix completes a fence of only local processes by itself (and Open MPI 5 on one
//! node does not fence), so the remote process is what makes it ask the host. The
//! harness answers the Fence with this node's blob (the remote node "contributed"
//! nothing) and the DirectModex for the remote rank with NotFound: the clients read
//! every local peer's value, and their read of the remote one fails instead of hanging.

mod common;

use common::{Seen, assert_all_exited_0, harness, skip};

#[test]
fn fence_and_direct_modex_with_a_remote_rank() {
    let Some(h) = harness() else { return };
    let _serial = h
        .serial
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let exe = match h.build_pmix_client("pmix_fence", include_str!("programs/pmix_fence.c")) {
        Ok(exe) => exe,
        Err(reason) => return skip(reason),
    };
    let exits = h.run_job_with_remote("fence", &exe, 3, 1, &[]);
    for e in &exits {
        print!("{}:{} exit {:?}: {}", e.ns, e.rank, e.code, e.stdout);
    }
    let seen = h.seen();
    println!("harness saw: {seen:?}");
    assert_all_exited_0(&exits);
    for e in &exits {
        let want = format!("pmix rank={} size=4 fence ok=1", e.rank);
        assert!(
            e.stdout.contains(&want),
            "rank {} printed {:?}",
            e.rank,
            e.stdout
        );
    }
    assert!(
        seen.iter().any(|s| matches!(s, Seen::Fence(_))),
        "no Fence request: {seen:?}"
    );
    assert!(
        seen.contains(&Seen::DirectModex("fence".into(), 3)),
        "no DirectModex request for the remote rank: {seen:?}"
    );
}
