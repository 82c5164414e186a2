//! A daemon: one per node. Keeps a replica of the psets and queryable changes so that
//! queries are answered locally, forwards everything else to the master, and launches,
//! kills and reports its local processes (thesis §7.3–7.4.3; `spec/resource-change.md`
//! §5).

use crate::shared::Shared;
use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::string::String;
use alloc::vec::Vec;

mod modex;
mod standing;

pub use standing::Standing;

use crate::process::{ProcRuns, ProcSet, ProcessId};
use crate::pset::{Attributes, Domain, PsetName};
use crate::rc::error::{DaemonRejection, RcError};
pub use crate::rc::input::DaemonInput;
use crate::rc::msg::{ClientReply, ClientRequest, ToDaemon, ToMaster};
use crate::rc::query;
use crate::rc::trace;
use crate::rc::types::{ChangeInfo, LaunchCommand, NodeId, NodeLaunch, ReqId};
use crate::time::Instant;

/// What a daemon wants done.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DaemonOutput {
    /// Send to the master.
    ToMaster(ToMaster),
    /// Answer a local client.
    ToClient {
        /// The client.
        to: ProcessId,
        /// Its request id.
        req: ReqId,
        /// The reply.
        reply: ClientReply,
    },
    /// Start these processes here (their namespace and rank go in their environment).
    Launch {
        /// The processes.
        procs: Vec<ProcessId>,
    },
    /// Start these spawned processes here, running `command` (`SPAWN-18`); their
    /// namespace, rank and application `app` go in their environment.
    Spawn {
        /// The children's application.
        app: String,
        /// What they run.
        command: LaunchCommand,
        /// The processes.
        procs: Vec<ProcessId>,
    },
    /// Kill these local processes (SIGKILL); report their exit as usual.
    Kill {
        /// The processes.
        procs: Vec<ProcessId>,
    },
}

/// See the module doc.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Daemon {
    node: NodeId,
    psets: Shared<BTreeMap<PsetName, (ProcRuns, Attributes)>>,
    changes: Shared<BTreeMap<PsetName, ChangeInfo>>,
    job: Shared<ProcSet>,
    local: Shared<BTreeSet<ProcessId>>,
    /// Modexes being gathered here, by pset and replica version (`MODEX-1`).
    gathers: BTreeMap<(PsetName, u64), Gather>,
    out: VecDeque<DaemonOutput>,
    bugs: crate::bugs::Bugs,
}

/// This node's part of one modex (`MODEX-1`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Gather {
    /// The pset's members placed on this node, at the gather's version.
    members: BTreeSet<ProcessId>,
    /// Contributions so far: member → (its request, its value).
    arrived: BTreeMap<ProcessId, (ReqId, String)>,
    /// The earliest deadline among the contributors.
    deadline: Instant,
    /// The node's batch went to the master; only its `ModexDone` ends the gather now.
    forwarded: bool,
}

impl Daemon {
    /// The daemon of `node`, with an empty replica (the master fills it).
    pub fn new(node: NodeId) -> Self {
        Daemon {
            node,
            psets: BTreeMap::new().into(),
            changes: BTreeMap::new().into(),
            job: ProcSet::new().into(),
            local: BTreeSet::new().into(),
            gathers: BTreeMap::new(),
            out: VecDeque::new(),
            bugs: crate::bugs::Bugs::NONE,
        }
    }

    /// Plants bugs for the verification crate's corpus.
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&mut self, bugs: crate::bugs::Bugs) {
        self.bugs = bugs;
    }

    /// Its node.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Processes running here.
    pub fn local(&self) -> &BTreeSet<ProcessId> {
        &self.local
    }

    /// The replica's view of a pset: members and attributes.
    pub fn pset(&self, name: &PsetName) -> Option<&(ProcRuns, Attributes)> {
        self.psets.get(name)
    }

    /// Every pset of the replica: name, members and attributes.
    pub fn psets(&self) -> impl Iterator<Item = (&PsetName, &(ProcRuns, Attributes))> {
        self.psets.iter()
    }

    /// The replica's job data: every process of the job, held as rank ranges (RC-23).
    pub fn job(&self) -> &ProcSet {
        &self.job
    }

    /// The replica's queryable changes.
    pub fn changes(&self) -> impl Iterator<Item = &ChangeInfo> {
        self.changes.values()
    }

    /// Feeds one input. Refuses requests from processes that do not run here.
    pub fn handle(&mut self, now: Instant, input: DaemonInput) -> Result<(), DaemonRejection> {
        crate::trace::record(self, now, input, Self::step)
    }

    /// A fingerprint of the state, without the queue of outputs not yet drained.
    pub fn fingerprint(&mut self) -> u64 {
        let out = core::mem::take(&mut self.out);
        let fp = trace::fingerprint(self);
        self.out = out;
        fp
    }

    fn step(&mut self, now: Instant, input: DaemonInput) -> Result<(), DaemonRejection> {
        match input {
            DaemonInput::FromMaster(msg) => self.on_master(msg),
            DaemonInput::FromClient { from, req, request } => {
                if !self.local.contains(&from) {
                    let reply = ClientReply::Published(Err(RcError::NotPermitted(from.clone())));
                    self.out.push_back(DaemonOutput::ToClient {
                        to: from.clone(),
                        req,
                        reply,
                    });
                    return Err(DaemonRejection::NotLocal(from));
                }
                self.on_client(now, from, req, request);
            }
            DaemonInput::Exited { pid } => {
                if self.local.remove(&pid) {
                    self.modex_member_gone(&pid);
                    self.out
                        .push_back(DaemonOutput::ToMaster(ToMaster::Exited { pid }));
                }
            }
            // SPAWN-25: believed only of a process of this node.
            DaemonInput::Started { pid } => {
                if self.local.contains(&pid) {
                    self.out
                        .push_back(DaemonOutput::ToMaster(ToMaster::Started { pid }));
                }
            }
            DaemonInput::Timeout => self.expire_gathers(now),
        }
        Ok(())
    }

    /// The next thing to do, if any.
    #[must_use = "an output is an action the driver must carry out"]
    pub fn poll_output(&mut self) -> Option<DaemonOutput> {
        self.out.pop_front()
    }

    /// When to call `handle(now, DaemonInput::Timeout)` next. A daemon's only deadlines
    /// are those of modexes not yet complete on its node (`MODEX-5`); every other
    /// deadline is kept by the master.
    #[must_use = "a deadline the driver must arm a timer for"]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.gathers
            .values()
            .filter(|g| !g.forwarded)
            .map(|g| g.deadline)
            .min()
    }

    fn on_master(&mut self, msg: ToDaemon) {
        match msg {
            ToDaemon::DefinePset {
                name,
                members,
                attrs,
            } => {
                let stale =
                    self.bugs.has(crate::bugs::Bug::StaleReplica) && self.psets.contains_key(&name);
                if !stale {
                    self.psets.insert(name.clone(), (members, attrs));
                }
                self.modex_pset_changed(&name);
            }
            ToDaemon::PrunePset { name } => {
                self.psets.remove(&name);
                self.modex_pset_changed(&name);
            }
            ToDaemon::ModexDone {
                pset,
                version,
                result,
            } => self.modex_done(&pset, version, result),
            ToDaemon::JobData { added, removed } => {
                self.job.extend(added.iter());
                for p in removed.iter() {
                    self.job.remove(&p);
                }
            }
            ToDaemon::Change { delta, info } => match info {
                Some(info) => {
                    self.changes.insert(delta, info);
                }
                None => {
                    self.changes.remove(&delta);
                }
            },
            ToDaemon::Launch { procs } => {
                if !self.bugs.has(crate::bugs::Bug::LaunchNotRecordedLocal) {
                    self.local.extend(procs.iter().cloned());
                }
                self.out.push_back(DaemonOutput::Launch { procs });
            }
            ToDaemon::Spawn { app, launches } => {
                // Recorded as local like any launch: a later `Kill` (a failed spawn's
                // orphans, SPAWN-20) must reach them. All of the node's children first,
                // so each launch's standing counts them all (`Daemon::standing`).
                for l in &launches {
                    self.local.extend(l.procs.iter().cloned());
                }
                for NodeLaunch { command, procs } in launches {
                    self.out.push_back(DaemonOutput::Spawn {
                        app: app.clone(),
                        command,
                        procs,
                    });
                }
            }
            ToDaemon::Kill { procs } => {
                let procs: Vec<ProcessId> = procs
                    .into_iter()
                    .filter(|p| self.local.contains(p))
                    .collect();
                if !procs.is_empty() {
                    self.out.push_back(DaemonOutput::Kill { procs });
                }
            }
            ToDaemon::Reply { to, req, reply } => {
                self.out
                    .push_back(DaemonOutput::ToClient { to, req, reply });
            }
        }
    }

    fn on_client(&mut self, now: Instant, from: ProcessId, req: ReqId, request: ClientRequest) {
        if let ClientRequest::Modex {
            pset,
            data,
            timeout,
        } = request
        {
            return self.modex(now, from, req, pset, data, timeout);
        }
        let reply = match &request {
            ClientRequest::Query { bound } => {
                let app = self.app_of(&from);
                ClientReply::Query(query::answer(
                    self.changes.values(),
                    app,
                    &from,
                    bound.as_ref(),
                ))
            }
            ClientRequest::PsetInfo { name } => ClientReply::PsetInfo(self.info(&from, name)),
            _ => {
                self.out
                    .push_back(DaemonOutput::ToMaster(ToMaster::Forward {
                        from,
                        req,
                        request,
                    }));
                return;
            }
        };
        self.out.push_back(DaemonOutput::ToClient {
            to: from,
            req,
            reply,
        });
    }

    fn info(&self, from: &ProcessId, name: &PsetName) -> Result<(usize, Attributes), RcError> {
        if name.domain() == Domain::SelfSet {
            let _ = from;
            return Ok((1, Attributes::new(0, true)));
        }
        self.psets
            .get(name)
            .map(|(m, a)| (m.len(), a.clone()))
            .ok_or_else(|| crate::pset::PsetError::NotFound(name.clone()).into())
    }

    /// The caller's application: the app root holding it, else the change adding it.
    fn app_of(&self, pid: &ProcessId) -> Option<&str> {
        self.psets
            .iter()
            .find(|(n, (m, _))| n.is_app_root() && m.contains(pid))
            .and_then(|(n, _)| n.app())
            .or_else(|| {
                self.changes
                    .values()
                    .find(|c| c.includes(pid))
                    .map(|c| c.app.as_str())
            })
    }
}

crate::machine::by_inherent_methods!(Daemon, DaemonInput, DaemonOutput, DaemonRejection);

impl crate::trace::Recorded for Daemon {
    const ROLE: &'static str = "daemon";
    // A refused request is answered with a refusal, which the outputs already show.
    const RESULT: crate::trace::ResultRecord = crate::trace::ResultRecord::Omitted;
    fn key(&self) -> crate::trace::TraceKey {
        crate::trace::TraceKey::Node(self.node.0)
    }
    fn queue(&mut self) -> &mut VecDeque<DaemonOutput> {
        &mut self.out
    }
    fn encode_input(input: &DaemonInput) -> Vec<u8> {
        trace::encode_daemon_input(input)
    }
}
