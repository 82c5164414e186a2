//! The server over libpmix: `PMIx_server_init` and the upcalls that become [`Request`]s.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, RwLock};

use crate::ffi;
use crate::{
    App, BLOCKING_TIMEOUT, FenceDone, LookupDone, ModexDone, Namespace, OpDone, PmixError, Proc,
    QueryDone, Request, SpawnDone, Status, Value,
};

/// Whether `PMIx_server_init` was called in this process: libpmix 4.2.2 cannot be
/// initialised again after `PMIx_server_finalize` (the second init aborts the process
/// inside libpmix: "bit out of range 0 - FD_SETSIZE on fd_set"), so never reset once
/// libpmix was called.
static STARTED: AtomicBool = AtomicBool::new(false);

/// Whether `start` got as far as calling `PMIx_server_init`.
static INIT_CALLED: AtomicBool = AtomicBool::new(false);

/// Where the upcalls send their requests; `None` while no server runs.
static EVENTS: Mutex<Option<Sender<Request>>> = Mutex::new(None);

/// The generation of the running server (0: none). A completion calls libpmix back
/// only while the generation it was made in still runs, holding the read lock, so
/// `PMIx_server_finalize` (called once `LIVE` is 0) never races a callback.
static LIVE: RwLock<u64> = RwLock::new(0);

/// The last generation handed out.
static GENERATIONS: AtomicU64 = AtomicU64::new(0);

const SUCCESS: c_int = ffi::PMIX_SUCCESS as c_int;

/// The PMIx server of this process: `PMIx_server_init` on [`start`](Server::start),
/// `PMIx_server_finalize` on drop.
///
/// Answer or drop every [`Request`] before dropping the server; completions made by
/// a finalized server are ignored (their answers go nowhere).
#[derive(Debug)]
pub struct Server {
    // libpmix keeps a copy of the module; the box keeps ours at a fixed place anyway.
    _module: Box<ffi::pmix_server_module_t>,
    tmpdir: PathBuf,
}

impl Server {
    /// Starts the process's PMIx server, with its rendezvous files under `tmpdir`
    /// (created if missing; it must be private to this server and short enough for
    /// a Unix socket path). Every upcall of libpmix is sent on `events`.
    ///
    /// Once per process: a second call fails with [`PmixError::AlreadyStarted`], also
    /// after the first server was dropped (libpmix 4.2.2 cannot restart).
    pub fn start(tmpdir: &Path, events: Sender<Request>) -> Result<Server, PmixError> {
        if STARTED.swap(true, Ordering::SeqCst) {
            return Err(PmixError::AlreadyStarted);
        }
        match Self::init(tmpdir, events) {
            Ok(server) => Ok(server),
            Err(e) => {
                *EVENTS
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
                if !INIT_CALLED.load(Ordering::SeqCst) {
                    STARTED.store(false, Ordering::SeqCst);
                }
                Err(e)
            }
        }
    }

    fn init(tmpdir: &Path, events: Sender<Request>) -> Result<Server, PmixError> {
        std::fs::create_dir_all(tmpdir).map_err(|e| {
            PmixError::InvalidArgument(format!("cannot create {}: {e}", tmpdir.display()))
        })?;
        let dir = path_str(tmpdir)?;
        *EVENTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(events);
        let mut module = Box::new(module());
        let mut list = InfoList::new()?;
        list.add_str(ffi::PMIX_SERVER_TMPDIR, &dir)?;
        list.add_str(ffi::PMIX_SYSTEM_TMPDIR, &dir)?;
        let mut info = list.convert()?;
        // A new generation (never reused), live before libpmix can make an upcall.
        *LIVE
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            GENERATIONS.fetch_add(1, Ordering::SeqCst) + 1;
        INIT_CALLED.store(true, Ordering::SeqCst);
        // SAFETY: `module` is a valid module whose upcalls are this file's `extern "C"`
        // functions; `info` is a valid array of `info.len()` pmix_info_t built by
        // libpmix itself; both outlive the call (libpmix copies what it keeps).
        let rc = unsafe { ffi::PMIx_server_init(&raw mut *module, info.as_mut_ptr(), info.len()) };
        if rc != SUCCESS {
            *LIVE
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = 0;
            return Err(PmixError::Pmix(Status::from_code(rc)));
        }
        Ok(Server {
            _module: module,
            tmpdir: tmpdir.to_path_buf(),
        })
    }

    /// Registers a namespace with libpmix, blocking until libpmix has stored it: the
    /// job-level information every process reads in `PMIx_Init`, and the
    /// per-process information of all its processes. Call it before
    /// [`register_client`](Server::register_client) and `fork` of any of its
    /// processes, and for every namespace that a local process may take part in a
    /// collective with, even one without local processes.
    pub fn register_namespace(&self, ns: &Namespace) -> Result<(), PmixError> {
        let nspace = nspace(&ns.name)?;
        let mut info = self.namespace_info(ns)?;
        let local = ns.procs.iter().filter(|p| p.node == ns.this_node).count();
        let local = c_int::try_from(local)
            .map_err(|_| PmixError::InvalidArgument("too many local processes".into()))?;
        let (ptr, len) = (info.as_mut_ptr(), info.len());
        let result = call_blocking(|cbfunc, cbdata| {
            // SAFETY: `nspace` is NUL-terminated; `ptr`/`len` describe `info`, which
            // stays alive until the callback ran (leaked below if it never does).
            unsafe {
                ffi::PMIx_server_register_nspace(nspace.as_ptr(), local, ptr, len, cbfunc, cbdata)
            }
        });
        if result == Err(PmixError::Timeout) {
            // libpmix may still read the array.
            std::mem::forget(info);
        }
        result
    }

    /// Forgets a namespace (blocking until libpmix did), e.g. after all its
    /// processes ended.
    pub fn deregister_namespace(&self, name: &str) {
        let Ok(nspace) = nspace(name) else { return };
        let _ = call_blocking(|cbfunc, cbdata| {
            // SAFETY: `nspace` is NUL-terminated and outlives the call.
            unsafe { ffi::PMIx_server_deregister_nspace(nspace.as_ptr(), cbfunc, cbdata) };
            SUCCESS
        });
    }

    /// Registers a process that is about to be started (blocking until libpmix did):
    /// only registered clients may connect, with the given user and group ids.
    pub fn register_client(
        &self,
        ns: &str,
        rank: u32,
        uid: u32,
        gid: u32,
    ) -> Result<(), PmixError> {
        let proc_ = proc_t(ns, rank)?;
        call_blocking(|cbfunc, cbdata| {
            // SAFETY: `proc_` is a valid pmix_proc_t that outlives the call; the
            // server object is unused (null).
            unsafe {
                ffi::PMIx_server_register_client(
                    &raw const proc_,
                    uid,
                    gid,
                    ptr::null_mut(),
                    cbfunc,
                    cbdata,
                )
            }
        })
    }

    /// The variables to add to the environment of process `rank` of namespace `ns`
    /// before it is started (the server's URI, the namespace, the rank…). See
    /// [`crate::child_env`] for the rest of the child's environment.
    pub fn setup_fork(&self, ns: &str, rank: u32) -> Result<Vec<(String, String)>, PmixError> {
        let proc_ = proc_t(ns, rank)?;
        let mut env: *mut *mut c_char = ptr::null_mut();
        // SAFETY: `proc_` is valid; `env` is a NULL argv that libpmix grows with malloc.
        let rc = unsafe { ffi::PMIx_server_setup_fork(&raw const proc_, &raw mut env) };
        // SAFETY: `env` is NULL or a NULL-terminated array of malloc'd strings.
        let strings = unsafe { take_argv(env) };
        if rc != SUCCESS {
            return Err(PmixError::Pmix(Status::from_code(rc)));
        }
        Ok(strings
            .into_iter()
            .filter_map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect())
    }

    /// Asks libpmix for the data that local process `rank` of `ns` committed (its
    /// modex blob), to answer another node's [`Request::DirectModex`]. Returns at once;
    /// `done` runs later, once the process has committed its data, on libpmix's
    /// thread: it must only hand the blob on (e.g. send it on a channel).
    pub fn dmodex_request(
        &self,
        ns: &str,
        rank: u32,
        done: impl FnOnce(Result<Vec<u8>, Status>) + Send + 'static,
    ) -> Result<(), PmixError> {
        type Done = Box<dyn FnOnce(Result<Vec<u8>, Status>) + Send>;
        unsafe extern "C" fn answer(
            status: c_int,
            data: *mut c_char,
            size: usize,
            cbdata: *mut c_void,
        ) {
            guard_void(|| {
                // SAFETY: `cbdata` is the `Box<Done>` leaked below, handed back once.
                let done = unsafe { Box::from_raw(cbdata.cast::<Done>()) };
                let result = if status == SUCCESS {
                    // SAFETY: libpmix passes `size` readable bytes at `data` (or null).
                    Ok(unsafe { bytes(data.cast_const(), size) })
                } else {
                    Err(Status::from_code(status))
                };
                done(result);
            });
        }
        let proc_ = proc_t(ns, rank)?;
        let done: Done = Box::new(done);
        let cbdata = Box::into_raw(Box::new(done));
        // SAFETY: `proc_` is valid; `answer` takes `cbdata` back exactly once.
        let rc = unsafe {
            ffi::PMIx_server_dmodex_request(&raw const proc_, Some(answer), cbdata.cast())
        };
        if rc != SUCCESS {
            // SAFETY: libpmix refused the request and will not call `answer`.
            drop(unsafe { Box::from_raw(cbdata) });
            return Err(PmixError::Pmix(Status::from_code(rc)));
        }
        Ok(())
    }

    /// The job-level and per-process information of a namespace.
    fn namespace_info(&self, ns: &Namespace) -> Result<DataArray, PmixError> {
        let invalid = |what: String| PmixError::InvalidArgument(what);
        let node_name = |id: u32| -> Result<&str, PmixError> {
            ns.nodes
                .get(id as usize)
                .map(String::as_str)
                .ok_or_else(|| invalid(format!("node id {id} has no host name in {}", ns.name)))
        };
        // Nodes with processes, in node-id order, and the ranks on each.
        let mut by_node: Vec<(u32, Vec<u32>)> = Vec::new();
        for p in &ns.procs {
            node_name(p.node)?;
            match by_node.iter_mut().find(|(n, _)| *n == p.node) {
                Some((_, ranks)) => ranks.push(p.rank),
                None => by_node.push((p.node, vec![p.rank])),
            }
        }
        by_node.sort_by_key(|(n, _)| *n);
        for (_, ranks) in &mut by_node {
            ranks.sort_unstable();
        }
        let hosts: Vec<&str> = by_node
            .iter()
            .map(|(n, _)| node_name(*n))
            .collect::<Result<_, _>>()?;
        let ppn: Vec<String> = by_node
            .iter()
            .map(|(_, ranks)| {
                ranks
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        let local: Vec<u32> = by_node
            .iter()
            .find(|(n, _)| *n == ns.this_node)
            .map(|(_, r)| r.clone())
            .unwrap_or_default();
        let napps = ns.procs.iter().map(|p| p.app).max().map_or(1, |a| a + 1);
        let num_nodes =
            u32::try_from(by_node.len()).map_err(|_| invalid("too many nodes".into()))?;
        let local_size =
            u32::try_from(local.len()).map_err(|_| invalid("too many processes".into()))?;

        let mut list = InfoList::new()?;
        list.add_str(ffi::PMIX_JOBID, &ns.name)?;
        list.add_u32(ffi::PMIX_JOB_SIZE, ns.size)?;
        list.add_u32(ffi::PMIX_MAX_PROCS, ns.size)?;
        list.add_u32(ffi::PMIX_UNIV_SIZE, ns.universe)?;
        list.add_u32(ffi::PMIX_NUM_NODES, num_nodes)?;
        list.add_u32(ffi::PMIX_JOB_NUM_APPS, napps)?;
        list.add_regex(
            ffi::PMIX_NODE_MAP,
            &generate(ffi::PMIx_generate_regex, &hosts.join(","))?,
        )?;
        list.add_regex(
            ffi::PMIX_PROC_MAP,
            &generate(ffi::PMIx_generate_ppn, &ppn.join(";"))?,
        )?;
        list.add_u32(ffi::PMIX_LOCAL_SIZE, local_size)?;
        list.add_u32(ffi::PMIX_NODE_SIZE, local_size)?;
        let peers: Vec<String> = local.iter().map(u32::to_string).collect();
        list.add_str(ffi::PMIX_LOCAL_PEERS, &peers.join(","))?;
        if let Some(first) = local.first() {
            list.add_rank(ffi::PMIX_LOCALLDR, *first)?;
        }
        list.add_str(ffi::PMIX_HOSTNAME, node_name(ns.this_node)?)?;
        list.add_u32(ffi::PMIX_NODEID, ns.this_node)?;
        let tmpdir = path_str(&self.tmpdir)?;
        list.add_str(ffi::PMIX_TMPDIR, &tmpdir)?;
        let nsdir = self.tmpdir.join(&ns.name);
        if std::fs::create_dir_all(&nsdir).is_ok() {
            list.add_str(ffi::PMIX_NSDIR, &path_str(&nsdir)?)?;
        }
        list.add_bool(ffi::PMIX_NODE_OVERSUBSCRIBED, ns.oversubscribed)?;
        if let Some((parent, rank)) = &ns.spawned_by {
            list.add_bool(ffi::PMIX_SPAWNED, true)?;
            list.add_proc(ffi::PMIX_PARENT_ID, &proc_t(parent, *rank)?)?;
        }
        for p in &ns.procs {
            let app_leader = ns
                .procs
                .iter()
                .filter(|q| q.app == p.app)
                .map(|q| q.rank)
                .min()
                .unwrap_or(p.rank);
            let app_rank = ns
                .procs
                .iter()
                .filter(|q| q.app == p.app && q.rank < p.rank)
                .count();
            let app_rank =
                u32::try_from(app_rank).map_err(|_| invalid("too many processes".into()))?;
            let mut proc_list = InfoList::new()?;
            proc_list.add_rank(ffi::PMIX_RANK, p.rank)?;
            proc_list.add_u16(ffi::PMIX_LOCAL_RANK, p.local_rank)?;
            proc_list.add_u16(ffi::PMIX_NODE_RANK, p.node_rank)?;
            proc_list.add_u32(ffi::PMIX_APPNUM, p.app)?;
            proc_list.add_rank(ffi::PMIX_APPLDR, app_leader)?;
            proc_list.add_rank(ffi::PMIX_APP_RANK, app_rank)?;
            proc_list.add_rank(ffi::PMIX_GLOBAL_RANK, p.rank)?;
            proc_list.add_str(ffi::PMIX_HOSTNAME, node_name(p.node)?)?;
            proc_list.add_u32(ffi::PMIX_NODEID, p.node)?;
            let mut array = proc_list.convert()?;
            list.add(
                ffi::PMIX_PROC_DATA,
                (&raw mut array.0).cast_const().cast(),
                ffi::PMIX_DATA_ARRAY,
            )?;
        }
        list.convert()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Waits for the completions that are calling libpmix back; later ones see 0
        // and do nothing. The lock is not held across finalize: libpmix's thread may
        // be in an upcall that reads `LIVE`, and finalize waits for that thread.
        *LIVE
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = 0;
        // SAFETY: the server was initialised by `start`; no completion calls libpmix
        // any more (`LIVE` is 0).
        unsafe { ffi::PMIx_server_finalize() };
        *EVENTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

// ---------------------------------------------------------------------------------
// Conversions.

fn path_str(path: &Path) -> Result<String, PmixError> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| PmixError::InvalidArgument(format!("{} is not UTF-8", path.display())))
}

fn cstring(s: &str) -> Result<CString, PmixError> {
    CString::new(s).map_err(|_| PmixError::InvalidArgument(format!("{s:?} contains a NUL byte")))
}

fn nspace(name: &str) -> Result<CString, PmixError> {
    if name.is_empty() || name.len() > ffi::PMIX_MAX_NSLEN as usize {
        return Err(PmixError::InvalidArgument(format!(
            "namespace {name:?} must have 1 to {} bytes",
            ffi::PMIX_MAX_NSLEN
        )));
    }
    cstring(name)
}

fn proc_t(ns: &str, rank: u32) -> Result<ffi::pmix_proc_t, PmixError> {
    let name = nspace(ns)?;
    let mut nspace = [0 as c_char; ffi::PMIX_MAX_NSLEN as usize + 1];
    for (dst, src) in nspace.iter_mut().zip(name.as_bytes()) {
        *dst = c_char::from_ne_bytes([*src]);
    }
    Ok(ffi::pmix_proc_t { nspace, rank })
}

/// A NUL-terminated C array of chars as a string (bounded by the array).
fn fixed_str(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| c.to_ne_bytes()[0])
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// # Safety
/// `s` is null or a valid NUL-terminated string.
unsafe fn c_str(s: *const c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: per the contract.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// # Safety
/// `data` is null or points at `len` readable bytes.
unsafe fn bytes(data: *const c_char, len: usize) -> Vec<u8> {
    if data.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }.to_vec()
}

/// # Safety
/// `p` is a valid pmix_proc_t.
unsafe fn proc_of(p: *const ffi::pmix_proc_t) -> Proc {
    // SAFETY: per the contract.
    let p = unsafe { &*p };
    (fixed_str(&p.nspace), p.rank)
}

/// # Safety
/// `procs` is null or points at `n` valid pmix_proc_t.
unsafe fn procs_of(procs: *const ffi::pmix_proc_t, n: usize) -> Vec<Proc> {
    if procs.is_null() {
        return Vec::new();
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(procs, n) }
        .iter()
        .map(|p| (fixed_str(&p.nspace), p.rank))
        .collect()
}

/// # Safety
/// `info` is null or points at `n` valid pmix_info_t.
unsafe fn infos<'a>(info: *const ffi::pmix_info_t, n: usize) -> &'a [ffi::pmix_info_t] {
    if info.is_null() || n == 0 {
        return &[];
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(info, n) }
}

fn key_is(info: &ffi::pmix_info_t, key: &[u8]) -> bool {
    let key = key.strip_suffix(b"\0").unwrap_or(key);
    let own: Vec<u8> = info
        .key
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| c.to_ne_bytes()[0])
        .collect();
    own == key
}

/// The value of a pmix_value_t that a [`Value`] can hold.
///
/// # Safety
/// `v` is a valid pmix_value_t (its union member matches its type).
unsafe fn value_of(v: &ffi::pmix_value_t) -> Option<Value> {
    let t = u32::from(v.type_);
    // SAFETY: each arm reads the union member that the type tag names.
    unsafe {
        Some(match t {
            ffi::PMIX_STRING => Value::Str(c_str(v.data.string)),
            ffi::PMIX_BYTE_OBJECT => Value::Bytes(bytes(v.data.bo.bytes, v.data.bo.size)),
            ffi::PMIX_BOOL => Value::Bool(v.data.flag),
            ffi::PMIX_INT => Value::Int(i64::from(v.data.integer)),
            ffi::PMIX_INT8 => Value::Int(i64::from(v.data.int8)),
            ffi::PMIX_INT16 => Value::Int(i64::from(v.data.int16)),
            ffi::PMIX_INT32 => Value::Int(i64::from(v.data.int32)),
            ffi::PMIX_INT64 => Value::Int(v.data.int64),
            ffi::PMIX_UINT => Value::UInt(u64::from(v.data.uint)),
            ffi::PMIX_UINT8 => Value::UInt(u64::from(v.data.uint8)),
            ffi::PMIX_UINT16 => Value::UInt(u64::from(v.data.uint16)),
            ffi::PMIX_UINT32 => Value::UInt(u64::from(v.data.uint32)),
            ffi::PMIX_UINT64 => Value::UInt(v.data.uint64),
            ffi::PMIX_SIZE => Value::UInt(v.data.size as u64),
            _ => return None,
        })
    }
}

/// Whether the directives ask for `key` (a `PMIX_BOOL` directive that is false does
/// not; any other type counts as present).
fn flag(info: &[ffi::pmix_info_t], key: &[u8]) -> bool {
    info.iter().filter(|i| key_is(i, key)).any(|i| {
        if u32::from(i.value.type_) == ffi::PMIX_BOOL {
            // SAFETY: the type tag says the union holds a bool.
            unsafe { i.value.data.flag }
        } else {
            true
        }
    })
}

/// # Safety
/// `argv` is null or a NULL-terminated array of valid strings.
unsafe fn argv_of(argv: *const *mut c_char) -> Vec<String> {
    let mut out = Vec::new();
    if argv.is_null() {
        return out;
    }
    let mut i = 0;
    loop {
        // SAFETY: the array is NULL-terminated, so every index up to the NULL is valid.
        let s = unsafe { *argv.add(i) };
        if s.is_null() {
            return out;
        }
        // SAFETY: a non-null entry is a valid string.
        out.push(unsafe { c_str(s) });
        i += 1;
    }
}

/// Reads and frees an argv that libpmix built with malloc.
///
/// # Safety
/// `argv` is null or a NULL-terminated, malloc'd array of malloc'd strings, not used
/// afterwards.
unsafe fn take_argv(argv: *mut *mut c_char) -> Vec<String> {
    // SAFETY: per the contract.
    let out = unsafe { argv_of(argv) };
    if !argv.is_null() {
        let mut i = 0;
        loop {
            // SAFETY: as in `argv_of`.
            let s = unsafe { *argv.add(i) };
            if s.is_null() {
                break;
            }
            // SAFETY: the entry was malloc'd by libpmix and is freed once.
            unsafe { libc::free(s.cast()) };
            i += 1;
        }
        // SAFETY: the array was malloc'd by libpmix and is freed once.
        unsafe { libc::free(argv.cast()) };
    }
    out
}

/// A regex (or blob) from `PMIx_generate_regex`/`PMIx_generate_ppn`, freed on drop.
struct Regex(*mut c_char);

impl Drop for Regex {
    fn drop(&mut self) {
        // SAFETY: libpmix allocated it with malloc; it is freed once.
        unsafe { libc::free(self.0.cast()) };
    }
}

fn generate(
    f: unsafe extern "C" fn(*const c_char, *mut *mut c_char) -> ffi::pmix_status_t,
    input: &str,
) -> Result<Regex, PmixError> {
    let input = cstring(input)?;
    let mut out: *mut c_char = ptr::null_mut();
    // SAFETY: `input` is NUL-terminated; libpmix stores a malloc'd result in `out`.
    let rc = unsafe { f(input.as_ptr(), &raw mut out) };
    if rc != SUCCESS || out.is_null() {
        return Err(PmixError::Pmix(Status::from_code(rc)));
    }
    Ok(Regex(out))
}

/// A `PMIx_Info_list`: libpmix copies every value added.
struct InfoList(*mut c_void);

impl InfoList {
    fn new() -> Result<InfoList, PmixError> {
        // SAFETY: no preconditions.
        let list = unsafe { ffi::PMIx_Info_list_start() };
        if list.is_null() {
            return Err(PmixError::Pmix(Status::Error));
        }
        Ok(InfoList(list))
    }

    /// Adds `key` (a bindgen key constant, NUL-terminated) with the value at `data`.
    fn add(&mut self, key: &[u8], data: *const c_void, type_: u32) -> Result<(), PmixError> {
        let key = CStr::from_bytes_with_nul(key)
            .map_err(|_| PmixError::InvalidArgument("bad key".into()))?;
        let type_ =
            u16::try_from(type_).map_err(|_| PmixError::InvalidArgument("bad type".into()))?;
        // SAFETY: `self.0` is a live list; `data` points at a value of type `type_`
        // (callers below guarantee it); libpmix copies it.
        let rc = unsafe { ffi::PMIx_Info_list_add(self.0, key.as_ptr(), data, type_) };
        if rc != SUCCESS {
            return Err(PmixError::Pmix(Status::from_code(rc)));
        }
        Ok(())
    }

    fn add_str(&mut self, key: &[u8], value: &str) -> Result<(), PmixError> {
        let value = cstring(value)?;
        self.add(key, value.as_ptr().cast(), ffi::PMIX_STRING)
    }

    fn add_u32(&mut self, key: &[u8], value: u32) -> Result<(), PmixError> {
        self.add(key, (&raw const value).cast(), ffi::PMIX_UINT32)
    }

    fn add_u16(&mut self, key: &[u8], value: u16) -> Result<(), PmixError> {
        self.add(key, (&raw const value).cast(), ffi::PMIX_UINT16)
    }

    fn add_rank(&mut self, key: &[u8], value: u32) -> Result<(), PmixError> {
        self.add(key, (&raw const value).cast(), ffi::PMIX_PROC_RANK)
    }

    fn add_bool(&mut self, key: &[u8], value: bool) -> Result<(), PmixError> {
        self.add(key, (&raw const value).cast(), ffi::PMIX_BOOL)
    }

    fn add_proc(&mut self, key: &[u8], value: &ffi::pmix_proc_t) -> Result<(), PmixError> {
        self.add(key, ptr::from_ref(value).cast(), ffi::PMIX_PROC)
    }

    fn add_regex(&mut self, key: &[u8], value: &Regex) -> Result<(), PmixError> {
        self.add(key, value.0.cast_const().cast(), ffi::PMIX_REGEX)
    }

    fn convert(self) -> Result<DataArray, PmixError> {
        let mut array = ffi::pmix_data_array_t {
            type_: 0,
            size: 0,
            array: ptr::null_mut(),
        };
        // SAFETY: `self.0` is a live list; `array` is an empty data array to fill.
        let rc = unsafe { ffi::PMIx_Info_list_convert(self.0, &raw mut array) };
        if rc != SUCCESS {
            return Err(PmixError::Pmix(Status::from_code(rc)));
        }
        Ok(DataArray(array))
    }
}

impl Drop for InfoList {
    fn drop(&mut self) {
        // SAFETY: the list is live and released once.
        unsafe { ffi::PMIx_Info_list_release(self.0) };
    }
}

/// A `pmix_data_array_t` of `pmix_info_t` that libpmix allocated.
struct DataArray(ffi::pmix_data_array_t);

impl DataArray {
    fn as_mut_ptr(&mut self) -> *mut ffi::pmix_info_t {
        self.0.array.cast()
    }

    fn len(&self) -> usize {
        self.0.size
    }
}

impl Drop for DataArray {
    fn drop(&mut self) {
        // SAFETY: the array was filled by `PMIx_Info_list_convert`; destructed once.
        unsafe { ffi::PMIx_Data_array_destruct(&raw mut self.0) };
    }
}

// ---------------------------------------------------------------------------------
// Blocking calls: the callback wakes the caller's thread.

#[derive(Default)]
struct Waiter {
    status: Mutex<Option<c_int>>,
    cv: Condvar,
}

unsafe extern "C" fn wake(status: c_int, cbdata: *mut c_void) {
    guard_void(|| {
        // SAFETY: `cbdata` is the `Arc<Waiter>` leaked by `call_blocking`, handed back once.
        let waiter = unsafe { Arc::from_raw(cbdata.cast_const().cast::<Waiter>()) };
        *waiter
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(status);
        waiter.cv.notify_all();
    });
}

/// Calls a libpmix function that answers through an op callback and waits for it.
fn call_blocking(
    call: impl FnOnce(ffi::pmix_op_cbfunc_t, *mut c_void) -> c_int,
) -> Result<(), PmixError> {
    let waiter = Arc::new(Waiter::default());
    let cbdata = Arc::into_raw(Arc::clone(&waiter))
        .cast_mut()
        .cast::<c_void>();
    let rc = call(Some(wake), cbdata);
    if rc != SUCCESS {
        // SAFETY: libpmix did not take the callback: the leaked reference is ours again.
        drop(unsafe { Arc::from_raw(cbdata.cast_const().cast::<Waiter>()) });
        return if rc == ffi::PMIX_OPERATION_SUCCEEDED {
            Ok(())
        } else {
            Err(PmixError::Pmix(Status::from_code(rc)))
        };
    }
    let status = waiter
        .status
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let (status, _) = waiter
        .cv
        .wait_timeout_while(status, BLOCKING_TIMEOUT, |s| s.is_none())
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match *status {
        None => Err(PmixError::Timeout),
        Some(SUCCESS) => Ok(()),
        Some(code) => Err(PmixError::Pmix(Status::from_code(code))),
    }
}

// ---------------------------------------------------------------------------------
// Upcalls: convert, send, return. Nothing here answers a request.

/// libpmix's `cbdata`, moved to whichever thread answers.
struct CbData(*mut c_void);

// SAFETY: libpmix's callbacks may be called from any thread (they thread-shift into
// libpmix's progress thread); the pointer is only handed back to them.
unsafe impl Send for CbData {}

impl CbData {
    fn get(&self) -> *mut c_void {
        self.0
    }
}

/// Runs `call` only while the server that made the request still runs.
fn if_live(generation: u64, call: impl FnOnce()) {
    let live = LIVE
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if *live == generation && generation != 0 {
        call();
    }
}

fn generation() -> u64 {
    *LIVE
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn code<T>(result: &Result<T, Status>) -> c_int {
    match result {
        Ok(_) => SUCCESS,
        Err(status) => status.code(),
    }
}

fn op_done(cbfunc: ffi::pmix_op_cbfunc_t, cbdata: *mut c_void) -> OpDone {
    let (cbdata, generation) = (CbData(cbdata), generation());
    OpDone::new(move |result| {
        if let Some(f) = cbfunc {
            // SAFETY: `f`/`cbdata` are the callback libpmix gave with the request, called once.
            if_live(generation, || unsafe { f(code(&result), cbdata.get()) });
        }
    })
}

unsafe extern "C" fn release_blob(cbdata: *mut c_void) {
    guard_void(|| {
        // SAFETY: `cbdata` is the `Box<Vec<u8>>` leaked by `modex_answer`, released once.
        drop(unsafe { Box::from_raw(cbdata.cast::<Vec<u8>>()) });
    });
}

fn modex_answer(
    cbfunc: ffi::pmix_modex_cbfunc_t,
    cbdata: *mut c_void,
) -> impl FnOnce(Result<Vec<u8>, Status>) + Send + 'static {
    let (cbdata, generation) = (CbData(cbdata), generation());
    move |result| {
        let Some(f) = cbfunc else { return };
        if_live(generation, || match result {
            Ok(blob) if !blob.is_empty() => {
                let blob = Box::new(blob);
                let (data, len) = (blob.as_ptr().cast::<c_char>(), blob.len());
                let keep = Box::into_raw(blob).cast::<c_void>();
                // SAFETY: the blob stays alive until libpmix calls `release_blob` with `keep`.
                unsafe { f(SUCCESS, data, len, cbdata.get(), Some(release_blob), keep) };
            }
            Ok(_) => {
                // SAFETY: an empty answer, with nothing to release.
                unsafe { f(SUCCESS, ptr::null(), 0, cbdata.get(), None, ptr::null_mut()) };
            }
            Err(status) => {
                // SAFETY: an error answer, with nothing to release.
                unsafe {
                    f(
                        status.code(),
                        ptr::null(),
                        0,
                        cbdata.get(),
                        None,
                        ptr::null_mut(),
                    )
                };
            }
        });
    }
}

unsafe extern "C" fn release_infos(cbdata: *mut c_void) {
    guard_void(|| {
        // SAFETY: `cbdata` is the `Box<DataArray>` leaked by `query_done`, released once.
        drop(unsafe { Box::from_raw(cbdata.cast::<DataArray>()) });
    });
}

/// The info array answering a query: each key with its value, copied by libpmix.
fn answers(found: &[(String, crate::QueryValue)]) -> Result<DataArray, PmixError> {
    let mut list = InfoList::new()?;
    for (key, answer) in found {
        let key = cstring(key)?;
        let key = key.as_bytes_with_nul();
        match answer {
            crate::QueryValue::Size(n) => list.add(key, ptr::from_ref(n).cast(), ffi::PMIX_SIZE)?,
            crate::QueryValue::Str(s) => list.add_str(key, s)?,
            crate::QueryValue::Procs(procs) => {
                let mut procs = procs
                    .iter()
                    .map(|(ns, rank)| proc_t(ns, *rank))
                    .collect::<Result<Vec<_>, _>>()?;
                let array = ffi::pmix_data_array_t {
                    type_: u16::try_from(ffi::PMIX_PROC)
                        .map_err(|_| PmixError::InvalidArgument("bad type".into()))?,
                    size: procs.len(),
                    array: procs.as_mut_ptr().cast(),
                };
                // libpmix copies the array and its processes before this returns.
                list.add(key, ptr::from_ref(&array).cast(), ffi::PMIX_DATA_ARRAY)?;
            }
        }
    }
    list.convert()
}

fn query_done(cbfunc: ffi::pmix_info_cbfunc_t, cbdata: *mut c_void) -> QueryDone {
    let (cbdata, generation) = (CbData(cbdata), generation());
    QueryDone::new(move |result| {
        let Some(f) = cbfunc else { return };
        let result = match result {
            Ok(found) if found.is_empty() => Err(Status::NotFound),
            Ok(found) => answers(&found).map_err(|e| match e {
                PmixError::Pmix(status) => status,
                _ => Status::BadParam,
            }),
            Err(status) => Err(status),
        };
        if_live(generation, || match result {
            Ok(array) => {
                let mut array = Box::new(array);
                let (info, n) = (array.as_mut_ptr(), array.len());
                let keep = Box::into_raw(array).cast::<c_void>();
                // SAFETY: the array stays alive until libpmix calls `release_infos`
                // with `keep`.
                unsafe { f(SUCCESS, info, n, cbdata.get(), Some(release_infos), keep) };
            }
            Err(status) => {
                // SAFETY: an error answer, with nothing to release.
                unsafe {
                    f(
                        status.code(),
                        ptr::null_mut(),
                        0,
                        cbdata.get(),
                        None,
                        ptr::null_mut(),
                    )
                };
            }
        });
    })
}

fn lookup_done(cbfunc: ffi::pmix_lookup_cbfunc_t, cbdata: *mut c_void) -> LookupDone {
    let (cbdata, generation) = (CbData(cbdata), generation());
    LookupDone::new(move |result| {
        let Some(f) = cbfunc else { return };
        let result = match result {
            Ok(found) if found.is_empty() => Err(Status::NotFound),
            other => other,
        };
        if_live(generation, || {
            match result.and_then(|found| pdata(&found)) {
                Ok(mut data) => {
                    // SAFETY: `data` holds valid pmix_pdata_t; libpmix copies them before returning.
                    unsafe { f(SUCCESS, data.0.as_mut_ptr(), data.0.len(), cbdata.get()) };
                }
                Err(status) => {
                    // SAFETY: an error answer without data.
                    unsafe { f(status.code(), ptr::null_mut(), 0, cbdata.get()) };
                }
            }
        });
    })
}

/// pmix_pdata_t with values loaded by libpmix, destructed on drop.
struct Pdata(Vec<ffi::pmix_pdata_t>);

impl Drop for Pdata {
    fn drop(&mut self) {
        for pd in &mut self.0 {
            // SAFETY: each value was zeroed or loaded by `PMIx_Value_load`.
            unsafe { ffi::PMIx_Value_destruct(&raw mut pd.value) };
        }
    }
}

fn pdata(found: &[(String, Value)]) -> Result<Pdata, Status> {
    let mut out = Pdata(Vec::with_capacity(found.len()));
    for (key, value) in found {
        if key.len() > ffi::PMIX_MAX_KEYLEN as usize || key.contains('\0') {
            return Err(Status::BadParam);
        }
        // SAFETY: pmix_pdata_t is plain C data for which all-zero is the empty value.
        let mut pd: ffi::pmix_pdata_t = unsafe { std::mem::zeroed() };
        pd.proc_.rank = crate::RANK_UNDEF;
        for (dst, src) in pd.key.iter_mut().zip(key.as_bytes()) {
            *dst = c_char::from_ne_bytes([*src]);
        }
        out.0.push(pd);
        let pd = out.0.last_mut().expect("just pushed");
        let text;
        let (int, uint, boolean);
        let object;
        let (data, type_): (*const c_void, u32) = match value {
            Value::Str(s) => {
                text = CString::new(s.as_str()).map_err(|_| Status::BadParam)?;
                (text.as_ptr().cast(), ffi::PMIX_STRING)
            }
            Value::Bytes(b) => {
                object = ffi::pmix_byte_object_t {
                    bytes: b.as_ptr().cast_mut().cast(),
                    size: b.len(),
                };
                ((&raw const object).cast(), ffi::PMIX_BYTE_OBJECT)
            }
            Value::Int(i) => {
                int = *i;
                ((&raw const int).cast(), ffi::PMIX_INT64)
            }
            Value::UInt(u) => {
                uint = *u;
                ((&raw const uint).cast(), ffi::PMIX_UINT64)
            }
            Value::Bool(b) => {
                boolean = *b;
                ((&raw const boolean).cast(), ffi::PMIX_BOOL)
            }
        };
        let type_ = u16::try_from(type_).map_err(|_| Status::BadParam)?;
        // SAFETY: `data` points at a value of type `type_` that lives until after the
        // call; libpmix copies it into `pd.value`.
        let rc = unsafe { ffi::PMIx_Value_load(&raw mut pd.value, data, type_) };
        if rc != SUCCESS {
            return Err(Status::from_code(rc));
        }
    }
    Ok(out)
}

fn spawn_done(cbfunc: ffi::pmix_spawn_cbfunc_t, cbdata: *mut c_void) -> SpawnDone {
    let (cbdata, generation) = (CbData(cbdata), generation());
    SpawnDone::new(move |result| {
        let Some(f) = cbfunc else { return };
        let result = result.and_then(|ns| CString::new(ns).map_err(|_| Status::BadParam));
        if_live(generation, || match result {
            // SAFETY: libpmix copies the namespace before returning.
            Ok(ns) => unsafe { f(SUCCESS, ns.as_ptr().cast_mut(), cbdata.get()) },
            // SAFETY: an error answer without a namespace.
            Err(status) => unsafe { f(status.code(), ptr::null_mut(), cbdata.get()) },
        });
    })
}

/// Hands a request to the host: `PMIX_SUCCESS` when it has it (and will answer),
/// an error (with the completion disarmed) when no host listens.
fn send(mut request: Request) -> c_int {
    let events = EVENTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let refused = match events.as_ref() {
        Some(tx) => match tx.send(request) {
            Ok(()) => return SUCCESS,
            Err(std::sync::mpsc::SendError(refused)) => refused,
        },
        None => request,
    };
    request = refused;
    request.disarm();
    ffi::PMIX_ERR_UNREACH
}

/// Runs an upcall's body; a panic becomes `PMIX_ERROR` instead of unwinding into C.
fn guard(body: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(ffi::PMIX_ERROR)
}

fn guard_void(body: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(body));
}

fn module() -> ffi::pmix_server_module_t {
    ffi::pmix_server_module_t {
        client_connected: Some(client_connected),
        client_finalized: Some(client_finalized),
        abort: Some(abort),
        fence_nb: Some(fence_nb),
        direct_modex: Some(direct_modex),
        publish: Some(publish),
        lookup: Some(lookup),
        unpublish: Some(unpublish),
        spawn: Some(spawn),
        connect: Some(connect),
        disconnect: Some(disconnect),
        register_events: None,
        deregister_events: None,
        listener: None,
        notify_event: None,
        query: Some(query),
        tool_connected: None,
        log: None,
        allocate: None,
        job_control: None,
        monitor: None,
        get_credential: None,
        validate_credential: None,
        iof_pull: None,
        push_stdin: None,
        group: None,
        fabric: None,
        client_connected2: None,
    }
}

unsafe extern "C" fn client_connected(
    proc_: *const ffi::pmix_proc_t,
    _server_object: *mut c_void,
    cbfunc: ffi::pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes a valid proc.
        let proc_ = unsafe { proc_of(proc_) };
        send(Request::ClientConnected {
            proc_,
            done: op_done(cbfunc, cbdata),
        })
    })
}

unsafe extern "C" fn client_finalized(
    proc_: *const ffi::pmix_proc_t,
    _server_object: *mut c_void,
    cbfunc: ffi::pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes a valid proc.
        let proc_ = unsafe { proc_of(proc_) };
        send(Request::ClientFinalized {
            proc_,
            done: op_done(cbfunc, cbdata),
        })
    })
}

unsafe extern "C" fn abort(
    proc_: *const ffi::pmix_proc_t,
    _server_object: *mut c_void,
    status: c_int,
    msg: *const c_char,
    _procs: *mut ffi::pmix_proc_t,
    _nprocs: usize,
    cbfunc: ffi::pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes a valid proc and a null or valid message.
        let (from, message) = unsafe { (proc_of(proc_), c_str(msg)) };
        send(Request::Abort {
            from,
            status,
            message,
            done: op_done(cbfunc, cbdata),
        })
    })
}

unsafe extern "C" fn fence_nb(
    procs: *const ffi::pmix_proc_t,
    nprocs: usize,
    info: *const ffi::pmix_info_t,
    ninfo: usize,
    data: *mut c_char,
    ndata: usize,
    cbfunc: ffi::pmix_modex_cbfunc_t,
    cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes valid arrays of the given lengths.
        let (procs, info, data) = unsafe {
            (
                procs_of(procs, nprocs),
                infos(info, ninfo),
                bytes(data, ndata),
            )
        };
        let collect = flag(info, ffi::PMIX_COLLECT_DATA);
        send(Request::Fence {
            procs,
            data,
            collect,
            done: FenceDone::new(modex_answer(cbfunc, cbdata)),
        })
    })
}

unsafe extern "C" fn direct_modex(
    proc_: *const ffi::pmix_proc_t,
    _info: *const ffi::pmix_info_t,
    _ninfo: usize,
    cbfunc: ffi::pmix_modex_cbfunc_t,
    cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes a valid proc.
        let proc_ = unsafe { proc_of(proc_) };
        send(Request::DirectModex {
            proc_,
            done: ModexDone::new(modex_answer(cbfunc, cbdata)),
        })
    })
}

unsafe extern "C" fn publish(
    proc_: *const ffi::pmix_proc_t,
    info: *const ffi::pmix_info_t,
    ninfo: usize,
    cbfunc: ffi::pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes a valid proc and info array.
        let (from, info) = unsafe { (proc_of(proc_), infos(info, ninfo)) };
        let mut entries = Vec::new();
        for i in info {
            let key = fixed_str(&i.key);
            // Directives (range, persistence, the requester's ids) are not data.
            if key.starts_with("pmix.") {
                continue;
            }
            // SAFETY: libpmix passes valid values.
            let Some(value) = (unsafe { value_of(&i.value) }) else {
                return ffi::PMIX_ERR_NOT_SUPPORTED;
            };
            entries.push((key, value));
        }
        send(Request::Publish {
            from,
            entries,
            done: op_done(cbfunc, cbdata),
        })
    })
}

unsafe extern "C" fn lookup(
    proc_: *const ffi::pmix_proc_t,
    keys: *mut *mut c_char,
    info: *const ffi::pmix_info_t,
    ninfo: usize,
    cbfunc: ffi::pmix_lookup_cbfunc_t,
    cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes a valid proc, a NULL-terminated key array, and a
        // valid info array.
        let (from, keys, info) = unsafe { (proc_of(proc_), argv_of(keys), infos(info, ninfo)) };
        let wait = flag(info, ffi::PMIX_WAIT);
        send(Request::Lookup {
            from,
            keys,
            wait,
            done: lookup_done(cbfunc, cbdata),
        })
    })
}

unsafe extern "C" fn query(
    proc_: *mut ffi::pmix_proc_t,
    queries: *mut ffi::pmix_query_t,
    nqueries: usize,
    cbfunc: ffi::pmix_info_cbfunc_t,
    cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes a valid proc.
        let from = unsafe { proc_of(proc_) };
        let queries: &[ffi::pmix_query_t] = if queries.is_null() || nqueries == 0 {
            &[]
        } else {
            // SAFETY: libpmix passes `nqueries` valid queries.
            unsafe { std::slice::from_raw_parts(queries, nqueries) }
        };
        let queries = queries
            .iter()
            .map(|q| {
                // SAFETY: each query holds a NULL-terminated key array and `nqual`
                // valid qualifiers.
                let (keys, qual) = unsafe { (argv_of(q.keys), infos(q.qualifiers, q.nqual)) };
                let pset = qual
                    .iter()
                    .find(|i| key_is(i, ffi::PMIX_PSET_NAME))
                    // SAFETY: a qualifier's value is valid (its union matches its type).
                    .and_then(|i| match unsafe { value_of(&i.value) } {
                        Some(Value::Str(s)) => Some(s),
                        _ => None,
                    });
                crate::Query { keys, pset }
            })
            .collect();
        send(Request::Query {
            from,
            queries,
            done: query_done(cbfunc, cbdata),
        })
    })
}

unsafe extern "C" fn unpublish(
    proc_: *const ffi::pmix_proc_t,
    keys: *mut *mut c_char,
    _info: *const ffi::pmix_info_t,
    _ninfo: usize,
    cbfunc: ffi::pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes a valid proc and a null or NULL-terminated key array.
        let (from, keys) = unsafe { (proc_of(proc_), argv_of(keys)) };
        send(Request::Unpublish {
            from,
            keys,
            done: op_done(cbfunc, cbdata),
        })
    })
}

unsafe extern "C" fn spawn(
    proc_: *const ffi::pmix_proc_t,
    _job_info: *const ffi::pmix_info_t,
    _ninfo: usize,
    apps: *const ffi::pmix_app_t,
    napps: usize,
    cbfunc: ffi::pmix_spawn_cbfunc_t,
    cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes a valid proc.
        let from = unsafe { proc_of(proc_) };
        let apps: &[ffi::pmix_app_t] = if apps.is_null() || napps == 0 {
            &[]
        } else {
            // SAFETY: libpmix passes `napps` valid apps.
            unsafe { std::slice::from_raw_parts(apps, napps) }
        };
        let apps = apps
            .iter()
            .map(|a| {
                // SAFETY: every field of a valid app is null or valid.
                let (cmd, argv, env, cwd) =
                    unsafe { (c_str(a.cmd), argv_of(a.argv), argv_of(a.env), c_str(a.cwd)) };
                App {
                    cmd,
                    argv,
                    env: env
                        .into_iter()
                        .filter_map(|kv| {
                            kv.split_once('=')
                                .map(|(k, v)| (k.to_string(), v.to_string()))
                        })
                        .collect(),
                    maxprocs: u32::try_from(a.maxprocs).unwrap_or(0),
                    cwd: if cwd.is_empty() { None } else { Some(cwd) },
                }
            })
            .collect();
        send(Request::Spawn {
            from,
            apps,
            done: spawn_done(cbfunc, cbdata),
        })
    })
}

unsafe extern "C" fn connect(
    procs: *const ffi::pmix_proc_t,
    nprocs: usize,
    _info: *const ffi::pmix_info_t,
    _ninfo: usize,
    cbfunc: ffi::pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes `nprocs` valid procs.
        let procs = unsafe { procs_of(procs, nprocs) };
        send(Request::Connect {
            procs,
            done: op_done(cbfunc, cbdata),
        })
    })
}

unsafe extern "C" fn disconnect(
    procs: *const ffi::pmix_proc_t,
    nprocs: usize,
    _info: *const ffi::pmix_info_t,
    _ninfo: usize,
    cbfunc: ffi::pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes `nprocs` valid procs.
        let procs = unsafe { procs_of(procs, nprocs) };
        send(Request::Disconnect {
            procs,
            done: op_done(cbfunc, cbdata),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_match_the_header() {
        assert_eq!(Status::Error.code(), ffi::PMIX_ERROR);
        assert_eq!(Status::NotFound.code(), ffi::PMIX_ERR_NOT_FOUND);
        assert_eq!(Status::Timeout.code(), ffi::PMIX_ERR_TIMEOUT);
        assert_eq!(Status::Unreachable.code(), ffi::PMIX_ERR_UNREACH);
        assert_eq!(Status::NotSupported.code(), ffi::PMIX_ERR_NOT_SUPPORTED);
        assert_eq!(Status::BadParam.code(), ffi::PMIX_ERR_BAD_PARAM);
        assert_eq!(crate::RANK_WILDCARD, ffi::PMIX_RANK_WILDCARD);
        assert_eq!(crate::RANK_UNDEF, ffi::PMIX_RANK_UNDEF);
    }

    #[test]
    fn pdata_loads_every_value() {
        let found = vec![
            ("port".to_string(), Value::Str("tcp://x".into())),
            ("b".to_string(), Value::Bytes(vec![1, 2])),
            ("i".to_string(), Value::Int(-3)),
            ("u".to_string(), Value::UInt(4)),
            ("f".to_string(), Value::Bool(true)),
        ];
        let data = pdata(&found).expect("loads");
        let back: Vec<(String, Value)> = data
            .0
            .iter()
            .map(|pd| {
                // SAFETY: the values were loaded by libpmix.
                let value = unsafe { value_of(&pd.value) };
                (fixed_str(&pd.key), value.expect("known type"))
            })
            .collect();
        assert_eq!(back, found);
    }
}
