//! Runs `dynres-core`'s own resource-change state machines as stateright actors.
//!
//! The master, every daemon and every process' client are the shipped `Master`,
//! `Daemon` and `Client`: an actor's `on_msg`/`on_timeout` feeds the machine with
//! `handle` and turns what `poll_output` returns into stateright sends. Nothing about the
//! protocol is decided here. What *is* written here is the environment: the application's
//! Lst. 6.7 loop run by a root process, new processes that query and confirm, removed
//! processes that exit when told, the operating system's kill, and a scheduler that asks
//! for changes. Time: the master's deadlines become one nondeterministic timer, fired at
//! any point, which advances the master's clock to its next deadline.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hash, Hasher};

use dynres_core::bugs::Bugs;
use dynres_core::pset::{AttrUpdate, PsetName, PsetOp, SetOp};
use dynres_core::rc::tools::{ToolAnswer, ToolDesk, ToolInput, ToolOutput};
use dynres_core::rc::{
    CallResult, ChangeInfo, ChangeRequest, Client, ClientCall, ClientInput, ClientOutput,
    ClientReply, ClientRequest, Daemon, DaemonInput, DaemonOutput, Master, MasterConfig,
    MasterInput, MasterOutput, NodeId, RcError, RcStatus, RcType, ReqId, ToDaemon, ToMaster,
};
use dynres_core::{Duration, Instant, ProcessId};
use stateright::actor::{Actor, Id, Out, model_timeout};

/// Messages between the model's actors.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RcMsg {
    /// Scheduler → master: a change request (`RES_CHANGE_DEFINE`) and its ticket, the
    /// request's place in the scheduler's list (from 1), which tells requests apart
    /// (`RC-15`).
    Request(u64, ChangeRequest),
    /// Daemon → master.
    ToMaster(ToMaster),
    /// Master → daemon.
    ToDaemon(ToDaemon),
    /// Client → its daemon.
    Req(ReqId, ClientRequest),
    /// Daemon → client.
    Reply(ReqId, ClientReply),
    /// Daemon → a dormant process: you are started.
    Launch,
    /// Daemon → a dormant process: you are started as a child of the spawn that made
    /// this application (`SPAWN-18`).
    LaunchSpawned(String),
    /// Daemon → process: SIGKILL.
    Kill,
    /// Two-leader configuration, rank 0 → rank 1: my pset is defined, define yours.
    Go,
    /// Root → removed process: the application's broadcast of `terminate`.
    Terminate,
    /// Process → its daemon: I exited (what `waitpid` tells a real daemon).
    Exited(ProcessId),
    /// Failure detector → master: this node is gone.
    NodeLost(NodeId),
    /// Scheduler → master: give this node back (`RC-20`).
    ReturnNode(NodeId),
    /// Master → scheduler (as the resource manager): more slots are needed (`RC-21`).
    NeedSlots,
    /// Scheduler → master: a node was granted (`RC-21`).
    AddNode(dynres_core::slots::NodeSpec),
}

/// What the actors send: an [`RcMsg`] behind an `Arc`, with its fingerprint computed
/// once when it is sent. The checker clones every message in flight with every state it
/// generates, and hashes all of them for every fingerprint; deep clones and re-hashing
/// of the same messages were a fifth of its work.
#[derive(Clone)]
pub struct Msg {
    inner: std::sync::Arc<RcMsg>,
    fp: u64,
}

impl Msg {
    /// Wraps a message (hashing it once).
    pub fn new(msg: RcMsg) -> Msg {
        let fp = fixed_hasher().hash_one(&msg);
        Msg {
            inner: std::sync::Arc::new(msg),
            fp,
        }
    }

    /// Whether the stored fingerprint is that of the message, and the message equals a
    /// fresh wrap of itself (tests check this on every message in flight they reach).
    pub fn fingerprint_is_current(&self) -> bool {
        let fresh = Msg::new((*self.inner).clone());
        fresh.fp == self.fp && fresh == *self
    }

    /// The message, cloned out only if another state still holds it.
    pub fn into_inner(self) -> RcMsg {
        std::sync::Arc::try_unwrap(self.inner).unwrap_or_else(|shared| (*shared).clone())
    }
}

impl core::ops::Deref for Msg {
    type Target = RcMsg;
    fn deref(&self) -> &RcMsg {
        &self.inner
    }
}

impl core::fmt::Debug for Msg {
    // Counterexamples print the message itself.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.inner.fmt(f)
    }
}

impl PartialEq for Msg {
    fn eq(&self, other: &Msg) -> bool {
        self.fp == other.fp
            && (std::sync::Arc::ptr_eq(&self.inner, &other.inner) || self.inner == other.inner)
    }
}

impl Eq for Msg {}

impl PartialOrd for Msg {
    fn partial_cmp(&self, other: &Msg) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Msg {
    // By the message, as before the wrapper: the order of a set of messages decides
    // nothing in the checker, but it must agree with `Eq`.
    fn cmp(&self, other: &Msg) -> core::cmp::Ordering {
        self.inner.cmp(&other.inner)
    }
}

impl Hash for Msg {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(self.fp);
    }
}

/// Sends `msg` from the actor whose output `o` is.
fn send(o: &mut Out<RcNode>, to: Id, msg: RcMsg) {
    o.send(to, Msg::new(msg));
}

/// The hasher of every cached fingerprint. A fixed seed: the same state has the same
/// fingerprint in every run, so golden counts stay repeatable.
fn fixed_hasher() -> foldhash::quality::FixedState {
    foldhash::quality::FixedState::with_seed(0x5eed_0001_5eed_0002)
}

/// Timers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RcTimer {
    /// The master's next deadline.
    Master,
    /// A root process polls again.
    Poll,
    /// A process crashes (a new one, or a member that may, `RC-18`).
    Crash,
    /// A daemon's next deadline (its modex gathers, `MODEX-5`).
    Daemon,
    /// The resource manager grants the node it was asked for (`RC-21`); it may also
    /// never fire before the master's deadline.
    Grant,
    /// Fair models only: a new process, launched, starts its query (scheduling delay,
    /// so that its confirm may come after the root's accept as well as before).
    Begin,
}

/// What a process does (the application, not the protocol).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Runs the Lst. 6.7 adaptation loop for the pset it leads: the application's, or
    /// one of the two psets of the two-leader configuration (`RC-8` with |X_c| = 2).
    Root {
        /// The pset it leads.
        lead: Lead,
        /// Its first accept of a change comes before its phase-2 operation, naming the
        /// led pset as it still is (an application's mistake): RC-8 must refuse it, and
        /// the root then applies the operation and accepts again.
        hasty: bool,
        /// Whether it starts with the start-up requests of an application (a
        /// scheduling hint and an inactive `mpi://app/{app}/all`, `PSET-34`) before
        /// its first poll; a bare root polls at once.
        setup: bool,
    },
    /// An existing process: exits when told to terminate; may crash at any time when
    /// `may_crash` (`RC-18`).
    Member {
        /// Whether it may crash (a nondeterministic timer).
        may_crash: bool,
    },
    /// An existing process that confirms a change it was not added by (a buggy or
    /// hostile client): it polls the application's changes like a root and, finding an
    /// undecided ADD or REPLACE, confirms it (`RC-9`: the master must refuse it).
    Rogue,
    /// A process an ADD/REPLACE starts: queries `mpi://SELF` and confirms.
    New {
        /// Whether it may crash (a nondeterministic timer).
        may_crash: bool,
    },
    /// Issues its actor's `script` of pset requests, one batch at a time.
    Scripted,
    /// Spawns one child (`SPAWN-17`) and, at any later point, kills it (`SPAWN-20`).
    Spawner,
    /// Runs a modex over the application's pset with the value `v{rank}` (its client
    /// asks again when told `Stale`, `MODEX-2`); may crash at any time when
    /// `may_crash`.
    Modex {
        /// Whether it may crash (a nondeterministic timer).
        may_crash: bool,
    },
    /// An MPI process speaking PMI-1 (or PMI-2) to its daemon through the shipped
    /// `PmiSession` (`spec/pmi.md`): puts `k{rank}=v{rank}`, enters the barrier (the
    /// modex), and after `barrier_out rc=0` (`kvs-fence-response;rc=0`) gets the key of
    /// every rank below `members`.
    Pmi {
        /// Whether it may crash (a nondeterministic timer).
        may_crash: bool,
        /// The processes of the barrier.
        members: u32,
        /// Whether it speaks PMI-2 (`init pmi_version=2`, then `fullinit`, `kvs-put`,
        /// `kvs-fence`, `kvs-get`: PMIS-17, PMIS-18) instead of PMI-1.
        pmi2: bool,
        /// Bugs planted in its session.
        bugs: dynres_core::bugs::Bugs,
    },
}

/// The pset a `Role::Root` leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lead {
    /// `mpi://app/{app}` of the named application (`APP`, or another application of a
    /// job that starts several).
    App(&'static str),
    /// `mpi://app/app/ex{r}`: the application less rank `r`, which rank `r` defines
    /// (active) at start. Rank 0 leads `ex1`, rank 1 leads `ex0`: two incomparable active
    /// psets, so with the application's pset made inactive both are malleable and a
    /// victim in both binds a SUB to two psets.
    Excluding(u32),
}

impl Lead {
    /// The pset's name.
    pub fn pset(self) -> PsetName {
        match self {
            Lead::App(app) => root_of(app),
            Lead::Excluding(r) => {
                PsetName::parse(&format!("mpi://app/app/ex{r}")).expect("valid name")
            }
        }
    }

    /// What a query or an accept names as its bound pset (the application's needs none).
    fn bound(self) -> Option<PsetName> {
        match self {
            Lead::App(_) => None,
            Lead::Excluding(_) => Some(self.pset()),
        }
    }
}

/// One PMI-2 message as a client frames it: the body's length, left-aligned in six
/// bytes, then the body.
fn pmi2_message(body: &str) -> Vec<u8> {
    let mut out = format!("{:<6}", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// The PMI job of a `Role::Pmi` process: the application's pset, `members` processes.
fn pmi_job(pid: &ProcessId, members: u32) -> dynres_core::pmi::PmiJob {
    dynres_core::pmi::PmiJob {
        pid: pid.clone(),
        rank: pid.rank,
        size: members,
        appnum: 0,
        universe: members,
        kvsname: "kvs".into(),
        mapping: None,
        group: app_root(),
        barrier_timeout: Duration::from_millis(100),
        preput: Vec::new(),
        spawner: None,
    }
}

/// The value a `Role::Modex` process contributes.
pub fn modex_value(rank: u32) -> String {
    format!("v{rank}")
}

/// One actor of the model.
#[derive(Clone, Debug)]
pub enum RcActor {
    /// The master, with its configuration and planted bugs.
    Master(MasterConfig, Bugs),
    /// Sends these requests to the master, one message each, then asks for this node
    /// back, if any (`RC-20`); as the resource manager, grants a node of these slots
    /// when asked, if any (`RC-21`).
    Scheduler(Vec<ChangeRequest>, Option<NodeId>, Option<u32>),
    /// The daemon of a node, with planted bugs, whether its node may crash, and whether
    /// it records the application pset's versions for the modex properties.
    Daemon(NodeId, Bugs, bool, bool),
    /// A process.
    Proc {
        /// Its id.
        pid: ProcessId,
        /// What it does.
        role: Role,
        /// Root only: how many times it may poll (bounds the state space; logged when hit).
        polls: u8,
        /// `Scripted` only: the pset request batches to issue, in order.
        script: Vec<Vec<PsetOp>>,
    },
}

/// The master actor's state: the shipped `Master` plus the model's clock and the log of
/// status changes the properties read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MasterState {
    /// The kernel machine.
    pub master: Master,
    /// The model's clock: advanced only by deadline timeouts.
    pub now: Instant,
    /// Every `Status` output, in order.
    pub log: Vec<(PsetName, RcStatus)>,
    /// Every `ProcessLost` output, with the length of `log` when it came (`RC-18`).
    pub lost: Vec<(ProcessId, usize)>,
    /// Nodes the master accepted back (`RC-20`).
    pub returned: Vec<NodeId>,
    /// Nodes the master accepted as added (`RC-21`).
    pub added_nodes: u32,
    /// Inputs the master refused that the model does not expect it to refuse (every
    /// `Err` is checked, none discarded): only a busy node given back may be refused
    /// (`RC-20`).
    pub refused_inputs: u32,
    /// Requests refused because the slots were not granted (`RC-21`).
    pub not_granted: u32,
    /// Processes the master told their `KillSpawn` succeeded (`SPAWN-20`: only the
    /// spawner). Observed on the master's replies: a child that asks may already be
    /// dead by the time its answer comes.
    pub spawn_kills_granted: Vec<ProcessId>,
    /// Steps after which some pset's version did not rise by exactly one per membership
    /// change (`PSET-10`), as seen by comparing the registry before and after each step.
    pub version_violations: u32,
    /// Jobs of several applications only: master steps on behalf of one application (its
    /// request, its process' message or exit, a deadline of its change) that changed
    /// what another application owns at the master (see [`AppView`]).
    pub foreign_edits: u32,
    /// Confirms from a process the change did not add that reached the master while
    /// the change was undecided (`RC-9`; reachability of the rogue configuration).
    pub foreign_confirms: u32,
    /// Master steps handling such a confirm (while the change was undecided or after)
    /// that changed the change's record, accepts or confirms (`RC-9`).
    pub foreign_confirm_edits: u32,
    /// An exit reached the master while two applications each had an undecided change
    /// (reachability of the two-application fault configurations, `RC-18`, `RC-15`).
    pub exit_while_concurrent: bool,
    /// Every request the master received, by ticket, and what became of it (`RC-15`).
    pub tickets: Vec<(u64, Ticket)>,
    /// The shipped tool desk, told what the master says about each ticket (TOOL-1..3):
    /// the scheduler's requests are tools' requests, odd tickets waiting for the
    /// decision and even ones `nowait` ([`tool_waits`]).
    pub desk: ToolDesk,
    /// Tickets the desk answered. Only which, not what: whether each answer was right is
    /// judged when it is given (`right_answer`), so two runs that told the same tools
    /// the right thing by different paths stay one state.
    pub answered: BTreeSet<u64>,
    /// Answers that were wrong when given, or given twice for one ticket (TOOL-1, TOOL-2).
    pub wrong_answers: u32,
    /// Fair models only: master deadlines that fired while a change was undecided (under
    /// fairness that means the protocol waited for a timer, not for a process).
    pub stalled: u32,
    /// Tickets in the order the master started or refused them, refusals for a full
    /// queue left out (those never queued): FIFO means increasing (`RC-15`).
    pub left_queue: Vec<u64>,
    /// Master steps that failed a modex (`ModexDone` with `ProcessLost` or `Timeout`,
    /// which only a failed gather sends) without telling every node where a member of
    /// its version runs (`MODEX-4`). A count that stays 0 in a correct run.
    pub modex_fail_untold: u32,
    /// Every undecided change's view of before it, recorded when it is announced and
    /// dropped at its decision (`RC-12`). While the change is undecided the view is what
    /// the master's own snapshot holds, so it splits no state.
    pub before: std::collections::BTreeMap<PsetName, RollbackView>,
    /// Aborts after which a pset membership of the application or the job data was not
    /// what it was when the change was announced (`RC-12`).
    pub rollback_mismatches: u32,
    /// A deadline step after which the master still asked to be woken at or before the
    /// time it had just handled: it would spin (`RC-10`). A flag, not a count, so that
    /// the spinning state repeats instead of growing a counterexample without end.
    pub spun: bool,
    /// The fingerprint of everything above (see `RcState::seal`).
    pub fp: u64,
}

/// What an abort must restore (`RC-12`): the application's psets and the job data as
/// they were when the change was announced.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RollbackView {
    /// Members of every live pset of the application's domains and of `mpi://WORLD`
    /// (the psets an abort restores), the change's own delta psets left out.
    pub psets: std::collections::BTreeMap<PsetName, Vec<ProcessId>>,
    /// The job data.
    pub job: std::collections::BTreeMap<ProcessId, NodeId>,
}

/// The psets an abort of a change of `app` restores, with their members, less `skip`.
fn restorable_psets(
    m: &Master,
    app: &str,
    skip: &[&PsetName],
) -> std::collections::BTreeMap<PsetName, Vec<ProcessId>> {
    use dynres_core::pset::{Domain, Origin};
    m.registry()
        .live_psets()
        .filter(|(n, _)| n.domain() == Domain::World || n.app() == Some(app))
        .filter(|(n, _)| !skip.contains(n))
        .map(|(n, _)| {
            let members = m
                .registry()
                .members(&Origin::Runtime, n)
                .unwrap_or_default();
            (n.clone(), members)
        })
        .collect()
}

/// The change's delta pset(s).
fn deltas(c: &ChangeInfo) -> impl Iterator<Item = &PsetName> {
    std::iter::once(&c.delta).chain(&c.sub_delta)
}

/// The view of before `c`, taken at the end of the step that announced it: that step
/// changed the psets only by defining `c`'s deltas and the job data only by `c`'s own
/// edits, which are left out or undone here.
fn view_before(m: &Master, c: &ChangeInfo) -> RollbackView {
    let own: Vec<&PsetName> = deltas(c).collect();
    let mut job = m.processes().clone();
    for p in &c.added {
        job.remove(p);
    }
    for p in &c.removed {
        // A victim still holds its slot while its change is undecided (SLOT-3).
        if let Some(node) = m.slots().slot_of(p).and_then(|s| m.slots().node_of(s)) {
            job.insert(p.clone(), NodeId(node));
        }
    }
    RollbackView {
        psets: restorable_psets(m, &c.app, &own),
        job,
    }
}

/// Whether the abort of `c` restored `before` (`RC-12`): every pset of its application
/// and `mpi://WORLD` has the members it had (versions rise, RC-14: only members are
/// compared), `c`'s deltas are gone, `c`'s added processes are out of the job data and
/// every other process of the view is back on its node — unless it was lost meanwhile
/// (it no longer holds a slot; RC-17). `later` are the changes the same step announced
/// after the abort (the next queued request starts at once): their own edits are left
/// out.
///
/// `mpi://WORLD` and the job data are compared on the processes no other application's
/// change names: the abort leaves WORLD alone, so what another application's change
/// finalized meanwhile shows in it, and another application's undecided SUB has its
/// victims out of the job data (RC-12; the isolation property checks that part). Found
/// with three applications (`rc-3apps-sub-add-sub-1n-5e-1new`): with two, the other
/// application only ever ADDed.
fn rolled_back(m: &Master, c: &ChangeInfo, before: &RollbackView, later: &[&ChangeInfo]) -> bool {
    use dynres_core::pset::Domain;
    let skip: Vec<&PsetName> = later.iter().flat_map(|l| deltas(l)).collect();
    let foreign: std::collections::BTreeSet<&ProcessId> = m
        .all_changes()
        .filter(|o| o.app != c.app)
        .flat_map(|o| o.added.iter().chain(&o.removed))
        .collect();
    let own_view = |v: &std::collections::BTreeMap<PsetName, Vec<ProcessId>>| {
        v.iter()
            .map(|(n, ms)| {
                let own = |p: &&ProcessId| n.domain() != Domain::World || !foreign.contains(p);
                (
                    n.clone(),
                    ms.iter().filter(own).cloned().collect::<Vec<_>>(),
                )
            })
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let psets_ok = own_view(&restorable_psets(m, &c.app, &skip)) == own_view(&before.psets);
    // Processes another application's change names are that application's: its own
    // undecided SUB has them out of the job data while they keep their slots (SLOT-3),
    // whatever this abort does (the isolation property checks that part).
    let taken_later =
        |p: &ProcessId| foreign.contains(p) || later.iter().any(|l| l.removed.contains(p));
    let added_out = c.added.iter().all(|p| !m.processes().contains_key(p));
    let job_ok = before
        .job
        .iter()
        .filter(|(p, _)| !taken_later(p))
        .all(|(p, node)| match m.slots().slot_of(p) {
            Some(_) => m.processes().get(p) == Some(node),
            None => !m.processes().contains_key(p),
        });
    psets_ok && added_out && job_ok
}

type VersionView = std::collections::BTreeMap<PsetName, (dynres_core::pset::MemberSet, u64)>;

fn versions(m: &Master) -> VersionView {
    m.registry()
        .live_psets()
        .map(|(n, p)| (n.clone(), (p.members.clone(), p.attrs.version)))
        .collect()
}

/// `PSET-10` across one master step: unchanged members keep their version, changed ones
/// rise (by one per change; a batch may change a pset more than once in one step).
fn version_step_ok(before: &VersionView, m: &Master) -> bool {
    m.registry().live_psets().all(|(n, p)| match before.get(n) {
        Some((members, v)) if *members == p.members => p.attrs.version == *v,
        Some((_, v)) => p.attrs.version > *v,
        None => true,
    })
}

/// What one application owns at the master: its psets (both of its domains, with
/// members and attributes), which of its processes `mpi://WORLD` holds, its job data, its
/// processes' slots, and its changes with their accepts and confirms. A step on behalf
/// of another application must leave all of it as it was (`RC-15`: applications do not
/// block each other; `PSET-6`: nor write in each other's domains).
#[derive(Debug, PartialEq, Eq)]
pub struct AppView {
    psets: Vec<(PsetName, Vec<ProcessId>, dynres_core::pset::Attributes)>,
    world: Vec<ProcessId>,
    job: Vec<(ProcessId, NodeId)>,
    slots: Vec<(ProcessId, Option<u32>, bool)>,
    changes: Vec<ChangeView>,
}

/// One change as [`AppView`] compares it: its record, accepts and confirms.
type ChangeView = (
    dynres_core::rc::ChangeInfo,
    Option<std::collections::BTreeMap<PsetName, PsetName>>,
    Option<std::collections::BTreeSet<ProcessId>>,
);

impl AppView {
    /// `app`'s view of `m`, in a job configured by `cfg`.
    pub fn of(cfg: &MasterConfig, m: &Master, app: &str) -> AppView {
        let procs = app_processes(cfg, m, app);
        let reg = m.registry();
        let members = |n: &PsetName| {
            reg.members(&dynres_core::pset::Origin::Runtime, n)
                .unwrap_or_default()
        };
        AppView {
            psets: reg
                .live_psets()
                .filter(|(n, _)| n.app() == Some(app))
                .map(|(n, p)| (n.clone(), members(n), p.attrs.clone()))
                .collect(),
            world: members(&PsetName::world())
                .into_iter()
                .filter(|p| procs.contains(p))
                .collect(),
            job: m
                .processes()
                .iter()
                .filter(|(p, _)| procs.contains(*p))
                .map(|(p, n)| (p.clone(), *n))
                .collect(),
            slots: procs
                .iter()
                .map(|p| (p.clone(), m.slots().slot_of(p), m.slots().is_running(p)))
                .collect(),
            changes: m
                .all_changes()
                .filter(|c| c.app == app)
                .map(|c| {
                    let accepts = m.accepts(&c.delta).cloned();
                    (c.clone(), accepts, m.confirmed(&c.delta).cloned())
                })
                .collect(),
        }
    }
}

/// The processes of `app`: the ranks it started with (the master hands out ranks to
/// the configured applications in order) and those its changes added.
pub fn app_processes(
    cfg: &MasterConfig,
    m: &Master,
    app: &str,
) -> std::collections::BTreeSet<ProcessId> {
    let mut first = 0;
    let mut out = std::collections::BTreeSet::new();
    for (name, n) in &cfg.apps {
        if name == app {
            out.extend((first..first + n).map(|r| ProcessId::new(cfg.namespace.clone(), r)));
        }
        first += n;
    }
    let added = m.all_changes().filter(|c| c.app == app);
    out.extend(added.flat_map(|c| c.added.iter().cloned()));
    out
}

/// The application of `pid` (see [`app_processes`]).
pub fn app_of(cfg: &MasterConfig, m: &Master, pid: &ProcessId) -> Option<String> {
    let mut first = 0;
    for (name, n) in &cfg.apps {
        if pid.rank >= first && pid.rank < first + n {
            return Some(name.clone());
        }
        first += n;
    }
    m.all_changes()
        .find(|c| c.added.contains(pid))
        .map(|c| c.app.clone())
}

/// The isolation check of one master step in a job of several applications: every
/// application's [`AppView`] before the step, and on whose behalf the step is.
struct Isolation {
    /// The application the input comes from or is about: a request's, or that of the
    /// process whose message or exit it is. `None` for a deadline (and for a process
    /// of no known application), judged like one.
    on_behalf: Option<String>,
    /// Length of the master's status log before the step.
    log_len: usize,
    views: Vec<(String, AppView)>,
}

impl Isolation {
    /// Takes the views before `input`; `None` in a job of one application and for the
    /// job-wide inputs (a node lost, added or returned), which may touch every
    /// application.
    fn before(actor: &RcActor, st: &MasterState, input: &MasterInput) -> Option<Isolation> {
        let RcActor::Master(cfg, _) = actor else {
            return None;
        };
        if cfg.apps.len() < 2 {
            return None;
        }
        let m = &st.master;
        let on_behalf = match input {
            MasterInput::RequestChange { req, .. } => Some(req.app.clone()),
            MasterInput::FromDaemon {
                msg: ToMaster::Forward { from, .. },
                ..
            } => app_of(cfg, m, from),
            MasterInput::FromDaemon {
                msg: ToMaster::Exited { pid },
                ..
            } => app_of(cfg, m, pid),
            MasterInput::Timeout => None,
            _ => return None,
        };
        let views = cfg
            .apps
            .iter()
            .map(|(app, _)| (app.clone(), AppView::of(cfg, m, app)))
            .collect();
        Some(Isolation {
            on_behalf,
            log_len: st.log.len(),
            views,
        })
    }

    /// Counts a foreign edit if the step changed the view of an application it was not
    /// on behalf of. A deadline is on behalf of the applications whose changes it
    /// decided.
    fn after(self, actor: &RcActor, st: &mut MasterState) {
        let RcActor::Master(cfg, _) = actor else {
            return;
        };
        let decided: Vec<&str> = st.log[self.log_len..]
            .iter()
            .filter_map(|(delta, _)| {
                let c = st.master.all_changes().find(|c| c.delta == *delta);
                c.map(|c| c.app.as_str())
            })
            .collect();
        let foreign = self.views.iter().any(|(app, before)| {
            let own = match &self.on_behalf {
                Some(a) => a == app,
                None => decided.contains(&app.as_str()),
            };
            !own && AppView::of(cfg, &st.master, app) != *before
        });
        if foreign {
            st.foreign_edits += 1;
        }
    }
}

/// The `RC-9` check of one master step that handles a confirm from a process the
/// change did not add: the change as it was before the step.
struct ForeignConfirm {
    delta: PsetName,
    undecided: bool,
    before: Option<ChangeView>,
}

impl ForeignConfirm {
    /// `Some` if `input` is a confirm of a known change by a process it did not add.
    fn before(st: &MasterState, input: &MasterInput) -> Option<ForeignConfirm> {
        let MasterInput::FromDaemon {
            msg:
                ToMaster::Forward {
                    from,
                    request: ClientRequest::Confirm { delta, .. },
                    ..
                },
            ..
        } = input
        else {
            return None;
        };
        let m = &st.master;
        let c = m.all_changes().find(|c| c.delta == *delta)?;
        if c.added.contains(from) {
            return None;
        }
        Some(ForeignConfirm {
            delta: delta.clone(),
            undecided: !c.status.is_final(),
            before: Self::view(m, delta),
        })
    }

    fn view(m: &Master, delta: &PsetName) -> Option<ChangeView> {
        let c = m.all_changes().find(|c| c.delta == *delta)?;
        Some((
            c.clone(),
            m.accepts(delta).cloned(),
            m.confirmed(delta).cloned(),
        ))
    }

    /// Counts the confirm, and an edit if the change is not as it was.
    fn after(self, st: &mut MasterState) {
        if self.undecided {
            st.foreign_confirms += 1;
        }
        if Self::view(&st.master, &self.delta) != self.before {
            st.foreign_confirm_edits += 1;
        }
    }
}

/// What became of an external change request (`RC-15`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ticket {
    /// Neither started nor refused yet: in the queue (or waiting for slots).
    Waiting,
    /// Started as the change of this delta pset.
    Started(PsetName),
    /// Refused.
    Refused,
}

/// A daemon actor's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DaemonState {
    /// The kernel machine.
    pub daemon: Daemon,
    /// For each process launched after job start: did the replica already hold a change
    /// including it (`RC-3`)?
    pub launched: Vec<(ProcessId, bool)>,
    /// Pset replicas received with a version below one already held (`RC-14`).
    pub regressions: u32,
    /// The node crashed: the daemon and its processes are gone (`RC-17`).
    pub lost: bool,
    /// Modex batches this daemon sent: (pset, version) (`MODEX-1`).
    pub modex_batches: Vec<(PsetName, u64)>,
    /// Modex configurations only: the application pset's members at every version the
    /// replica received (`MODEX-3`).
    pub app_versions: std::collections::BTreeMap<u64, Vec<ProcessId>>,
    /// A modex deadline of this daemon fired (`MODEX-5`).
    pub timed_out: bool,
    /// Inputs the daemon refused (every `Err` is checked, none discarded).
    pub refused_inputs: u32,
    /// For each spawned child it launched: did the replica already hold the child in its
    /// application's pset and in the job data (`SPAWN-18`)?
    pub spawn_launches: Vec<(ProcessId, bool)>,
    /// Modex replies `Stale` it handed its clients (whose machines then ask again,
    /// `MODEX-2`).
    pub stale_replies: u32,
    /// Launches after job start (of an added process or a spawn's child) whose replica
    /// lacked `mpi://WORLD`, the process' application pset or the process in its job
    /// data (`RC-22`). A count that stays 0 in a correct run, so it splits no state.
    pub unready_launches: u32,
    /// The fingerprint of everything above (see `RcState::seal`).
    pub fp: u64,
}

/// Where a process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not started.
    Dormant,
    /// Running.
    Running,
    /// Exited or killed.
    Dead,
}

/// The application step of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Root: its start-up pset requests are out.
    Setup,
    /// Nothing out (root: waiting for its next poll).
    Idle,
    /// A query is out.
    Querying,
    /// Root: the phase-2 pset operation is out.
    Applying,
    /// Root: an accept is out or pending (the next poll re-accepts).
    Accepting,
    /// New process: the confirm is out.
    Confirming,
    /// Nothing more to do.
    Done,
}

/// A process actor's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProcState {
    /// Lifecycle.
    pub phase: Phase,
    /// The kernel machine (present once launched).
    pub client: Option<Client>,
    /// Its daemon.
    pub daemon: Option<Id>,
    /// Application step.
    pub step: Step,
    /// `Modex` only: the outcome of its modex, once it has one.
    pub modex: Option<Result<dynres_core::rc::ModexData, dynres_core::rc::RcError>>,
    /// `Pmi` only: its session (the shipped machine, fed PMI-1 bytes).
    pub pmi: Option<dynres_core::pmi::PmiSession>,
    /// `Pmi` only: `barrier_out`'s outcome (`true`: `rc=0`), once it came.
    pub pmi_barrier: Option<bool>,
    /// `Pmi` only: the values its gets after the barrier returned, by rank (`None`: not
    /// found).
    pub pmi_seen: Vec<Option<String>>,
    /// Inputs its client machine refused (every `Err` is checked, none discarded).
    pub refused_inputs: u32,
    /// The change being handled.
    pub current: Option<PsetName>,
    /// Polls left (root).
    pub polls_left: u8,
    /// Launched twice (a rank was reused).
    pub relaunched: bool,
    /// Decisions this process observed: (delta, finalized?).
    pub seen: Vec<(PsetName, bool)>,
    /// `Scripted`: batches issued so far.
    pub script_pos: u8,
    /// A spawn's child: its application. The spawner: the application it spawned.
    pub spawn_app: Option<String>,
    /// Launched as a spawn's child (`SPAWN-18`).
    pub child: bool,
    /// Outcomes of its `KillSpawn` calls: `true` for `Ok` (`SPAWN-20`).
    pub kills: Vec<bool>,
    /// Error replies its calls got that the call does not allow (see
    /// `RcNode::error_allowed`).
    pub unexpected_errors: u32,
    /// A hasty root's accept before its phase-2 operation: `Some(false)` once sent,
    /// `Some(true)` once refused (`RC-8`).
    pub hasty: Option<bool>,
    next_call: u64,
    /// The fingerprint of everything above (see `RcState::seal`).
    pub fp: u64,
}

/// Every actor's state. Its `Hash` is the fingerprint `RcState::seal` stored after the
/// actor's last step: the checker hashes every actor of every state it generates, and
/// hashing the master's registry and change tables each time was a third of its work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RcState {
    /// Master.
    Master(Box<MasterState>),
    /// Scheduler (stateless).
    Scheduler,
    /// Daemon.
    Daemon(Box<DaemonState>),
    /// Process.
    Proc(Box<ProcState>),
}

impl RcState {
    /// Recomputes the stored fingerprint; the actor glue calls it after every step that
    /// changed the state (and only there), so it is never stale.
    fn seal(&mut self) {
        fn fp<T: Hash>(v: &T) -> u64 {
            fixed_hasher().hash_one(v)
        }
        match self {
            RcState::Master(m) => {
                m.fp = 0;
                m.fp = fp(&**m);
            }
            RcState::Daemon(d) => {
                d.fp = 0;
                d.fp = fp(&**d);
            }
            RcState::Proc(p) => {
                p.fp = 0;
                p.fp = fp(&**p);
            }
            RcState::Scheduler => {}
        }
    }
}

impl RcState {
    /// Whether the stored fingerprint is that of the state as it is now. A step that
    /// changed a state without resealing it would make the checker take two different
    /// states for one and skip the second (tests check this on every state they reach).
    pub fn fingerprint_is_current(&self) -> bool {
        let mut fresh = self.clone();
        fresh.seal();
        fresh == *self
    }
}

impl Hash for RcState {
    fn hash<H: Hasher>(&self, h: &mut H) {
        core::mem::discriminant(self).hash(h);
        match self {
            RcState::Master(m) => h.write_u64(m.fp),
            RcState::Daemon(d) => h.write_u64(d.fp),
            RcState::Proc(p) => h.write_u64(p.fp),
            RcState::Scheduler => {}
        }
    }
}

/// Seals a state an actor step may have changed (a borrowed one is unchanged).
fn seal(state: &mut Cow<RcState>) {
    if let Cow::Owned(s) = state {
        s.seal();
    }
}

/// The application's root pset, `mpi://app/app`, parsed once.
pub fn app_root() -> PsetName {
    static ROOT: std::sync::OnceLock<PsetName> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| PsetName::app_root(APP).expect("valid name"))
        .clone()
}

/// `mpi://app/{app}`: [`app_root`] for `APP`, parsed for any other application.
pub fn root_of(app: &str) -> PsetName {
    match app {
        APP => app_root(),
        _ => PsetName::app_root(app).expect("valid name"),
    }
}

/// Actor ids: master 0, scheduler 1, daemons from 2, then one per rank.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Number of daemons.
    pub daemons: usize,
}

impl Layout {
    /// The master's id.
    pub fn master() -> Id {
        Id::from(0usize)
    }
    /// The daemon of `node`.
    pub fn daemon(&self, node: NodeId) -> Id {
        Self::daemon_of(node)
    }
    /// The daemon of `node` (daemons follow the master and the scheduler in every
    /// layout).
    pub fn daemon_of(node: NodeId) -> Id {
        Id::from(2 + node.0 as usize)
    }
    /// The process of `pid`.
    pub fn proc(&self, pid: &ProcessId) -> Id {
        Id::from(2 + self.daemons + pid.rank as usize)
    }
    /// The node of a daemon id.
    pub fn node(&self, id: Id) -> NodeId {
        NodeId((usize::from(id) - 2) as u32)
    }
}

/// The actor type stateright runs.
#[derive(Clone, Debug)]
pub struct RcNode {
    /// What this actor is.
    pub actor: RcActor,
    /// A fair model's actor (see `fair.rs`): new processes wait for [`RcTimer::Begin`].
    pub fair: bool,
    /// Id layout shared by all actors.
    pub layout: Layout,
    /// Ranks below this started with the job.
    pub initial: u32,
}

/// Drains the master's outputs after one step; `batch_step` says the step handled a
/// node's modex batch (see [`modex_fail_told_all`]).
fn drain_master(layout: &Layout, st: &mut MasterState, o: &mut Out<RcNode>, batch_step: bool) {
    let first = st.log.len();
    // MODEX-4: the nodes each failed modex of this step was sent to.
    let mut failed: BTreeMap<(PsetName, u64), BTreeSet<NodeId>> = BTreeMap::new();
    while let Some(out) = st.master.poll_output() {
        match out {
            MasterOutput::Send(env) => {
                if let ToDaemon::ModexDone {
                    pset,
                    version,
                    result: Err(RcError::ProcessLost(_) | RcError::Timeout),
                } = &env.msg
                {
                    failed
                        .entry((pset.clone(), *version))
                        .or_default()
                        .insert(env.to);
                }
                if let ToDaemon::Reply {
                    to,
                    reply: ClientReply::SpawnKilled(Ok(())),
                    ..
                } = &env.msg
                {
                    st.spawn_kills_granted.push(to.clone());
                }
                send(o, layout.daemon(env.to), RcMsg::ToDaemon(env.msg))
            }
            MasterOutput::Status { delta, status } => {
                st.log.push((delta.clone(), status));
                feed_desk(st, ToolInput::Status { delta, status });
            }
            MasterOutput::Aborted { delta, reason } => {
                feed_desk(st, ToolInput::Aborted { delta, reason });
            }
            MasterOutput::ProcessLost(pid) => {
                let at = st.log.len();
                st.lost.push((pid, at));
            }
            MasterOutput::NeedSlots { .. } => send(o, Id::from(1usize), RcMsg::NeedSlots),
            MasterOutput::Started { ticket, delta } => {
                st.left_queue.push(ticket);
                set_ticket(st, ticket, Ticket::Started(delta.clone()));
                feed_desk(st, ToolInput::Started { ticket, delta });
            }
            MasterOutput::Refused { ticket, error, .. } => {
                match &error {
                    RcError::NotGranted { .. } => st.not_granted += 1,
                    RcError::QueueFull(_) => {}
                    _ => st.left_queue.push(ticket),
                }
                set_ticket(st, ticket, Ticket::Refused);
                feed_desk(st, ToolInput::Refused { ticket, error });
            }
            _ => {}
        }
    }
    track_rollbacks(st, first);
    for ((pset, version), told) in failed {
        if !batch_step && !modex_fail_told_all(&st.master, &pset, version, &told) {
            st.modex_fail_untold += 1;
        }
    }
    match st.master.poll_timeout() {
        Some(_) => o.set_timer(RcTimer::Master, model_timeout()),
        None => o.cancel_timer(RcTimer::Master),
    }
}

/// `MODEX-4`: a failed modex of `pset` at `version` was sent to every node where the
/// master places a live member of that version (the job data's node, as the gather's
/// members are found), so no daemon still gathering for it waits for its own deadline.
///
/// Checked for failures a deadline or a loss causes (`Timeout`, an exit, a lost node),
/// not for the answer to a batch: a batch naming a dead member when no gather is held
/// is answered to its sender alone, the other nodes' batches being failed the same way
/// when they come.
fn modex_fail_told_all(
    master: &Master,
    pset: &PsetName,
    version: u64,
    told: &BTreeSet<NodeId>,
) -> bool {
    let Ok(p) = master.registry().get(pset) else {
        return true;
    };
    if p.attrs.version != version {
        // Not the gathered version any more: MODEX-2 fails it with Stale instead.
        return true;
    }
    let members = master
        .registry()
        .members(&dynres_core::pset::Origin::Runtime, pset)
        .unwrap_or_default();
    members
        .iter()
        .filter_map(|m| master.processes().get(m))
        .all(|n| told.contains(n))
}

/// `RC-12` across one master step whose statuses start at `log[first]`: a change
/// announced records its view of before, a change decided drops it, and a change
/// aborted is checked against it first.
fn track_rollbacks(st: &mut MasterState, first: usize) {
    let step: Vec<(PsetName, RcStatus)> = st.log[first..].to_vec();
    let info = |m: &Master, d: &PsetName| m.all_changes().find(|c| c.delta == *d).cloned();
    for (i, (delta, status)) in step.iter().enumerate() {
        match status {
            RcStatus::Announced => {
                if let Some(c) = info(&st.master, delta) {
                    let view = view_before(&st.master, &c);
                    st.before.insert(delta.clone(), view);
                }
            }
            RcStatus::Finalized => {
                st.before.remove(delta);
            }
            RcStatus::Aborted => {
                let later: Vec<ChangeInfo> = step[i + 1..]
                    .iter()
                    .filter(|(_, s)| *s == RcStatus::Announced)
                    .filter_map(|(d, _)| info(&st.master, d))
                    .collect();
                let later: Vec<&ChangeInfo> = later.iter().collect();
                if let (Some(view), Some(c)) = (st.before.remove(delta), info(&st.master, delta)) {
                    if !rolled_back(&st.master, &c, &view, &later) {
                        st.rollback_mismatches += 1;
                    }
                }
            }
            _ => {}
        }
    }
}

/// Whether the tool behind scheduler ticket `ticket` waits for the decision: odd ones
/// do, even ones are `nowait`, so every configuration with two requests has both.
pub fn tool_waits(ticket: u64) -> bool {
    ticket % 2 == 1
}

/// Feeds the desk and keeps its answers. The desk refuses only a ticket asked twice,
/// which the scheduler's numbering rules out; a refusal is counted as any other.
fn feed_desk(st: &mut MasterState, input: ToolInput) {
    if st.desk.handle(st.now, input).is_err() {
        st.refused_inputs += 1;
    }
    while let Some(out) = st.desk.poll_output() {
        if !st.answered.insert(out.ticket) || !right_answer(st, &out) {
            st.wrong_answers += 1;
        }
    }
}

/// TOOL-2: whether `out` is its ticket's outcome as the master stands now — a waiting
/// tool hears its refusal or its change's final status, a `nowait` tool also that its
/// request waits in the queue or that its change started.
fn right_answer(st: &MasterState, out: &ToolOutput) -> bool {
    let fate = st
        .tickets
        .iter()
        .find(|(t, _)| *t == out.ticket)
        .map(|(_, f)| f);
    let final_of = |d: &PsetName| {
        st.log
            .iter()
            .find(|(x, s)| x == d && s.is_final())
            .map(|(_, s)| *s)
    };
    let waits = tool_waits(out.ticket);
    match (&out.answer, fate) {
        (ToolAnswer::Refused(_) | ToolAnswer::NotGranted(_), Some(Ticket::Refused)) => true,
        (ToolAnswer::Finalized(x), Some(Ticket::Started(d))) => {
            waits && x == d && final_of(d) == Some(RcStatus::Finalized)
        }
        (ToolAnswer::Aborted { delta, .. }, Some(Ticket::Started(d))) => {
            waits && delta == d && final_of(d) == Some(RcStatus::Aborted)
        }
        (ToolAnswer::Announced(x), Some(Ticket::Started(d))) => !waits && x == d,
        (ToolAnswer::Queued, Some(Ticket::Waiting)) => !waits,
        _ => false,
    }
}

fn set_ticket(st: &mut MasterState, ticket: u64, outcome: Ticket) {
    if let Some((_, t)) = st.tickets.iter_mut().find(|(id, _)| *id == ticket) {
        *t = outcome;
    }
}

/// `RC-22`: whether a daemon's replica holds what a process it launches needs at once —
/// `mpi://WORLD`, the pset of the process' application and the process in the job data
/// — as every daemon of the job does from its start. A node added at run time holds them
/// only once the master sent it the replica.
fn replica_ready(daemon: &Daemon, p: &ProcessId, app: &str) -> bool {
    daemon.pset(&PsetName::world()).is_some()
        && daemon.pset(&root_of(app)).is_some()
        && daemon.job().contains(p)
}

fn drain_daemon(layout: &Layout, initial: u32, st: &mut DaemonState, o: &mut Out<RcNode>) {
    while let Some(out) = st.daemon.poll_output() {
        match out {
            DaemonOutput::ToMaster(msg) => {
                if let ToMaster::Modex { pset, version, .. } = &msg {
                    st.modex_batches.push((pset.clone(), *version));
                }
                send(o, Layout::master(), RcMsg::ToMaster(msg))
            }
            DaemonOutput::ToClient { to, req, reply } => {
                if matches!(reply, ClientReply::Modex(Err(RcError::Stale { .. }))) {
                    st.stale_replies += 1;
                }
                send(o, layout.proc(&to), RcMsg::Reply(req, reply))
            }
            DaemonOutput::Spawn { app, procs, .. } => {
                let root = PsetName::app_root(&app).expect("the master names spawns validly");
                for p in procs {
                    let in_pset = st.daemon.pset(&root).is_some_and(|(m, _)| m.contains(&p));
                    let known = in_pset && st.daemon.job().contains(&p);
                    st.spawn_launches.push((p.clone(), known));
                    if !replica_ready(&st.daemon, &p, &app) {
                        st.unready_launches += 1;
                    }
                    send(o, layout.proc(&p), RcMsg::LaunchSpawned(app.clone()));
                }
            }
            DaemonOutput::Launch { procs } => {
                for p in procs {
                    if p.rank >= initial {
                        let saw = st.daemon.changes().any(|c| c.includes(&p));
                        st.launched.push((p.clone(), saw));
                        let app = st
                            .daemon
                            .changes()
                            .find(|c| c.includes(&p))
                            .map(|c| c.app.clone());
                        if !app.is_some_and(|app| replica_ready(&st.daemon, &p, &app)) {
                            st.unready_launches += 1;
                        }
                    }
                    send(o, layout.proc(&p), RcMsg::Launch);
                }
            }
            DaemonOutput::Kill { procs } => {
                // SIGKILL; the exit is reported once the process is dead (its `Exited`).
                for p in procs {
                    send(o, layout.proc(&p), RcMsg::Kill);
                }
            }
        }
    }
    // Only modex gathers arm a daemon's timer; like the master's, it may fire at any
    // point (nondeterministic time).
    match st.daemon.poll_timeout() {
        Some(_) => o.set_timer(RcTimer::Daemon, model_timeout()),
        None => o.cancel_timer(RcTimer::Daemon),
    }
}

impl RcNode {
    /// Hands a call to the process' client and sends what it asks for.
    fn call(&self, st: &mut ProcState, step: Step, call: ClientCall, o: &mut Out<Self>) {
        st.step = step;
        let (Some(client), Some(daemon)) = (st.client.as_mut(), st.daemon) else {
            return;
        };
        st.next_call += 1;
        let accepted = client.handle(
            Instant::ZERO,
            ClientInput::Call {
                id: st.next_call,
                call,
            },
        );
        if accepted.is_err() {
            st.refused_inputs += 1;
        }
        while let Some(out) = client.poll_output() {
            if let ClientOutput::Request { req, request } = out {
                send(o, daemon, RcMsg::Req(req, request));
            }
        }
    }

    fn poll_later(st: &mut ProcState, o: &mut Out<Self>) {
        if st.polls_left > 0 {
            o.set_timer(RcTimer::Poll, model_timeout());
        } else {
            // A bound of the model (spec/verification.md): logged, never silent.
            tracing::trace!("bound hit: root poll budget exhausted");
        }
    }

    fn root_next(&self, st: &mut ProcState, o: &mut Out<Self>) {
        let lead = match &self.actor {
            RcActor::Proc {
                role: Role::Root { lead, .. },
                ..
            } => *lead,
            _ => Lead::App(APP),
        };
        match (st.step, st.current.clone()) {
            (Step::Accepting, Some(delta)) => {
                // A fair model's root blocks in its accept until the decision (or the
                // wait's deadline): polling again while PENDING would spend the poll
                // budget, a bound of the model, before the new processes confirm.
                let wait = self.fair.then(|| Duration::from_millis(400));
                let call = ClientCall::Accept {
                    delta,
                    new_pset: lead.pset(),
                    bound: lead.bound(),
                    wait,
                };
                self.call(st, Step::Accepting, call, o);
            }
            _ => self.call(
                st,
                Step::Querying,
                ClientCall::GetResChange {
                    bound: lead.bound(),
                },
                o,
            ),
        }
    }

    /// The application's reaction to a completed call (Lst. 6.7 for the root; query and
    /// confirm for a new process).
    fn on_result(&self, st: &mut ProcState, result: CallResult, o: &mut Out<Self>) {
        let RcActor::Proc { role, .. } = &self.actor else {
            return;
        };
        if !Self::error_allowed(*role, st.child, &result) {
            st.unexpected_errors += 1;
        }
        if st.step == Step::Setup {
            st.step = Step::Idle;
            match (role, pid_rank(&self.actor)) {
                // Two leaders: rank 0 has defined ex0, so rank 1 may define ex1.
                (
                    Role::Root {
                        lead: Lead::Excluding(_),
                        ..
                    },
                    Some(0),
                ) => {
                    send(o, self.layout.proc(&self.pid_of(1)), RcMsg::Go);
                }
                // Rank 1 has defined ex1: both psets are there, it asks for the SUB of
                // rank 2 (an application-initiated request, RC-15).
                (
                    Role::Root {
                        lead: Lead::Excluding(_),
                        ..
                    },
                    Some(1),
                ) => {
                    let req = dynres_core::rc::ChangeRequest::sub_named(APP, self.pid_of(2).into());
                    self.call(st, Step::Querying, ClientCall::RequestChange(req), o);
                    return;
                }
                _ => {}
            }
            Self::poll_later(st, o);
            return;
        }
        if st.child {
            // A child tries to kill its own spawn: only the spawner may (SPAWN-20).
            if let CallResult::SpawnKilled(r) = result {
                st.kills.push(r.is_ok());
            }
            return;
        }
        match (role, result) {
            (Role::Spawner, CallResult::Spawned(Ok(s))) => {
                st.spawn_app = Some(s.app);
                st.step = Step::Idle;
                // It kills its children at any later point (or after they are gone).
                o.set_timer(RcTimer::Poll, model_timeout());
            }
            (Role::Spawner, CallResult::SpawnKilled(r)) => {
                st.kills.push(r.is_ok());
                st.step = Step::Done;
            }
            (Role::Root { .. }, CallResult::ChangeRequested(_)) => {
                st.step = Step::Idle;
                Self::poll_later(st, o);
            }
            (Role::Root { lead, hasty, .. }, CallResult::ResChange(q)) => {
                match (q.kind, q.delta, q.status) {
                    (Some(_), Some(delta), RcStatus::Announced | RcStatus::Pending)
                        if *hasty && st.hasty.is_none() =>
                    {
                        // The application's mistake: it accepts before its operation.
                        st.hasty = Some(false);
                        st.current = Some(delta);
                        st.step = Step::Accepting;
                        self.root_next(st, o);
                    }
                    (Some(kind), Some(delta), RcStatus::Announced | RcStatus::Pending) => {
                        let led = lead.pset();
                        let op = |op, with: &PsetName| PsetOp::Set {
                            op,
                            pset1: led.clone(),
                            pset2: with.clone(),
                            target: Some(led.clone()),
                            attrs: AttrUpdate::none(),
                        };
                        let ops = match (kind, &q.sub_delta) {
                            (RcType::Replace, Some(sub)) => {
                                vec![op(SetOp::Difference, sub), op(SetOp::Union, &delta)]
                            }
                            (RcType::Sub, _) => vec![op(SetOp::Difference, &delta)],
                            _ => vec![op(SetOp::Union, &delta)],
                        };
                        st.current = Some(delta);
                        self.call(st, Step::Applying, ClientCall::PsetOp { ops }, o);
                    }
                    _ => {
                        st.step = Step::Idle;
                        Self::poll_later(st, o);
                    }
                }
            }
            (Role::Root { .. }, CallResult::PsetOp(Ok(_))) => {
                st.step = Step::Accepting;
                self.root_next(st, o);
            }
            (Role::Root { .. }, CallResult::Accept(Ok(a))) if a.status == RcStatus::Pending => {
                Self::poll_later(st, o);
            }
            (
                Role::Root { hasty: true, .. },
                CallResult::Accept(Err(RcError::NewPsetMismatch { .. })),
            ) if st.hasty == Some(false) => {
                // Refused (RC-8): it asks again and, this time, applies its operation first.
                st.hasty = Some(true);
                st.current = None;
                st.step = Step::Idle;
                self.root_next(st, o);
            }
            (Role::Root { .. }, result) => {
                let decided = match &result {
                    CallResult::Accept(Ok(a)) => {
                        for p in &a.removed {
                            send(o, self.layout.proc(p), RcMsg::Terminate);
                        }
                        Some(a.status == RcStatus::Finalized)
                    }
                    CallResult::Accept(Err(dynres_core::rc::RcError::Aborted(_))) => Some(false),
                    _ => None,
                };
                if let (Some(ok), Some(delta)) = (decided, st.current.take()) {
                    st.seen.push((delta, ok));
                }
                st.step = Step::Idle;
                Self::poll_later(st, o);
            }
            (Role::Rogue, CallResult::ResChange(q)) => {
                let adds = matches!(q.kind, Some(RcType::Add | RcType::Replace));
                match q.delta {
                    Some(delta) if !q.incl && adds && !q.status.is_final() => {
                        let timeout = Duration::from_millis(100);
                        self.call(st, Step::Done, ClientCall::Confirm { delta, timeout }, o);
                    }
                    _ => {
                        st.step = Step::Idle;
                        Self::poll_later(st, o);
                    }
                }
            }
            (Role::New { .. }, CallResult::ResChange(q)) => {
                let adds = matches!(q.kind, Some(RcType::Add | RcType::Replace));
                match q.delta {
                    Some(delta) if q.incl && adds && !q.status.is_final() => {
                        st.current = Some(delta.clone());
                        let timeout = Duration::from_millis(100);
                        self.call(
                            st,
                            Step::Confirming,
                            ClientCall::Confirm { delta, timeout },
                            o,
                        );
                    }
                    _ => st.step = Step::Done,
                }
            }
            (Role::New { .. }, CallResult::Confirm(r)) => {
                if let Some(delta) = st.current.take() {
                    st.seen.push((delta, r.is_ok()));
                }
                st.step = Step::Done;
            }
            (Role::Scripted, CallResult::PsetOp(_)) => {
                st.script_pos += 1;
                self.next_scripted(st, o);
            }
            (Role::Modex { .. }, CallResult::Modex(r)) => {
                st.modex = Some(r);
                st.step = Step::Done;
            }
            _ => {}
        }
    }

    /// A new process asks what the change that made it is (Lst. 6.6).
    fn query_self(&self, st: &mut ProcState, o: &mut Out<Self>) {
        let call = ClientCall::GetResChange {
            bound: Some(PsetName::self_set()),
        };
        self.call(st, Step::Querying, call, o);
    }

    /// Whether an error reply is one the call allows here (every `Err` is checked, none
    /// discarded): a root's phase-2 operation on the delta of a change aborted meanwhile
    /// (`Pruned`), its accept of an aborted change, a new process' confirm of an aborted
    /// change or after its lookup of the accept timed out. Modex, spawn and kill errors
    /// have properties of their own.
    fn error_allowed(role: Role, child: bool, result: &CallResult) -> bool {
        use dynres_core::pset::PsetError;
        let pruned = |e: &RcError| match e {
            RcError::Pset(b) => match &*b.0 {
                PsetError::InBatch { source, .. } => matches!(**source, PsetError::Pruned(_)),
                PsetError::Pruned(_) => true,
                _ => false,
            },
            _ => false,
        };
        match (role, result) {
            _ if child => true,
            // Its confirm of a change that did not add it fails, however (RC-9).
            (Role::Rogue, CallResult::Confirm(Err(_))) => true,
            (_, CallResult::Modex(_) | CallResult::Spawned(_) | CallResult::SpawnKilled(_)) => true,
            (Role::Root { .. }, CallResult::PsetOp(Err(e))) => pruned(e),
            // A hasty root's accept before its operation is refused, once (RC-8).
            (Role::Root { hasty, .. }, CallResult::Accept(Err(e))) => {
                matches!(e, RcError::Aborted(_))
                    || (hasty && matches!(e, RcError::NewPsetMismatch { .. }))
            }
            (Role::New { .. }, CallResult::Confirm(Err(e))) => {
                matches!(e, RcError::Aborted(_) | RcError::Timeout)
            }
            (_, CallResult::PsetOp(Err(_)) | CallResult::Accept(Err(_))) => false,
            (_, CallResult::Confirm(Err(_)) | CallResult::Lookup(Err(_))) => false,
            (_, CallResult::Fence(Err(_)) | CallResult::PsetInfo(Err(_))) => false,
            (_, CallResult::ChangeRequested(Err(_)) | CallResult::Published(Err(_))) => false,
            (_, CallResult::Unpublished(Err(_))) => false,
            _ => true,
        }
    }

    /// Feeds a PMI process' session `bytes` (or the daemon's `reply`), sends its
    /// requests to the daemon and reads its replies: after `barrier_out rc=0` it asks
    /// for every member's key, one `get` after the other (PMIS-4 serves them in order).
    fn pmi_feed(
        st: &mut ProcState,
        bytes: Vec<u8>,
        reply: Option<(dynres_core::rc::ReqId, ClientReply)>,
        members: u32,
        o: &mut Out<Self>,
    ) {
        use dynres_core::pmi::{PmiInput, PmiOutput};
        let mut input = Some(match reply {
            Some((req, reply)) => PmiInput::Reply { req, reply },
            None => PmiInput::Received(bytes),
        });
        while let Some(i) = input.take() {
            let Some(session) = st.pmi.as_mut() else {
                return;
            };
            session.handle(Instant::ZERO, i);
            let mut gets = Vec::new();
            while let Some(out) = session.poll_output() {
                match out {
                    PmiOutput::Request { req, request } => {
                        if let Some(d) = st.daemon {
                            send(o, d, RcMsg::Req(req, request));
                        }
                    }
                    PmiOutput::Send(bytes) if session.pmi2() && !bytes.starts_with(b"cmd=") => {
                        // PMI-2: the length field, then the body (PMIS-17).
                        let reply = bytes
                            .get(dynres_core::pmi::wire2::LEN_FIELD..)
                            .map(dynres_core::pmi::wire2::parse_message);
                        let Some(Ok(c)) = reply else {
                            st.unexpected_errors += 1;
                            continue;
                        };
                        match c.name.as_str() {
                            "kvs-fence-response" => {
                                let ok = c.get("rc") == Some("0");
                                if st.pmi_barrier.is_none() && ok {
                                    for r in 0..members {
                                        let m = format!("cmd=kvs-get;jobid=;srcid={r};key=k{r};");
                                        gets.extend(pmi2_message(&m));
                                    }
                                }
                                st.pmi_barrier.get_or_insert(ok);
                            }
                            "kvs-get-response" if c.get("found") == Some("TRUE") => {
                                st.pmi_seen.push(c.get("value").map(String::from));
                            }
                            "kvs-get-response" => st.pmi_seen.push(None),
                            "fullinit-response" | "kvs-put-response"
                                if c.get("rc") == Some("0") => {}
                            _ => st.unexpected_errors += 1,
                        }
                    }
                    PmiOutput::Send(line) => {
                        let line = String::from_utf8_lossy(&line).into_owned();
                        if let Some(rest) = line.strip_prefix("cmd=barrier_out rc=") {
                            let ok = rest.starts_with("0");
                            if st.pmi_barrier.is_none() && ok {
                                for r in 0..members {
                                    gets.extend_from_slice(
                                        format!("cmd=get key=k{r}\n").as_bytes(),
                                    );
                                }
                            }
                            st.pmi_barrier.get_or_insert(ok);
                        } else if let Some(rest) = line.strip_prefix("cmd=get_result rc=0 value=") {
                            let v = rest.split(' ').next().unwrap_or_default();
                            st.pmi_seen.push(Some(v.to_string()));
                        } else if line.starts_with("cmd=get_result ") {
                            st.pmi_seen.push(None);
                        }
                    }
                    PmiOutput::Aborted { .. } | PmiOutput::Close(_) => st.unexpected_errors += 1,
                }
            }
            if !gets.is_empty() {
                input = Some(PmiInput::Received(gets));
            }
        }
    }

    fn start_modex(&self, st: &mut ProcState, o: &mut Out<Self>) {
        let RcActor::Proc { pid, .. } = &self.actor else {
            return;
        };
        let call = ClientCall::Modex {
            pset: app_root(),
            data: modex_value(pid.rank),
            timeout: Duration::from_millis(100),
        };
        self.call(st, Step::Querying, call, o);
    }
}

impl RcNode {
    fn next_scripted(&self, st: &mut ProcState, o: &mut Out<Self>) {
        let RcActor::Proc { script, .. } = &self.actor else {
            return;
        };
        match script.get(st.script_pos as usize) {
            Some(ops) => self.call(
                st,
                Step::Applying,
                ClientCall::PsetOp { ops: ops.clone() },
                o,
            ),
            None => st.step = Step::Done,
        }
    }
}

impl Actor for RcNode {
    type Msg = Msg;
    type Timer = RcTimer;
    type State = RcState;
    type Storage = ();
    type Random = ();

    fn on_start(&self, _id: Id, _storage: &Option<()>, o: &mut Out<Self>) -> RcState {
        let mut state = self.start(o);
        state.seal();
        state
    }

    fn on_msg(&self, _id: Id, state: &mut Cow<RcState>, src: Id, msg: Msg, o: &mut Out<Self>) {
        self.deliver(state, src, msg.into_inner(), o);
        seal(state);
    }

    fn on_timeout(&self, _id: Id, state: &mut Cow<RcState>, timer: &RcTimer, o: &mut Out<Self>) {
        self.fire(state, timer, o);
        seal(state);
    }
}

/// The actor's steps, before [`seal`].
impl RcNode {
    fn start(&self, o: &mut Out<Self>) -> RcState {
        match &self.actor {
            RcActor::Master(cfg, bugs) => {
                let mut master = Master::new(cfg.clone()).expect("model configs are valid");
                master.plant(*bugs);
                let mut st = MasterState {
                    master,
                    now: Instant::ZERO,
                    log: Vec::new(),
                    lost: Vec::new(),
                    returned: Vec::new(),
                    added_nodes: 0,
                    refused_inputs: 0,
                    not_granted: 0,
                    version_violations: 0,
                    foreign_edits: 0,
                    foreign_confirms: 0,
                    foreign_confirm_edits: 0,
                    modex_fail_untold: 0,
                    exit_while_concurrent: false,
                    spawn_kills_granted: Vec::new(),
                    tickets: Vec::new(),
                    desk: ToolDesk::with_bugs(*bugs),
                    answered: BTreeSet::new(),
                    wrong_answers: 0,
                    left_queue: Vec::new(),
                    stalled: 0,
                    before: std::collections::BTreeMap::new(),
                    rollback_mismatches: 0,
                    spun: false,
                    fp: 0,
                };
                drain_master(&self.layout, &mut st, o, false);
                RcState::Master(Box::new(st))
            }
            RcActor::Scheduler(reqs, give_back, _) => {
                for (ticket, r) in (1..).zip(reqs) {
                    send(o, Layout::master(), RcMsg::Request(ticket, r.clone()));
                }
                if let Some(node) = give_back {
                    send(o, Layout::master(), RcMsg::ReturnNode(*node));
                }
                RcState::Scheduler
            }
            RcActor::Daemon(node, bugs, may_crash, _) => {
                if *may_crash {
                    o.set_timer(RcTimer::Crash, model_timeout());
                }
                let mut daemon = Daemon::new(*node);
                daemon.plant(*bugs);
                RcState::Daemon(Box::new(DaemonState {
                    daemon,
                    launched: Vec::new(),
                    regressions: 0,
                    lost: false,
                    modex_batches: Vec::new(),
                    app_versions: std::collections::BTreeMap::new(),
                    timed_out: false,
                    refused_inputs: 0,
                    spawn_launches: Vec::new(),
                    stale_replies: 0,
                    unready_launches: 0,
                    fp: 0,
                }))
            }
            RcActor::Proc { polls, .. } => RcState::Proc(Box::new(ProcState {
                phase: Phase::Dormant,
                client: None,
                daemon: None,
                step: Step::Idle,
                modex: None,
                pmi: None,
                pmi_barrier: None,
                pmi_seen: Vec::new(),
                refused_inputs: 0,
                current: None,
                polls_left: *polls,
                relaunched: false,
                seen: Vec::new(),
                script_pos: 0,
                spawn_app: None,
                child: false,
                kills: Vec::new(),
                unexpected_errors: 0,
                hasty: None,
                next_call: 0,
                fp: 0,
            })),
        }
    }

    fn deliver(&self, state: &mut Cow<RcState>, src: Id, msg: RcMsg, o: &mut Out<Self>) {
        match (&self.actor, state.to_mut(), msg) {
            (RcActor::Master(..), RcState::Master(st), msg) => {
                let mut asked = None;
                let input = match msg {
                    RcMsg::Request(ticket, req) => {
                        st.tickets.push((ticket, Ticket::Waiting));
                        let wait = tool_waits(ticket);
                        feed_desk(st, ToolInput::Asked { ticket, wait });
                        asked = Some(ticket);
                        MasterInput::RequestChange { ticket, req }
                    }
                    RcMsg::NodeLost(node) => MasterInput::NodeLost { node },
                    RcMsg::ReturnNode(node) => MasterInput::NodeReturned { node },
                    RcMsg::AddNode(node) => MasterInput::NodeAdded { node },
                    RcMsg::ToMaster(msg) => MasterInput::FromDaemon {
                        node: self.layout.node(src),
                        msg,
                    },
                    _ => return,
                };
                let before = versions(&st.master);
                let isolation = Isolation::before(&self.actor, st, &input);
                let foreign_confirm = ForeignConfirm::before(st, &input);
                if let MasterInput::FromDaemon {
                    msg: ToMaster::Exited { .. },
                    ..
                } = &input
                {
                    let open = || st.master.all_changes().filter(|c| !c.status.is_final());
                    if open().any(|a| open().any(|b| a.app != b.app)) {
                        st.exit_while_concurrent = true;
                    }
                }
                let giving_back = match &input {
                    MasterInput::NodeReturned { node } => Some(*node),
                    _ => None,
                };
                let adding = matches!(input, MasterInput::NodeAdded { .. });
                let batch_step = matches!(
                    input,
                    MasterInput::FromDaemon {
                        msg: ToMaster::Modex { .. },
                        ..
                    }
                );
                let r = st.master.handle(st.now, input);
                if let (Some(node), Ok(())) = (giving_back, &r) {
                    st.returned.push(node);
                }
                if r.is_err() && giving_back.is_none() {
                    st.refused_inputs += 1;
                }
                if adding && r.is_ok() {
                    st.added_nodes += 1;
                }
                if !version_step_ok(&before, &st.master) {
                    st.version_violations += 1;
                }
                // After the drain: the step's status changes are in the log then.
                drain_master(&self.layout, st, o, batch_step);
                if let Some(ticket) = asked {
                    feed_desk(st, ToolInput::Handled { ticket });
                }
                if let Some(check) = isolation {
                    check.after(&self.actor, st);
                }
                if let Some(check) = foreign_confirm {
                    check.after(st);
                }
            }
            (RcActor::Scheduler(_, _, Some(_)), RcState::Scheduler, RcMsg::NeedSlots) => {
                o.set_timer(RcTimer::Grant, model_timeout());
            }
            (RcActor::Daemon(..), RcState::Daemon(st), _) if st.lost => {}
            (RcActor::Daemon(..), RcState::Daemon(st), msg) => {
                let input = match msg {
                    RcMsg::ToDaemon(m) => {
                        if let ToDaemon::DefinePset {
                            name,
                            attrs,
                            members,
                        } = &m
                        {
                            let held = st.daemon.pset(name).map(|(_, a)| a.version);
                            if held.is_some_and(|v| attrs.version < v) {
                                st.regressions += 1;
                            }
                            let records = matches!(self.actor, RcActor::Daemon(_, _, _, true));
                            if records && name.is_app_root() {
                                st.app_versions.insert(attrs.version, members.to_vec());
                            }
                        }
                        DaemonInput::FromMaster(m)
                    }
                    RcMsg::Req(req, request) => {
                        let from = ProcessId::new(self.namespace(), self.rank_of(src));
                        DaemonInput::FromClient { from, req, request }
                    }
                    RcMsg::Exited(pid) => DaemonInput::Exited { pid },
                    _ => return,
                };
                if st.daemon.handle(Instant::ZERO, input).is_err() {
                    st.refused_inputs += 1;
                }
                drain_daemon(&self.layout, self.initial, st, o);
            }
            (RcActor::Proc { pid, role, .. }, RcState::Proc(st), msg) => match (st.phase, msg) {
                (Phase::Dormant, RcMsg::Launch) => {
                    st.phase = Phase::Running;
                    st.client = Some(Client::new(pid.clone()));
                    st.daemon = Some(src);
                    match role {
                        Role::Root {
                            lead: Lead::Excluding(_),
                            ..
                        } if pid.rank == 1 => {
                            // It waits for rank 0's Go.
                        }
                        Role::Root {
                            lead: Lead::Excluding(_),
                            ..
                        } => {
                            // The application's pset becomes inactive (so the two psets
                            // of the leaders are the malleable ones) and rank 0 defines
                            // ex0.
                            let root = app_root();
                            let ops = vec![
                                PsetOp::Null {
                                    target: root.clone(),
                                    attrs: AttrUpdate::active(false),
                                },
                                PsetOp::Set {
                                    op: SetOp::Difference,
                                    pset1: root,
                                    pset2: PsetName::self_set(),
                                    target: Some(Lead::Excluding(0).pset()),
                                    attrs: AttrUpdate::active(true),
                                },
                            ];
                            self.call(st, Step::Setup, ClientCall::PsetOp { ops }, o);
                        }
                        Role::Root {
                            lead: Lead::App(_),
                            setup: false,
                            ..
                        } => Self::poll_later(st, o),
                        Role::Root {
                            lead: lead @ Lead::App(app),
                            setup: true,
                            ..
                        } => {
                            // What applications do at start: a scheduling hint (NULL) and
                            // an inactive pset the runtime keeps consistent (PSET-34).
                            let root = lead.pset();
                            let all = PsetName::parse(&format!("mpi://app/{app}/all"))
                                .expect("valid name");
                            let ops = vec![
                                PsetOp::Null {
                                    target: root.clone(),
                                    attrs: AttrUpdate::none().with_sched("mpi_ps_sched_poll", "1"),
                                },
                                PsetOp::Set {
                                    op: SetOp::Union,
                                    pset1: root.clone(),
                                    pset2: PsetName::self_set(),
                                    target: Some(all),
                                    attrs: AttrUpdate::active(false),
                                },
                            ];
                            self.call(st, Step::Setup, ClientCall::PsetOp { ops }, o);
                        }
                        Role::Member { may_crash } => {
                            if *may_crash {
                                o.set_timer(RcTimer::Crash, model_timeout());
                            }
                        }
                        Role::Rogue => Self::poll_later(st, o),
                        Role::Scripted => self.next_scripted(st, o),
                        Role::Spawner => {
                            let commands = vec![dynres_core::rc::SpawnCommand {
                                program: "child".into(),
                                args: Vec::new(),
                                count: 1,
                            }];
                            let env = Vec::new();
                            let watch = dynres_core::rc::SpawnWatch::Handshake;
                            let call = ClientCall::Spawn {
                                commands,
                                env,
                                watch,
                            };
                            self.call(st, Step::Querying, call, o);
                        }
                        Role::Modex { may_crash } => {
                            if *may_crash {
                                o.set_timer(RcTimer::Crash, model_timeout());
                            }
                            self.start_modex(st, o);
                        }
                        Role::Pmi {
                            may_crash,
                            members,
                            pmi2,
                            bugs,
                        } => {
                            if *may_crash {
                                o.set_timer(RcTimer::Crash, model_timeout());
                            }
                            let job = pmi_job(pid, *members);
                            st.pmi = Some(dynres_core::pmi::PmiSession::with_bugs(job, *bugs));
                            let r = pid.rank;
                            let start = if *pmi2 {
                                // What Slurm's libpmi2 sends (`spec/pmi.md` §3.1), the
                                // whole start-up at once (PMIS-4 serves it in order).
                                let mut b = b"cmd=init pmi_version=2 pmi_subversion=0\n".to_vec();
                                for m in [
                                    format!("cmd=fullinit;pmirank={r};threaded=FALSE;"),
                                    format!("cmd=kvs-put;key=k{r};value=v{r};"),
                                    "cmd=kvs-fence;".into(),
                                ] {
                                    b.extend(pmi2_message(&m));
                                }
                                b
                            } else {
                                format!("cmd=put key=k{r} value=v{r}\ncmd=barrier_in\n")
                                    .into_bytes()
                            };
                            Self::pmi_feed(st, start, None, *members, o);
                        }
                        Role::New { may_crash } => {
                            if *may_crash {
                                o.set_timer(RcTimer::Crash, model_timeout());
                            }
                            if self.fair {
                                o.set_timer(RcTimer::Begin, model_timeout());
                            } else {
                                self.query_self(st, o);
                            }
                        }
                    }
                }
                (Phase::Dormant, RcMsg::LaunchSpawned(app)) => {
                    st.phase = Phase::Running;
                    st.client = Some(Client::new(pid.clone()));
                    st.daemon = Some(src);
                    st.child = true;
                    st.spawn_app = Some(app.clone());
                    // It tries to kill its own spawn (SPAWN-20), then runs until the
                    // spawner kills it (its own exit would add nothing the kill does
                    // not: both are an `Exited` at any point).
                    self.call(st, Step::Done, ClientCall::KillSpawn { app }, o);
                }
                (Phase::Running | Phase::Dead, RcMsg::Launch | RcMsg::LaunchSpawned(_)) => {
                    st.relaunched = true
                }
                (Phase::Running, RcMsg::Reply(req, reply))
                    if st.pmi.as_ref().is_some_and(|s| s.owns(req)) =>
                {
                    let members = match role {
                        Role::Pmi { members, .. } => *members,
                        _ => 0,
                    };
                    Self::pmi_feed(st, Vec::new(), Some((req, reply)), members, o);
                }
                (Phase::Running, RcMsg::Reply(req, reply)) => {
                    let Some(client) = st.client.as_mut() else {
                        return;
                    };
                    if client
                        .handle(Instant::ZERO, ClientInput::Reply { req, reply })
                        .is_err()
                    {
                        st.refused_inputs += 1;
                    }
                    let mut done = Vec::new();
                    while let Some(out) = client.poll_output() {
                        match out {
                            ClientOutput::Request { req, request } => {
                                if let Some(d) = st.daemon {
                                    send(o, d, RcMsg::Req(req, request));
                                }
                            }
                            ClientOutput::Done { result, .. } => done.push(result),
                        }
                    }
                    for r in done {
                        self.on_result(st, r, o);
                    }
                }
                (Phase::Running, RcMsg::Go) => {
                    let ops = vec![PsetOp::Set {
                        op: SetOp::Difference,
                        pset1: app_root(),
                        pset2: PsetName::self_set(),
                        target: Some(Lead::Excluding(1).pset()),
                        attrs: AttrUpdate::active(true),
                    }];
                    self.call(st, Step::Setup, ClientCall::PsetOp { ops }, o);
                }
                (Phase::Running, RcMsg::Kill | RcMsg::Terminate) => {
                    if let Some(d) = st.daemon {
                        send(o, d, RcMsg::Exited(pid.clone()));
                    }
                    st.phase = Phase::Dead;
                }
                _ => {}
            },
            _ => {}
        }
    }

    fn fire(&self, state: &mut Cow<RcState>, timer: &RcTimer, o: &mut Out<Self>) {
        match (state.to_mut(), timer) {
            (RcState::Master(st), RcTimer::Master) => {
                if self.fair && st.master.all_changes().any(|c| !c.status.is_final()) {
                    st.stalled += 1;
                }
                let mut isolation = None;
                if let Some(t) = st.master.poll_timeout() {
                    st.now = st.now.max(t);
                    let before = versions(&st.master);
                    isolation = Isolation::before(&self.actor, st, &MasterInput::Timeout);
                    if st.master.handle(st.now, MasterInput::Timeout).is_err() {
                        st.refused_inputs += 1;
                    }
                    if !version_step_ok(&before, &st.master) {
                        st.version_violations += 1;
                    }
                    // Every deadline due at `now` was just handled: one still due would
                    // wake the master again at once, and again (RC-10).
                    if st.master.poll_timeout().is_some_and(|next| next <= st.now) {
                        st.spun = true;
                    }
                }
                drain_master(&self.layout, st, o, false);
                if let Some(check) = isolation {
                    check.after(&self.actor, st);
                }
            }
            (RcState::Scheduler, RcTimer::Grant) => {
                if let RcActor::Scheduler(_, _, Some(slots)) = &self.actor {
                    let node = dynres_core::slots::NodeSpec {
                        name: "granted".into(),
                        slots: *slots,
                    };
                    send(o, Layout::master(), RcMsg::AddNode(node));
                }
            }
            (RcState::Daemon(st), RcTimer::Daemon) if !st.lost => {
                if let Some(t) = st.daemon.poll_timeout() {
                    st.timed_out = true;
                    if st.daemon.handle(t, DaemonInput::Timeout).is_err() {
                        st.refused_inputs += 1;
                    }
                }
                drain_daemon(&self.layout, self.initial, st, o);
            }
            (RcState::Proc(st), RcTimer::Begin) if st.phase == Phase::Running => {
                self.query_self(st, o);
            }
            (RcState::Proc(st), RcTimer::Poll) if st.phase == Phase::Running => {
                if let (
                    RcActor::Proc {
                        role: Role::Spawner,
                        ..
                    },
                    Some(app),
                ) = (&self.actor, st.spawn_app.clone())
                {
                    self.call(st, Step::Querying, ClientCall::KillSpawn { app }, o);
                    return;
                }
                st.polls_left = st.polls_left.saturating_sub(1);
                self.root_next(st, o);
            }
            (RcState::Daemon(st), RcTimer::Crash) if !st.lost => {
                // The node crashes: its processes die with it, the failure detector
                // tells the master.
                st.lost = true;
                if let RcActor::Daemon(node, ..) = &self.actor {
                    send(o, Layout::master(), RcMsg::NodeLost(*node));
                }
                for p in st.daemon.local() {
                    send(o, self.layout.proc(p), RcMsg::Kill);
                }
            }
            (RcState::Proc(st), RcTimer::Crash) if st.phase == Phase::Running => {
                if let (Some(d), RcActor::Proc { pid, .. }) = (st.daemon, &self.actor) {
                    send(o, d, RcMsg::Exited(pid.clone()));
                }
                st.phase = Phase::Dead;
            }
            _ => {}
        }
    }
}

/// The rank of a process actor.
fn pid_rank(actor: &RcActor) -> Option<u32> {
    match actor {
        RcActor::Proc { pid, .. } => Some(pid.rank),
        _ => None,
    }
}

impl RcNode {
    /// The id of rank `rank` of the job.
    fn pid_of(&self, rank: u32) -> ProcessId {
        ProcessId::new(self.namespace(), rank)
    }

    fn namespace(&self) -> dynres_core::Namespace {
        dynres_core::Namespace::new(NAMESPACE)
    }

    fn rank_of(&self, id: Id) -> u32 {
        (usize::from(id) - 2 - self.layout.daemons) as u32
    }
}

/// The application every model runs.
pub const APP: &str = "app";
/// The second application of the configurations whose job starts two (`RC-15`).
pub const APP2: &str = "app2";
/// The third application of the configuration whose job starts three (`RC-15`).
pub const APP3: &str = "app3";
/// The job's namespace in every model.
pub const NAMESPACE: &str = "job";
