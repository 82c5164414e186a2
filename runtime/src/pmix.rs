//! PMIx for Open MPI 5 programs (issue 31, `spec/pmi.md` §4): the job's PMIx server,
//! over `dynres-pmix` (OpenPMIx 4.2's server library). Open MPI speaks PMIx only; this
//! serves it what a one-host job needs: the namespace and every rank's registration
//! before its launch, and libpmix's upcalls handed to the engine as
//! [`Event::Pmix`], where the decisions are the kernel's (names: the data server;
//! `MPI_Abort`: PMIS-7). What it does not serve yet is refused at once, never left
//! waiting: spawn, and fences or connects across nodes (a one-host job has none:
//! libpmix completes local ones itself).

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::Sender;

use dynres_pmix::{Namespace, ProcInfo, Server};

use super::engine::Event;
use crate::error::LauncherError;

/// `DYNRES_PMIX`: `1` serves PMIx to the job's program whatever it is, `0` never;
/// unset: when the program links Open MPI ([`links_open_mpi`]).
pub const ENV: &str = "DYNRES_PMIX";

/// How much of a program is read to find the libraries it links (their names are in
/// the dynamic section's string table, near the start of an ELF file).
const SCAN: u64 = 4 << 20;

/// The job's PMIx server and namespace.
pub struct PmixHost {
    server: Server,
    /// The namespace (the job's).
    pub namespace: String,
}

impl std::fmt::Debug for PmixHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmixHost")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl PmixHost {
    /// The environment rank `rank`'s process needs to reach the server (PMIx's
    /// `setup_fork`), after registering it as a client of the namespace.
    pub fn client_env(&self, rank: u32) -> Result<Vec<(String, String)>, String> {
        // SAFETY: getuid and getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        self.server
            .register_client(&self.namespace, rank, uid, gid)
            .map_err(|e| format!("PMIx register_client of rank {rank}: {e}"))?;
        self.server
            .setup_fork(&self.namespace, rank)
            .map_err(|e| format!("PMIx setup_fork of rank {rank}: {e}"))
    }
}

/// Whether `program` (a path, or a name looked up in `PATH`) links Open MPI 5
/// (`libmpi.so.40`) or PMIx: then it needs the PMIx server. MPICH's `libmpi.so.12`
/// speaks PMI-1, which every rank is served anyway.
pub fn links_open_mpi(program: &str) -> bool {
    use std::io::Read;
    let path = if program.contains('/') {
        Some(std::path::PathBuf::from(program))
    } else {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(program))
                .find(|f| f.is_file())
        })
    };
    let Some(file) = path.and_then(|p| std::fs::File::open(p).ok()) else {
        return false;
    };
    let mut head = Vec::new();
    if file.take(SCAN).read_to_end(&mut head).is_err() {
        return false;
    }
    let has = |needle: &[u8]| head.windows(needle.len()).any(|w| w == needle);
    has(b"libmpi.so.40") || has(b"libpmix.so")
}

/// Whether the job's program gets a PMIx server: [`ENV`], else [`links_open_mpi`].
pub fn wanted(program: &str) -> bool {
    match std::env::var(ENV).as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => links_open_mpi(program),
    }
}

/// Starts the job's PMIx server in `dir` (the job's private directory) with its
/// namespace: `n` processes on this one host (`host`), `universe` slots. libpmix's
/// upcalls reach the engine as [`Event::Pmix`] through a thread of their own.
pub fn start(
    dir: &Path,
    namespace: &str,
    host: &str,
    n: u32,
    universe: u32,
    events: Sender<Event>,
) -> Result<Arc<PmixHost>, LauncherError> {
    let fail = |what: String| LauncherError::Usage(format!("cannot serve PMIx (Open MPI): {what}"));
    if let Some(why) = dynres_pmix::unavailable_reason() {
        return Err(fail(format!(
            "this dynres was built without libpmix ({why}); build it where libpmix-dev 4.2 \
             is installed, or set {ENV}=0 to run the program without it"
        )));
    }
    let tmp = dir.join("pmix");
    std::fs::create_dir_all(&tmp).map_err(|e| fail(format!("{}: {e}", tmp.display())))?;
    let (tx, rx) = std::sync::mpsc::channel();
    let server = Server::start(&tmp, tx).map_err(|e| fail(e.to_string()))?;
    std::thread::Builder::new()
        .name("dynres-pmix".into())
        .spawn(move || {
            // Ends when the server is dropped (its sender with it) or the engine is.
            for r in rx {
                if events.send(Event::Pmix(r)).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| fail(format!("start its thread: {e}")))?;
    let procs = (0..n)
        .map(|rank| ProcInfo {
            rank,
            node: 0,
            local_rank: u16::try_from(rank).unwrap_or(u16::MAX),
            node_rank: u16::try_from(rank).unwrap_or(u16::MAX),
            app: 0,
        })
        .collect();
    let ns = Namespace {
        name: namespace.into(),
        size: n,
        universe,
        nodes: vec![host.into()],
        procs,
        this_node: 0,
        spawned_by: None,
    };
    server
        .register_namespace(&ns)
        .map_err(|e| fail(format!("register the namespace: {e}")))?;
    tracing::info!(
        namespace,
        n,
        "serving PMIx (Open MPI) to the job's processes"
    );
    Ok(Arc::new(PmixHost {
        server,
        namespace: namespace.into(),
    }))
}
