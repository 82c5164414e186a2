//! The client library and the communicator on real processes: the built-in `check`
//! example exits non-zero on any wrong answer (psets, publish/lookup/fence, p2p,
//! barrier, bcast, allreduce), which fails the job.

use dynres_tests::job::Runtime;

#[test]
fn client_library_and_communicator_answer_correctly() {
    let rt = Runtime::new("check");
    for n in ["1", "4"] {
        let f = rt.run(&["run", "-n", n, "--slots", "4", "--example", "check"]);
        assert_eq!(f.code, Some(0), "{}", f.dump());
        let ok = format!("[rank 0] check: {n} processes ok");
        assert!(f.stdout.contains(&ok), "{}", f.dump());
        f.assert_nothing_left();
    }
}

#[test]
fn a_client_without_the_runtime_gets_a_typed_error() {
    // No DYNRES_* environment: not started by `dynres run`.
    let Err(e) = dynres_client::Session::init() else {
        panic!("a session without a runtime")
    };
    assert!(matches!(e, dynres_client::ClientError::Env(_)), "{e}");
}
