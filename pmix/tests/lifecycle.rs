//! The server's life: start, serve, finalize on drop; no second start in the same
//! process (libpmix 4.2.2 aborts the process when it is initialised again). Needs
//! libpmix only (no Open MPI).

use dynres_pmix::{Namespace, PmixError, ProcInfo, Server};

fn one_proc(name: &str) -> Namespace {
    Namespace {
        name: name.into(),
        size: 1,
        universe: 1,
        nodes: vec!["localhost".into()],
        procs: vec![ProcInfo {
            rank: 0,
            node: 0,
            local_rank: 0,
            node_rank: 0,
            app: 0,
        }],
        this_node: 0,
        spawned_by: None,
        oversubscribed: false,
    }
}

#[test]
fn start_serve_drop_and_no_restart() {
    if let Some(reason) = dynres_pmix::unavailable_reason() {
        eprintln!(
            "skipped: lifecycle::start_serve_drop_and_no_restart: no libpmix in this build: {reason}"
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("dpx-life-{}", std::process::id()));
    {
        let (tx, _rx) = std::sync::mpsc::channel();
        let server = Server::start(&dir.join("srv"), tx).expect("start");
        let (tx2, _rx2) = std::sync::mpsc::channel();
        assert_eq!(
            Server::start(&dir.join("other"), tx2).err(),
            Some(PmixError::AlreadyStarted)
        );
        let ns = "life".to_string();
        server
            .register_namespace(&one_proc(&ns))
            .expect("register_namespace");
        server
            .register_client(&ns, 0, 0, 0)
            .expect("register_client");
        let env = server.setup_fork(&ns, 0).expect("setup_fork");
        assert!(
            env.iter().any(|(k, v)| k == "PMIX_NAMESPACE" && *v == ns),
            "{env:?}"
        );
        // Bad arguments are refused before they reach libpmix.
        assert!(matches!(
            server.setup_fork("bad\0name", 0),
            Err(PmixError::InvalidArgument(_))
        ));
        let mut bad = one_proc("badnode");
        bad.procs[0].node = 3;
        assert!(matches!(
            server.register_namespace(&bad),
            Err(PmixError::InvalidArgument(_))
        ));
        server.deregister_namespace(&ns);
        drop(server);
    }
    let (tx, _rx) = std::sync::mpsc::channel();
    assert_eq!(
        Server::start(&dir.join("again"), tx).err(),
        Some(PmixError::AlreadyStarted)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
