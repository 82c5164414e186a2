//! An MPI library's spawn (`spec/spawn.md` SPAWN-24, SPAWN-25), checked with the
//! shipped master: a spawner asks for two children as an MPI library does
//! (`SpawnWatch::Job`); each child, once launched, may reach its MPI library (the
//! daemon's `Started`) or die, in any order, and a child told to die dies some time
//! later. The daemon is the model: it forwards the spawner's request, the children's
//! starts and exits as `ToMaster` messages from their node, and records the kills and
//! replies the master sends.
//!
//! Properties:
//! - SPAWN-25: the spawner is answered once; `Ok` only once every child started;
//! - SPAWN-25: a child that ends before every child started fails the spawn at once,
//!   and every other child is dead or told to die;
//! - SPAWN-24, SPAWN-25: a child's exit is a loss of the job only after its spawn was
//!   answered `Ok`;
//! - (sometimes) the spawn succeeds; it fails.

use dynres_core::bugs::Bugs;
use dynres_core::rc::{
    ClientReply, ClientRequest, DataServer, Master, MasterConfig, MasterInput, MasterOutput,
    NodeId, SpawnCommand, SpawnWatch, ToDaemon, ToMaster,
};
use dynres_core::slots::NodeSpec;
use dynres_core::time::{Duration, Instant};
use dynres_core::{Namespace, ProcessId};
use stateright::{Model, Property};

use crate::run::Outcome;

/// How many children the spawn asks for.
const CHILDREN: usize = 2;

/// A child's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Child {
    /// Not launched (the spawn was not asked yet).
    Unborn,
    /// Launched; not in its MPI library yet.
    Launched,
    /// In its MPI library (`Started` told).
    Started,
    /// Exited.
    Dead,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpawnMpiState {
    /// The shipped master.
    pub master: Master,
    /// The children, by their place in the spawn.
    pub children: [Child; CHILDREN],
    /// Children the master told their daemon to kill.
    pub kill_ordered: [bool; CHILDREN],
    /// The spawner's answers.
    pub answers: Vec<ClientReply>,
    /// An `Ok` came while a child had not started.
    pub ok_early: bool,
    /// A child died before every child started and before the spawn was answered.
    pub died_first: bool,
    /// Exits the master reported as losses of the job, and whether the spawn had been
    /// answered `Ok` then.
    pub losses: Vec<bool>,
}

/// What can happen next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpawnMpiAction {
    /// The spawner's MPI library asks for the children.
    Ask,
    /// Child `i` reaches its MPI library.
    Start(usize),
    /// Child `i` exits.
    Die(usize),
}

/// One configuration.
#[derive(Clone, Debug)]
pub struct SpawnMpiConfig {
    /// Name in the table and the golden file.
    pub name: &'static str,
    /// Planted bugs (none for the clean gate).
    pub bugs: Bugs,
}

fn ns() -> Namespace {
    Namespace::new("job")
}

/// The spawner, rank 0; the children get the next ranks.
fn child(i: usize) -> ProcessId {
    ProcessId::new(ns(), 1 + i as u32)
}

impl SpawnMpiConfig {
    fn feed(&self, s: &mut SpawnMpiState, msg: ToMaster) {
        let node = NodeId(0);
        let _ = s
            .master
            .handle(Instant(0), MasterInput::FromDaemon { node, msg });
        while let Some(o) = s.master.poll_output() {
            match o {
                MasterOutput::Send(env) => match env.msg {
                    ToDaemon::Reply { reply, .. } => {
                        let early = s.children.iter().any(|c| *c != Child::Started);
                        s.ok_early |= matches!(reply, ClientReply::Spawned(Ok(_))) && early;
                        s.answers.push(reply);
                    }
                    ToDaemon::Spawn { launches, .. } => {
                        for l in launches {
                            for p in l.procs {
                                if let Some(i) = (0..CHILDREN).find(|i| child(*i) == p) {
                                    s.children[i] = Child::Launched;
                                }
                            }
                        }
                    }
                    ToDaemon::Kill { procs } => {
                        for i in 0..CHILDREN {
                            s.kill_ordered[i] |= procs.contains(&child(i));
                        }
                    }
                    _ => {}
                },
                MasterOutput::ProcessLost(_) => {
                    let ok = s
                        .answers
                        .iter()
                        .any(|a| matches!(a, ClientReply::Spawned(Ok(_))));
                    s.losses.push(ok);
                }
                _ => {}
            }
        }
    }
}

impl Model for SpawnMpiConfig {
    type State = SpawnMpiState;
    type Action = SpawnMpiAction;

    fn init_states(&self) -> Vec<SpawnMpiState> {
        let mut master = Master::new(MasterConfig {
            namespace: ns(),
            nodes: vec![NodeSpec {
                name: "n0".into(),
                slots: 1 + CHILDREN as u32,
            }],
            apps: vec![("a".into(), 1)],
            change_timeout: Duration::from_secs(30),
            grace: Duration::from_secs(5),
            max_queued: 1,
            grow_wait: None,
            data_server: DataServer::Own,
        })
        .expect("a valid job");
        master.plant(self.bugs);
        while master.poll_output().is_some() {}
        vec![SpawnMpiState {
            master,
            children: [Child::Unborn; CHILDREN],
            kill_ordered: [false; CHILDREN],
            answers: Vec::new(),
            ok_early: false,
            died_first: false,
            losses: Vec::new(),
        }]
    }

    fn actions(&self, s: &SpawnMpiState, out: &mut Vec<SpawnMpiAction>) {
        if s.children.iter().all(|c| *c == Child::Unborn) && s.answers.is_empty() {
            out.push(SpawnMpiAction::Ask);
        }
        for (i, c) in s.children.iter().enumerate() {
            match c {
                Child::Launched => {
                    out.push(SpawnMpiAction::Start(i));
                    out.push(SpawnMpiAction::Die(i));
                }
                Child::Started => out.push(SpawnMpiAction::Die(i)),
                Child::Unborn | Child::Dead => {}
            }
        }
    }

    fn next_state(&self, last: &SpawnMpiState, a: SpawnMpiAction) -> Option<SpawnMpiState> {
        let mut s = last.clone();
        match a {
            SpawnMpiAction::Ask => {
                let request = ClientRequest::Spawn {
                    commands: vec![SpawnCommand {
                        program: "child".into(),
                        args: Vec::new(),
                        count: CHILDREN as u32,
                    }],
                    env: Vec::new(),
                    watch: SpawnWatch::Job,
                };
                let from = ProcessId::new(ns(), 0);
                self.feed(
                    &mut s,
                    ToMaster::Forward {
                        from,
                        req: 1,
                        request,
                    },
                );
            }
            SpawnMpiAction::Start(i) => {
                s.children[i] = Child::Started;
                self.feed(&mut s, ToMaster::Started { pid: child(i) });
            }
            SpawnMpiAction::Die(i) => {
                let unstarted = s.children.contains(&Child::Launched);
                s.died_first |= unstarted && s.answers.is_empty();
                s.children[i] = Child::Dead;
                self.feed(&mut s, ToMaster::Exited { pid: child(i) });
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "SPAWN-25 an MPI spawn is answered once, Ok only once every child started",
                |_, s: &SpawnMpiState| s.answers.len() <= 1 && !s.ok_early,
            ),
            Property::always(
                "SPAWN-25 a child that ends first fails the spawn and leaves no child",
                |_, s: &SpawnMpiState| {
                    !s.died_first
                        || (matches!(s.answers[..], [ClientReply::Spawned(Err(_))])
                            && (0..CHILDREN)
                                .all(|i| s.children[i] == Child::Dead || s.kill_ordered[i]))
                },
            ),
            Property::always(
                "SPAWN-24 SPAWN-25 a child is a loss only after its spawn was answered Ok",
                |_, s: &SpawnMpiState| s.losses.iter().all(|ok| *ok),
            ),
            Property::sometimes("SPAWN-25 the MPI spawn succeeds", |_, s: &SpawnMpiState| {
                matches!(s.answers[..], [ClientReply::Spawned(Ok(_))])
            }),
            Property::sometimes("SPAWN-25 the MPI spawn fails", |_, s: &SpawnMpiState| {
                matches!(s.answers[..], [ClientReply::Spawned(Err(_))])
            }),
        ]
    }
}

/// The PR tier's configurations.
pub fn pr_configs() -> Vec<SpawnMpiConfig> {
    vec![SpawnMpiConfig {
        name: "spawn-mpi-2c",
        bugs: Bugs::NONE,
    }]
}

/// Checks one configuration.
pub fn check(cfg: &SpawnMpiConfig, max_states: usize, threads: usize) -> Outcome {
    crate::run::explore_actions(cfg.name, cfg, max_states, threads)
}
