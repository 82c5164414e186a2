//! The runtime link between the master's process and a remote node's daemon process
//! (`spec/runtime.md`, LINK-1..LINK-6): after the daemon authenticated (AUTH-1..AUTH-5),
//! the TCP stream carries core's master ↔ daemon frames ([`ToDaemon`](crate::rc::ToDaemon),
//! [`ToMaster`](crate::rc::ToMaster)) and these few control messages of the runtime
//! itself, all in the kernel's frame format (type range `0x05xx`).
//!
//! Nothing here decides a protocol step: the control messages carry what the driver of a
//! remote daemon needs to start processes (the launch template), liveness (heartbeats,
//! HB-1..HB-3) and how processes ended, which `dynres status` and `RC-18` reports use.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

use crate::wire::prim::{put_seq, put_str, put_u8, put_u32, seq, string, u8, u32};
use crate::wire::{PResult, WireError, decode_frame, encode_frame, parse_all};

use super::MAX_APP_LEN;
use super::values::invalid;
use crate::rc::ends::KillCause;

/// First type of the runtime link's control messages.
pub const LINK_FIRST: u16 = 0x0501;
/// Last type reserved for them.
pub const LINK_LAST: u16 = 0x05ff;

const SETUP: u16 = 0x0501;
const HEARTBEAT: u16 = 0x0502;
const STARTED: u16 = 0x0503;
const ENDED: u16 = 0x0504;
const SHUTDOWN: u16 = 0x0505;
const SIGNAL: u16 = 0x0506;
const ABORTED: u16 = 0x0507;

/// Longest `MPI_Abort` message an [`LinkMsg::Aborted`] carries, in bytes.
pub const MAX_ABORT_MESSAGE: usize = 1024;

/// Longest program path, job id, namespace or address in a [`NodeSetup`], in bytes.
pub const MAX_SETUP_STR: usize = 4096;
/// Longest single program argument, in bytes.
pub const MAX_ARG_LEN: usize = 64 << 10;
/// Most program arguments.
pub const MAX_ARGS: usize = 4096;
/// Most environment variables a [`NodeSetup`] carries (`RT-5`).
pub const MAX_ENV: usize = 4096;
/// Most nodes a [`PmixSetup`] names.
pub const MAX_PMIX_NODES: usize = 1 << 16;
/// Most processes a [`PmixSetup`] places.
pub const MAX_PMIX_PROCS: usize = 1 << 20;

/// What every node's PMIx server needs to serve the job's Open MPI processes
/// (`spec/pmi.md` PMIS-13): the same namespace and map on every node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PmixSetup {
    /// The job's PMIx namespace, secret suffix included (PMIS-12).
    pub namespace: String,
    /// The universe size (`PMIX_UNIV_SIZE`): the job's slots.
    pub universe: u32,
    /// Each node's host name, by node id (`PMIX_NODE_MAP`).
    pub nodes: Vec<String>,
    /// The node of each of the job's first processes, by rank (`PMIX_PROC_MAP`).
    pub placement: Vec<u32>,
}

/// What a remote daemon needs to run its node's share of the job (`LINK-2`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeSetup {
    /// The node this daemon serves.
    pub node: u32,
    /// The job's id (names the daemon's local job directory).
    pub job: String,
    /// The job's namespace.
    pub namespace: String,
    /// The application's name.
    pub app: String,
    /// The program every process runs.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// The node's name as the job's host list gives it (for logs: processes bind to
    /// the address their daemon reaches the master from, `spec/runtime.md`).
    pub node_addr: String,
    /// The shared-memory spin budget calibrated by the master's host.
    pub shm_spins: u32,
    /// How often each side sends a heartbeat, in milliseconds (`HB-1`).
    pub heartbeat_ms: u32,
    /// The directory processes start in (`RT-5`): the caller's, or `--wdir`.
    pub cwd: String,
    /// Whether `cwd` was asked for (`--wdir`): then a node without it fails its
    /// launches; the caller's own directory is only used where it exists (`RT-5`).
    pub cwd_required: bool,
    /// The environment processes get on top of the daemon's own (`RT-5`): the caller's,
    /// less host-specific variables, with `-x` settings applied.
    pub env: Vec<(String, String)>,
    /// Whether each process is bound to one core of its node (`--bind-to core`).
    pub bind_core: bool,
    /// Whether each line of output is tagged `[rank N] ` (`--tag-output`, the default).
    pub tag_output: bool,
    /// Whether each line of output carries the time since the job started.
    pub timestamp_output: bool,
    /// `--output-filename DIR`: per-rank output files under DIR on the node; empty:
    /// the output goes to the daemon's own stdout and stderr.
    pub output_dir: String,
    /// PMIx for an Open MPI program (PMIS-13); `None`: no PMIx server.
    pub pmix: Option<PmixSetup>,
}

/// A control message of the runtime link.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LinkMsg {
    /// Master → daemon, the first frame after authentication.
    Setup(Box<NodeSetup>),
    /// Either way: "I am alive" (`HB-1`).
    Heartbeat,
    /// Daemon → master: a process was started (`LINK-4`).
    Started {
        /// Its rank.
        rank: u32,
        /// Its pid on the node.
        os_pid: u32,
    },
    /// Daemon → master: how a process ended, sent before core's `Exited` for it so the
    /// master can judge a loss by it (`LINK-4`, `RC-18`).
    Ended {
        /// Its rank.
        rank: u32,
        /// Its pid on the node (0 if it never started).
        os_pid: u32,
        /// Exit code, or 128 + signal number when a signal ended it.
        code: u32,
        /// Why the runtime killed it, if it did (NODE-4): whether the job removed it,
        /// was ending, or the daemon ended it on its own.
        cause: KillCause,
    },
    /// Master → daemon: deliver this signal (SIGUSR1 or SIGUSR2) to every process of
    /// the node, as `dynres run` does to its own (RT-4).
    Signal {
        /// The signal number.
        signal: u32,
    },
    /// Master → daemon: the job is over; kill what still runs, report it, and exit
    /// (`LINK-5`).
    Shutdown,
    /// Daemon → master: a process of the node called `MPI_Abort` (through PMI or PMIx):
    /// the master ends the job with `code`, whatever `--on-loss` says (PMIS-7).
    Aborted {
        /// Its rank.
        rank: u32,
        /// The code it gave.
        code: i32,
        /// Its message, at most [`MAX_ABORT_MESSAGE`] bytes.
        message: String,
    },
}

/// Whether a frame's type belongs to the runtime link's control messages.
pub fn is_link_type(msg_type: u16) -> bool {
    (LINK_FIRST..=LINK_LAST).contains(&msg_type)
}

/// Encodes a control message as one frame.
pub fn encode_link(msg: &LinkMsg) -> Vec<u8> {
    let mut out = Vec::new();
    match msg {
        LinkMsg::Setup(s) => encode_frame(&mut out, SETUP, |b| {
            put_u32(b, s.node);
            put_str(b, &s.job);
            put_str(b, &s.namespace);
            put_str(b, &s.app);
            put_str(b, &s.program);
            put_seq(b, &s.args, |b, a| put_str(b, a));
            put_str(b, &s.node_addr);
            put_u32(b, s.shm_spins);
            put_u32(b, s.heartbeat_ms);
            put_str(b, &s.cwd);
            put_u8(b, u8::from(s.cwd_required));
            put_seq(b, &s.env, |b, (k, v)| {
                put_str(b, k);
                put_str(b, v);
            });
            put_u8(b, u8::from(s.bind_core));
            put_u8(b, u8::from(s.tag_output));
            put_u8(b, u8::from(s.timestamp_output));
            put_str(b, &s.output_dir);
            match &s.pmix {
                None => put_u8(b, 0),
                Some(p) => {
                    put_u8(b, 1);
                    put_str(b, &p.namespace);
                    put_u32(b, p.universe);
                    put_seq(b, &p.nodes, |b, n| put_str(b, n));
                    put_seq(b, &p.placement, |b, n| put_u32(b, *n));
                }
            }
        }),
        LinkMsg::Heartbeat => encode_frame(&mut out, HEARTBEAT, |_| {}),
        LinkMsg::Started { rank, os_pid } => encode_frame(&mut out, STARTED, |b| {
            put_u32(b, *rank);
            put_u32(b, *os_pid);
        }),
        LinkMsg::Ended {
            rank,
            os_pid,
            code,
            cause,
        } => encode_frame(&mut out, ENDED, |b| {
            put_u32(b, *rank);
            put_u32(b, *os_pid);
            put_u32(b, *code);
            put_u8(b, cause.code());
        }),
        LinkMsg::Signal { signal } => encode_frame(&mut out, SIGNAL, |b| put_u32(b, *signal)),
        LinkMsg::Shutdown => encode_frame(&mut out, SHUTDOWN, |_| {}),
        LinkMsg::Aborted {
            rank,
            code,
            message,
        } => encode_frame(&mut out, ABORTED, |b| {
            put_u32(b, *rank);
            put_u32(b, *code as u32);
            put_str(b, message);
        }),
    }
    out
}

fn setup(i: &[u8]) -> PResult<'_, NodeSetup> {
    let text = |what| string(what, MAX_SETUP_STR);
    let (i, node) = u32(i)?;
    let (i, job) = text("job id")(i)?;
    let (i, namespace) = text("namespace")(i)?;
    let (i, app) = string("app", MAX_APP_LEN)(i)?;
    let (i, program) = text("program")(i)?;
    let (i, args) = seq("arguments", MAX_ARGS, string("argument", MAX_ARG_LEN))(i)?;
    let (i, node_addr) = text("node address")(i)?;
    let (i, shm_spins) = u32(i)?;
    let (i, heartbeat_ms) = u32(i)?;
    let (i, cwd) = text("working directory")(i)?;
    let (i, cwd_required) = flag("working directory flag")(i)?;
    let (i, env) = seq("environment", MAX_ENV, |i| {
        let (i, k) = text("variable name")(i)?;
        let (i, v) = string("variable value", MAX_ARG_LEN)(i)?;
        Ok((i, (k, v)))
    })(i)?;
    let (i, bind_core) = flag("binding flag")(i)?;
    let (i, tag_output) = flag("output tag flag")(i)?;
    let (i, timestamp_output) = flag("output timestamp flag")(i)?;
    let (i, output_dir) = text("output directory")(i)?;
    let (i, pmix) = match flag("PMIx flag")(i)? {
        (i, false) => (i, None),
        (i, true) => {
            let (i, namespace) = text("PMIx namespace")(i)?;
            let (i, universe) = u32(i)?;
            let (i, nodes) = seq("PMIx nodes", MAX_PMIX_NODES, text("node name"))(i)?;
            let (i, placement) = seq("PMIx placement", MAX_PMIX_PROCS, u32)(i)?;
            let p = PmixSetup {
                namespace,
                universe,
                nodes,
                placement,
            };
            (i, Some(p))
        }
    };
    Ok((
        i,
        NodeSetup {
            node,
            job,
            namespace,
            app,
            program,
            args,
            node_addr,
            shm_spins,
            heartbeat_ms,
            cwd,
            cwd_required,
            env,
            bind_core,
            tag_output,
            timestamp_output,
            output_dir,
            pmix,
        },
    ))
}

/// A `u8` that is 0 (false) or 1 (true).
fn flag<'a>(what: &'static str) -> impl Fn(&'a [u8]) -> PResult<'a, bool> {
    move |i| match u8(i)? {
        (i, 0) => Ok((i, false)),
        (i, 1) => Ok((i, true)),
        (_, b) => invalid(what, b.into()),
    }
}

/// Decodes one frame written by [`encode_link`]; a type outside the link's control
/// messages is [`WireError::UnknownType`].
pub fn decode_link(frame: &[u8]) -> Result<LinkMsg, WireError> {
    let (h, body) = decode_frame(frame)?;
    match h.msg_type {
        SETUP => parse_all(body, |i| {
            let (i, s) = setup(i)?;
            Ok((i, LinkMsg::Setup(Box::new(s))))
        }),
        HEARTBEAT => parse_all(body, |i| Ok((i, LinkMsg::Heartbeat))),
        STARTED => parse_all(body, |i| {
            let (i, rank) = u32(i)?;
            let (i, os_pid) = u32(i)?;
            Ok((i, LinkMsg::Started { rank, os_pid }))
        }),
        ENDED => parse_all(body, |i| {
            let (i, rank) = u32(i)?;
            let (i, os_pid) = u32(i)?;
            let (i, code) = u32(i)?;
            let (i, byte) = u8(i)?;
            let cause = KillCause::from_code(byte)
                .map_or_else(|| invalid("kill cause", byte.into()), Ok)?;
            Ok((
                i,
                LinkMsg::Ended {
                    rank,
                    os_pid,
                    code,
                    cause,
                },
            ))
        }),
        SIGNAL => parse_all(body, |i| {
            let (i, signal) = u32(i)?;
            Ok((i, LinkMsg::Signal { signal }))
        }),
        SHUTDOWN => parse_all(body, |i| Ok((i, LinkMsg::Shutdown))),
        ABORTED => parse_all(body, |i| {
            let (i, rank) = u32(i)?;
            let (i, code) = u32(i)?;
            let (i, message) = string("abort message", MAX_ABORT_MESSAGE)(i)?;
            let code = code as i32;
            Ok((
                i,
                LinkMsg::Aborted {
                    rank,
                    code,
                    message,
                },
            ))
        }),
        other => Err(WireError::UnknownType { msg_type: other }),
    }
}
