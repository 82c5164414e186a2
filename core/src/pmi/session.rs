//! The PMI-1 server for one process (`spec/pmi.md` §3): what its daemon runs for each
//! local rank of an MPI program, on the socket that rank inherited as `PMI_FD`.
//!
//! Nothing PMI decides is decided here: the barrier is the kernel's modex over the
//! process' application pset (`MODEX-1..6`, so a kvs fence across hosts is one message
//! per node each way), and publish/lookup/unpublish are the master's data server. The
//! session only translates: PMI commands in, [`ClientCall`]s to an [`rc::Client`] of the
//! process (the same machine a dynres-native process runs), their results back out as
//! PMI replies.
//!
//! PMI-1 is one request, one reply: the session reads the next command only once the
//! previous one is answered, so a client that sends ahead is served in order and never
//! has two calls open (PMIS-4).
//!
//! [`rc::Client`]: crate::rc::Client

use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::wire::{Command, Framer, MAXES, PmiWireError, reply};
use crate::bugs::{Bug, Bugs};
use crate::process::ProcessId;
use crate::pset::PsetName;
use crate::rc::{CallId, CallResult, Client, ClientCall, ClientInput, ClientOutput, ClientReply};
use crate::rc::{ClientRequest, ReqId, SpawnCommand, SpawnWatch};
use crate::time::{Duration, Instant};

/// The first request id of a session's client: far from the ids a dynres-native client
/// of the same process counts up from 0.
pub const FIRST_REQUEST: ReqId = 1 << 62;

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

/// See the module doc.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PmiSession {
    job: PmiJob,
    bugs: Bugs,
    framer: Framer,
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
            framer: Framer::new(),
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
            PmiInput::Received(bytes) => self.framer.push(&bytes),
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
            match self.framer.next_command() {
                None => return,
                Some(Ok(cmd)) => self.command(now, &cmd),
                Some(Err(e @ PmiWireError::TooLong(_))) => {
                    self.send_error("error", &e.to_string());
                    self.closed = true;
                    self.out.push_back(PmiOutput::Close(e));
                }
                // A malformed line is answered; the stream is still in step (PMIS-3).
                Some(Err(e)) => self.send_error("error", &e.to_string()),
            }
        }
    }

    fn send(&mut self, name: &str, attrs: &[(&str, &str)]) {
        self.out.push_back(PmiOutput::Send(reply(name, attrs)));
    }

    fn send_error(&mut self, name: &str, msg: &str) {
        self.send(name, &[("rc", "-1"), ("msg", msg)]);
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
                if v != 1 {
                    return Err(format!("PMI version {v}.{sub} is not served here; 1.1 is"));
                }
                self.send(
                    "response_to_init",
                    &[("rc", "0"), ("pmi_version", "1"), ("pmi_subversion", "1")],
                );
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
            "put" => self.put(cmd)?,
            "get" => self.get(cmd)?,
            "barrier_in" => {
                // PMIS-5: this process' puts since the last barrier travel in the modex.
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
                    self.send("barrier_out", &[("rc", "0")]);
                }
            }
            "finalize" => {
                self.finalized = true;
                self.send("finalize_ack", &[("rc", "0")]);
            }
            "abort" => {
                // No reply: the process exits right after sending it.
                let code = cmd.int_or("exitcode", 1).map_err(e)?;
                let message = cmd.get("message").unwrap_or_default().into();
                self.out.push_back(PmiOutput::Aborted {
                    code: i32::try_from(code).unwrap_or(1),
                    message,
                });
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
        let env = alloc::vec![(
            PREPUT_ENV.into(),
            encode_preput(&core::mem::take(&mut self.spawn_preput))
        )];
        // MPICH connects to its children itself: only the job can notice one that dies
        // (SPAWN-24).
        let watch = SpawnWatch::Job;
        let call = ClientCall::Spawn {
            commands,
            env,
            watch,
        };
        self.call(now, call, Waiting::Spawn);
        Ok(())
    }

    /// `put`: only into the process' own kvs (PMIS-6), within the limits it was told.
    fn put(&mut self, cmd: &Command) -> Result<(), String> {
        let e = |e: PmiWireError| e.to_string();
        self.own_kvs(cmd)?;
        let key = cmd.need("key").map_err(e)?;
        let value = cmd.need("value").map_err(e)?;
        let (_, keylen, vallen) = MAXES;
        if key.len() > keylen || value.len() > vallen {
            return Err(format!(
                "key or value too long (at most {keylen} and {vallen} bytes)"
            ));
        }
        if key.contains('=') {
            return Err("a key may not contain `=`".into());
        }
        if self.put_bytes + key.len() + value.len() > MAX_PUT_BYTES {
            return Err(format!(
                "more than {MAX_PUT_BYTES} bytes put before one barrier"
            ));
        }
        self.put_bytes += key.len() + value.len();
        self.puts.push((key.into(), value.into()));
        self.kvs.insert(key.into(), value.into());
        self.send("put_result", &[("rc", "0")]);
        Ok(())
    }

    fn get(&mut self, cmd: &Command) -> Result<(), String> {
        self.own_kvs(cmd)?;
        let key = cmd.need("key").map_err(|e| e.to_string())?;
        let found = match key {
            "PMI_process_mapping" => self.job.mapping.clone(),
            _ => self.kvs.get(key).cloned(),
        };
        match found {
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
        Ok(())
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
        match (waiting, result) {
            (Waiting::Barrier, CallResult::Modex(Ok(data))) => {
                for (_, values) in &data.entries {
                    for line in values.split('\n') {
                        if let Some((k, v)) = line.split_once('=') {
                            self.kvs.insert(k.into(), v.into());
                        }
                    }
                }
                self.send("barrier_out", &[("rc", "0")]);
            }
            (Waiting::Barrier, CallResult::Modex(Err(err))) => {
                self.send_error("barrier_out", &fail(&err));
            }
            (Waiting::Spawn, CallResult::Spawned(r)) => match r {
                Ok(_) => self.send("spawn_result", &[("rc", "0")]),
                // No slots (or a bad command): MPI_Comm_spawn returns an error.
                Err(err) => self.send_error("spawn_result", &fail(&err)),
            },
            (Waiting::Publish, CallResult::Published(r)) => match r {
                Ok(()) => self.send("publish_result", &[("rc", "0")]),
                Err(err) => self.send_error("publish_result", &fail(&err)),
            },
            (Waiting::Unpublish, CallResult::Unpublished(r)) => match r {
                Ok(()) => self.send("unpublish_result", &[("rc", "0")]),
                Err(err) => self.send_error("unpublish_result", &fail(&err)),
            },
            (Waiting::Lookup, CallResult::Lookup(r)) => match r {
                Ok(port) => self.send("lookup_result", &[("rc", "0"), ("port", &port)]),
                Err(err) => self.send_error("lookup_result", &fail(&err)),
            },
            // The client machine completes a call with its own kind of result.
            (_, other) => self.send_error("error", &format!("unexpected result {other:?}")),
        }
    }
}
