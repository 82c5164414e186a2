//! The master's side of the other hosts (`spec/runtime.md`): starting their daemons
//! through the launch agent (RT-2), accepting and authenticating them (AUTH-1..8, with
//! `acceptor.rs`), relaying frames to them without blocking (LINK-2, LINK-6),
//! heartbeats and the failure detector (HB-1..3, NODE-1). Nothing here decides: whether
//! a node is lost, when it is owed a heartbeat and whether its link's end is news is
//! core's [`Liveness`] machine's to say, which this driver feeds with what happened on
//! the links and the time; a node found dead is reported to the engine, which tells
//! core (`NodeLost`, RC-17).

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dynres_core::rc::liveness::{
    Liveness, LivenessConfig, LivenessInput, LivenessOutput, Loss, NodeLink,
};
use dynres_core::rc::wire::link::{LinkMsg, NodeSetup, encode_link};
use dynres_core::time::{Duration as KDuration, Instant as KInstant};

use super::acceptor::Acceptor;
use super::conns::Conn;
use super::engine::Event;
use super::link;
use crate::hosts::Host;
use dynres_client::framing::FrameReader;

/// The node of a master that serves none of the job's hosts (RT-1): every host then
/// has a daemon.
pub const NO_NODE: u32 = u32::MAX;

/// How often launch agents are polled for their exit (HB-3): not after every event
/// (no `waitpid` per agent per client request).
const CHECK_EVERY: KDuration = KDuration::from_millis(10);

/// How long a daemon has to connect and authenticate after its launch (HB-3), as the
/// daemon's retries bound it.
pub const CONNECT_BOUND: Duration =
    Duration::from_nanos(dynres_core::rc::liveness::CONNECT_BOUND.as_nanos());

/// The kernel's clock for a driver: nanoseconds since `origin` (`dynres_core::time`).
pub(crate) fn kernel_now(origin: Instant) -> KInstant {
    KInstant(u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

/// A std span as the kernel's.
pub(crate) fn kernel_span(d: Duration) -> KDuration {
    KDuration(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The launch template every daemon gets in its `Setup` (LINK-2), minus the node.
#[derive(Clone, Debug)]
pub struct Template {
    /// The job id.
    pub job: String,
    /// The job's namespace.
    pub namespace: String,
    /// The application's name.
    pub app: String,
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// The calibrated shm spin budget.
    pub shm_spins: u32,
    /// The heartbeat interval (HB-1).
    pub heartbeat: Duration,
    /// RT-5: the directory processes start in, and whether it is required.
    pub cwd: String,
    /// See `cwd`.
    pub cwd_required: bool,
    /// RT-5: the environment sent to the other hosts' processes.
    pub env: Vec<(String, String)>,
    /// `--bind-to core`.
    pub bind_core: bool,
    /// How the node's processes' output is shown or stored.
    pub output: crate::output::OutputStyle,
    /// PMIx for an Open MPI program: every node serves this namespace (PMIS-13).
    pub pmix: Option<dynres_core::rc::wire::link::PmixSetup>,
}

/// How daemons are started: `AGENT… HOST DYNRES daemon --master ADDR --node N`.
#[derive(Clone, Debug)]
pub struct Agent {
    /// The agent command and its arguments (`ssh -o BatchMode=yes`, `srun …`).
    pub command: Vec<String>,
    /// The `dynres` executable as the other hosts find it.
    pub exe: PathBuf,
}

/// A node's link as I/O sees it; where it stands for the job is [`Liveness`]'s.
enum State {
    /// The agent runs; the daemon has not authenticated yet. Frames wait in order.
    Starting { queued: Vec<u8> },
    /// Authenticated and set up.
    Up { conn: Conn },
    /// Lost, shut down or given back: frames for it are dropped.
    Gone,
}

struct Remote {
    agent: Option<Child>,
    state: State,
    reader: Option<JoinHandle<()>>,
}

/// The other hosts of a job, as the master sees them.
pub struct Nodes {
    hosts: Vec<Host>,
    /// The master's own node ([`NO_NODE`] when it serves none).
    own: u32,
    key: Arc<Vec<u8>>,
    master_addr: String,
    agent: Agent,
    template: Template,
    remote: BTreeMap<u32, Remote>,
    events: Sender<Event>,
    acceptor: Option<Acceptor>,
    /// The Slurm job whose emptied nodes are given back (RC-20), if any.
    slurm_job: Option<String>,
    /// Nodes of second allocations (GROW-1): node → its Slurm job.
    grown: BTreeMap<u32, String>,
    /// Launch agents of nodes that do not use the job's (a second allocation's steps).
    agents: BTreeMap<u32, Vec<String>>,
    /// Where `scontrol` runs: it writes `slurm_job_<id>_resize.{sh,csh}` into its
    /// working directory, which must be the job's, not the user's.
    slurm_dir: PathBuf,
    /// What was given back to it (shared with the threads that run `scontrol`).
    slurm: Arc<std::sync::Mutex<SlurmReturns>>,
    /// The failure detector and link lifecycle (HB-1..3, NODE-1, RC-20).
    liveness: Liveness,
    /// The origin of the kernel clock the detector is fed.
    origin: Instant,
    /// When [`Nodes::tick`] last polled the agents.
    checked: KInstant,
}

/// Nodes given back to Slurm and the node list last applied to the allocation.
#[derive(Default)]
struct SlurmReturns {
    returned: std::collections::BTreeSet<String>,
    applied: Option<String>,
}

impl Nodes {
    /// Listens for daemons on `listener` and prepares to start them; they connect to
    /// `master_addr`. `key` is the job's daemon key (AUTH-1): a secret's text
    /// (`auth::new_secret`), used as HMAC key bytes and handed to daemons as one line.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        hosts: Vec<Host>,
        own: u32,
        key: Vec<u8>,
        listener: TcpListener,
        master_addr: String,
        agent: Agent,
        template: Template,
        events: Sender<Event>,
    ) -> std::io::Result<Nodes> {
        let key = Arc::new(key);
        let up = events.clone();
        let acceptor = Acceptor::start(
            listener,
            key.clone(),
            Default::default(),
            move |node, stream| {
                let _ = up.send(Event::NodeUp { node, stream });
            },
        )?;
        let liveness = Liveness::new(LivenessConfig::new(kernel_span(template.heartbeat)));
        Ok(Nodes {
            hosts,
            own,
            key,
            master_addr,
            agent,
            template,
            remote: BTreeMap::new(),
            events,
            acceptor: Some(acceptor),
            slurm_job: None,
            grown: BTreeMap::new(),
            agents: BTreeMap::new(),
            slurm_dir: std::env::temp_dir(),
            slurm: Arc::default(),
            liveness,
            origin: Instant::now(),
            checked: KInstant::ZERO,
        })
    }

    fn now(&self) -> KInstant {
        kernel_now(self.origin)
    }

    /// Gives the detector `input` and carries out what it decides: heartbeats are
    /// written (a write that fails ends the link, which the detector hears too); the
    /// nodes it declares lost are returned with why, `detail` for a loss the driver
    /// saw (a link's or an agent's end).
    fn decide(&mut self, input: LivenessInput, detail: Option<String>) -> Vec<(u32, String)> {
        let now = self.now();
        let mut lost = Vec::new();
        let mut next = vec![(input, detail)];
        while let Some((input, detail)) = next.pop() {
            if let Err(e) = self.liveness.handle(now, input) {
                tracing::debug!(error = %e, "the failure detector refused {input:?}");
            }
            while let Some(out) = self.liveness.poll_output() {
                match out {
                    LivenessOutput::Heartbeat { node } => {
                        let Some(Remote {
                            state: State::Up { conn },
                            ..
                        }) = self.remote.get_mut(&node)
                        else {
                            continue;
                        };
                        if let Err(e) = conn.send(&encode_link(&LinkMsg::Heartbeat)) {
                            next.push((
                                LivenessInput::LinkEnded { node },
                                Some(format!("link: {e}")),
                            ));
                        }
                    }
                    LivenessOutput::Lost { node, loss } => {
                        lost.push((node, describe(loss, detail.clone())));
                    }
                }
            }
        }
        lost
    }

    /// `node`'s link ended (closed, failed, undecodable: LINK-1, LINK-6) for `why`:
    /// the loss, if the detector says it is one (not for a node given back, RC-20).
    pub fn link_ended(&mut self, node: u32, why: String) -> Option<(u32, String)> {
        self.decide(LivenessInput::LinkEnded { node }, Some(why))
            .into_iter()
            .next()
    }

    /// The host name of `node`.
    pub fn host(&self, node: u32) -> &str {
        self.hosts
            .get(node as usize)
            .map_or("?", |h| h.name.as_str())
    }

    /// Gives nodes emptied by a shrink back to Slurm job `job` (RC-20).
    pub fn give_back_to_slurm(&mut self, job: String) {
        self.slurm_job = Some(job);
    }

    /// Runs Slurm's commands in `dir` (the job's directory).
    pub fn slurm_in(&mut self, dir: PathBuf) {
        self.slurm_dir = dir;
    }

    /// Whether emptied nodes are given back: to the job's allocation (RC-20) or, for
    /// a second allocation's node, to that allocation (GROW-2).
    pub fn gives_back(&self, node: u32) -> bool {
        self.slurm_job.is_some() || self.grown.contains_key(&node)
    }

    /// Adds the nodes of a second allocation (GROW-1, NODE-3): each gets the next node
    /// index (core's, `SLOT-6`) and a daemon started as a job step of that allocation,
    /// authenticated and watched like every other (their loss is a node loss).
    /// Returns their indices.
    pub fn add_grant(&mut self, grant: &super::slurm::Grant) -> Vec<u32> {
        let agent = super::slurm::agent_for(&grant.job);
        let mut added = Vec::with_capacity(grant.hosts.len());
        for host in &grant.hosts {
            let node = self.hosts.len() as u32;
            self.hosts.push(host.clone());
            self.grown.insert(node, grant.job.clone());
            self.agents.insert(node, agent.clone());
            added.push(node);
        }
        added
    }

    /// Gives `batch` back to Slurm (RC-20; core accepted each, GROW-4: the nodes a
    /// change emptied come together): their daemons end, then, on a thread of its own,
    /// one `scontrol update` shrinks the job's allocation to the nodes not given back,
    /// and each second allocation of the batch is shrunk to its nodes still used or
    /// cancelled (GROW-2). Slurm without an accounting database resizes a job once
    /// only, so nodes emptied by one change must go in one update. The engine never
    /// waits for Slurm: nothing here takes a lock the engine holds.
    pub fn return_to_slurm(&mut self, batch: &[u32]) {
        let mut own = Vec::new();
        let mut grants: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for &node in batch {
            match self.grown.get(&node) {
                Some(job) => grants.entry(job.clone()).or_default().push(node),
                None if self.slurm_job.is_some() => own.push(node),
                None => {}
            }
        }
        for (job, nodes) in grants {
            self.return_to_grant(&nodes, job);
        }
        let Some(job) = self.slurm_job.clone() else {
            return;
        };
        if own.is_empty() {
            return;
        }
        let hosts: Vec<String> = own.iter().map(|n| self.host(*n).to_string()).collect();
        let all = own_allocation(&self.hosts, &self.grown);
        let slurm = self.slurm.clone();
        let cwd = self.slurm_dir.clone();
        self.give_back(&own, move || {
            // Updates run one at a time, each with every node given back so far: a
            // node Slurm kept once is offered again with the next.
            let Ok(mut s) = slurm.lock() else {
                return;
            };
            s.returned.extend(hosts.iter().cloned());
            let keep: Vec<&str> = all
                .iter()
                .filter(|h| !s.returned.contains(*h))
                .map(String::as_str)
                .collect();
            let list = keep.join(",");
            let given = hosts.join(",");
            if s.applied.as_deref() == Some(list.as_str()) {
                tracing::info!(hosts = given, "node given back to Slurm job {job}");
                return;
            }
            let kept = format!(
                "the node stays in Slurm job {job} until the job ends (offered again with \
                 the next node given back)"
            );
            if shrink_logged(&job, &list, &cwd, &given, &kept) {
                s.applied = Some(list);
            }
        });
    }

    /// Gives back `nodes` of second allocation `job` (GROW-2): their daemons end, and
    /// the allocation is cancelled once none of its nodes is used any more (or shrunk
    /// to the nodes still used).
    fn return_to_grant(&mut self, nodes: &[u32], job: String) {
        let keep: Vec<String> = self
            .grown
            .iter()
            .filter(|(n, j)| **j == job && !nodes.contains(n) && self.is_live(**n))
            .map(|(n, _)| self.host(*n).to_string())
            .collect();
        let given: Vec<&str> = nodes.iter().map(|n| self.host(*n)).collect();
        let given = given.join(",");
        let cwd = self.slurm_dir.clone();
        self.give_back(nodes, move || {
            if keep.is_empty() {
                super::slurm::release(&job);
                return;
            }
            let kept = format!("Slurm job {job} is cancelled when the job ends");
            shrink_logged(&job, &keep.join(","), &cwd, &given, &kept);
        });
    }

    /// The nodes other than the master's own.
    pub fn others(&self) -> Vec<u32> {
        (0..self.hosts.len() as u32)
            .filter(|n| *n != self.own)
            .collect()
    }

    /// The state of `node`'s daemon, for `dynres status`.
    pub fn daemon_state(&self, node: u32) -> &'static str {
        if node == self.own {
            return "in-process";
        }
        self.liveness
            .link(node)
            .as_ref()
            .map_or("not started", NodeLink::name)
    }

    /// Starts `node`'s daemon through the launch agent (RT-2), once.
    pub fn start(&mut self, node: u32) -> Result<(), String> {
        if self.remote.contains_key(&node) {
            return Ok(());
        }
        let host = self.host(node).to_string();
        let agent = self
            .agents
            .get(&node)
            .unwrap_or(&self.agent.command)
            .clone();
        let mut cmd = Command::new(&agent[0]);
        cmd.args(&agent[1..])
            .arg(&host)
            .arg(&self.agent.exe)
            .args(["daemon", "--master", &self.master_addr, "--node"])
            .arg(node.to_string())
            .stdin(Stdio::piped());
        tracing::info!(node, host, agent = %agent.join(" "), "starting a daemon");
        // Before the daemon exists, so the acceptor knows its node when it connects.
        self.awaiting(node, true);
        let started = crate::procs::spawn_locked(&mut cmd).map(|mut child| {
            // AUTH-1: the key goes over the agent's stdin, never on a command line. An
            // agent that does not take it has exited or will not start the daemon:
            // `tick` reports it (HB-3).
            if let Some(mut stdin) = child.stdin.take() {
                // The key is the job's secret text (`auth::new_secret`, hex): one line.
                if let Err(e) = stdin
                    .write_all(&self.key)
                    .and_then(|()| stdin.write_all(b"\n"))
                {
                    tracing::debug!(node, error = %e, "the launch agent did not take the key");
                }
            }
            child
        });
        let (agent, state) = match started {
            Ok(child) => {
                self.decide(LivenessInput::Launched { node }, None);
                (Some(child), State::Starting { queued: Vec::new() })
            }
            Err(e) => {
                self.awaiting(node, false);
                let why = format!(
                    "cannot start the launch agent `{}` for {host}: {e}",
                    agent[0]
                );
                self.remote.insert(
                    node,
                    Remote {
                        agent: None,
                        state: State::Gone,
                        reader: None,
                    },
                );
                let lost = self.decide(LivenessInput::LaunchFailed { node }, Some(why.clone()));
                return Err(lost.into_iter().next().map_or(why, |(_, why)| why));
            }
        };
        self.remote.insert(
            node,
            Remote {
                agent,
                state,
                reader: None,
            },
        );
        Ok(())
    }

    /// Tells the acceptor whether `node` takes a daemon (AUTH-5): one that is not
    /// awaited is refused before its verdict byte.
    fn awaiting(&self, node: u32, yes: bool) {
        match &self.acceptor {
            Some(a) if yes => a.expect(node),
            Some(a) => a.forget(node),
            None => {}
        }
    }

    /// Sends a frame to `node`'s daemon, or queues it until the daemon is up (RT-2).
    /// An error means the node must be declared lost (LINK-6).
    pub fn send(&mut self, node: u32, frame: &[u8]) -> Result<(), String> {
        let failed = match self.remote.get_mut(&node).map(|r| &mut r.state) {
            None => Some(format!("no daemon was started for node {node}")),
            Some(State::Starting { queued }) => {
                queued.extend_from_slice(frame);
                None
            }
            Some(State::Up { conn }) => conn.send(frame).err().map(|e| format!("link: {e}")),
            Some(State::Gone) => None,
        };
        match failed {
            None => {
                let now = self.now();
                // Refusals are for authentication only; a write is always taken.
                let _ = self.liveness.handle(now, LivenessInput::Sent { node });
                Ok(())
            }
            Some(why) => match self.link_ended(node, why) {
                Some((_, why)) => Err(why),
                None => Ok(()),
            },
        }
    }

    /// Whether `node`'s link still counts: a link that ends later is a lost node.
    pub fn is_live(&self, node: u32) -> bool {
        self.liveness.is_live(node)
    }

    /// Ends the daemons of `nodes` because the nodes were given back (RC-20; their
    /// processes are gone already): `Shutdown`, and their end is not a loss. Then runs
    /// `then` (the resource manager's side) on a thread of its own once their agents
    /// exited (bounded), so the engine never waits for it.
    pub fn give_back(&mut self, nodes: &[u32], then: impl FnOnce() + Send + 'static) {
        let mut agents = Vec::new();
        for node in nodes {
            self.awaiting(*node, false);
            let Some(r) = self.remote.get_mut(node) else {
                continue;
            };
            if let State::Up { conn, .. } = &mut r.state {
                let _ = conn.send(&encode_link(&LinkMsg::Shutdown));
                let _ = conn.flush();
            }
            r.state = State::Gone;
            agents.extend(r.agent.take());
            self.decide(LivenessInput::Returned { node: *node }, None);
        }
        let name = format!(
            "dynres-return-{}",
            nodes.first().copied().unwrap_or(NO_NODE)
        );
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(10);
            for mut a in agents {
                while matches!(a.try_wait(), Ok(None)) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if matches!(a.try_wait(), Ok(None)) {
                    let _ = a.kill();
                    let _ = a.wait();
                }
            }
            then();
        });
        if let Err(e) = spawned {
            tracing::error!(?nodes, error = %e, "no thread to give the nodes back");
        }
    }

    /// A daemon authenticated as `node`: accepted only if its daemon was started and has
    /// not connected yet (AUTH-5). Sends `Setup` and what was queued (LINK-2).
    pub fn on_auth(&mut self, node: u32, stream: TcpStream) -> Result<(), String> {
        let peer = stream
            .peer_addr()
            .map_or_else(|_| "?".into(), |a| a.to_string());
        // AUTH-5: only a node that awaits its daemon takes one.
        let now = self.now();
        if let Err(e) = self
            .liveness
            .handle(now, LivenessInput::Authenticated { node })
        {
            let _ = stream.shutdown(std::net::Shutdown::Both);
            tracing::warn!(node, %peer, "refused a daemon: {e}");
            return Ok(());
        }
        let Some(Remote {
            state: State::Starting { queued },
            ..
        }) = self.remote.get_mut(&node)
        else {
            // The detector awaits a daemon only while its agent runs: not reached.
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return Ok(());
        };
        let queued = std::mem::take(queued);
        let reader_stream = stream
            .try_clone()
            .map_err(|e| format!("cannot clone the link: {e}"))?;
        let _ = stream.set_nodelay(true);
        let mut conn = Conn::new(node, stream);
        let setup = encode_link(&LinkMsg::Setup(Box::new(NodeSetup {
            node,
            job: self.template.job.clone(),
            namespace: self.template.namespace.clone(),
            app: self.template.app.clone(),
            program: self.template.program.clone(),
            args: self.template.args.clone(),
            node_addr: self.hosts[node as usize].name.clone(),
            shm_spins: self.template.shm_spins,
            heartbeat_ms: u32::try_from(self.template.heartbeat.as_millis()).unwrap_or(u32::MAX),
            cwd: self.template.cwd.clone(),
            cwd_required: self.template.cwd_required,
            env: self.template.env.clone(),
            bind_core: self.template.bind_core,
            tag_output: self.template.output.tag,
            timestamp_output: self.template.output.timestamp,
            output_dir: self
                .template
                .output
                .dir
                .as_ref()
                .map_or_else(String::new, |d| d.display().to_string()),
            pmix: self.template.pmix.clone(),
        })));
        let wrote = conn
            .send(&setup)
            .and_then(|()| conn.send(&queued))
            .map_err(|e| format!("link: {e}"))
            .and_then(|()| {
                link::reader(reader_stream, FrameReader::new(), node, self.events.clone())
                    .map_err(|e| format!("no thread to read the link: {e}"))
            });
        let reader = match wrote {
            Ok(reader) => reader,
            Err(why) => {
                // The detector hears of it too: the node was up for it already.
                let _ = self.link_ended(node, why.clone());
                return Err(why);
            }
        };
        if let Some(r) = self.remote.get_mut(&node) {
            r.reader = Some(reader);
            r.state = State::Up { conn };
        }
        tracing::info!(node, %peer, host = %self.hosts[node as usize].name, "daemon up");
        Ok(())
    }

    /// Something arrived from `node` (HB-1: any frame is a sign of life).
    pub fn heard(&mut self, node: u32) {
        let now = self.now();
        // Refusals are for authentication only; a frame is always taken.
        let _ = self.liveness.handle(now, LivenessInput::Heard { node });
    }

    /// Heartbeats, pending writes and the failure detector: returns the nodes found
    /// dead, with why (HB-2, HB-3, LINK-6). The detector decides; this polls the
    /// agents and the writes and wakes it when it asked to be.
    pub fn tick(&mut self) -> Vec<(u32, String)> {
        let mut ended = Vec::new();
        for (&node, r) in &mut self.remote {
            if let State::Up { conn } = &mut r.state {
                if let Err(e) = conn.flush() {
                    ended.push((LivenessInput::LinkEnded { node }, format!("link: {e}")));
                }
            }
        }
        let now = self.now();
        if now - self.checked >= CHECK_EVERY {
            self.checked = now;
            for (&node, r) in &mut self.remote {
                if let Some(agent) = &mut r.agent {
                    if let Ok(Some(st)) = agent.try_wait() {
                        r.agent = None;
                        ended.push((
                            LivenessInput::AgentExited { node },
                            format!("its launch agent exited ({st}) before the daemon connected"),
                        ));
                    }
                }
            }
        }
        let mut dead = Vec::new();
        for (input, why) in ended {
            dead.extend(self.decide(input, Some(why)));
        }
        if self.liveness.poll_timeout().is_some_and(|t| t <= now) {
            dead.extend(self.decide(LivenessInput::Timeout, None));
        }
        dead
    }

    /// The links whose writes wait for their daemon to read, by node: the I/O loop
    /// says when they take bytes again.
    pub fn blocked(&self) -> Vec<(u32, std::os::fd::BorrowedFd<'_>)> {
        self.remote
            .iter()
            .filter_map(|(node, r)| match &r.state {
                State::Up { conn, .. } if conn.has_pending() => Some((*node, conn.fd())),
                _ => None,
            })
            .collect()
    }

    /// Forgets `node`'s link: it is lost or done. Its agent is left to exit (a daemon
    /// whose link closed ends by itself, RT-3); [`Nodes::finish`] bounds the wait.
    pub fn drop_node(&mut self, node: u32) {
        self.awaiting(node, false);
        if let Some(r) = self.remote.get_mut(&node) {
            if let State::Up { conn, .. } = &r.state {
                conn.close();
            }
            r.state = State::Gone;
        }
        self.decide(LivenessInput::Dropped { node }, None);
    }

    /// Tells every connected daemon the job is over (LINK-5) and stops daemons that
    /// have not connected; returns those (their processes never started).
    pub fn shutdown(&mut self) -> Vec<u32> {
        let bye = encode_link(&LinkMsg::Shutdown);
        let mut never = Vec::new();
        for (&node, r) in &mut self.remote {
            match &mut r.state {
                State::Up { conn, .. } => {
                    let _ = conn.send(&bye);
                    let _ = conn.flush();
                }
                State::Starting { .. } => {
                    if let Some(a) = &self.acceptor {
                        a.forget(node);
                    }
                    if let Some(a) = &mut r.agent {
                        let _ = a.kill();
                    }
                    r.state = State::Gone;
                    never.push(node);
                }
                State::Gone => {}
            }
        }
        for &node in &never {
            self.decide(LivenessInput::Dropped { node }, None);
        }
        never
    }

    /// After [`Nodes::shutdown`]: waits (at most `bound`) for the daemons to exit,
    /// kills the agents left, and stops accepting.
    pub fn finish(mut self, bound: Duration) {
        let deadline = Instant::now() + bound;
        for r in self.remote.values_mut() {
            while let Some(a) = &mut r.agent {
                if let State::Up { conn, .. } = &mut r.state {
                    let _ = conn.flush();
                }
                match a.try_wait() {
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Ok(None) => {
                        tracing::warn!("a daemon did not exit in time; killing its agent");
                        let _ = a.kill();
                        let _ = a.wait();
                        r.agent = None;
                    }
                    Ok(Some(_)) | Err(_) => r.agent = None,
                }
            }
            if let State::Up { conn, .. } = &r.state {
                conn.close();
            }
            if let Some(t) = r.reader.take() {
                let _ = t.join();
            }
        }
        if let Some(a) = self.acceptor.take() {
            a.stop();
        }
        // GROW-3: second allocations end with the job (those whose nodes were all given
        // back were cancelled then), requests still waiting included.
        super::slurm::cancel_pending();
        let open: std::collections::BTreeSet<&String> = self
            .grown
            .iter()
            .filter(|(n, _)| self.liveness.link(**n) != Some(NodeLink::Returned))
            .map(|(_, j)| j)
            .collect();
        for job in open {
            super::slurm::release(job);
        }
    }
}

/// Why a node was lost, in words for the job's one line (NODE-2); `detail` is what
/// the driver saw, for the losses it reported.
fn describe(loss: Loss, detail: Option<String>) -> String {
    match (loss, detail) {
        (Loss::NeverConnected(bound), _) => format!(
            "its daemon did not connect within {} s",
            bound.as_nanos() / 1_000_000_000
        ),
        (Loss::Silent(d), _) => {
            format!("its daemon was silent for {} ms", d.as_nanos() / 1_000_000)
        }
        (_, Some(why)) => why,
        (Loss::LaunchFailed, None) => "its launch agent could not be started".into(),
        (Loss::AgentExited, None) => "its launch agent exited before the daemon connected".into(),
        (Loss::LinkEnded, None) => "its link ended".into(),
    }
}

/// Shrinks Slurm job `job` to `list` and logs the outcome for the hosts `given`: one
/// info line, or one warning with Slurm's answer and what follows (`kept`). Whether
/// Slurm did it.
fn shrink_logged(job: &str, list: &str, cwd: &std::path::Path, given: &str, kept: &str) -> bool {
    match super::slurm::shrink_to(job, list, cwd) {
        Ok(()) => {
            tracing::info!(hosts = given, "node given back to Slurm job {job}");
            true
        }
        Err(why) => {
            tracing::warn!(hosts = given, "{why}; {kept}");
            false
        }
    }
}

/// The hosts of the job's own Slurm allocation: every host but those of second
/// allocations (GROW-1), which an update of the job's allocation must not name (Slurm
/// refuses a node list that is not a subset of the job's).
fn own_allocation(hosts: &[Host], grown: &BTreeMap<u32, String>) -> Vec<String> {
    hosts
        .iter()
        .enumerate()
        .filter(|(n, _)| !grown.contains_key(&(*n as u32)))
        .map(|(_, h)| h.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_allocation_leaves_out_second_allocations() {
        let host = |name: &str| Host {
            name: name.into(),
            slots: 2,
        };
        let hosts = [host("n1"), host("n2"), host("n3"), host("n4")];
        let grown = BTreeMap::from([(2, "7".to_string()), (3, "8".to_string())]);
        assert_eq!(own_allocation(&hosts, &grown), ["n1", "n2"]);
        assert_eq!(
            own_allocation(&hosts, &BTreeMap::new()),
            ["n1", "n2", "n3", "n4"]
        );
    }
}
