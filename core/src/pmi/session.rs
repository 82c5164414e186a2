//! The PMI server for one process (`spec/pmi.md` §3): what its daemon runs for each
//! local rank of an MPI program, on the socket that rank inherited as `PMI_FD`. It
//! speaks PMI-1, and PMI-2 once the client's first `init` asks for version 2 (§3.1):
//! both wires are served by the same operations below (put, barrier, get, names,
//! spawn, abort), only their parsing and replies differ.
//!
//! Nothing PMI decides is decided here: the barrier is the kernel's modex over the
//! process' application pset (`MODEX-1..6`, so a kvs fence across hosts is one message
//! per node each way), and publish/lookup/unpublish are the master's data server. The
//! session only translates: PMI commands in, [`ClientCall`]s to an [`rc::Client`] of the
//! process (the same machine a dynres-native process runs), their results back out as
//! PMI replies.
//!
//! PMI is one request, one reply: the session reads the next command only once the
//! previous one is answered, so a client that sends ahead is served in order and never
//! has two calls open (PMIS-4).
//!
//! [`rc::Client`]: crate::rc::Client

use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::wire::{Command, Framer, MAXES, PmiWireError, reply};
use super::wire2::{Framer2, MAX_REPLY_VALUE, reply2};
use crate::bugs::{Bug, Bugs};
use crate::process::ProcessId;
use crate::pset::PsetName;
use crate::rc::{CallId, CallResult, Client, ClientCall, ClientInput, ClientOutput, ClientReply};
use crate::rc::{ClientRequest, ReqId, SpawnCommand, SpawnWatch};
use crate::time::{Duration, Instant};

/// The first request id of a session's client: far from the ids a dynres-native client
/// of the same process counts up from 0.
pub const FIRST_REQUEST: ReqId = 1 << 62;

/// Most bytes a process may send ahead while one of its calls is open (PMIS-4): beyond
/// it the socket is closed, as for an overlong line (PMIS-3).
pub const MAX_AHEAD: usize = 1 << 20;

/// Most bytes of keys and values one process may put between two barriers (PMIS-5):
/// every put travels to every member of the job at the barrier.
pub const MAX_PUT_BYTES: usize = 4 << 20;

/// What the session knows of its process and job, from the daemon.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PmiJob {
    /// The process.
    pub pid: ProcessId,
    /// Its rank in its application (`PMI_RANK`).
    pub rank: u32,
    /// Its application's size (`PMI_SIZE`).
    pub size: u32,
    /// Its application's number (`get_appnum`): 0 for the job's program.
    pub appnum: u32,
    /// `get_universe_size`: the slots the job may use.
    pub universe: u32,
    /// The kvs name: one per application (`get_my_kvsname`).
    pub kvsname: String,
    /// `PMI_process_mapping`, when the daemon knows the whole placement; without it
    /// MPICH finds its node-mates by a put/barrier/get of host names.
    pub mapping: Option<String>,
    /// The pset the barrier runs over: the application's `mpi://app/{app}`.
    pub group: PsetName,
    /// How long one barrier may wait for the other processes (the master bounds it).
    pub barrier_timeout: Duration,
    /// Keys its spawner put into its kvs before the spawn (`PARENT_ROOT_PORT_NAME`):
    /// visible from the start (PMIS-10).
    pub preput: Vec<(String, String)>,
    /// For a spawn's children, the job id of their spawner (PMI-2's `spawner-jobid`,
    /// whose presence tells a PMI-2 client it was spawned); `None` for the job's
    /// program.
    pub spawner: Option<String>,
}

/// The variable that carries a spawn's pre-put keys to its children's daemons, as
/// [`encode_preput`] writes them (PMIS-10).
pub const PREPUT_ENV: &str = "DYNRES_PMI_PREPUT";

/// Pre-put keys as one environment value: `key=value` lines (keys hold no `=` and no
/// line holds a newline, PMIS-5).
pub fn encode_preput(keys: &[(String, String)]) -> String {
    let mut out = String::new();
    for (k, v) in keys {
        out.push_str(k);
        out.push('=');
        out.push_str(v);
        out.push('\n');
    }
    out
}

/// The keys of an [`encode_preput`] value; lines that are not `key=value` are skipped.
pub fn decode_preput(text: &str) -> Vec<(String, String)> {
    text.split('\n')
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
}

/// What a session is told.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PmiInput {
    /// Bytes read from the process' PMI socket.
    Received(Vec<u8>),
    /// The daemon answered one of the session's requests.
    Reply {
        /// The request.
        req: ReqId,
        /// The answer.
        reply: ClientReply,
    },
}

/// What a session wants done.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PmiOutput {
    /// Write these bytes to the process' PMI socket.
    Send(Vec<u8>),
    /// Hand this request to the node's daemon machine as the process'.
    Request {
        /// Its id, echoed in the reply.
        req: ReqId,
        /// The request.
        request: ClientRequest,
    },
    /// The process called `PMI_Abort` (`MPI_Abort`), asking for this exit code: the
    /// runtime ends the job (PMIS-7; MPICH waits for it to).
    Aborted {
        /// The exit code it asked for.
        code: i32,
        /// Its message.
        message: String,
    },
    /// Close the socket: the input broke the framing (PMIS-3). Sent once; the session
    /// ignores everything after it.
    Close(PmiWireError),
}

/// The call a session waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Waiting {
    Barrier,
    Spawn,
    Publish,
    Unpublish,
    Lookup,
}

/// The wire a session speaks: PMI-1 lines until an `init pmi_version=2` switches it to
/// PMI-2's length-prefixed messages (PMIS-17), never back.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Wire {
    V1(Framer),
    V2 {
        framer: Framer2,
        /// Whether `fullinit` was served: nothing else is before it (PMIS-18).
        ready: bool,
        /// The `thrid` of the command being answered, echoed in its reply (a
        /// threaded client matches replies to requests by it).
        thrid: Option<String>,
    },
}

impl Wire {
    fn next_command(&mut self) -> Option<Result<Command, PmiWireError>> {
        match self {
            Wire::V1(f) => f.next_command(),
            Wire::V2 { framer, .. } => framer.next_command(),
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        match self {
            Wire::V1(f) => f.push(bytes),
            Wire::V2 { framer, .. } => framer.push(bytes),
        }
    }

    fn held(&self) -> usize {
        match self {
            Wire::V1(f) => f.held(),
            Wire::V2 { framer, .. } => framer.held(),
        }
    }

    fn v2(&self) -> bool {
        matches!(self, Wire::V2 { .. })
    }

    /// The reply to a call the session waited for, on this wire.
    fn reply_name(&self, w: Waiting) -> &'static str {
        match (self.v2(), w) {
            (false, Waiting::Barrier) => "barrier_out",
            (false, Waiting::Spawn) => "spawn_result",
            (false, Waiting::Publish) => "publish_result",
            (false, Waiting::Unpublish) => "unpublish_result",
            (false, Waiting::Lookup) => "lookup_result",
            (true, Waiting::Barrier) => "kvs-fence-response",
            (true, Waiting::Spawn) => "spawn-response",
            (true, Waiting::Publish) => "name-publish-response",
            (true, Waiting::Unpublish) => "name-unpublish-response",
            (true, Waiting::Lookup) => "name-lookup-response",
        }
    }
}

/// See the module doc.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PmiSession {
    job: PmiJob,
    bugs: Bugs,
    wire: Wire,
    /// Whether an `init` was answered: the wire can switch only before.
    inited: bool,
    client: Client,
    next_call: CallId,
    waiting: Option<(CallId, Waiting)>,
    /// Puts since the last barrier, in order, and their size in bytes.
    puts: Vec<(String, String)>,
    put_bytes: usize,
    /// What the barriers so far made visible, and this process' own puts.
    kvs: BTreeMap<String, String>,
    /// The commands of a `spawn` whose last segment has not come yet (MPICH sends one
    /// `mcmd=spawn` per command of `MPI_Comm_spawn_multiple`), and their pre-put keys.
    spawning: Vec<SpawnCommand>,
    spawn_preput: Vec<(String, String)>,
    finalized: bool,
    closed: bool,
    out: VecDeque<PmiOutput>,
}

impl PmiSession {
    /// The session of `job`'s process.
    pub fn new(job: PmiJob) -> PmiSession {
        PmiSession::with_bugs(job, Bugs::NONE)
    }

    /// [`PmiSession::new`] with planted bugs (the verification crate's).
    pub fn with_bugs(job: PmiJob, bugs: Bugs) -> PmiSession {
        let client = Client::with_first_request(job.pid.clone(), FIRST_REQUEST);
        let kvs = job.preput.iter().cloned().collect();
        PmiSession {
            job,
            bugs,
            wire: Wire::V1(Framer::new()),
            inited: false,
            client,
            next_call: 0,
            waiting: None,
            puts: Vec::new(),
            put_bytes: 0,
            kvs,
            spawning: Vec::new(),
            spawn_preput: Vec::new(),
            finalized: false,
            closed: false,
            out: VecDeque::new(),
        }
    }

    /// Its job description.
    pub fn job(&self) -> &PmiJob {
        &self.job
    }

    /// Whether the process sent `finalize`.
    pub fn finalized(&self) -> bool {
        self.finalized
    }

    /// Whether the session speaks PMI-2 (its client's `init` asked for version 2).
    pub fn pmi2(&self) -> bool {
        self.wire.v2()
    }

    /// Whether the session asked for its socket to be closed.
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// Whether `req` is one of this session's requests (the daemon's replies to the
    /// process go to the session or to its own control connection by this).
    pub fn owns(&self, req: ReqId) -> bool {
        req >= FIRST_REQUEST
    }

    /// Feeds one input. Never fails: what the process sends wrong is answered on its
    /// socket (PMIS-3), replies to unknown requests are ignored.
    pub fn handle(&mut self, now: Instant, input: PmiInput) {
        if self.closed {
            return;
        }
        match input {
            PmiInput::Received(bytes) => {
                self.wire.push(&bytes);
                // PMIS-4: commands sent ahead wait in the framer while a call is open;
                // a process may not make its daemon hold more than this of them.
                if self.waiting.is_some() && self.wire.held() > MAX_AHEAD {
                    let e = PmiWireError::TooLong(MAX_AHEAD);
                    self.send_error("error", &e.to_string());
                    self.closed = true;
                    self.out.push_back(PmiOutput::Close(e));
                    return;
                }
            }
            PmiInput::Reply { req, reply } => {
                // The client machine ignores what it did not ask.
                let _ = self.client.handle(now, ClientInput::Reply { req, reply });
                self.drain_client();
            }
        }
        self.serve(now);
    }

    /// The next thing to do, if any.
    #[must_use = "an output is an action the driver must carry out"]
    pub fn poll_output(&mut self) -> Option<PmiOutput> {
        self.out.pop_front()
    }

    /// Sessions arm no timers: the barrier's bound is the master's.
    #[must_use = "a deadline the driver must arm a timer for"]
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Serves commands until one waits for the daemon or the input runs out (PMIS-4).
    fn serve(&mut self, now: Instant) {
        while self.waiting.is_none() && !self.closed {
            match self.wire.next_command() {
                None => return,
                Some(Ok(cmd)) if self.wire.v2() => self.command2(now, &cmd),
                Some(Ok(cmd)) => self.command(now, &cmd),
                Some(Err(e)) if e.breaks_framing() => {
                    self.send_error("error", &e.to_string());
                    self.closed = true;
                    self.out.push_back(PmiOutput::Close(e));
                }
                // A malformed line is answered; the stream is still in step (PMIS-3).
                Some(Err(e)) => self.send_error("error", &e.to_string()),
            }
        }
    }

    /// Sends a reply on the session's wire (on PMI-2 with the command's `thrid`).
    fn send(&mut self, name: &str, attrs: &[(&str, &str)]) {
        let bytes = match &self.wire {
            Wire::V1(_) => reply(name, attrs),
            Wire::V2 { thrid: None, .. } => reply2(name, attrs),
            Wire::V2 { thrid: Some(t), .. } => {
                let mut all = Vec::with_capacity(attrs.len() + 1);
                all.push(("thrid", t.as_str()));
                all.extend_from_slice(attrs);
                reply2(name, &all)
            }
        };
        self.out.push_back(PmiOutput::Send(bytes));
    }

    fn send_error(&mut self, name: &str, msg: &str) {
        if self.wire.v2() {
            // A PMI-2 client refuses a reply with a longer value.
            let mut end = msg.len().min(MAX_REPLY_VALUE);
            while !msg.is_char_boundary(end) {
                end -= 1;
            }
            self.send(name, &[("rc", "-1"), ("errmsg", &msg[..end])]);
        } else {
            self.send(name, &[("rc", "-1"), ("msg", msg)]);
        }
    }

    fn command(&mut self, now: Instant, cmd: &Command) {
        let answer = |name: &str| format!("{name}_result");
        if let Err(e) = self.dispatch(now, cmd) {
            let name = match cmd.name.as_str() {
                "init" => "response_to_init".into(),
                "get_maxes" => "maxes".into(),
                "get_appnum" => "appnum".into(),
                "get_universe_size" => "universe_size".into(),
                "get_my_kvsname" => "my_kvsname".into(),
                "barrier_in" => "barrier_out".into(),
                "spawn" => "spawn_result".into(),
                "finalize" => "finalize_ack".into(),
                "publish_name" => "publish_result".into(),
                "unpublish_name" => "unpublish_result".into(),
                "lookup_name" => "lookup_result".into(),
                other => answer(other),
            };
            self.send_error(&name, &e);
        }
    }

    /// Serves one command; an `Err` is the message of its error reply.
    fn dispatch(&mut self, now: Instant, cmd: &Command) -> Result<(), String> {
        let e = |e: PmiWireError| e.to_string();
        if self.finalized {
            return Err("the process already finalized".into());
        }
        match cmd.name.as_str() {
            "init" => {
                let (v, sub) = (
                    cmd.int_or("pmi_version", 1).map_err(e)?,
                    cmd.int_or("pmi_subversion", 1).map_err(e)?,
                );
                match v {
                    1 => self.send(
                        "response_to_init",
                        &[("rc", "0"), ("pmi_version", "1"), ("pmi_subversion", "1")],
                    ),
                    // PMIS-17: the reply is PMI-1's; everything after it is PMI-2's.
                    2 if !self.inited => {
                        self.send(
                            "response_to_init",
                            &[("rc", "0"), ("pmi_version", "2"), ("pmi_subversion", "0")],
                        );
                        let held = match &mut self.wire {
                            Wire::V1(f) => f.take_held(),
                            Wire::V2 { .. } => Vec::new(),
                        };
                        self.wire = Wire::V2 {
                            framer: Framer2::with_bytes(held),
                            ready: false,
                            thrid: None,
                        };
                    }
                    2 => return Err("the connection already speaks PMI-1".into()),
                    _ => {
                        return Err(format!(
                            "PMI version {v}.{sub} is not served here; 1.1 and 2.0 are"
                        ));
                    }
                }
                self.inited = true;
            }
            "get_maxes" => {
                let (k, key, val) = MAXES;
                let (k, key, val) = (k.to_string(), key.to_string(), val.to_string());
                self.send(
                    "maxes",
                    &[
                        ("rc", "0"),
                        ("kvsname_max", &k),
                        ("keylen_max", &key),
                        ("vallen_max", &val),
                    ],
                );
            }
            "get_appnum" => {
                let n = self.job.appnum.to_string();
                self.send("appnum", &[("rc", "0"), ("appnum", &n)]);
            }
            "get_universe_size" => {
                let n = self.job.universe.to_string();
                self.send("universe_size", &[("rc", "0"), ("size", &n)]);
            }
            "get_my_kvsname" => {
                let k = self.job.kvsname.clone();
                self.send("my_kvsname", &[("rc", "0"), ("kvsname", &k)]);
            }
            "put" => {
                self.own_kvs(cmd)?;
                self.put_kv(cmd.need("key").map_err(e)?, cmd.need("value").map_err(e)?)?;
                self.send("put_result", &[("rc", "0")]);
            }
            "get" => {
                self.own_kvs(cmd)?;
                match self.kv(cmd.need("key").map_err(e)?) {
                    Some(v) => self.send(
                        "get_result",
                        &[("rc", "0"), ("value", &v), ("found", "TRUE")],
                    ),
                    // Not an error of the connection: MPICH asks for optional keys.
                    None => self.send(
                        "get_result",
                        &[("rc", "1"), ("found", "FALSE"), ("msg", "key not found")],
                    ),
                }
            }
            "barrier_in" => self.barrier(now),
            "finalize" => {
                self.finalized = true;
                self.send("finalize_ack", &[("rc", "0")]);
            }
            "abort" => {
                // No reply: the process exits right after sending it.
                let code = cmd.int_or("exitcode", 1).map_err(e)?;
                let message = cmd.get("message").unwrap_or_default().into();
                self.abort(i32::try_from(code).unwrap_or(1), message);
            }
            // PMIS-8: names are the master's data server.
            "publish_name" => {
                let key = cmd.need("service").map_err(e)?.into();
                let value = cmd.need("port").map_err(e)?.into();
                self.call(now, ClientCall::Publish { key, value }, Waiting::Publish);
            }
            "unpublish_name" => {
                let key = cmd.need("service").map_err(e)?.into();
                self.call(now, ClientCall::Unpublish { key }, Waiting::Unpublish);
            }
            "lookup_name" => {
                let key = cmd.need("service").map_err(e)?.into();
                let call = ClientCall::Lookup { key, wait: None };
                self.call(now, call, Waiting::Lookup);
            }
            "spawn" => self.spawn(now, cmd)?,
            other => return Err(format!("unknown command `{other}`")),
        }
        Ok(())
    }

    /// Serves one PMI-2 command; an error is answered as `{name}-response` with
    /// `rc=-1` and changes nothing (PMIS-3).
    fn command2(&mut self, now: Instant, cmd: &Command) {
        if let Wire::V2 { thrid, .. } = &mut self.wire {
            *thrid = cmd.get("thrid").map(String::from);
        }
        if let Err(e) = self.dispatch2(now, cmd) {
            self.send_error(&format!("{}-response", cmd.name), &e);
        }
    }

    /// The PMI-2 commands (`spec/pmi.md` §3.1), on the same operations as PMI-1's.
    fn dispatch2(&mut self, now: Instant, cmd: &Command) -> Result<(), String> {
        let e = |e: PmiWireError| e.to_string();
        if self.finalized {
            return Err("the process already finalized".into());
        }
        let ready = matches!(self.wire, Wire::V2 { ready: true, .. });
        let name = cmd.name.as_str();
        if !ready && !matches!(name, "fullinit" | "abort") {
            // PMIS-18: nothing is served before the process said who it is.
            return Err(format!("`{name}` before `fullinit`"));
        }
        match name {
            "fullinit" => self.fullinit(cmd)?,
            "job-getid" => {
                let jobid = self.job.kvsname.clone();
                self.send("job-getid-response", &[("rc", "0"), ("jobid", &jobid)]);
            }
            "info-getjobattr" => {
                let value = match cmd.need("key").map_err(e)? {
                    "PMI_process_mapping" => self.job.mapping.clone(),
                    "universeSize" => Some(self.job.universe.to_string()),
                    _ => None,
                };
                self.send_found("info-getjobattr-response", value);
            }
            // Node attributes would be shared by the processes of a node, which no
            // session sees: none is stored, so none is found (PMIS-19).
            "info-getnodeattr" => {
                cmd.need("key").map_err(e)?;
                self.send_found("info-getnodeattr-response", None);
            }
            "info-putnodeattr" => {
                return Err("node attributes are not served here (PMIS-19)".into());
            }
            "kvs-put" => {
                self.put_kv(cmd.need("key").map_err(e)?, cmd.need("value").map_err(e)?)?;
                self.send("kvs-put-response", &[("rc", "0")]);
            }
            "kvs-fence" => self.barrier(now),
            "kvs-get" => {
                // PMIS-6: the process' own job only; an empty jobid is its own.
                match cmd.get("jobid") {
                    Some(j) if !j.is_empty() && j != self.job.kvsname => {
                        return Err(format!("no access to job `{j}`"));
                    }
                    _ => {}
                }
                let value = self.kv(cmd.need("key").map_err(e)?);
                self.send_found("kvs-get-response", value);
            }
            // PMIS-8: names are the master's data server.
            "name-publish" => {
                let key = cmd.need("name").map_err(e)?.into();
                let value = cmd.need("port").map_err(e)?.into();
                self.call(now, ClientCall::Publish { key, value }, Waiting::Publish);
            }
            "name-unpublish" => {
                let key = cmd.need("name").map_err(e)?.into();
                self.call(now, ClientCall::Unpublish { key }, Waiting::Unpublish);
            }
            "name-lookup" => {
                let key = cmd.need("name").map_err(e)?.into();
                let call = ClientCall::Lookup { key, wait: None };
                self.call(now, call, Waiting::Lookup);
            }
            "spawn" => self.spawn2(now, cmd)?,
            "abort" => {
                // No reply, and PMI-2's abort carries no exit code (`PMI2_Abort`
                // exits with its `isworld` flag): the job's code is 1.
                self.abort(1, cmd.get("msg").unwrap_or_default().into());
            }
            "finalize" => {
                self.finalized = true;
                self.send("finalize-response", &[("rc", "0")]);
            }
            // `job-connect`, `job-disconnect`: each job's kvs is its own (PMIS-6).
            other => return Err(format!("`{other}` is not served")),
        }
        Ok(())
    }

    /// A PMI-2 lookup's reply: `found=TRUE` and the value, or `found=FALSE` (not an
    /// error: MPI libraries ask for optional keys).
    fn send_found(&mut self, name: &str, value: Option<String>) {
        match value {
            Some(v) => self.send(name, &[("rc", "0"), ("found", "TRUE"), ("value", &v)]),
            None => self.send(name, &[("rc", "0"), ("found", "FALSE")]),
        }
    }

    /// `fullinit` (PMIS-18): the socket is its process' alone (PMIS-2), so a client
    /// that claims another rank, PMI id or job is refused.
    fn fullinit(&mut self, cmd: &Command) -> Result<(), String> {
        if matches!(self.wire, Wire::V2 { ready: true, .. }) {
            return Err("`fullinit` was already served".into());
        }
        let rank = i64::from(self.job.rank);
        for key in ["pmirank", "pmiid", "srcid"] {
            if let Some(v) = cmd.get(key) {
                if v.parse::<i64>() != Ok(rank) {
                    return Err(format!("{key} {v} is not this socket's process ({rank})"));
                }
            }
        }
        match cmd.get("pmijobid") {
            Some(j) if j != self.job.kvsname => return Err(format!("no access to job `{j}`")),
            _ => {}
        }
        if let Wire::V2 { ready, .. } = &mut self.wire {
            *ready = true;
        }
        let (rank, size, appnum) = (
            self.job.rank.to_string(),
            self.job.size.to_string(),
            self.job.appnum.to_string(),
        );
        let spawner = self.job.spawner.clone();
        let mut attrs = alloc::vec![
            ("rc", "0"),
            ("pmi-version", "2"),
            ("pmi-subversion", "0"),
            ("rank", rank.as_str()),
            ("size", size.as_str()),
            ("appnum", appnum.as_str()),
        ];
        if let Some(s) = &spawner {
            attrs.push(("spawner-jobid", s.as_str()));
        }
        attrs.extend([("debugged", "FALSE"), ("pmiverbose", "FALSE")]);
        self.send("fullinit-response", &attrs);
        Ok(())
    }

    /// PMI-2's `spawn` (PMIS-10): one message of `ncmds` commands, each `subcmd`,
    /// `maxprocs`, `argc` and `argvN` (`infokey`s ignored), and the pre-put keys
    /// `ppkeyN`/`ppvalN`: the same kernel `Spawn` as PMI-1's segments.
    fn spawn2(&mut self, now: Instant, cmd: &Command) -> Result<(), String> {
        let e = |e: PmiWireError| e.to_string();
        let count = |k: &'static str| -> Result<u32, String> {
            let v = cmd.int_or(k, -1).map_err(e)?;
            u32::try_from(v).map_err(|_| format!("`{k}` is missing or negative"))
        };
        let ncmds = count("ncmds")?;
        let mut preput = Vec::new();
        for i in 0..cmd.int_or("preputcount", 0).map_err(e)?.max(0) {
            let (k, v) = (cmd.get(&format!("ppkey{i}")), cmd.get(&format!("ppval{i}")));
            match (k, v) {
                (Some(k), Some(v))
                    if !k.is_empty() && !k.contains(['=', '\n']) && !v.contains('\n') =>
                {
                    preput.push((String::from(k), String::from(v)));
                }
                _ => {
                    return Err(format!(
                        "pre-put key {i} is missing or holds `=` or a newline"
                    ));
                }
            }
        }
        /// One command as its pairs come: program, maxprocs, argc, indexed args.
        struct Sub {
            program: String,
            count: Option<u32>,
            argc: Option<u32>,
            args: Vec<(u32, String)>,
        }
        let mut subs: Vec<Sub> = Vec::new();
        for (k, v) in &cmd.attrs {
            let v = v.as_deref().unwrap_or_default();
            let int = || {
                v.parse::<u32>()
                    .map_err(|_| format!("`{k}` is not a count"))
            };
            if k == "subcmd" {
                subs.push(Sub {
                    program: v.into(),
                    count: None,
                    argc: None,
                    args: Vec::new(),
                });
                continue;
            }
            let Some(sub) = subs.last_mut() else {
                continue;
            };
            match k.as_str() {
                "maxprocs" => sub.count = Some(int()?),
                "argc" => sub.argc = Some(int()?),
                _ => {
                    if let Some(i) = k.strip_prefix("argv").and_then(|i| i.parse().ok()) {
                        sub.args.push((i, v.into()));
                    }
                }
            }
        }
        if subs.len() != ncmds as usize || ncmds == 0 {
            return Err(format!("{} commands for `ncmds` {ncmds}", subs.len()));
        }
        let mut commands = Vec::with_capacity(subs.len());
        for sub in subs {
            let (Some(count), Some(argc)) = (sub.count, sub.argc) else {
                return Err(format!(
                    "`{}`: `maxprocs` or `argc` is missing",
                    sub.program
                ));
            };
            let mut args = sub.args;
            args.sort_by_key(|(i, _)| *i);
            if count == 0 || sub.program.is_empty() || !args.iter().map(|(i, _)| *i).eq(0..argc) {
                return Err(format!(
                    "`{}`: no processes, no program, or not `argv0..argv{argc}`",
                    sub.program
                ));
            }
            commands.push(SpawnCommand {
                program: sub.program,
                args: args.into_iter().map(|(_, a)| a).collect(),
                count,
            });
        }
        self.start_spawn(now, commands, &preput);
        Ok(())
    }

    /// `spawn` (PMIS-10): one segment per command; the last one makes the kernel's
    /// `Spawn` of all of them (all get slots or none starts, `SPAWN-17`).
    fn spawn(&mut self, now: Instant, cmd: &Command) -> Result<(), String> {
        let e = |e: PmiWireError| e.to_string();
        let count = |k: &'static str| -> Result<u32, String> {
            let v = cmd.int_or(k, -1).map_err(e)?;
            u32::try_from(v).map_err(|_| format!("`{k}` is missing or negative"))
        };
        let (total, so_far, nprocs) =
            (count("totspawns")?, count("spawnssofar")?, count("nprocs")?);
        if nprocs == 0
            || so_far == 0
            || so_far > total
            || so_far as usize != self.spawning.len() + 1
        {
            self.spawning.clear();
            self.spawn_preput.clear();
            return Err(format!(
                "spawn segment {so_far} of {total} with {nprocs} processes is out of order"
            ));
        }
        let argc = count("argcnt")?;
        let args = (1..=argc)
            .map(|i| {
                cmd.get(&format!("arg{i}"))
                    .map(String::from)
                    .ok_or_else(|| format!("`arg{i}` is missing"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let program = cmd.need("execname").map_err(e)?.to_string();
        if so_far == 1 {
            for i in 0..cmd.int_or("preput_num", 0).map_err(e)?.max(0) {
                let (k, v) = (
                    cmd.get(&format!("preput_key_{i}")),
                    cmd.get(&format!("preput_val_{i}")),
                );
                match (k, v) {
                    (Some(k), Some(v)) if !k.contains('=') => {
                        self.spawn_preput.push((k.into(), v.into()))
                    }
                    _ => return Err(format!("pre-put key {i} is missing or holds `=`")),
                }
            }
        }
        self.spawning.push(SpawnCommand {
            program,
            args,
            count: nprocs,
        });
        if so_far < total {
            // MPICH waits for one reply, after the last segment.
            return Ok(());
        }
        let commands = core::mem::take(&mut self.spawning);
        let preput = core::mem::take(&mut self.spawn_preput);
        self.start_spawn(now, commands, &preput);
        Ok(())
    }

    /// PMIS-10: one kernel `Spawn` of all the commands, the pre-put keys in the
    /// children's environment (the same for PMI-1's segments and PMI-2's message).
    fn start_spawn(
        &mut self,
        now: Instant,
        commands: Vec<SpawnCommand>,
        preput: &[(String, String)],
    ) {
        let env = alloc::vec![(PREPUT_ENV.into(), encode_preput(preput))];
        // MPICH connects to its children itself: only the job can notice one that dies
        // (SPAWN-24).
        let watch = SpawnWatch::Job;
        let call = ClientCall::Spawn {
            commands,
            env,
            watch,
        };
        self.call(now, call, Waiting::Spawn);
    }

    /// PMIS-5: a barrier (`barrier_in`, `kvs-fence`) is the modex; this process' puts
    /// since the last barrier travel in it.
    fn barrier(&mut self, now: Instant) {
        let mut data = String::with_capacity(self.put_bytes + 2 * self.puts.len());
        for (k, v) in self.puts.drain(..) {
            data.push_str(&k);
            data.push('=');
            data.push_str(&v);
            data.push('\n');
        }
        self.put_bytes = 0;
        let call = ClientCall::Modex {
            pset: self.job.group.clone(),
            data,
            timeout: self.job.barrier_timeout,
        };
        self.call(now, call, Waiting::Barrier);
        if self.bugs.has(Bug::PmiBarrierEarly) {
            // Planted: answered before the modex, and nothing waits for it.
            self.waiting = None;
            let name = self.wire.reply_name(Waiting::Barrier);
            self.send(name, &[("rc", "0")]);
        }
    }

    /// PMIS-7: the runtime ends the job.
    fn abort(&mut self, code: i32, message: String) {
        self.out.push_back(PmiOutput::Aborted { code, message });
    }

    /// A put (`put`, `kvs-put`) within the limits the process was told (PMIS-5). A key
    /// holds no `=` and neither a newline: the modex carries puts as `key=value` lines.
    fn put_kv(&mut self, key: &str, value: &str) -> Result<(), String> {
        let (_, keylen, vallen) = MAXES;
        if key.len() > keylen || value.len() > vallen {
            return Err(format!(
                "key or value too long (at most {keylen} and {vallen} bytes)"
            ));
        }
        if key.is_empty() || key.contains(['=', '\n']) || value.contains('\n') {
            return Err(
                "a key may not be empty or contain `=`, nor a key or value a newline".into(),
            );
        }
        if self.put_bytes + key.len() + value.len() > MAX_PUT_BYTES {
            return Err(format!(
                "more than {MAX_PUT_BYTES} bytes put before one barrier"
            ));
        }
        self.put_bytes += key.len() + value.len();
        self.puts.push((key.into(), value.into()));
        self.kvs.insert(key.into(), value.into());
        Ok(())
    }

    /// A get (`get`, `kvs-get`): what the barriers made visible, the spawner's pre-put
    /// keys, and `PMI_process_mapping` from the job.
    fn kv(&self, key: &str) -> Option<String> {
        match key {
            "PMI_process_mapping" => self.job.mapping.clone(),
            _ => self.kvs.get(key).cloned(),
        }
    }

    /// PMIS-6: a process reads and writes its own application's kvs only.
    fn own_kvs(&self, cmd: &Command) -> Result<(), String> {
        match cmd.get("kvsname") {
            Some(k) if k != self.job.kvsname => Err(format!("no access to kvs `{k}`")),
            _ => Ok(()),
        }
    }

    fn call(&mut self, now: Instant, call: ClientCall, waiting: Waiting) {
        let id = self.next_call;
        self.next_call += 1;
        self.waiting = Some((id, waiting));
        // Ids are fresh, so the client machine cannot refuse the call.
        let _ = self.client.handle(now, ClientInput::Call { id, call });
        self.drain_client();
    }

    fn drain_client(&mut self) {
        while let Some(o) = self.client.poll_output() {
            match o {
                ClientOutput::Request { req, request } => {
                    self.out.push_back(PmiOutput::Request { req, request });
                }
                ClientOutput::Done { id, result } => self.done(id, result),
            }
        }
    }

    fn done(&mut self, id: CallId, result: CallResult) {
        let Some((open, waiting)) = self.waiting else {
            return;
        };
        if open != id {
            return;
        }
        self.waiting = None;
        let fail = |e: &dyn core::fmt::Display| format!("{e}");
        let name = self.wire.reply_name(waiting);
        match (waiting, result) {
            (Waiting::Barrier, CallResult::Modex(Ok(data))) => {
                for (_, values) in &data.entries {
                    for line in values.split('\n') {
                        if let Some((k, v)) = line.split_once('=') {
                            self.kvs.insert(k.into(), v.into());
                        }
                    }
                }
                self.send(name, &[("rc", "0")]);
            }
            (Waiting::Spawn, CallResult::Spawned(Ok(spawned))) if self.wire.v2() => {
                // The children's job id is their kvs name (`{job}-{app}`), and every
                // child started: one `0` per child.
                let jobid = format!("{}-{}", self.job.pid.namespace.as_str(), spawned.app);
                let errcodes = alloc::vec!["0"; spawned.procs.len()].join(",");
                self.send(
                    name,
                    &[("rc", "0"), ("jobid", &jobid), ("errcodes", &errcodes)],
                );
            }
            (Waiting::Barrier, CallResult::Modex(Err(err)))
            // No slots (or a bad command): MPI_Comm_spawn returns an error.
            | (Waiting::Spawn, CallResult::Spawned(Err(err)))
            | (Waiting::Publish, CallResult::Published(Err(err)))
            | (Waiting::Unpublish, CallResult::Unpublished(Err(err)))
            | (Waiting::Lookup, CallResult::Lookup(Err(err))) => {
                self.send_error(name, &fail(&err));
            }
            (Waiting::Spawn, CallResult::Spawned(Ok(_)))
            | (Waiting::Publish, CallResult::Published(Ok(())))
            | (Waiting::Unpublish, CallResult::Unpublished(Ok(()))) => {
                self.send(name, &[("rc", "0")]);
            }
            (Waiting::Lookup, CallResult::Lookup(Ok(port))) => {
                let key = if self.wire.v2() { "value" } else { "port" };
                self.send(name, &[("rc", "0"), (key, &port)]);
            }
            // The client machine completes a call with its own kind of result.
            (_, other) => self.send_error("error", &format!("unexpected result {other:?}")),
        }
    }
}
