//! The runtime part of a spawn (`spec/spawn.md` §9, `SPAWN-17..20`): the
//! master grants the children slots all at once or not at all, makes them a new
//! application of the job, has their daemons launch them, lets only the spawning
//! application kill them, and forgets the application once its last child is gone.
//!
//! The handshake between parent and children (`spec/spawn.md`) is not the master's
//! business: it runs between the application processes with `dynres_core::spawn`.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::{Master, MasterOutput, Route};
use crate::bugs::Bug;
use crate::process::ProcessId;
use crate::rc::error::{BadRequest, RcError};
use crate::rc::msg::ClientReply;
use crate::rc::msg::ToDaemon;
use crate::rc::types::{LaunchCommand, NodeId, NodeLaunch, SpawnCommand, SpawnWatch, Spawned};
use crate::slots::SlotError;

/// Most children one spawn may start (the largest group a handshake carries).
pub const MAX_SPAWN: u64 = crate::spawn::msg::MAX_GROUP as u64;

/// A spawn whose children are not all gone.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SpawnGroup {
    /// The application that spawned it: the only one that may kill it (`SPAWN-20`).
    pub spawner: String,
    /// The children, in spawn order.
    pub procs: Vec<ProcessId>,
    /// Who tells the spawner that a child failed (`SPAWN-24`).
    pub watch: SpawnWatch,
    /// `SPAWN-25`: an MPI library's spawn not answered yet — its spawner, the grant,
    /// and the children that reached their MPI library so far.
    pub unanswered: Option<(Route, Spawned, BTreeSet<ProcessId>)>,
    /// `SPAWN-25`: a child ended before every child started, so the spawn failed: its
    /// spawner was told, the other children were killed, and none of their exits is a
    /// loss of the job.
    pub failed: bool,
}

/// Checks what a client may ask for before anything is allocated (`RC-2`).
fn validate(commands: &[SpawnCommand], env: &[(String, String)]) -> Result<u64, RcError> {
    if commands.is_empty() {
        return Err(RcError::BadRequest(BadRequest::NoSpawnCommand));
    }
    let mut total: u64 = 0;
    for c in commands {
        if c.program.is_empty() || c.program.contains('\0') {
            return Err(RcError::BadRequest(BadRequest::NoProgram));
        }
        if c.count == 0 {
            return Err(RcError::BadRequest(BadRequest::EmptySpawnCommand));
        }
        if c.args.iter().any(|a| a.contains('\0')) {
            return Err(RcError::BadRequest(BadRequest::NulInArgument));
        }
        total += u64::from(c.count);
    }
    if total > MAX_SPAWN {
        return Err(RcError::BadRequest(BadRequest::SpawnTooLarge));
    }
    let bad_name = |k: &str| k.is_empty() || k.contains('=') || k.contains('\0');
    if env.iter().any(|(k, v)| bad_name(k) || v.contains('\0')) {
        return Err(RcError::BadRequest(BadRequest::BadEnvironment));
    }
    Ok(total)
}

impl Master {
    /// `SPAWN-17`/`SPAWN-18`: grants a client's spawn or refuses it with nothing
    /// changed.
    pub(crate) fn spawn(
        &mut self,
        route: &Route,
        commands: Vec<SpawnCommand>,
        env: Vec<(String, String)>,
        watch: SpawnWatch,
    ) -> Result<Spawned, RcError> {
        let spawner = self
            .app_of
            .get(&route.pid)
            .cloned()
            .ok_or_else(|| RcError::NotPermitted(route.pid.clone()))?;
        let total = validate(&commands, &env)?;
        let free = self.slots.free_count();
        if total > free as u64 {
            return Err(RcError::Slots(SlotError::Exhausted {
                wanted: total as usize,
                free,
            }));
        }
        let app = format!("spawn-{}", self.next_spawn);
        let first = self.next_rank;
        let pids: Vec<ProcessId> = (0..total as u32)
            .map(|i| ProcessId::new(self.cfg.namespace.clone(), first.saturating_add(i)))
            .collect();
        // Placed on a copy, named in the registry, then committed: a refusal at any
        // step leaves the master as it was.
        let mut slots = self.slots.clone();
        let (placed, new_nodes) = slots.place(&pids)?;
        let root = self.registry.add_app(&app, &pids)?;
        self.slots = slots;
        self.next_rank = first.saturating_add(total as u32);
        self.next_spawn += 1;
        for p in &placed {
            self.procs.insert(p.pid.clone(), NodeId(p.node));
            self.app_of.insert(p.pid.clone(), app.clone());
        }
        self.spawns.insert(
            app.clone(),
            SpawnGroup {
                spawner,
                procs: pids.clone(),
                watch,
                unanswered: None,
                failed: false,
            },
        );
        // SPAWN-18, in order on every ordered link: the children's pset, the job data,
        // then the launches.
        let early = self.bug(Bug::SpawnLaunchBeforeReplica);
        if !early {
            self.replicate_spawn(&root, &pids);
        }
        for n in new_nodes {
            self.out.push_back(MasterOutput::NodeAllocated(NodeId(n)));
        }
        // One message per node with every command that has children there, so a
        // daemon knows all of its children before it launches the first (their
        // `Standing`: how many of the world run on the node).
        let mut launches: BTreeMap<NodeId, Vec<NodeLaunch>> = BTreeMap::new();
        let mut next = 0usize;
        for c in commands {
            let mine = &pids[next..next + c.count as usize];
            next += c.count as usize;
            let command = LaunchCommand {
                program: c.program,
                args: c.args,
                env: env.clone(),
            };
            for (node, procs) in self.by_node(mine) {
                let command = command.clone();
                launches
                    .entry(node)
                    .or_default()
                    .push(NodeLaunch { command, procs });
            }
        }
        for (node, launches) in launches {
            let app = app.clone();
            self.send(node, ToDaemon::Spawn { app, launches });
        }
        if early {
            self.replicate_spawn(&root, &pids);
        }
        tracing::debug!(%app, children = total, "spawn granted");
        Ok(Spawned { app, procs: pids })
    }

    /// The children's pset and job data, to every daemon (`SPAWN-18`).
    fn replicate_spawn(&mut self, root: &crate::pset::PsetName, pids: &[ProcessId]) {
        self.broadcast_pset(root);
        self.broadcast(ToDaemon::job_data(pids, &[]));
    }

    /// `SPAWN-20`: the spawning application kills the children of a spawn that failed.
    /// A spawn whose children are all gone has nothing left to kill.
    pub(crate) fn kill_spawn(&mut self, route: &Route, app: &str) -> Result<(), RcError> {
        let Some(group) = self.spawns.get(app) else {
            let past = app
                .strip_prefix("spawn-")
                .and_then(|k| k.parse::<u64>().ok())
                .is_some_and(|k| k < self.next_spawn);
            return if past {
                Ok(())
            } else {
                Err(RcError::BadRequest(BadRequest::NoSuchSpawn))
            };
        };
        if self.app_of.get(&route.pid) != Some(&group.spawner) && !self.bug(Bug::KillSpawnByAnyone)
        {
            return Err(RcError::NotPermitted(route.pid.clone()));
        }
        let running: Vec<ProcessId> = group
            .procs
            .iter()
            .filter(|p| self.slots.is_running(p))
            .cloned()
            .collect();
        let _ = self.slots.mark_leaving(&running);
        self.kill(&running);
        Ok(())
    }

    /// `SPAWN-17`, `SPAWN-25`: answers a granted spawn — at once, or, for an MPI
    /// library's (`SpawnWatch::Job`), once every child reached its MPI library.
    pub(crate) fn answer_spawn(&mut self, route: Route, granted: Spawned, watch: SpawnWatch) {
        let waits = watch == SpawnWatch::Job && !self.bug(Bug::MpiSpawnAnsweredAtGrant);
        match self.spawns.get_mut(&granted.app) {
            Some(group) if waits => group.unanswered = Some((route, granted, BTreeSet::new())),
            _ => self.reply(&route, ClientReply::Spawned(Ok(granted))),
        }
    }

    /// `SPAWN-25`: a child reached its MPI library; the last of its spawn's to do so
    /// has the spawn answered.
    pub(crate) fn on_started(&mut self, pid: &ProcessId) {
        let Some(app) = self.app_of.get(pid) else {
            return;
        };
        let Some(group) = self.spawns.get_mut(app) else {
            return;
        };
        let all = group.procs.len();
        let Some((_, _, started)) = &mut group.unanswered else {
            return;
        };
        started.insert(pid.clone());
        if started.len() == all {
            if let Some((route, granted, _)) = group.unanswered.take() {
                self.reply(&route, ClientReply::Spawned(Ok(granted)));
            }
        }
    }

    /// `SPAWN-25`: a child of an MPI library's unanswered spawn ended before every child
    /// started: the spawn fails — its spawner hears why, and its other children are
    /// killed, so nothing of it is left.
    pub(crate) fn fail_unstarted_spawn(&mut self, pid: &ProcessId) {
        let Some(app) = self.app_of.get(pid) else {
            return;
        };
        let Some(group) = self.spawns.get_mut(app) else {
            return;
        };
        let Some((route, _, _)) = group.unanswered.take() else {
            return;
        };
        group.failed = true;
        let others: Vec<ProcessId> = group.procs.iter().filter(|p| *p != pid).cloned().collect();
        let err = RcError::ProcessLost(pid.clone());
        self.reply(&route, ClientReply::Spawned(Err(err)));
        if self.bug(Bug::FailedSpawnKeepsChildren) {
            return;
        }
        let running: Vec<ProcessId> = others
            .into_iter()
            .filter(|p| self.slots.is_running(p))
            .collect();
        let _ = self.slots.mark_leaving(&running);
        self.kill(&running);
    }

    /// `SPAWN-19`, `SPAWN-24`, `SPAWN-25`: whether the exit of spawned child `pid` is a
    /// loss of the job — only for an MPI library's spawn that was answered (no
    /// handshake tells its spawner); `None` if `pid` is no spawn's child.
    pub(crate) fn spawned_exit_is_loss(&self, pid: &ProcessId) -> Option<bool> {
        let group = self.spawns.get(self.app_of.get(pid)?)?;
        let answered = group.unanswered.is_none() && !group.failed;
        Some(group.watch == SpawnWatch::Job && answered)
    }

    /// `SPAWN-19`: after a process exited — once every child of its spawn is gone, the
    /// spawn's psets and job data are forgotten here and at every daemon.
    pub(crate) fn spawn_child_exited(&mut self, pid: &ProcessId) {
        let Some(app) = self.app_of.get(pid).cloned() else {
            return;
        };
        let Some(group) = self.spawns.get(&app) else {
            return;
        };
        if group.procs.iter().any(|p| self.procs.contains_key(p))
            || self.bug(Bug::SpawnNeverForgotten)
        {
            return;
        }
        let group = self.spawns.remove(&app).expect("present");
        for name in self.registry.forget_app(&app) {
            self.broadcast(ToDaemon::PrunePset { name });
        }
        self.broadcast(ToDaemon::job_data(&[], &group.procs));
        for p in &group.procs {
            self.app_of.remove(p);
        }
        tracing::debug!(%app, "spawn forgotten: every child is gone");
        self.retire_processes();
    }

    /// The spawns whose children are not all gone: (application, spawner, children).
    pub fn spawns(&self) -> impl Iterator<Item = (&str, &str, &[ProcessId])> {
        self.spawns
            .iter()
            .map(|(a, g)| (a.as_str(), g.spawner.as_str(), g.procs.as_slice()))
    }

    /// Whether `pid` is a child of a spawn (not of an application the job started with
    /// or a resource change added).
    pub fn is_spawned(&self, pid: &ProcessId) -> bool {
        self.spawn_watch(pid).is_some()
    }

    /// Who tells `pid`'s spawner that it failed, if it is a spawn's child (`SPAWN-24`).
    pub fn spawn_watch(&self, pid: &ProcessId) -> Option<SpawnWatch> {
        self.app_of
            .get(pid)
            .and_then(|a| self.spawns.get(a))
            .map(|g| g.watch)
    }
}
