//! A small, safe layer over the OpenPMIx **server** library, so that dynres can serve
//! Open MPI 5 processes (which speak only PMIx).
//!
//! # Which library, and why
//!
//! The crate binds the system's `libpmix` from Debian's `libpmix-dev` (OpenPMIx 4.2.2):
//! it is prebuilt in Debian, it is ABI-compatible with the PMIx 5.0.x clients that
//! Open MPI 5.0.x processes carry for the calls served here (init, fence/modex,
//! publish/lookup/unpublish, spawn, connect/disconnect, abort, finalize), and it spares
//! CI a 20-minute source build. The bindings are generated at build time by bindgen
//! from the installed `pmix_server.h` (found with `pkg-config pmix`, or at Debian's
//! `/usr/lib/<triple>/pmix2/include`).
//!
//! Without the library (CI's fast lane has only the Rust toolchain), or with
//! `DYNRES_PMIX_DISABLE=1` set at build time, the crate builds a stub: every type is
//! there, and [`Server::start`] returns [`PmixError::Unavailable`] with the reason
//! ([`unavailable_reason`] says it too).
//!
//! # What is served
//!
//! One [`Server`] per process lifetime (libpmix 4.2.2 cannot be initialised again
//! after it was finalized). Every upcall that libpmix makes into the host becomes a
//! [`Request`] on the channel given to [`Server::start`]; each request carries a
//! one-shot completion object (`done`). The host answers by calling `done.complete(..)`
//! from any thread, at any later time. A completion object dropped without an answer
//! answers with [`Status::Error`], so libpmix (and the client blocked in it) is never
//! left waiting.
//!
//! Not served: PMIx groups (`PMIx_Group_construct` needs a ≥ 5.0.2 server; libpmix
//! answers "not supported"), event registration/notification upcalls, queries, tool
//! connections, IOF forwarding, credentials, allocation and job control.
//!
//! # Threading rules for the host
//!
//! - libpmix calls the upcalls on its own progress thread. This crate only converts the
//!   arguments, sends the [`Request`] and returns; the host must **never** block that
//!   thread, and nothing here completes a request from inside an upcall (it would
//!   deadlock libpmix).
//! - [`Server::register_namespace`], [`Server::deregister_namespace`] and
//!   [`Server::register_client`] block the calling thread until libpmix has done the
//!   work (bounded by [`BLOCKING_TIMEOUT`]). Call them from the host's own threads,
//!   never from code that runs inside a completion callback of this crate.
//! - The thread that receives [`Request`]s may call any method of [`Server`].
//!
//! # Environment of the children
//!
//! A child gets the host's environment **cleaned of every `PMIX_*` variable** and of
//! any `LD_LIBRARY_PATH` that points at the system libpmix, then the pairs from
//! [`Server::setup_fork`]. Open MPI processes load their own `libpmix.so.2` (from their
//! installation's `lib/openmpi/`); a leaked `LD_LIBRARY_PATH` would make them load the
//! server's 4.2.2 library instead, and leaked `PMIX_*` variables would point them at
//! another server. [`child_env`] does the cleaning.

#[cfg(have_pmix)]
mod ffi;
#[cfg(have_pmix)]
mod server;
#[cfg(not(have_pmix))]
mod stub;

#[cfg(have_pmix)]
pub use server::Server;
#[cfg(not(have_pmix))]
pub use stub::Server;

use std::fmt;
use std::time::Duration;

/// How long the blocking calls of [`Server`] wait for libpmix before they give up
/// with [`PmixError::Timeout`].
pub const BLOCKING_TIMEOUT: Duration = Duration::from_secs(30);

/// The rank that stands for "every process of the namespace" in [`Request`]s
/// (`PMIX_RANK_WILDCARD`).
pub const RANK_WILDCARD: u32 = u32::MAX - 1;

/// The rank that stands for "no particular process" (`PMIX_RANK_UNDEF`).
pub const RANK_UNDEF: u32 = u32::MAX;

/// Why libpmix is not available to this build, or `None` when it is.
pub fn unavailable_reason() -> Option<&'static str> {
    let reason = include_str!(concat!(env!("OUT_DIR"), "/unavailable.txt"));
    if reason.is_empty() {
        None
    } else {
        Some(reason)
    }
}

/// What went wrong in a call of [`Server`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PmixError {
    /// This build has no libpmix (the stub), with the reason.
    Unavailable(String),
    /// A [`Server`] was already started in this process: libpmix allows one per
    /// process lifetime (4.2.2 cannot be initialised again after it was finalized).
    AlreadyStarted,
    /// An argument cannot be passed to libpmix: a name or key with a NUL byte or too
    /// long, a node id out of range, a namespace without processes on this node…
    InvalidArgument(String),
    /// libpmix returned this status.
    Pmix(Status),
    /// libpmix did not call back within [`BLOCKING_TIMEOUT`].
    Timeout,
}

impl fmt::Display for PmixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PmixError::Unavailable(reason) => write!(f, "PMIx is unavailable: {reason}"),
            PmixError::AlreadyStarted => {
                write!(f, "a PMIx server is already running in this process")
            }
            PmixError::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            PmixError::Pmix(status) => write!(f, "libpmix failed: {status}"),
            PmixError::Timeout => write!(f, "libpmix did not answer within {BLOCKING_TIMEOUT:?}"),
        }
    }
}

impl std::error::Error for PmixError {}

/// A PMIx status that the host answers with (or that libpmix returned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// `PMIX_ERROR`: a general error; what a dropped completion answers.
    Error,
    /// `PMIX_ERR_NOT_FOUND`: e.g. a looked-up key that is not published.
    NotFound,
    /// `PMIX_ERR_TIMEOUT`.
    Timeout,
    /// `PMIX_ERR_UNREACH`: a peer or node cannot be reached.
    Unreachable,
    /// `PMIX_ERR_NOT_SUPPORTED`.
    NotSupported,
    /// `PMIX_ERR_BAD_PARAM`.
    BadParam,
    /// Any other PMIx status code.
    Other(i32),
}

impl Status {
    /// The PMIx status code.
    pub fn code(self) -> i32 {
        match self {
            Status::Error => -1,
            Status::NotFound => -46,
            Status::Timeout => -24,
            Status::Unreachable => -25,
            Status::NotSupported => -47,
            Status::BadParam => -27,
            Status::Other(code) => code,
        }
    }

    /// The status for a PMIx code (`Other` for codes without a variant of their own;
    /// 0, `PMIX_SUCCESS`, is no error and maps to `Other(0)`).
    pub fn from_code(code: i32) -> Status {
        match code {
            -1 => Status::Error,
            -46 => Status::NotFound,
            -24 => Status::Timeout,
            -25 => Status::Unreachable,
            -47 => Status::NotSupported,
            -27 => Status::BadParam,
            other => Status::Other(other),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?} ({})", self.code())
    }
}

/// A value published with `PMIx_Publish` (Open MPI publishes port names as strings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `PMIX_STRING`.
    Str(String),
    /// `PMIX_BYTE_OBJECT`.
    Bytes(Vec<u8>),
    /// The signed integer types (`PMIX_INT`, `PMIX_INT8`…`PMIX_INT64`), widened.
    Int(i64),
    /// The unsigned integer types (`PMIX_UINT`, `PMIX_UINT8`…`PMIX_UINT64`,
    /// `PMIX_SIZE`), widened; looked up again as `PMIX_UINT64`.
    UInt(u64),
    /// `PMIX_BOOL`.
    Bool(bool),
}

/// One process of a [`Namespace`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcInfo {
    /// Its rank in the namespace (`PMIX_RANK`).
    pub rank: u32,
    /// The node it runs on: an index into [`Namespace::nodes`] (`PMIX_NODEID`).
    pub node: u32,
    /// Its rank among the namespace's processes on its node (`PMIX_LOCAL_RANK`).
    pub local_rank: u16,
    /// Its rank among all jobs' processes on its node (`PMIX_NODE_RANK`).
    pub node_rank: u16,
    /// Its application number within the namespace (`PMIX_APPNUM`).
    pub app: u32,
}

/// A job as libpmix must know it before any of its processes connects
/// ([`Server::register_namespace`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    /// The namespace (`PMIX_JOBID` too); at most 255 bytes, no NUL.
    pub name: String,
    /// The number of processes (`PMIX_JOB_SIZE`, `PMIX_MAX_PROCS`).
    pub size: u32,
    /// The universe size (`PMIX_UNIV_SIZE`): the slots the session may use.
    pub universe: u32,
    /// Host names by node id. Only the nodes that run processes of this namespace
    /// appear in `PMIX_NODE_MAP`/`PMIX_PROC_MAP` (in node-id order).
    pub nodes: Vec<String>,
    /// Every process of the namespace, on every node.
    pub procs: Vec<ProcInfo>,
    /// The node id of the node this server runs on.
    pub this_node: u32,
    /// The process that spawned this namespace (`PMIX_PARENT_ID`, and
    /// `PMIX_SPAWNED` true), if any.
    pub spawned_by: Option<(String, u32)>,
    /// More processes on this node than it has cores (`PMIX_NODE_OVERSUBSCRIBED`):
    /// Open MPI then yields while it waits instead of spinning.
    pub oversubscribed: bool,
}

/// One application of a `PMIx_Spawn` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// The executable, as the client gave it.
    pub cmd: String,
    /// The arguments, `argv[0]` included when the client gave it (Open MPI does).
    pub argv: Vec<String>,
    /// Variables to set in the children (Open MPI puts `OMPI_PARENT_PORT` and the
    /// parent's `OMPI_MCA_*` here).
    pub env: Vec<(String, String)>,
    /// How many processes to start.
    pub maxprocs: u32,
    /// The working directory, if the client asked for one.
    pub cwd: Option<String>,
}

/// A process, as `(namespace, rank)`; the rank may be [`RANK_WILDCARD`].
pub type Proc = (String, u32);

/// `PMIX_QUERY_NUM_PSETS`: how many psets there are (answer [`QueryValue::Size`]).
pub const QUERY_NUM_PSETS: &str = "pmix.qry.psetnum";
/// `PMIX_QUERY_PSET_NAMES`: their names, comma-separated (answer [`QueryValue::Str`]).
pub const QUERY_PSET_NAMES: &str = "pmix.qry.psets";
/// `PMIX_QUERY_PSET_MEMBERSHIP`: the members of the pset a query's qualifier names
/// (answer [`QueryValue::Procs`]).
pub const QUERY_PSET_MEMBERSHIP: &str = "pmix.qry.pmems";

/// One query of a [`Request::Query`]: the keys asked for, and the pset its
/// `PMIX_PSET_NAME` qualifier names, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The keys (`PMIX_QUERY_*`).
    pub keys: Vec<String>,
    /// The `PMIX_PSET_NAME` qualifier.
    pub pset: Option<String>,
}

/// The value of one answered query key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryValue {
    /// A count (`PMIX_SIZE`).
    Size(usize),
    /// A string.
    Str(String),
    /// Processes (a `PMIX_DATA_ARRAY` of `PMIX_PROC`).
    Procs(Vec<Proc>),
}

/// An upcall of libpmix that the host must answer through its `done` object.
#[derive(Debug)]
pub enum Request {
    /// The local processes in `procs` all entered a fence. Answer with the
    /// concatenation of the `data` blobs of every node that takes part (this node's
    /// included), in any order. libpmix 4.2.2 completes a fence of only local
    /// processes by itself, so this comes only when participants are on other nodes.
    Fence {
        /// The participants (a namespace with [`RANK_WILDCARD`] for all of it).
        procs: Vec<Proc>,
        /// This node's contribution, opaque.
        data: Vec<u8>,
        /// Whether the clients asked for the data (`PMIX_COLLECT_DATA`).
        collect: bool,
        /// The answer.
        done: FenceDone,
    },
    /// A local client asks for the data of a process that is not on this node:
    /// answer with the blob that the hosting node's [`Server::dmodex_request`] gave.
    DirectModex {
        /// The process whose data is wanted.
        proc_: Proc,
        /// The answer.
        done: ModexDone,
    },
    /// A client publishes data.
    Publish {
        /// The publisher.
        from: Proc,
        /// The keys and values.
        entries: Vec<(String, Value)>,
        /// The answer.
        done: OpDone,
    },
    /// A client queries the host (`PMIx_Query_info`): answer each key the host knows
    /// with its value (the answer's key is the query's key); [`Status::NotFound`] if
    /// none is known.
    Query {
        /// The client.
        from: Proc,
        /// The queries.
        queries: Vec<Query>,
        /// The answer.
        done: QueryDone,
    },
    /// A client looks up published keys. With `wait`, answer only once every key
    /// is published; otherwise answer at once ([`Status::NotFound`] when none is;
    /// `Ok` with no entries answers `NotFound` too). Open MPI expects a looked-up key
    /// to be deleted on first read (ports are reused). `MPI_Lookup_name` does not wait;
    /// the connect/accept of `MPI_Comm_spawn` does.
    Lookup {
        /// The client.
        from: Proc,
        /// The keys wanted.
        keys: Vec<String>,
        /// Whether the client waits for the keys (`PMIX_WAIT`).
        wait: bool,
        /// The answer.
        done: LookupDone,
    },
    /// A client deletes published keys (`keys` empty: everything it published).
    Unpublish {
        /// The client.
        from: Proc,
        /// The keys.
        keys: Vec<String>,
        /// The answer.
        done: OpDone,
    },
    /// A client spawns a new job: register its namespace, start its processes, and
    /// answer with the new namespace's name.
    Spawn {
        /// The client.
        from: Proc,
        /// The applications to start.
        apps: Vec<App>,
        /// The answer.
        done: SpawnDone,
    },
    /// The local processes in `procs` called `PMIx_Connect`; answer once every
    /// participant (on every node) did. libpmix 4.2.2 completes a connect of only
    /// local processes by itself.
    Connect {
        /// The participants.
        procs: Vec<Proc>,
        /// The answer.
        done: OpDone,
    },
    /// The local processes in `procs` called `PMIx_Disconnect`; answer once every
    /// participant did.
    Disconnect {
        /// The participants.
        procs: Vec<Proc>,
        /// The answer.
        done: OpDone,
    },
    /// A client called `PMIx_Abort` (e.g. `MPI_Abort`): end the job with `status`.
    Abort {
        /// The client.
        from: Proc,
        /// The exit status it asks for.
        status: i32,
        /// Its message.
        message: String,
        /// The answer (the client stays blocked until it comes).
        done: OpDone,
    },
    /// A registered client connected (`PMIx_Init`).
    ClientConnected {
        /// The client.
        proc_: Proc,
        /// The answer.
        done: OpDone,
    },
    /// A client called `PMIx_Finalize`.
    ClientFinalized {
        /// The client.
        proc_: Proc,
        /// The answer.
        done: OpDone,
    },
}

/// The one-shot answer shared by all completion objects: the closure that calls
/// libpmix's callback. Called at most once; called with [`Status::Error`] on drop.
struct Once<T> {
    answer: Option<Answer<T>>,
}

/// The closure behind a completion object.
type Answer<T> = Box<dyn FnOnce(Result<T, Status>) + Send>;

impl<T> Once<T> {
    fn new(answer: impl FnOnce(Result<T, Status>) + Send + 'static) -> Self {
        Once {
            answer: Some(Box::new(answer)),
        }
    }

    fn complete(&mut self, result: Result<T, Status>) {
        if let Some(answer) = self.answer.take() {
            answer(result);
        }
    }

    /// Forgets the answer without calling it (libpmix was told the request failed).
    #[cfg_attr(not(have_pmix), allow(dead_code))]
    fn disarm(&mut self) {
        self.answer = None;
    }
}

impl<T> Drop for Once<T> {
    fn drop(&mut self) {
        self.complete(Err(Status::Error));
    }
}

macro_rules! completion {
    ($(#[$doc:meta])* $name:ident, $ok:ty) => {
        $(#[$doc])*
        ///
        /// Call [`complete`](Self::complete) exactly once, from any thread; dropping
        /// the object without it answers [`Status::Error`].
        pub struct $name(Once<$ok>);

        impl $name {
            /// Answers the request.
            pub fn complete(mut self, result: Result<$ok, Status>) {
                self.0.complete(result);
            }

            #[cfg_attr(not(have_pmix), allow(dead_code))]
            pub(crate) fn new(answer: impl FnOnce(Result<$ok, Status>) + Send + 'static) -> Self {
                $name(Once::new(answer))
            }

            #[cfg_attr(not(have_pmix), allow(dead_code))]
            pub(crate) fn disarm(&mut self) {
                self.0.disarm();
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(concat!(stringify!($name), " { .. }"))
            }
        }
    };
}

completion!(
    /// The answer to an operation that returns only a status.
    OpDone,
    ()
);
completion!(
    /// The answer to a [`Request::Fence`]: the concatenated blobs of all nodes.
    FenceDone,
    Vec<u8>
);
completion!(
    /// The answer to a [`Request::DirectModex`]: the process's blob.
    ModexDone,
    Vec<u8>
);
completion!(
    /// The answer to a [`Request::Lookup`]: the keys found, with their values.
    LookupDone,
    Vec<(String, Value)>
);
completion!(
    /// The answer to a [`Request::Spawn`]: the new namespace's name.
    SpawnDone,
    String
);
completion!(
    /// The answer to a [`Request::Query`]: each key answered, with its value.
    QueryDone,
    Vec<(String, QueryValue)>
);

impl Request {
    /// Forgets the completion object without answering (the upcall failed and
    /// libpmix must not be called back).
    #[cfg_attr(not(have_pmix), allow(dead_code))]
    pub(crate) fn disarm(&mut self) {
        match self {
            Request::Fence { done, .. } => done.disarm(),
            Request::DirectModex { done, .. } => done.disarm(),
            Request::Lookup { done, .. } => done.disarm(),
            Request::Spawn { done, .. } => done.disarm(),
            Request::Query { done, .. } => done.disarm(),
            Request::Publish { done, .. }
            | Request::Unpublish { done, .. }
            | Request::Connect { done, .. }
            | Request::Disconnect { done, .. }
            | Request::Abort { done, .. }
            | Request::ClientConnected { done, .. }
            | Request::ClientFinalized { done, .. } => done.disarm(),
        }
    }
}

/// The environment for a child that [`Server::setup_fork`] prepared: `base` (usually
/// the host's own environment) without any `PMIX_*` variable and without an
/// `LD_LIBRARY_PATH` entry that holds a `libpmix.so.2` of its own, then `extra` (the
/// application's variables), then `fork` (what `setup_fork` returned), later pairs
/// replacing earlier ones.
pub fn child_env<I>(
    base: I,
    extra: &[(String, String)],
    fork: &[(String, String)],
) -> Vec<(String, String)>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut env: Vec<(String, String)> = Vec::new();
    let mut set = |key: String, value: String| {
        if let Some(slot) = env.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
        } else {
            env.push((key, value));
        }
    };
    for (key, value) in base {
        if key.starts_with("PMIX_") {
            continue;
        }
        if key == "LD_LIBRARY_PATH" {
            let kept: Vec<&str> = value
                .split(':')
                .filter(|dir| {
                    !dir.is_empty() && !std::path::Path::new(dir).join("libpmix.so.2").exists()
                })
                .collect();
            if !kept.is_empty() {
                set(key, kept.join(":"));
            }
            continue;
        }
        set(key, value);
    }
    for (key, value) in extra.iter().chain(fork) {
        set(key.clone(), value.clone());
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    type Answers<T> = Arc<Mutex<Vec<Result<T, Status>>>>;

    fn recorder<T: Send + 'static>() -> (Answers<T>, impl FnOnce(Result<T, Status>) + Send) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        (seen, move |r| sink.lock().unwrap().push(r))
    }

    #[test]
    fn a_completion_answers_once() {
        let (seen, answer) = recorder::<()>();
        OpDone::new(answer).complete(Ok(()));
        assert_eq!(*seen.lock().unwrap(), vec![Ok(())]);
    }

    #[test]
    fn a_dropped_completion_answers_an_error() {
        let (seen, answer) = recorder::<Vec<(String, Value)>>();
        drop(LookupDone::new(answer));
        assert_eq!(*seen.lock().unwrap(), vec![Err(Status::Error)]);
    }

    #[test]
    fn a_disarmed_request_does_not_answer() {
        let (seen, answer) = recorder::<String>();
        let mut request = Request::Spawn {
            from: ("ns".into(), 0),
            apps: Vec::new(),
            done: SpawnDone::new(answer),
        };
        request.disarm();
        drop(request);
        assert!(seen.lock().unwrap().is_empty());
    }

    #[test]
    fn a_completion_can_be_answered_from_another_thread() {
        let (seen, answer) = recorder::<Vec<u8>>();
        let done = FenceDone::new(answer);
        std::thread::spawn(move || done.complete(Ok(vec![1, 2, 3])))
            .join()
            .unwrap();
        assert_eq!(*seen.lock().unwrap(), vec![Ok(vec![1, 2, 3])]);
    }

    #[test]
    fn the_server_is_shared_and_requests_move_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<Server>();
        send::<Request>();
    }

    #[test]
    fn status_codes_round_trip() {
        for status in [
            Status::Error,
            Status::NotFound,
            Status::Timeout,
            Status::Unreachable,
            Status::NotSupported,
            Status::BadParam,
            Status::Other(-12345),
        ] {
            assert_eq!(Status::from_code(status.code()), status);
        }
    }

    #[test]
    fn child_env_drops_pmix_and_the_servers_library_path() {
        let dir = std::env::temp_dir().join(format!("dynres-pmix-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("libpmix.so.2"), b"").unwrap();
        let base = vec![
            ("PATH".to_string(), "/bin".to_string()),
            ("PMIX_SERVER_URI41".to_string(), "stale".to_string()),
            (
                "LD_LIBRARY_PATH".to_string(),
                format!("/opt/lib:{}", dir.display()),
            ),
            ("OMPI_MCA_pml".to_string(), "ucx".to_string()),
        ];
        let extra = vec![("OMPI_MCA_pml".to_string(), "ob1".to_string())];
        let fork = vec![("PMIX_NAMESPACE".to_string(), "job".to_string())];
        let env = child_env(base, &extra, &fork);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            env,
            vec![
                ("PATH".to_string(), "/bin".to_string()),
                ("LD_LIBRARY_PATH".to_string(), "/opt/lib".to_string()),
                ("OMPI_MCA_pml".to_string(), "ob1".to_string()),
                ("PMIX_NAMESPACE".to_string(), "job".to_string()),
            ]
        );
    }

    #[test]
    fn the_stub_says_why() {
        #[cfg(not(have_pmix))]
        {
            let reason = unavailable_reason().expect("the stub has a reason");
            let (tx, _rx) = std::sync::mpsc::channel();
            match Server::start(&std::env::temp_dir(), tx) {
                Err(PmixError::Unavailable(r)) => assert_eq!(r, reason),
                other => panic!("the stub started: {other:?}"),
            }
        }
        #[cfg(have_pmix)]
        assert_eq!(unavailable_reason(), None);
    }
}
