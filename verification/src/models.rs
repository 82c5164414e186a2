//! Model configurations and their properties (`spec/verification.md`). Every property is
//! named by the spec rule it checks; every outcome has a `sometimes` property so that a
//! model cut too small to reach it fails loudly instead of passing vacuously.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dynres_core::bugs::Bugs;
use dynres_core::pset::{Origin, PsetName};
use dynres_core::rc::{ChangeRequest, MasterConfig, RcStatus, RcType};
use dynres_core::slots::NodeSpec;
use dynres_core::{Duration, Namespace, ProcessId};
use stateright::actor::{ActorModel, ActorModelState, Network};
use stateright::{Expectation, Model, Property};

use crate::adapter::{
    APP, APP2, APP3, Layout, Lead, NAMESPACE, Phase, RcActor, RcNode, RcState, Role, Ticket,
    tool_waits,
};

/// One resource-change model configuration.
#[derive(Clone, Debug)]
pub struct RcConfig {
    /// Name shown in the table and the golden file.
    pub name: &'static str,
    /// Nodes (one daemon each).
    pub nodes: u32,
    /// Slots per node.
    pub slots: u32,
    /// Processes the application starts with.
    pub existing: u32,
    /// Process actors for ranks a change may create.
    pub spare: u32,
    /// What the scheduler asks for.
    pub requests: Vec<ChangeRequest>,
    /// Whether new processes may crash.
    pub may_crash: bool,
    /// How often the root may poll.
    pub polls: u8,
    /// Outcomes that must be reachable.
    pub reachable: &'static [RcStatus],
    /// Planted bugs (none for the clean gate).
    pub bugs: Bugs,
    /// A node whose daemon (and processes) may crash (`RC-17`).
    pub lose_node: Option<u32>,
    /// Whether existing non-root processes may crash (`RC-18`).
    pub member_may_crash: bool,
    /// A node the scheduler asks back after its requests (`RC-20`).
    pub return_node: Option<u32>,
    /// Every existing process runs a modex over the application's pset instead of the
    /// Lst. 6.7 loop (`MODEX-1..6`).
    pub modex: bool,
    /// With `modex`: the processes speak PMI-1 through the shipped `PmiSession`
    /// (`spec/pmi.md`): the barrier is the modex (`PMIS-5`).
    pub pmi: bool,
    /// With `modex`: this rank leaves the application's pset with a pset operation
    /// instead, so the modex meets a new version (`MODEX-2`).
    pub leaver: Option<u32>,
    /// `RC-21`: requests short of slots wait this long for the scheduler to add a node
    /// (`added_node_slots`); `None` refuses them at once.
    pub grow_wait: Option<Duration>,
    /// The slots of the node the scheduler may add when asked (`RC-21`); its daemon
    /// actor is the last one.
    pub added_node_slots: u32,
    /// Ranks 0 and 1 each lead an active pset that holds rank 2 and not the other
    /// leader, the application's pset is made inactive, and rank 1 asks for the SUB of
    /// rank 2: X_c has two psets, each accepted by its own leader (`RC-8`).
    pub two_leaders: bool,
    /// Scenario outcomes that must be reachable, so a scenario cannot pass without
    /// happening.
    pub scenario: &'static [Scenario],
    /// This existing rank spawns one child and later kills it (`SPAWN-17..20`); the
    /// child is whichever spare rank the master hands out next.
    pub spawner: Option<u32>,
    /// The root's first accept comes before its phase-2 operation (`Role::Root`'s
    /// `hasty`): RC-8 must refuse it.
    pub hasty: bool,
    /// Further applications the job starts after `APP`, each with its number of
    /// processes: their ranks follow `APP`'s `existing` ones in this order, the first of
    /// each runs the Lst. 6.7 loop for its own `mpi://app/{name}` (with `polls`), the
    /// others are members. Spare ranks come after all of them.
    pub other_apps: &'static [(&'static str, u32)],
    /// Roots poll at once, without an application's start-up requests (the scheduling
    /// hint and the inactive pset of `PSET-34`, which the one-application
    /// configurations check): where the point is another scenario, they would only
    /// multiply its interleavings.
    pub bare_roots: bool,
    /// This existing rank confirms the application's undecided ADD or REPLACE, which did
    /// not add it (`Role::Rogue`, `RC-9`); it polls like the root.
    pub rogue: Option<u32>,
}

/// A scenario a configuration exists for; each is a `sometimes` property.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// A FINALIZED SUB removed a process an earlier FINALIZED change added.
    SubOfAdded,
    /// A FINALIZED SUB removed exactly rank 1, the victim `rc-sub-victim-…` names instead
    /// of the stack order's rank 2 (`RC-5`).
    NamedVictim,
    /// A hasty root's accept, naming its pset before the UNION with the delta, was
    /// refused (`RC-8`).
    HastyAcceptRefused,
    /// A node was added while a FINALIZED SUB still waited for its victim to exit
    /// (`RC-14`, `RC-21`: the new daemon must get the table the others hold).
    GrowWhileSubLeaves,
    /// Two applications each have an undecided change at the same time (`RC-15`: one
    /// per application, not one per job).
    ConcurrentApps,
    /// A process exits (crashes) while two applications each have an undecided change
    /// (`RC-18`, `RC-15`: the fault must touch its own application only).
    ExitWhileConcurrentApps,
    /// Three applications each have an undecided change at the same time (`RC-15`).
    ThreeConcurrentApps,
}

/// The model type of every resource-change configuration.
pub type RcModel = ActorModel<RcNode, Bundle, ()>;
/// Its state type.
pub type RcModelState = ActorModelState<RcNode, ()>;

impl RcConfig {
    fn layout(&self) -> Layout {
        Layout {
            daemons: (self.nodes + u32::from(self.grow_wait.is_some())) as usize,
        }
    }

    /// The ranks the job starts with: `APP`'s and every other application's.
    pub fn initial(&self) -> u32 {
        self.existing + self.other_apps.iter().map(|(_, n)| n).sum::<u32>()
    }

    /// The further application whose root `rank` is, if any.
    fn other_root(&self, rank: u32) -> Option<&'static str> {
        let mut first = self.existing;
        for (app, n) in self.other_apps {
            if rank == first {
                return Some(app);
            }
            first += n;
        }
        None
    }

    /// Whether the configuration has a fair model (`fair.rs`): no fault (a rogue
    /// client is one), and a root that runs the adaptation loop.
    pub fn fair_eligible(&self) -> bool {
        !self.modex
            && !self.may_crash
            && !self.member_may_crash
            && self.lose_node.is_none()
            && self.rogue.is_none()
    }

    /// Whether the configuration's only faults are crashing processes (new ones or
    /// members, `RC-10`, `RC-18`) around a root that runs the adaptation loop: its fair
    /// model (`fair.rs`) checks that a crash decides what it affects at once, no
    /// deadline passing first.
    pub fn fair_with_crashes(&self) -> bool {
        (self.may_crash || self.member_may_crash)
            && !self.modex
            && self.lose_node.is_none()
            && self.rogue.is_none()
    }

    /// Builds the stateright model.
    pub fn model(&self) -> RcModel {
        self.build(false)
    }

    /// Builds the model; `fair` makes new processes wait for a `Begin` timer (the fair
    /// model of `fair.rs` runs it).
    pub(crate) fn build(&self, fair: bool) -> RcModel {
        let layout = self.layout();
        let cfg = MasterConfig {
            namespace: Namespace::new(NAMESPACE),
            nodes: (0..self.nodes)
                .map(|i| NodeSpec {
                    name: format!("n{i}"),
                    slots: self.slots,
                })
                .collect(),
            apps: std::iter::once((APP, self.existing))
                .chain(self.other_apps.iter().copied())
                .map(|(app, n)| (app.to_string(), n))
                .collect(),
            change_timeout: Duration::from_millis(500),
            grace: Duration::from_millis(100),
            max_queued: 2,
            grow_wait: self.grow_wait,
            data_server: Default::default(),
        };
        let node = |actor| RcNode {
            actor,
            fair,
            layout,
            initial: self.initial(),
        };
        let mut model = ActorModel::new(Bundle::default(), ())
            .actor(node(RcActor::Master(cfg, self.bugs)))
            .actor(node(RcActor::Scheduler(
                self.requests.clone(),
                self.return_node.map(dynres_core::rc::NodeId),
                self.grow_wait.map(|_| self.added_node_slots),
            )));
        // RC-21: the node the scheduler may grant has its daemon actor from the start,
        // idle until the master sends it something.
        for n in 0..self.nodes + u32::from(self.grow_wait.is_some()) {
            model = model.actor(node(RcActor::Daemon(
                dynres_core::rc::NodeId(n),
                self.bugs,
                self.lose_node == Some(n),
                self.modex,
            )));
        }
        for rank in 0..self.initial() + self.spare {
            let pid = ProcessId::new(Namespace::new(NAMESPACE), rank);
            let other_root = self.other_root(rank);
            let setup = !self.bare_roots;
            let role = if let Some(app) = other_root {
                Role::Root {
                    lead: Lead::App(app),
                    setup,
                    hasty: self.hasty,
                }
            } else {
                match rank {
                    r if self.modex && self.leaver == Some(r) => Role::Scripted,
                    r if self.spawner == Some(r) => Role::Spawner,
                    r if self.rogue == Some(r) => Role::Rogue,
                    r if self.modex && self.pmi && r < self.existing => Role::Pmi {
                        may_crash: self.member_may_crash,
                        members: self.existing,
                        // The last member speaks PMI-2: one barrier (one modex) over
                        // both wires (`spec/pmi.md` §3.1).
                        pmi2: r + 1 == self.existing,
                        bugs: self.bugs,
                    },
                    r if self.modex && r < self.existing => Role::Modex {
                        may_crash: self.member_may_crash,
                    },
                    0 if self.two_leaders => Role::Root {
                        lead: Lead::Excluding(1),
                        setup,
                        hasty: self.hasty,
                    },
                    1 if self.two_leaders => Role::Root {
                        lead: Lead::Excluding(0),
                        setup,
                        hasty: self.hasty,
                    },
                    0 => Role::Root {
                        lead: Lead::App(APP),
                        setup,
                        hasty: self.hasty,
                    },
                    r if r < self.initial() => Role::Member {
                        may_crash: self.member_may_crash,
                    },
                    _ => Role::New {
                        may_crash: self.may_crash,
                    },
                }
            };
            let leads = rank == 0
                || (self.two_leaders && rank == 1)
                || other_root.is_some()
                || self.rogue == Some(rank);
            let polls = if leads { self.polls } else { 0 };
            let script = match role {
                Role::Scripted => vec![vec![leave_app_pset()]],
                _ => Vec::new(),
            };
            model = model.actor(node(RcActor::Proc {
                pid,
                role,
                polls,
                script,
            }));
        }
        let model = model.init_network(Network::new_ordered([]));
        let mut model = add_properties(model, self.reachable);
        if self.modex && self.pmi {
            model = pmi_properties(model);
        } else if self.modex {
            model = modex_properties(model, self.leaver.is_some(), self.member_may_crash);
        }
        if self.spawner.is_some() {
            model = spawn_properties(model);
        }
        if self.grow_wait.is_some() {
            model = model
                .property(
                    Expectation::Always,
                    "SLOT-6 processes run only on nodes of the job",
                    |_, s| {
                        let nodes = master(s).master.slots().nodes().len();
                        procs(s).all(|p| {
                            p.phase != Phase::Running
                                || p.daemon.is_some_and(|d| usize::from(d) < 2 + nodes)
                        })
                    },
                )
                .property(
                    Expectation::Always,
                    "RC-21 a request refused for want of slots never starts",
                    |_, s| {
                        // Only changes that add processes wait for slots (a SUB before
                        // them may have run).
                        master(s).not_granted == 0
                            || master(s).master.all_changes().all(|c| c.added.is_empty())
                    },
                )
                // Without these the growth configuration could pass without either.
                .property(Expectation::Sometimes, "RC-21 a node is added", |_, s| {
                    master(s).added_nodes > 0
                })
                .property(
                    Expectation::Sometimes,
                    "RC-21 a request whose slots never come is refused",
                    |_, s| master(s).not_granted > 0,
                );
        }
        for scenario in self.scenario {
            model = match scenario {
                Scenario::SubOfAdded => model.property(
                    Expectation::Sometimes,
                    "a SUB removes the process an earlier change added",
                    |_, s| {
                        let m = &master(s).master;
                        let done =
                            |c: &&dynres_core::rc::ChangeInfo| c.status == RcStatus::Finalized;
                        m.all_changes().filter(done).any(|sub| {
                            m.all_changes()
                                .filter(done)
                                .any(|add| sub.removed.iter().any(|p| add.added.contains(p)))
                        })
                    },
                ),
                Scenario::ConcurrentApps => model.property(
                    Expectation::Sometimes,
                    "RC-15 two applications' changes are undecided at once",
                    |_, s| {
                        let m = &master(s).master;
                        let open = || m.all_changes().filter(|c| !c.status.is_final());
                        open().any(|a| open().any(|b| a.app != b.app))
                    },
                ),
                Scenario::ThreeConcurrentApps => model.property(
                    Expectation::Sometimes,
                    "RC-15 three applications' changes are undecided at once",
                    |_, s| {
                        let m = &master(s).master;
                        let mut apps: Vec<&str> = m
                            .all_changes()
                            .filter(|c| !c.status.is_final())
                            .map(|c| c.app.as_str())
                            .collect();
                        apps.sort_unstable();
                        apps.dedup();
                        apps.len() >= 3
                    },
                ),
                Scenario::ExitWhileConcurrentApps => model.property(
                    Expectation::Sometimes,
                    "RC-18 RC-15 a process exits while two applications' changes are undecided",
                    |_, s| master(s).exit_while_concurrent,
                ),
                Scenario::NamedVictim => model.property(
                    Expectation::Sometimes,
                    "RC-5 a SUB removes the victim it names",
                    |_, s| {
                        master(s).master.all_changes().any(|c| {
                            c.status == RcStatus::Finalized
                                && c.removed.len() == 1
                                && c.removed[0].rank == 1
                        })
                    },
                ),
                Scenario::HastyAcceptRefused => model.property(
                    Expectation::Sometimes,
                    "RC-8 an accept of a pset lacking the added process is refused",
                    |_, s| procs(s).any(|p| p.hasty == Some(true)),
                ),
                Scenario::GrowWhileSubLeaves => model.property(
                    Expectation::Sometimes,
                    "RC-21 a node is added while a finalized SUB waits for its victim",
                    |_, s| {
                        let m = &master(s).master;
                        master(s).added_nodes > 0
                            && m.changes()
                                .any(|c| c.kind == RcType::Sub && c.status == RcStatus::Finalized)
                    },
                ),
            };
        }
        if !self.other_apps.is_empty() {
            model = model.property(
                Expectation::Always,
                "RC-15 PSET-6 a step of one application leaves every other one's state alone",
                |_, s| master(s).foreign_edits == 0,
            );
        }
        if self.rogue.is_some() {
            model = model
                .property(
                    Expectation::Always,
                    "RC-9 a confirm from a process the change did not add leaves the change untouched",
                    |_, s| master(s).foreign_confirm_edits == 0,
                )
                // Without this the configuration could pass without the rogue confirm.
                .property(
                    Expectation::Sometimes,
                    "RC-9 a process the change did not add confirms it while undecided",
                    |_, s| master(s).foreign_confirms > 0,
                );
        }
        if self.two_leaders {
            // Without this the configuration could pass with one bound pset.
            model = model.property(
                Expectation::Sometimes,
                "RC-8 a SUB binding two psets is FINALIZED",
                |_, s| {
                    master(s)
                        .master
                        .all_changes()
                        .any(|c| c.bound.len() == 2 && c.status == RcStatus::Finalized)
                },
            );
        }
        if self.member_may_crash {
            // Without this the loss configuration could pass without losing anyone.
            model = model.property(Expectation::Sometimes, "RC-18 a process is lost", |_, s| {
                !master(s).lost.is_empty()
            });
        }
        if self.return_node.is_some() {
            model = model
                .property(
                    Expectation::Always,
                    "SLOT-5 nothing runs on a returned node",
                    |_, s| {
                        master(s).returned.iter().all(|n| {
                            let d = crate::adapter::Layout::daemon_of(*n);
                            procs(s).all(|p| {
                                p.phase != crate::adapter::Phase::Running || p.daemon != Some(d)
                            })
                        })
                    },
                )
                // Without this the configuration could pass without returning the node.
                .property(
                    Expectation::Sometimes,
                    "RC-20 a node is returned",
                    |_, s| !master(s).returned.is_empty(),
                );
        }
        if self.lose_node.is_some() {
            // Without this the node-loss configuration could pass without losing a node.
            model.property(Expectation::Sometimes, "RC-17 a node is lost", |_, s| {
                daemons(s).any(|d| d.lost)
            })
        } else {
            model
        }
    }
}

/// `DIFFERENCE(mpi://app/app, mpi://SELF)` as a new version of the application's pset:
/// the leaver's way out, which the modex must meet as a version change (`MODEX-2`).
fn leave_app_pset() -> dynres_core::pset::PsetOp {
    let root = crate::adapter::app_root();
    dynres_core::pset::PsetOp::Set {
        op: dynres_core::pset::SetOp::Difference,
        pset1: root.clone(),
        pset2: PsetName::self_set(),
        target: Some(root),
        attrs: dynres_core::pset::AttrUpdate::none(),
    }
}

/// The modex properties (`MODEX-1..6`, `spec/resource-change.md` §8).
fn modex_properties(model: RcModel, stale: bool, losses: bool) -> RcModel {
    let mut model = model
        .property(
            Expectation::Always,
            "MODEX-1 one batch per node and version",
            |_, s| {
                daemons(s).all(|d| {
                    let set: std::collections::BTreeSet<_> = d.modex_batches.iter().collect();
                    set.len() == d.modex_batches.len()
                })
            },
        )
        .property(
            Expectation::Always,
            "MODEX-3 every table is the pset at its version",
            |_, s| {
                procs(s).all(|p| match &p.modex {
                    Some(Ok(d)) => {
                        let members = daemons(s).find_map(|x| x.app_versions.get(&d.version));
                        let pids: Vec<&ProcessId> = d.entries.iter().map(|(p, _)| p).collect();
                        members.is_some_and(|m| m.iter().collect::<Vec<_>>() == pids)
                            && d.entries
                                .iter()
                                .all(|(p, v)| *v == crate::adapter::modex_value(p.rank))
                    }
                    _ => true,
                })
            },
        )
        .property(
            Expectation::Always,
            "MODEX-5 every member that runs gets an outcome",
            |model, s| {
                !terminal(s)
                    || modex_members(model, s)
                        .all(|p| p.phase != Phase::Running || p.modex.is_some())
            },
        )
        .property(
            Expectation::Always,
            "MODEX-3 once the network drains before any deadline, every member holds the table",
            |model, s| {
                // Not only terminal states: a modex that only a timer could end (a
                // gather nobody fails) is a liveness bug even though the timer ends it.
                let quiet = master(s).now == dynres_core::Instant::ZERO
                    && daemons(s).all(|d| !d.timed_out)
                    && procs(s).all(|p| p.phase != Phase::Dead);
                s.network.len() != 0
                    || !quiet
                    || modex_members(model, s).all(|p| matches!(p.modex, Some(Ok(_))))
            },
        )
        .property(
            Expectation::Always,
            "MODEX-4 MODEX-6 a member's modex fails only for a lost member",
            |model, s| {
                use dynres_core::rc::RcError;
                let dead = |q: &ProcessId| {
                    model.actors.iter().zip(&s.actor_states).any(|(a, st)| {
                        matches!((&a.actor, &**st), (RcActor::Proc { pid, .. }, RcState::Proc(x)) if pid == q && x.phase == Phase::Dead)
                    })
                };
                procs(s).all(|p| match &p.modex {
                    Some(Err(RcError::NotPermitted(_))) => false,
                    Some(Err(RcError::ProcessLost(q))) => dead(q),
                    _ => true,
                })
            },
        )
        .property(
            Expectation::Always,
            "MODEX-4 a failed modex is sent to every node with a member, not only those with a batch",
            |_, s| master(s).modex_fail_untold == 0,
        )
        .property(
            Expectation::Sometimes,
            "MODEX-3 a modex completes",
            |_, s| procs(s).any(|p| matches!(p.modex, Some(Ok(_)))),
        );
    if stale {
        model = model.property(
            Expectation::Sometimes,
            "MODEX-2 a member is told Stale and asks again",
            |_, s| daemons(s).any(|d| d.stale_replies > 0),
        );
    }
    if losses {
        model = model.property(
            Expectation::Sometimes,
            "MODEX-4 a modex fails with a lost member",
            |_, s| {
                procs(s)
                    .any(|p| matches!(p.modex, Some(Err(dynres_core::rc::RcError::ProcessLost(_)))))
            },
        );
    }
    model
}

/// Spawned children with their process ids (`SPAWN-17..20`).
fn children<'a>(
    model: &'a RcModel,
    state: &'a RcModelState,
) -> impl Iterator<Item = (&'a ProcessId, &'a crate::adapter::ProcState)> + 'a {
    model
        .actors
        .iter()
        .zip(state.actor_states.iter())
        .filter_map(|(a, s)| match (&a.actor, &**s) {
            (RcActor::Proc { pid, .. }, RcState::Proc(p)) if p.child => Some((pid, &**p)),
            _ => None,
        })
}

/// The spawner's state.
fn spawners(state: &RcModelState) -> impl Iterator<Item = &crate::adapter::ProcState> {
    procs(state).filter(|p| !p.child && p.spawn_app.is_some())
}

/// The runtime part of a spawn (`spec/spawn.md` §9).
fn spawn_properties(model: RcModel) -> RcModel {
    model
        .property(
            Expectation::Always,
            "SPAWN-17 SPAWN-19 a running child is in the job data and its spawn's pset",
            |m, s| {
                let master = &master(s).master;
                children(m, s).all(|(pid, c)| {
                    let Some(app) = c.spawn_app.as_deref() else {
                        return false;
                    };
                    let root = PsetName::app_root(app).expect("valid name");
                    c.phase != Phase::Running
                        || (master.processes().contains_key(pid)
                            && master
                                .registry()
                                .members(&Origin::Runtime, &root)
                                .is_ok_and(|ms| ms.contains(pid)))
                })
            },
        )
        .property(
            Expectation::Always,
            "SPAWN-19 SPAWN-24 a child of a handshake spawn is never a loss of the job",
            // The model's spawner runs the kernel's handshake (`SpawnWatch::Handshake`).
            |m, s| {
                master(s)
                    .lost
                    .iter()
                    .all(|(lost, _)| children(m, s).all(|(c, _)| c != lost))
            },
        )
        .property(
            Expectation::Always,
            "SPAWN-18 a child is launched only where the replica holds its pset and job data",
            |_, s| daemons(s).all(|d| d.spawn_launches.iter().all(|(_, known)| *known)),
        )
        .property(
            Expectation::Always,
            "SPAWN-19 a spawn whose children are gone leaves nothing behind",
            |m, s| {
                if !terminal(s) {
                    return true;
                }
                let master = &master(s).master;
                children(m, s).all(|(pid, c)| {
                    let Some(app) = c.spawn_app.as_deref() else {
                        return false;
                    };
                    let root = PsetName::app_root(app).expect("valid name");
                    c.phase == Phase::Dead
                        && master.registry().get(&root).is_err()
                        && !master.processes().contains_key(pid)
                        && daemons(s).all(|d| d.daemon.pset(&root).is_none())
                        && daemons(s).all(|d| !d.daemon.job().contains(pid))
                }) && master.spawns().next().is_none()
            },
        )
        .property(
            Expectation::Always,
            "SPAWN-20 only the spawning application kills its children",
            |m, s| {
                let spawner: Vec<&ProcessId> = m
                    .actors
                    .iter()
                    .filter_map(|a| match &a.actor {
                        RcActor::Proc {
                            pid,
                            role: Role::Spawner,
                            ..
                        } => Some(pid),
                        _ => None,
                    })
                    .collect();
                master(s)
                    .spawn_kills_granted
                    .iter()
                    .all(|p| spawner.contains(&p))
                    && children(m, s).all(|(_, c)| c.kills.iter().all(|ok| !ok))
            },
        )
        // Without these the configuration could pass without the interleavings.
        .property(Expectation::Sometimes, "SPAWN-17 a child runs", |m, s| {
            children(m, s).any(|(_, c)| c.phase == Phase::Running)
        })
        .property(
            Expectation::Sometimes,
            "SPAWN-20 the spawner kills its children",
            |_, s| spawners(s).any(|p| !p.kills.is_empty()),
        )
        .property(
            Expectation::Sometimes,
            "SPAWN-19 a change aborts while a child runs",
            |m, s| {
                master(s).log.iter().any(|(_, st)| *st == RcStatus::Aborted)
                    && children(m, s).any(|(_, c)| c.phase == Phase::Running)
            },
        )
}

/// Nothing in flight and no timer left. Liveness checked as a safety property on terminal
/// states keeps state counts independent of search order.
pub(crate) fn terminal(s: &RcModelState) -> bool {
    s.network.len() == 0 && s.timers_set.iter().all(|t| t.iter().next().is_none())
}

/// The PMI server's properties (`spec/pmi.md`) over processes that speak PMI-1 or
/// PMI-2 through the shipped `PmiSession` to the shipped daemons and master.
fn pmi_properties(model: RcModel) -> RcModel {
    model
        .property(
            Expectation::Always,
            "PMIS-5 after barrier_out every member's put is visible",
            |_, s| {
                procs(s).all(|p| {
                    p.pmi_barrier != Some(true)
                        || p.pmi_seen.iter().enumerate().all(|(r, v)| {
                            v.as_deref() == Some(crate::adapter::modex_value(r as u32).as_str())
                        })
                })
            },
        )
        .property(
            Expectation::Always,
            "PMIS-4 PMIS-5 every running PMI process gets its barrier's outcome",
            |_, s| {
                !terminal(s)
                    || procs(s)
                        .filter(|p| p.pmi.is_some() && p.phase == Phase::Running)
                        .all(|p| p.pmi_barrier.is_some())
            },
        )
        .property(
            Expectation::Always,
            "PMIS-3 a PMI session never closes or aborts on a well-formed client",
            |_, s| procs(s).all(|p| p.pmi.is_none() || p.unexpected_errors == 0),
        )
        .property(
            Expectation::Sometimes,
            "PMIS-5 a PMI barrier completes and every key is read",
            |_, s| {
                procs(s).any(|p| {
                    p.pmi_barrier == Some(true)
                        && p.pmi
                            .as_ref()
                            .is_some_and(|x| p.pmi_seen.len() == x.job().size as usize)
                })
            },
        )
}

/// The states of the processes whose role is `Modex`.
fn modex_members<'a>(
    model: &'a RcModel,
    state: &'a RcModelState,
) -> impl Iterator<Item = &'a crate::adapter::ProcState> + 'a {
    model
        .actors
        .iter()
        .zip(state.actor_states.iter())
        .filter_map(|(a, s)| match (&a.actor, &**s) {
            (
                RcActor::Proc {
                    role: Role::Modex { .. },
                    ..
                },
                RcState::Proc(p),
            ) => Some(&**p),
            _ => None,
        })
}

pub(crate) fn master(state: &RcModelState) -> &crate::adapter::MasterState {
    match &*state.actor_states[0] {
        RcState::Master(m) => m,
        _ => unreachable!("actor 0 is the master"),
    }
}

fn procs(state: &RcModelState) -> impl Iterator<Item = &crate::adapter::ProcState> {
    state.actor_states.iter().filter_map(|s| match &**s {
        RcState::Proc(p) => Some(&**p),
        _ => None,
    })
}

fn daemons(state: &RcModelState) -> impl Iterator<Item = &crate::adapter::DaemonState> {
    state.actor_states.iter().filter_map(|s| match &**s {
        RcState::Daemon(d) => Some(&**d),
        _ => None,
    })
}

/// Every request the master received was refused or started a change that is decided
/// (`RC-15`): a request left in the queue is not.
pub(crate) fn every_request_decided(s: &RcModelState) -> bool {
    let m = master(s);
    m.tickets.iter().all(|(_, t)| match t {
        Ticket::Waiting => false,
        Ticket::Started(delta) => m.master.status(delta).is_final(),
        Ticket::Refused => true,
    })
}

/// TOOL-1, TOOL-2: every tool request is answered once, with its own request's outcome
/// (judged when given, `adapter::right_answer`), and as soon as there is one — a waiting
/// tool at its refusal or its change's final status, a `nowait` tool at once.
pub(crate) fn tools_told_their_own_outcome(s: &RcModelState) -> bool {
    let m = master(s);
    m.wrong_answers == 0
        && m.tickets.iter().all(|(ticket, fate)| {
            let due = match fate {
                _ if !tool_waits(*ticket) => true,
                Ticket::Waiting => false,
                Ticket::Refused => true,
                Ticket::Started(d) => m.master.status(d).is_final(),
            };
            !due || m.answered.contains(ticket)
        })
}

/// The statuses a change went through must be a prefix of one legal path (`RC-1`).
fn legal_path(log: &[RcStatus]) -> bool {
    use RcStatus::*;
    const PATHS: [&[RcStatus]; 3] = [
        &[Announced, Pending, Finalized],
        &[Announced, Pending, Aborted],
        &[Announced, Aborted],
    ];
    PATHS
        .iter()
        .any(|p| log.len() <= p.len() && p[..log.len()] == *log)
}

fn add_properties(model: RcModel, reachable: &'static [RcStatus]) -> RcModel {
    let mut model = model
        .property(
            Expectation::Always,
            "RC-1 status only moves forward",
            |_, s| {
                let m = master(s);
                let deltas: std::collections::BTreeSet<&PsetName> =
                    m.log.iter().map(|(d, _)| d).collect();
                deltas.into_iter().all(|d| {
                    let path: Vec<RcStatus> = m
                        .log
                        .iter()
                        .filter(|(x, _)| x == d)
                        .map(|(_, st)| *st)
                        .collect();
                    legal_path(&path)
                })
            },
        )
        .property(
            Expectation::Always,
            "RC-1 every process sees the master's decision",
            |_, s| {
                let m = &master(s).master;
                procs(s).all(|p| {
                    p.seen.iter().all(|(d, ok)| {
                        let st = m.status(d);
                        if *ok {
                            st == RcStatus::Finalized
                        } else {
                            st == RcStatus::Aborted
                        }
                    })
                })
            },
        )
        .property(
            Expectation::Always,
            "RC-10 a deadline once handled is not armed again",
            |_, s| !master(s).spun,
        )
        .property(
            Expectation::Always,
            "RC-3 announced before launched",
            |_, s| daemons(s).all(|d| d.launched.iter().all(|(_, saw)| *saw)),
        )
        .property(
            Expectation::Always,
            "RC-22 a process is launched only where the replica holds WORLD, its application's pset and its job data",
            |_, s| daemons(s).all(|d| d.unready_launches == 0),
        )
        .property(
            Expectation::Always,
            "RC-9 ADD finalized => every new process confirmed",
            |_, s| {
                let m = &master(s).master;
                m.all_changes()
                    .filter(|c| c.status == RcStatus::Finalized && c.kind != RcType::Sub)
                    .all(|c| {
                        let confirmed = m.confirmed(&c.delta).cloned().unwrap_or_default();
                        c.added.iter().all(|p| confirmed.contains(p))
                    })
            },
        )
        .property(
            Expectation::Always,
            "RC-9 ADD finalized => new pset is UNION(main, delta)",
            |_, s| {
                let m = &master(s).master;
                // Each change against its own application's pset.
                let members = |app: &str| {
                    let root = crate::adapter::root_of(app);
                    m.registry()
                        .members(&Origin::Runtime, &root)
                        .unwrap_or_default()
                };
                // A later SUB's phase-2 operation takes its victims out of the pset
                // before it is decided; its abort puts them back (RC-12).
                let removed_later: Vec<&ProcessId> = m
                    .all_changes()
                    .filter(|c| c.status != RcStatus::Aborted)
                    .flat_map(|c| c.removed.iter())
                    .collect();
                m.all_changes()
                    .filter(|c| c.status == RcStatus::Finalized && c.kind != RcType::Sub)
                    .all(|c| {
                        let members = members(&c.app);
                        c.added
                            .iter()
                            .all(|p| members.contains(p) || removed_later.contains(&p))
                    })
            },
        )
        .property(
            Expectation::Always,
            "RC-8 SUB finalized <=> one accept per X_c pset",
            |_, s| {
                let m = &master(s).master;
                m.all_changes().filter(|c| c.kind == RcType::Sub).all(|c| {
                    let accepts = m.accepts(&c.delta).map_or(0, |a| a.len());
                    let all_in = accepts == c.bound.len();
                    match c.status {
                        RcStatus::Finalized => all_in,
                        RcStatus::Aborted => true,
                        _ => !all_in,
                    }
                })
            },
        )
        .property(
            Expectation::Always,
            "every input the model gives a machine is accepted",
            |_, s| {
                master(s).refused_inputs == 0
                    && daemons(s).all(|d| d.refused_inputs == 0)
                    && procs(s).all(|p| p.refused_inputs == 0)
            },
        )
        .property(
            Expectation::Always,
            "every error an application is answered with is one its call allows",
            |_, s| procs(s).all(|p| p.unexpected_errors == 0),
        )
        .property(
            Expectation::Always,
            "RC-12 ABORTED => rolled back",
            |_, s| {
                // At the abort (the adapter's step check): every pset of the
                // application and WORLD has the members, and the job data the entries,
                // it had when the change was announced. Ever after: an aborted change's
                // added processes are in no pset and not in the job data.
                let m = &master(s).master;
                if master(s).rollback_mismatches != 0 {
                    return false;
                }
                let gone: Vec<&ProcessId> = m
                    .all_changes()
                    .filter(|c| c.status == RcStatus::Aborted)
                    .flat_map(|c| c.added.iter())
                    .collect();
                // Each pset's members are resolved once, not once per process: this
                // property was the checker's costliest.
                gone.is_empty()
                    || (!gone.iter().any(|p| m.processes().contains_key(*p))
                        && !m.registry().live_psets().any(|(n, _)| {
                            let members = m
                                .registry()
                                .members(&Origin::Runtime, n)
                                .unwrap_or_default();
                            gone.iter().any(|p| members.contains(p))
                        }))
            },
        )
        .property(
            Expectation::Always,
            "RC-18 a change undecided at a loss is never finalized",
            |model, s| {
                let m = master(s);
                let RcActor::Master(cfg, _) = &model.actors[0].actor else {
                    unreachable!("actor 0 is the master")
                };
                m.lost.iter().all(|(pid, at)| {
                    let (before, after) = m.log.split_at(*at);
                    // Only the lost process' own application's change: another
                    // application's goes on (RC-18, RC-15).
                    let app = crate::adapter::app_of(cfg, &m.master, pid);
                    let undecided = |d: &PsetName| {
                        d.app() == app.as_deref()
                            && before.iter().any(|(x, _)| x == d)
                            && !before.iter().any(|(x, st)| x == d && st.is_final())
                    };
                    !after
                        .iter()
                        .any(|(d, st)| *st == RcStatus::Finalized && undecided(d))
                })
            },
        )
        .property(
            Expectation::Always,
            "RC-18 a dead process is not in the job data",
            |model, s| {
                if s.network.len() != 0 {
                    return true;
                }
                let m = &master(s).master;
                let pids = model.actors.iter().filter_map(|a| match &a.actor {
                    RcActor::Proc { pid, .. } => Some(pid),
                    _ => None,
                });
                pids.zip(procs(s))
                    .all(|(pid, p)| p.phase != Phase::Dead || !m.processes().contains_key(pid))
            },
        )
        .property(
            Expectation::Always,
            "RC-14 replicas never go backwards",
            |_, s| daemons(s).all(|d| d.regressions == 0),
        )
        .property(
            Expectation::Always,
            "RC-14 replicas match the master when quiet",
            |_, s| {
                if s.network.len() != 0 {
                    return true;
                }
                let m = &master(s).master;
                // Only nodes of the job: a node the resource manager may grant is not
                // one until it is added (RC-21).
                let nodes = m.slots().nodes().len() as u32;
                // Job data is compared only while nothing was lost: a loss changes the
                // master's job data alone (RC-18; daemons need no update for it).
                let no_loss = master(s).lost.is_empty() && daemons(s).all(|d| !d.lost);
                let job: std::collections::BTreeSet<&ProcessId> = m.processes().keys().collect();
                daemons(s).filter(|d| !d.lost && d.daemon.node().0 < nodes).all(|d| {
                    // The same psets (none the master pruned), each with the master's
                    // version and members.
                    d.daemon.psets().count() == m.registry().live_psets().count()
                        && m.registry().live_psets().all(|(n, p)| {
                            let members = m.registry().members(&Origin::Runtime, n).unwrap_or_default();
                            d.daemon.pset(n).is_some_and(|(ms, a)| {
                                a.version == p.attrs.version && ms.iter().eq(members)
                            })
                        })
                        && (!no_loss || d.daemon.job().iter().eq(job.iter().map(|p| (*p).clone())))
                        // The same change table: every change still queryable (undecided,
                        // or ABORTED with processes to go), with the master's record.
                        && d.daemon.changes().eq(m.changes().filter(|c| c.status != RcStatus::Finalized))
                })
            },
        )
        .property(
            Expectation::Always,
            "RC-12 ABORTED => added processes killed",
            |model, s| {
                if s.network.len() != 0 {
                    return true;
                }
                let m = &master(s).master;
                let aborted: Vec<&ProcessId> = m
                    .all_changes()
                    .filter(|c| c.status == RcStatus::Aborted)
                    .flat_map(|c| c.added.iter())
                    .collect();
                let pids = model.actors.iter().filter_map(|a| match &a.actor {
                    RcActor::Proc { pid, .. } => Some(pid),
                    _ => None,
                });
                pids.zip(procs(s))
                    .all(|(pid, p)| p.phase != Phase::Running || !aborted.contains(&pid))
            },
        )
        .property(
            Expectation::Always,
            "PSET-10 versions rise exactly with membership",
            |_, s| master(s).version_violations == 0,
        )
        .property(
            Expectation::Always,
            "PSET-34 inactive psets follow a finalized SUB",
            |_, s| {
                let m = &master(s).master;
                let reg = m.registry();
                m.all_changes()
                    .filter(|c| c.status == RcStatus::Finalized && !c.removed.is_empty())
                    .all(|c| {
                        reg.live_psets()
                            .filter(|(n, p)| n.in_app_domain(&c.app) && !p.attrs.active)
                            .all(|(n, _)| {
                                let members = reg.members(&Origin::Runtime, n).unwrap_or_default();
                                c.removed.iter().all(|r| !members.contains(r))
                            })
                    })
            },
        )
        .property(
            Expectation::Always,
            "PSET-20 ranks are never reused",
            |_, s| procs(s).all(|p| !p.relaunched),
        )
        .property(
            Expectation::Always,
            "SLOT-3 a running process holds its slot",
            |model, s| {
                let m = &master(s).master;
                let ranks = model.actors.iter().filter_map(|a| match &a.actor {
                    RcActor::Proc { pid, .. } => Some(pid.clone()),
                    _ => None,
                });
                // A process on a lost node dies with it (its Kill may still be in flight).
                let node_lost = |p: &crate::adapter::ProcState| {
                    p.daemon.is_some_and(|d| matches!(&*s.actor_states[usize::from(d)], RcState::Daemon(d) if d.lost))
                };
                ranks.zip(procs(s)).all(|(pid, p)| {
                    p.phase != Phase::Running || node_lost(p) || m.slots().slot_of(&pid).is_some()
                })
            },
        )
        .property(
            Expectation::Always,
            "RC-1 every terminal state has every change decided",
            |_, s| !terminal(s) || master(s).master.all_changes().all(|c| c.status.is_final()),
        )
        .property(
            Expectation::Always,
            "RC-19 a decided change is done once its processes are gone",
            |model, s| {
                // Terminal states: a decided change still waiting must wait for a process
                // that runs; one waiting for the dead is never forgotten (an exit filed
                // against the wrong change leaves its owner waiting forever).
                if !terminal(s) {
                    return true;
                }
                let running: Vec<&ProcessId> = model
                    .actors
                    .iter()
                    .zip(procs(s))
                    .filter_map(|(a, p)| match &a.actor {
                        RcActor::Proc { pid, .. } if p.phase == Phase::Running => Some(pid),
                        _ => None,
                    })
                    .collect();
                master(s).master.changes().all(|c| {
                    let gone = match c.status {
                        RcStatus::Finalized => &c.removed,
                        RcStatus::Aborted => &c.added,
                        _ => return true,
                    };
                    gone.iter().any(|p| running.contains(&p))
                })
            },
        )
        .property(
            Expectation::Always,
            "TOOL-1 TOOL-2 every tool hears its own request's outcome, once",
            |_, s| tools_told_their_own_outcome(s),
        )
        .property(
            Expectation::Always,
            "RC-15 every request is decided, queued ones included",
            |_, s| !terminal(s) || every_request_decided(s),
        )
        .property(
            Expectation::Always,
            "RC-15 queued requests leave the queue in order",
            |model, s| {
                // The queue is FIFO per application: another application's request may
                // start in between. A ticket is its request's place in the scheduler's
                // list.
                let RcActor::Scheduler(requests, ..) = &model.actors[1].actor else {
                    unreachable!("actor 1 is the scheduler")
                };
                let app = |t: u64| requests.get(t as usize - 1).map(|r| r.app.as_str());
                let left = &master(s).left_queue;
                left.iter().all(|&t| {
                    let same_app = left.iter().filter(|&&x| app(x) == app(t));
                    same_app.is_sorted_by(|a, b| a < b)
                })
            },
        );
    // The "when quiet" properties above are vacuous unless quiet states exist.
    model = model.property(Expectation::Sometimes, "the network drains", |_, s| {
        s.network.len() == 0
    });
    for outcome in reachable {
        model = match outcome {
            RcStatus::Finalized => {
                model.property(Expectation::Sometimes, "reach FINALIZED", |_, s| {
                    master(s)
                        .log
                        .iter()
                        .any(|(_, st)| *st == RcStatus::Finalized)
                })
            }
            RcStatus::Aborted => model.property(Expectation::Sometimes, "reach ABORTED", |_, s| {
                master(s).log.iter().any(|(_, st)| *st == RcStatus::Aborted)
            }),
            _ => model,
        };
    }
    model
}

fn config(
    name: &'static str,
    (nodes, slots, existing, spare): (u32, u32, u32, u32),
    requests: Vec<ChangeRequest>,
    may_crash: bool,
    polls: u8,
) -> RcConfig {
    RcConfig {
        name,
        nodes,
        slots,
        existing,
        spare,
        requests,
        may_crash,
        polls,
        reachable: &[RcStatus::Finalized, RcStatus::Aborted],
        bugs: Bugs::NONE,
        lose_node: None,
        member_may_crash: false,
        return_node: None,
        modex: false,
        pmi: false,
        leaver: None,
        grow_wait: None,
        added_node_slots: 0,
        spawner: None,
        two_leaders: false,
        scenario: &[],
        hasty: false,
        other_apps: &[],
        bare_roots: false,
        rogue: None,
    }
}

/// A modex configuration: `existing` processes on `nodes` nodes of 2 slots, no change
/// requested, so no change outcome is expected.
fn modex_config(name: &'static str, nodes: u32, existing: u32) -> RcConfig {
    RcConfig {
        reachable: &[],
        modex: true,
        ..config(name, (nodes, 2, existing, 0), Vec::new(), false, 0)
    }
}

/// A job of two applications (`RC-15`): `app` (ranks 0, 1) asks for the SUB of one
/// process while `app2` (rank 2) asks for the ADD of one; bare roots, one poll each (see
/// `rc-2apps-sub-add-1n-3e-1new` in [`pr_configs`]).
fn two_apps_config(name: &'static str) -> RcConfig {
    RcConfig {
        other_apps: &[(APP2, 1)],
        bare_roots: true,
        scenario: &[Scenario::ConcurrentApps],
        ..config(
            name,
            (1, 4, 2, 1),
            vec![ChangeRequest::sub(APP, 1), ChangeRequest::add(APP2, 1)],
            false,
            1,
        )
    }
}

/// The PR-tier resource-change configurations (each exhaustive in well under 60 s).
pub fn pr_configs() -> Vec<RcConfig> {
    let add = |n| ChangeRequest::add(APP, n);
    vec![
        config("rc-add-1n-2e-1new", (1, 4, 2, 1), vec![add(1)], false, 2),
        // The root's first accept names its pset before the UNION with the delta (an
        // application's mistake): RC-8 refuses it, the root applies the operation and
        // accepts again. The only configuration in which RC-8's check of the new pset
        // has something to refuse.
        RcConfig {
            hasty: true,
            scenario: &[Scenario::HastyAcceptRefused],
            ..config(
                "rc-add-hasty-1n-2e-1new",
                (1, 4, 2, 1),
                vec![add(1)],
                false,
                2,
            )
        },
        config(
            "rc-sub-1n-3e",
            (1, 4, 3, 0),
            vec![ChangeRequest::sub(APP, 1)],
            false,
            2,
        ),
        config(
            "rc-replace-1n-2e-1new",
            (1, 4, 2, 1),
            vec![ChangeRequest::replace(APP, 1, 1)],
            false,
            2,
        ),
        config("rc-add-2n-2e-1new", (2, 2, 2, 1), vec![add(1)], false, 2),
        // Two new processes in one change: "every new process confirmed" differs from
        // "some" only here (RC-9).
        config("rc-add2-1n-2e-2new", (1, 4, 2, 2), vec![add(2)], false, 2),
        // The root polls twice: enough to take both ADDs in turn (RC-15); three polls
        // (14.8 M states, about 5 min) are the nightly tier's.
        config(
            "rc-add-add-1n-2e-2new",
            (1, 4, 2, 2),
            vec![add(1), add(1)],
            false,
            2,
        ),
        // Three requests at once: the ADD starts, the other two wait in the queue and are
        // refused when they leave it (a SUB of every process, an ADD beyond the slots),
        // so the order in which they leave it shows (RC-15).
        config(
            "rc-queue-1n-2e-1new",
            (1, 3, 2, 1),
            vec![add(1), ChangeRequest::sub(APP, 3), add(2)],
            false,
            2,
        ),
        // Issue 13's unexplored scenarios. The SUB after the ADD removes the process the
        // ADD added, if it was finalized (stack order, SLOT-2): on_exit must file its
        // exit against the SUB, not the ADD that named it first.
        RcConfig {
            scenario: &[Scenario::SubOfAdded],
            ..config(
                "rc-add-sub-1n-2e-1new",
                (1, 4, 2, 1),
                vec![add(1), ChangeRequest::sub(APP, 1)],
                false,
                // Two polls for the ADD (accept, then the decision), one for the SUB.
                3,
            )
        },
        // A SUB naming its victim: rank 1, not the stack order's rank 2 (RC-5).
        RcConfig {
            scenario: &[Scenario::NamedVictim],
            ..config(
                "rc-sub-victim-1n-3e",
                (1, 4, 3, 0),
                vec![ChangeRequest::sub_named(
                    APP,
                    ProcessId::new(Namespace::new(NAMESPACE), 1).into(),
                )],
                false,
                2,
            )
        },
        // A REPLACE whose new process may crash at any point.
        config(
            "rc-replace-crash-1n-2e-1new",
            (1, 4, 2, 1),
            vec![ChangeRequest::replace(APP, 1, 1)],
            true,
            2,
        ),
        // Three nodes of one slot: the new process goes to the third.
        config("rc-add-3n-2e-1new", (3, 1, 2, 1), vec![add(1)], false, 2),
        // Rank 1, a member the ADD does not add, confirms it (a buggy or hostile client:
        // its fence over the delta is refused, so it reports a failure). RC-9: the
        // master refuses it, and the change is neither counted nor aborted.
        RcConfig {
            rogue: Some(1),
            ..config(
                "rc-add-rogue-1n-2e-1new",
                (1, 4, 2, 1),
                vec![add(1)],
                false,
                2,
            )
        },
        // Node 0 is lost: its daemon, the root and rank 1 with it, while the ADD is
        // under way on node 1.
        RcConfig {
            lose_node: Some(0),
            ..config(
                "rc-add-nodeloss0-2n-2e-1new",
                (2, 2, 2, 1),
                vec![add(1)],
                false,
                1,
            )
        },
        // |X_c| = 2: the SUB's victim is in both leaders' psets, and each leader accepts
        // its own (RC-8 "one accept per X_c pset"); the SUB is the application's request.
        RcConfig {
            two_leaders: true,
            ..config("rc-sub-2leaders-1n-3e", (1, 4, 3, 0), Vec::new(), false, 2)
        },
        config(
            "rc-add-crash-1n-2e-1new",
            (1, 4, 2, 1),
            vec![add(1)],
            true,
            2,
        ),
        RcConfig {
            member_may_crash: true,
            ..config(
                "rc-add-lost-1n-2e-1new",
                (1, 4, 2, 1),
                vec![add(1)],
                false,
                2,
            )
        },
        RcConfig {
            lose_node: Some(1),
            ..config(
                "rc-add-nodeloss-2n-2e-1new",
                (2, 2, 2, 1),
                vec![add(1)],
                false,
                1,
            )
        },
        // Node 0 is full: the ADD waits for the scheduler to grant a node of one slot,
        // which it may do at any point, or never before the master's deadline (RC-21).
        RcConfig {
            grow_wait: Some(Duration::from_millis(200)),
            added_node_slots: 1,
            ..config("rc-grow-1n-2e-1new", (1, 2, 2, 1), vec![add(1)], false, 2)
        },
        // A SUB of one of two on a full node, then an ADD of one: while the SUB's victim
        // has not exited its slot is taken, so the ADD needs a node, whose daemon joins
        // while the finalized SUB is still in the master's table.
        RcConfig {
            grow_wait: Some(Duration::from_millis(200)),
            added_node_slots: 1,
            scenario: &[Scenario::GrowWhileSubLeaves],
            ..config(
                "rc-sub-grow-1n-2e-1new",
                (1, 2, 2, 1),
                vec![ChangeRequest::sub(APP, 1), add(1)],
                false,
                // One poll for the SUB, two for the ADD (accept, then the decision).
                3,
            )
        },
        // Ranks 0 and 1 on node 0, rank 2 on node 1: two batches, one of two members.
        modex_config("rc-modex-2n-3e", 2, 3),
        // MPI processes through PMI-1 (ranks 0 and 1) and PMI-2 (rank 2): their barrier
        // is the modex (spec/pmi.md).
        RcConfig {
            pmi: true,
            ..modex_config("pmi-modex-2n-3e", 2, 3)
        },
        // Rank 2 leaves the application's pset while 0 and 1 gather over it.
        RcConfig {
            leaver: Some(2),
            ..modex_config("rc-modex-stale-2n-3e", 2, 3)
        },
        // A SUB of rank 2 is announced (job data without it) while all three gather;
        // nobody accepts it, so it is aborted at its deadline.
        RcConfig {
            requests: vec![ChangeRequest::sub(APP, 1)],
            ..modex_config("rc-modex-sub-2n-3e", 2, 3)
        },
        // Any member may crash at any point of the modex.
        RcConfig {
            member_may_crash: true,
            ..modex_config("rc-modex-loss-2n-3e", 2, 3)
        },
        // Rank 1 spawns a child while the scheduler's ADD is under way (and may be aborted
        // at its deadline), and kills the child at any point; the child tries to kill
        // its own spawn (SPAWN-17..20).
        RcConfig {
            spawner: Some(1),
            ..config(
                "rc-spawn-add-1n-2e-2new",
                (1, 4, 2, 2),
                vec![add(1)],
                false,
                2,
            )
        },
        // Two applications of one job, each with a change at once (RC-15: one undecided
        // change per application, not per job): `app` (ranks 0, 1) gives up rank 1 while
        // `app2` (rank 2, its root) grows by rank 3 into the free slot. The two changes
        // interleave freely, so the roots are bare and poll once (query, phase 2,
        // accept): the start-up requests or a second poll multiply the states several
        // times over (the ADD alone: by 7 and by 3.8). The ADD's root then learns no
        // decision (its accept answers PENDING); its new process does.
        two_apps_config("rc-2apps-sub-add-1n-3e-1new"),
        // The two-application configuration with faults: rank 1, `app`'s member and its
        // SUB's victim, may crash at any point, also while both changes are undecided.
        // A loss aborts its own application's undecided change only (RC-18); app2's ADD
        // goes on, and the rollback (RC-12) must leave app2 alone (RC-15, PSET-6).
        RcConfig {
            member_may_crash: true,
            scenario: &[Scenario::ConcurrentApps, Scenario::ExitWhileConcurrentApps],
            ..two_apps_config("rc-2apps-sub-add-lost-1n-3e-1new")
        },
        // Rank 1 runs alone on node 1; the SUB removes it, the scheduler asks node 1
        // back at any point, and an ADD then wants a slot (node 1's, unless returned).
        RcConfig {
            return_node: Some(1),
            ..config(
                "rc-sub-return-2n-2e-1new",
                (2, 1, 2, 1),
                vec![ChangeRequest::sub(APP, 1), add(1)],
                false,
                2,
            )
        },
        // Nightly-only until the checker got faster (issue 13): two nodes of two
        // slots losing two processes at once; a SUB then an ADD, the new process
        // crashing, three polls; two applications with a crash.
        config(
            "rc-sub-2n-4e",
            (2, 2, 4, 0),
            vec![ChangeRequest::sub(APP, 2)],
            false,
            2,
        ),
        config(
            "rc-sub-add-1n-3e-1new",
            (1, 4, 3, 1),
            vec![ChangeRequest::sub(APP, 1), ChangeRequest::add(APP, 1)],
            true,
            3,
        ),
        // The two-application configuration with app2's new process crashing at any
        // point: its exit aborts the ADD (RC-10) while app's SUB may be in flight, and
        // the rollback (RC-12) must leave app alone (2.07 M states).
        RcConfig {
            may_crash: true,
            scenario: &[Scenario::ConcurrentApps, Scenario::ExitWhileConcurrentApps],
            ..two_apps_config("rc-2apps-sub-add-crash-1n-3e-1new")
        },
    ]
}

/// Larger configurations for the nightly tier (seeded simulation sizes are future work;
/// these are still exhaustive, with a budget of 600 M generated states).
pub fn nightly_configs() -> Vec<RcConfig> {
    vec![
        config(
            "rc-add-add-1n-2e-2new-3polls",
            (1, 4, 2, 2),
            vec![ChangeRequest::add(APP, 1), ChangeRequest::add(APP, 1)],
            false,
            3,
        ),
        // Three applications (`RC-15` beyond a pair): `app` (ranks 0, 1), `app2`
        // (ranks 2, 3) and `app3` (ranks 4, 5) each SUB their member, all at once; bare
        // roots, one poll each. Each change must touch its own application's psets and
        // processes only (PSET-6), whatever the interleaving, and an abort must restore
        // its own application while another's SUB has its victim out of the job data
        // (RC-12, SLOT-3).
        RcConfig {
            other_apps: &[(APP2, 2), (APP3, 2)],
            bare_roots: true,
            scenario: &[Scenario::ConcurrentApps, Scenario::ThreeConcurrentApps],
            ..config(
                "rc-3apps-sub-sub-sub-1n-6e",
                (1, 6, 2, 0),
                vec![
                    ChangeRequest::sub(APP, 1),
                    ChangeRequest::sub(APP2, 1),
                    ChangeRequest::sub(APP3, 1),
                ],
                false,
                1,
            )
        },
    ]
}

/// The properties the gate checks as one (see [`bundle`]); empty in a model built by
/// [`RcConfig::model`], whose properties are all its own.
#[derive(Clone, Default)]
pub struct Bundle {
    /// The bundled always-properties, in the model's order.
    pub always: Vec<Property<RcModel>>,
    /// The bundled sometimes-properties, in the model's order.
    pub sometimes: Vec<Property<RcModel>>,
    /// Which of `sometimes` some visited state satisfied (shared by the checker's clones
    /// of the model).
    pub reached: Arc<[AtomicBool]>,
}

/// The name of the property [`bundle`] puts in place of the ones it bundles.
pub const BUNDLE: &str = "every always-property";

/// Checks the model's always- and sometimes-properties as one property.
///
/// Why: stateright's checker looks each property up by name in a shared map for every
/// state it visits (a SipHash of the name and a shard lock), which cost about a tenth of
/// its time with our forty-odd properties per configuration.
///
/// The bundle is an always-property that fails exactly where one of the always-properties
/// fails; which ones is told by [`failing_always`] on the counterexample's last state.
/// On every state it visits it also marks the sometimes-properties that state satisfies
/// (each is evaluated until it is first reached, as stateright does), and
/// [`unreached_sometimes`] names those no state satisfied. Eventually-properties stay
/// stateright's. Planted-bug hunts run the properties one by one, as built.
pub fn bundle(mut model: RcModel) -> RcModel {
    let mut always = Vec::new();
    let mut sometimes = Vec::new();
    let mut rest = Vec::new();
    for p in std::mem::take(&mut model.properties) {
        match p.expectation {
            Expectation::Always => always.push(p),
            Expectation::Sometimes => sometimes.push(p),
            Expectation::Eventually => rest.push(p),
        }
    }
    model.cfg = Bundle {
        always,
        reached: sometimes.iter().map(|_| AtomicBool::new(false)).collect(),
        sometimes,
    };
    rest.insert(
        0,
        Property {
            expectation: Expectation::Always,
            name: BUNDLE,
            condition: |m: &RcModel, s| {
                let b = &m.cfg;
                for (p, reached) in b.sometimes.iter().zip(b.reached.iter()) {
                    if !reached.load(Ordering::Relaxed) && (p.condition)(m, s) {
                        reached.store(true, Ordering::Relaxed);
                    }
                }
                b.always.iter().all(|p| (p.condition)(m, s))
            },
        },
    );
    model.properties = rest;
    model
}

/// The bundled always-properties (see [`bundle`]) that fail in `state`.
pub fn failing_always(model: &RcModel, state: &RcModelState) -> Vec<&'static str> {
    model
        .cfg
        .always
        .iter()
        .filter(|p| !(p.condition)(model, state))
        .map(|p| p.name)
        .collect()
}

/// The bundled sometimes-properties (see [`bundle`]) that no state checked so far
/// satisfied.
pub fn unreached_sometimes(model: &RcModel) -> Vec<&'static str> {
    let b = &model.cfg;
    b.sometimes
        .iter()
        .zip(b.reached.iter())
        .filter(|(_, r)| !r.load(Ordering::Relaxed))
        .map(|(p, _)| p.name)
        .collect()
}

/// Arc'd property names, for reporting.
pub fn property_names(model: &RcModel) -> Vec<(&'static str, Expectation)> {
    model
        .properties()
        .into_iter()
        .map(|p| (p.name, p.expectation))
        .collect()
}

#[allow(dead_code)]
fn _assert_send(_: Arc<RcModel>) {}
