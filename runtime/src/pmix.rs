//! PMIx for Open MPI 5 programs (issue 31, `spec/pmi.md` §4): each node's PMIx server,
//! over `dynres-pmix` (OpenPMIx 4.2's server library). Open MPI speaks PMIx only; this
//! serves it the namespace (the same on every node: PMIS-13, from the master's
//! [`PmixSetup`]) and every local rank's registration before its launch, and hands
//! libpmix's upcalls to the engine as [`Event::Pmix`], where the decisions are the
//! kernel's (fences across nodes: the modex; names: the data server; `MPI_Abort`:
//! PMIS-7; spawn: the kernel's, its children registered in a namespace of their own
//! before their launch). What it does not serve is refused at once, never left
//! waiting.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Sender;

use dynres_core::rc::wire::link::PmixSetup;
use dynres_pmix::{Namespace, ProcInfo, Server};

use super::engine::Event;
use crate::error::LauncherError;

/// `DYNRES_PMIX`: `1` serves PMIx to the job's program whatever it is, `0` never;
/// unset: when the program links Open MPI ([`links_open_mpi`]).
pub const ENV: &str = "DYNRES_PMIX";

/// Most bytes read of any one part of a program's ELF file (headers, dynamic section,
/// string table): a hostile or odd file costs at most this much.
const SCAN: u64 = 4 << 20;

/// The variable a spawn's command environment carries to name the spawning process to
/// its children's launcher (`PMIX_PARENT_ID`): `RANK@NAMESPACE`.
pub const PARENT_ENV: &str = "DYNRES_PMIX_PARENT";

/// The job's PMIx server and namespace.
pub struct PmixHost {
    server: Server,
    /// The PMIx namespace: the job's, with a secret suffix (PMIS-12).
    pub namespace: String,
    /// Every node's host name, by node id, as the namespaces' node maps give them.
    nodes: Vec<String>,
    /// This node's id.
    this_node: u32,
    /// The node of each of the job's first processes, by rank.
    placement: Vec<u32>,
    /// Spawns' namespaces registered so far.
    spawned: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Other jobs' namespaces registered at a connect, with their sizes (PMIS-20).
    foreign: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    /// The next node rank (unique among all namespaces on the node).
    next_node_rank: std::sync::atomic::AtomicU32,
    /// The job's rank of each spawned process, by (namespace, rank in it): PMIx names
    /// a spawn's child by its rank among its spawn's children.
    ranks: std::sync::Mutex<std::collections::HashMap<(String, u32), u32>>,
    /// The engine's events: libpmix's answers to `dmodex_request` go there.
    events: Sender<Event>,
    /// PMIS-23: where this node's Open MPI processes put their shared-memory segments
    /// (`OMPI_MCA_btl_sm_backing_directory`); removed with everything in it when the
    /// job ends here. `None` if it could not be made (Open MPI then uses `/dev/shm`).
    shm_dir: Option<PathBuf>,
}

/// Open MPI's parameter for the directory of its shared-memory segments (PMIS-23).
pub const SM_DIR_ENV: &str = "OMPI_MCA_btl_sm_backing_directory";

/// The prefix of the runtimes' directories for Open MPI's segments in `/dev/shm`,
/// followed by the runtime's pid (PMIS-23).
const SM_DIR_PREFIX: &str = "dynres-ompi-";

/// PMIS-23: this runtime's directory for its Open MPI processes' shared memory,
/// `/dev/shm/dynres-ompi-{pid}` (mode 0700), made empty; the directories of runtimes
/// that died without removing theirs (their pid is gone) are removed first. The name
/// holds no secret: `/dev/shm` is listed by everyone.
fn make_shm_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let root = Path::new("/dev/shm");
    for e in std::fs::read_dir(root)?.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SM_DIR_PREFIX))
            .and_then(|p| p.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone || pid == std::process::id() as libc::pid_t {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    let dir = root.join(format!("{SM_DIR_PREFIX}{}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
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
        self.client_env_in(&self.namespace, rank)
    }

    fn client_env_in(&self, ns: &str, rank: u32) -> Result<Vec<(String, String)>, String> {
        // SAFETY: getuid and getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        self.server
            .register_client(ns, rank, uid, gid)
            .map_err(|e| format!("PMIx register_client of {ns} rank {rank}: {e}"))?;
        self.server
            .setup_fork(ns, rank)
            .map_err(|e| format!("PMIx setup_fork of {ns} rank {rank}: {e}"))
    }

    /// The PMIx processes of this node among `procs` (a namespace with the wildcard
    /// rank stands for all of its processes): the job's first processes here and the
    /// spawns' children registered here.
    pub fn local_procs(&self, procs: &[(String, u32)]) -> Vec<(String, u32)> {
        let mut here: Vec<(String, u32)> = self
            .local_ranks()
            .into_iter()
            .map(|r| (self.namespace.clone(), r))
            .collect();
        here.extend(
            self.ranks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .keys()
                .cloned(),
        );
        here.retain(|(ns, r)| {
            procs
                .iter()
                .any(|(pns, pr)| pns == ns && (*pr == dynres_pmix::RANK_WILDCARD || pr == r))
        });
        here.sort();
        here
    }

    /// Any PMIx process of this node, to ask the data server on this node's behalf.
    pub fn any_local_proc(&self) -> Option<(String, u32)> {
        self.local_procs(&[(self.namespace.clone(), dynres_pmix::RANK_WILDCARD)])
            .into_iter()
            .next()
            .or_else(|| {
                self.ranks
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .keys()
                    .next()
                    .cloned()
            })
    }

    /// PMIS-16: asks libpmix for local process `proc_`'s committed data, for connect
    /// `connect`; the answer reaches the engine as [`Event::PmixBlob`].
    pub fn request_blob(&self, connect: u64, proc_: (String, u32)) -> Result<(), String> {
        let events = self.events.clone();
        let (ns, rank) = (proc_.0.clone(), proc_.1);
        self.server
            .dmodex_request(&ns, rank, move |blob| {
                let _ = events.send(Event::PmixBlob {
                    connect,
                    proc_,
                    blob,
                });
            })
            .map_err(|e| format!("PMIx dmodex_request of {ns} rank {rank}: {e}"))
    }

    /// The application of spawn namespace `ns` (`{job namespace}-{app}`), if it is one.
    pub fn spawn_app<'a>(&self, ns: &'a str) -> Option<&'a str> {
        ns.strip_prefix(self.namespace.as_str())?.strip_prefix('-')
    }

    /// Whether `ns` is a namespace this server serves or registered: the job's own, a
    /// spawn's, or another job's it connected to (PMIS-16, PMIS-20).
    pub fn knows(&self, ns: &str) -> bool {
        ns == self.namespace
            || self
                .spawned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains(ns)
    }

    /// PMIS-23: the directory of this node's Open MPI segments, if there is one.
    pub fn shm_dir(&self) -> Option<&Path> {
        self.shm_dir.as_deref()
    }

    /// PMIS-23: once the job's processes here are gone, forgets every namespace this
    /// server registered (the job's, its spawns', other jobs' it connected to) and
    /// removes the directory of their shared-memory segments, which Open MPI leaves
    /// for its launcher to remove.
    pub fn finish(&self) {
        self.deregister_all();
        if let Some(d) = &self.shm_dir {
            if let Err(e) = std::fs::remove_dir_all(d) {
                tracing::warn!(dir = %d.display(), error = %e, "cannot remove Open MPI's shared memory");
            }
        }
    }

    fn deregister_all(&self) {
        let mut all: Vec<String> = vec![self.namespace.clone()];
        all.extend(
            self.spawned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .cloned(),
        );
        for ns in all {
            self.server.deregister_namespace(&ns);
        }
    }

    /// The size of another job's namespace this node registered at a connect
    /// (PMIS-20); `None` for any other.
    pub fn foreign_size(&self, ns: &str) -> Option<u32> {
        self.foreign
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(ns)
            .copied()
    }

    /// The size of the job's first namespace (`PMIX_JOB_SIZE`).
    pub fn job_size(&self) -> u32 {
        u32::try_from(self.placement.len()).unwrap_or(u32::MAX)
    }

    /// PMIS-16, PMIS-20: registers a namespace of `size` processes that runs on other
    /// nodes only (a spawn's, or another job's this job connected to), so that
    /// libpmix takes their data (direct modex) for it; nothing if this node knows the
    /// namespace already (it runs some of its processes).
    pub fn know_remote_namespace(&self, ns: &str, size: u32) -> Result<(), String> {
        let mut known = self
            .spawned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if ns == self.namespace || known.contains(ns) {
            return Ok(());
        }
        // Where they run is not known here, only that it is elsewhere.
        let spawned = self.spawn_app(ns).is_some();
        let namespace = match spawned {
            true => self.spawn_ns(ns, size, &[], 0, None),
            false => self.foreign_ns(ns, size),
        };
        self.server
            .register_namespace(&namespace)
            .map_err(|e| format!("PMIx register the remote namespace {ns}: {e}"))?;
        if !spawned {
            self.foreign
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(ns.to_string(), size);
        }
        known.insert(ns.to_string());
        Ok(())
    }

    /// Another job's namespace of `size` processes (PMIS-20): where they run is not
    /// known here, so all of them are on one node of their own, named for the
    /// namespace, that no process of this job shares (their data is fetched through
    /// the direct modex, PMIS-16).
    fn foreign_ns(&self, ns: &str, size: u32) -> Namespace {
        let mut nodes = self.nodes.clone();
        let node = u32::try_from(nodes.len()).unwrap_or(u32::MAX);
        nodes.push(format!("{ns}.elsewhere"));
        let procs = (0..size)
            .map(|r| ProcInfo {
                rank: r,
                node,
                local_rank: u16::try_from(r).unwrap_or(u16::MAX),
                node_rank: u16::try_from(r).unwrap_or(u16::MAX),
                app: 0,
            })
            .collect();
        Namespace {
            name: ns.to_string(),
            size,
            universe: size,
            nodes,
            procs,
            this_node: self.this_node,
            spawned_by: None,
            oversubscribed: false,
        }
    }

    /// A spawn's namespace of `size` children: those of ranks `local` on this node (node
    /// ranks from `first` on), the others on another node.
    fn spawn_ns(
        &self,
        ns: &str,
        size: u32,
        local: &[u32],
        first: u32,
        spawned_by: Option<(String, u32)>,
    ) -> Namespace {
        let elsewhere = u32::from(self.this_node == 0);
        let procs = (0..size)
            .map(|r| {
                let (node, place, node_rank) = match local.iter().position(|l| *l == r) {
                    Some(i) => {
                        let i = u32::try_from(i).unwrap_or(u32::MAX);
                        (self.this_node, i, first.saturating_add(i))
                    }
                    None => (elsewhere, r, r),
                };
                ProcInfo {
                    rank: r,
                    node,
                    local_rank: u16::try_from(place).unwrap_or(u16::MAX),
                    node_rank: u16::try_from(node_rank).unwrap_or(u16::MAX),
                    app: 0,
                }
            })
            .collect();
        let here = u32::try_from(local.len()).unwrap_or(u32::MAX);
        Namespace {
            name: ns.to_string(),
            size,
            universe: size,
            nodes: self.nodes.clone(),
            procs,
            this_node: self.this_node,
            spawned_by,
            // Its children next to the processes the job already runs here.
            oversubscribed: here > 0 && oversubscribed(first.saturating_add(here)),
        }
    }

    /// How many nodes the job has.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// This node's id.
    pub fn this_node(&self) -> u32 {
        self.this_node
    }

    /// The job's first processes that run on this node, by rank.
    pub fn local_ranks(&self) -> Vec<u32> {
        (0u32..)
            .zip(&self.placement)
            .filter(|(_, n)| **n == self.this_node)
            .map(|(r, _)| r)
            .collect()
    }

    /// The namespace of the spawn whose children are application `app`.
    pub fn spawn_namespace(&self, app: &str) -> String {
        format!("{}-{app}", self.namespace)
    }

    /// The job's rank of the PMIx process `proc_`: the namespace's rank for the job's
    /// own processes, the recorded one for a spawn's child; `None` for a process this
    /// server did not launch.
    pub fn job_rank(&self, proc_: &(String, u32)) -> Option<u32> {
        if proc_.0 == self.namespace {
            return Some(proc_.1);
        }
        let ranks = self
            .ranks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ranks.get(proc_).copied()
    }

    /// The PMIx name of the job's rank `job_rank` ([`PmixHost::job_rank`]'s inverse):
    /// `None` for a process that is no PMIx client of this job as this node knows it
    /// (one a dynres change added, or a spawn's child registered on another node).
    pub fn pmix_proc(&self, job_rank: u32) -> Option<(String, u32)> {
        if usize::try_from(job_rank).is_ok_and(|r| r < self.placement.len()) {
            return Some((self.namespace.clone(), job_rank));
        }
        let ranks = self
            .ranks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ranks
            .iter()
            .find(|(_, r)| **r == job_rank)
            .map(|(p, _)| p.clone())
    }

    /// [`PmixHost::client_env`] for child `rank` of `size` of the spawn `app` (the
    /// job's rank `job_rank`), spawned by the job's rank `parent`: the spawn's
    /// namespace is registered with its first child here, the children `local` (ranks
    /// in the spawn, of every command) on this node and the others elsewhere.
    pub fn spawned_env(
        &self,
        app: &str,
        job_rank: u32,
        rank: u32,
        size: u32,
        parent: Option<&str>,
        local: &[u32],
    ) -> Result<Vec<(String, String)>, String> {
        use std::sync::atomic::Ordering;
        let ns = self.spawn_namespace(app);
        let mut done = self
            .spawned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !done.contains(&ns) {
            // On one node every child is here, whatever this command's share.
            let all: Vec<u32>;
            let local = if self.nodes.len() == 1 {
                all = (0..size).collect();
                &all[..]
            } else {
                local
            };
            let here = u32::try_from(local.len()).unwrap_or(u32::MAX);
            let first = self.next_node_rank.fetch_add(here, Ordering::Relaxed);
            let spawned_by = parent
                .and_then(|p| p.split_once('@'))
                .and_then(|(r, ns)| Some((ns.to_string(), r.parse().ok()?)));
            let namespace = self.spawn_ns(&ns, size, local, first, spawned_by);
            self.server
                .register_namespace(&namespace)
                .map_err(|e| format!("PMIx register the namespace {ns}: {e}"))?;
            done.insert(ns.clone());
        }
        drop(done);
        self.ranks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((ns.clone(), rank), job_rank);
        self.client_env_in(&ns, rank)
    }
}

/// Whether `program` (a path, or a name looked up in `PATH`) links Open MPI 5: its ELF
/// dynamic section names `libmpi.so.40` (MPICH's `libmpi.so.12` speaks PMI-1, which
/// every rank is served anyway). A script that starts an Open MPI program is not
/// seen through: [`ENV`] is for it.
pub fn links_open_mpi(program: &str) -> bool {
    let path = if program.contains('/') {
        Some(std::path::PathBuf::from(program))
    } else {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(program))
                .find(|f| f.is_file())
        })
    };
    path.and_then(|p| needed_libraries(&p))
        .is_some_and(|libs| libs.iter().any(|l| l.starts_with("libmpi.so.40")))
}

/// The `DT_NEEDED` entries of a 64-bit little-endian ELF file, `None` if it is not one
/// (or is malformed: every read is bounds-checked, nothing here trusts the file).
fn needed_libraries(path: &Path) -> Option<Vec<String>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let mut read_at = |offset: u64, len: u64| -> Option<Vec<u8>> {
        let len = usize::try_from(len.min(SCAN)).ok()?;
        f.seek(SeekFrom::Start(offset)).ok()?;
        let mut buf = vec![0; len];
        f.read_exact(&mut buf).ok()?;
        Some(buf)
    };
    let u16_at = |b: &[u8], o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |b: &[u8], o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |b: &[u8], o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let head = read_at(0, 64)?;
    // ELFCLASS64, ELFDATA2LSB.
    if head.get(..4)? != b"\x7fELF" || head.get(4)? != &2 || head.get(5)? != &1 {
        return None;
    }
    let (phoff, phentsize, phnum) = (
        u64_at(&head, 0x20)?,
        u16_at(&head, 0x36)?,
        u16_at(&head, 0x38)?,
    );
    let phdrs = read_at(phoff, u64::from(phentsize) * u64::from(phnum))?;
    // (type, offset, vaddr, filesz) of each program header.
    let segments: Vec<(u32, u64, u64, u64)> = (0..usize::from(phnum))
        .filter_map(|i| {
            let o = i * usize::from(phentsize);
            Some((
                u32_at(&phdrs, o)?,
                u64_at(&phdrs, o + 8)?,
                u64_at(&phdrs, o + 16)?,
                u64_at(&phdrs, o + 32)?,
            ))
        })
        .collect();
    const PT_LOAD: u32 = 1;
    const PT_DYNAMIC: u32 = 2;
    let &(_, dyn_off, _, dyn_size) = segments.iter().find(|s| s.0 == PT_DYNAMIC)?;
    let dynamic = read_at(dyn_off, dyn_size)?;
    let (mut needed, mut strtab, mut strsz) = (Vec::new(), None, None);
    for entry in dynamic.chunks_exact(16) {
        let (tag, val) = (u64_at(entry, 0)?, u64_at(entry, 8)?);
        match tag {
            0 => break,
            1 => needed.push(val),
            5 => strtab = Some(val),
            10 => strsz = Some(val),
            _ => {}
        }
    }
    let (strtab, strsz) = (strtab?, strsz?);
    // The string table's address is a virtual one: its file offset is its load segment's.
    let &(_, off, vaddr, _) = segments
        .iter()
        .find(|s| s.0 == PT_LOAD && s.2 <= strtab && strtab - s.2 < s.3)?;
    let strings = read_at(strtab - vaddr + off, strsz)?;
    Some(
        needed
            .into_iter()
            .filter_map(|o| {
                let rest = strings.get(usize::try_from(o).ok()?..)?;
                let end = rest.iter().position(|&b| b == 0)?;
                Some(String::from_utf8_lossy(&rest[..end]).into_owned())
            })
            .collect(),
    )
}

/// Whether `procs` processes are more than this host's cores: Open MPI is told so
/// (`PMIX_NODE_OVERSUBSCRIBED`) and yields while it waits, as under its own mpirun,
/// instead of spinning against the other processes.
fn oversubscribed(procs: u32) -> bool {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    usize::try_from(procs).unwrap_or(usize::MAX) > cores
}

/// Whether the job's program gets a PMIx server: [`ENV`], else [`links_open_mpi`].
pub fn wanted(program: &str) -> bool {
    match std::env::var(ENV).as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => links_open_mpi(program),
    }
}

/// The job's PMIx namespace (PMIS-12): libpmix 4.2 listens on loopback TCP, where any
/// local user may connect and, with its `native` security, claim any uid; a connection
/// must name a registered namespace, so the namespace carries 128 random bits that only
/// the job's processes learn (their environment, readable by the user alone) and the
/// daemons (over the authenticated link, PMIS-13).
pub fn secret_namespace(namespace: &str) -> Result<String, LauncherError> {
    let secret =
        dynres_client::auth::new_secret().map_err(|e| LauncherError::io("read /dev/urandom", e))?;
    Ok(format!(
        "{namespace}-{}",
        secret.get(..32).unwrap_or(&secret)
    ))
}

/// Where the job's first processes run, by rank: what every node's server registers.
fn procs_of(setup: &PmixSetup) -> Vec<ProcInfo> {
    let mut on_node: std::collections::HashMap<u32, u16> = std::collections::HashMap::new();
    (0u32..)
        .zip(&setup.placement)
        .map(|(rank, &node)| {
            let local = on_node.entry(node).or_insert(0);
            let p = ProcInfo {
                rank,
                node,
                local_rank: *local,
                node_rank: *local,
                app: 0,
            };
            *local = local.saturating_add(1);
            p
        })
        .collect()
}

/// Starts node `this_node`'s PMIx server in `dir` (the job's private directory on this
/// host) with the job's namespace as `setup` describes it (the same on every node,
/// PMIS-13). libpmix's upcalls reach the engine as [`Event::Pmix`] through a thread of
/// their own.
pub fn start(
    dir: &Path,
    setup: &PmixSetup,
    this_node: u32,
    events: Sender<Event>,
) -> Result<Arc<PmixHost>, LauncherError> {
    let fail = |what: String| LauncherError::Usage(format!("cannot serve PMIx (Open MPI): {what}"));
    if let Some(why) = dynres_pmix::unavailable_reason() {
        return Err(fail(format!(
            "this dynres was built without libpmix ({why}); build it where libpmix-dev 4.2 \
             is installed, or set {ENV}=0 to run the program without it"
        )));
    }
    let procs = procs_of(setup);
    let here = procs.iter().filter(|p| p.node == this_node).count();
    let here = u32::try_from(here).unwrap_or(u32::MAX);
    let size = u32::try_from(procs.len()).map_err(|_| fail("too many processes".into()))?;
    if usize::try_from(this_node).map_or(true, |n| n >= setup.nodes.len()) {
        return Err(fail(format!(
            "node {this_node} is not in the job's node list"
        )));
    }
    let tmp = dir.join("pmix");
    std::fs::create_dir_all(&tmp).map_err(|e| fail(format!("{}: {e}", tmp.display())))?;
    let (tx, rx) = std::sync::mpsc::channel();
    let server = Server::start(&tmp, tx).map_err(|e| fail(e.to_string()))?;
    let blobs = events.clone();
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
    let ns = Namespace {
        name: setup.namespace.clone(),
        size,
        universe: setup.universe,
        nodes: setup.nodes.clone(),
        procs,
        this_node,
        spawned_by: None,
        oversubscribed: oversubscribed(here),
    };
    server
        .register_namespace(&ns)
        .map_err(|e| fail(format!("register the namespace: {e}")))?;
    tracing::info!(
        node = this_node,
        n = size,
        here,
        "serving PMIx (Open MPI) to the job's processes"
    );
    Ok(Arc::new(PmixHost {
        server,
        namespace: setup.namespace.clone(),
        nodes: setup.nodes.clone(),
        this_node,
        placement: setup.placement.clone(),
        spawned: std::sync::Mutex::new(std::collections::HashSet::new()),
        foreign: std::sync::Mutex::new(std::collections::HashMap::new()),
        next_node_rank: std::sync::atomic::AtomicU32::new(here),
        ranks: std::sync::Mutex::new(std::collections::HashMap::new()),
        events: blobs,
        shm_dir: make_shm_dir()
            .inspect(|d| tracing::debug!(dir = %d.display(), "Open MPI's shared memory goes here"))
            .inspect_err(|e| {
                tracing::warn!(error = %e, "no directory for Open MPI's shared memory: /dev/shm it is");
            })
            .ok(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needed_libraries_are_read_from_the_dynamic_section() {
        // This test binary links libc dynamically, and names no MPI library.
        let me = std::env::current_exe().unwrap();
        let libs = needed_libraries(&me).expect("an ELF file");
        assert!(libs.iter().any(|l| l.starts_with("libc.so")), "{libs:?}");
        assert!(!links_open_mpi(me.to_str().unwrap()));
        // Not ELF, missing, a directory: nothing, no panic.
        assert_eq!(needed_libraries(Path::new("/etc/hostname")), None);
        assert_eq!(needed_libraries(Path::new("/nonexistent")), None);
        assert_eq!(needed_libraries(Path::new("/")), None);
        // A truncated ELF header.
        let dir = std::env::temp_dir().join(format!("dynres-elf-{}", std::process::id()));
        std::fs::write(&dir, b"\x7fELF\x02\x01").unwrap();
        assert_eq!(needed_libraries(&dir), None);
        let _ = std::fs::remove_file(&dir);
    }
}
