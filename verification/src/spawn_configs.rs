//! Spawn / accept-connect model configurations and their properties (`spec/spawn.md`,
//! `spec/verification.md`). Properties are named by `SPAWN-n`; every outcome a
//! configuration must reach has a `sometimes` property, so a model cut too small fails
//! loudly instead of passing vacuously.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dynres_core::Duration;
use dynres_core::bugs::Bugs;
use dynres_core::spawn::datagram::SEGMENT_OVERHEAD;
use dynres_core::spawn::{Bootstrap, DatagramConfig, Phase};
use stateright::Expectation;
use stateright::actor::{ActorModel, ActorModelState, LossyNetwork, Network};

use crate::spawn_model::{HsParams, JobState, RootSpec, RootState, Slot, SpawnNode};

/// A root: (actor index, slot).
pub type RootAt = (usize, Slot);

/// The network a configuration runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Net {
    /// Ordered and reliable per pair of actors (streams: TCP, RC, shm).
    Ordered,
    /// Unordered, every message deliverable any number of times (UD duplicates).
    Duplicating,
    /// Unordered, no duplication, any message may be lost; at most `max_in_flight`
    /// messages in flight (a bound, counted when it cuts).
    Lossy {
        /// Cap on messages in flight.
        max_in_flight: usize,
    },
}

/// An outcome that must be reachable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Some initiator/acceptor pair both hold a handle.
    BothReady,
    /// Every pair both hold a handle at once.
    AllReady,
    /// Some root failed.
    Failed,
    /// A spawn's children were killed.
    ChildrenKilled,
    /// A message of more than one datagram segment was delivered.
    Segmented,
}

/// What the properties need to know about the model (stateright's model `cfg`).
#[derive(Clone, Debug)]
pub struct SpawnBounds {
    /// Cap on messages in flight (lossy network only).
    pub max_in_flight: Option<usize>,
    /// Transitions cut by `max_in_flight` (reported under the configuration's row).
    pub cuts: Arc<AtomicUsize>,
    /// Handshakes: (initiator root, acceptor root).
    pub pairs: Vec<(RootAt, RootAt)>,
    /// Spawns: (parent root, children's actor).
    pub spawns: Vec<(RootAt, usize)>,
    /// Datagram payload bytes per segment.
    pub per_segment: usize,
}

/// The model type of every spawn configuration.
pub type SpawnModel = ActorModel<SpawnNode, SpawnBounds, ()>;
/// Its state type.
pub type SpawnState = ActorModelState<SpawnNode, ()>;

/// One spawn / accept-connect configuration.
#[derive(Clone, Debug)]
pub struct SpawnModelConfig {
    /// Name shown in the table and the golden file.
    pub name: &'static str,
    /// Actors: label and root machines.
    pub actors: Vec<(&'static str, Vec<RootSpec>)>,
    /// Parameters shared by every root.
    pub params: HsParams,
    /// The network.
    pub net: Net,
    /// Outcomes that must be reachable.
    pub reach: &'static [Reach],
    /// Planted bugs (none for the clean gate).
    pub bugs: Bugs,
}

fn root(s: &SpawnState, (a, slot): RootAt) -> &RootState {
    let job: &JobState = &s.actor_states[a];
    &job.roots[usize::from(slot)]
}

fn all_roots(s: &SpawnState) -> impl Iterator<Item = &RootState> {
    s.actor_states.iter().flat_map(|j| j.roots.iter())
}

fn terminal(s: &SpawnState) -> bool {
    s.network.len() == 0 && s.timers_set.iter().all(|t| t.iter().next().is_none())
}

fn phase(r: &RootState) -> Option<Phase> {
    r.machine.as_ref().map(|m| m.hs().phase())
}

fn ready(r: &RootState) -> bool {
    r.machine
        .as_ref()
        .is_some_and(|m| m.hs().intergroup().is_some())
}

impl SpawnModelConfig {
    fn bounds(&self) -> SpawnBounds {
        let mut pairs = Vec::new();
        let mut spawns = Vec::new();
        for (a, (_, roots)) in self.actors.iter().enumerate() {
            for (slot, spec) in roots.iter().enumerate() {
                let here = (a, slot as Slot);
                match spec {
                    RootSpec::Connect { to, .. } => pairs.push((here, *to)),
                    RootSpec::Spawn { child, .. } => {
                        // The children's root is slot 0 of their actor.
                        pairs.push(((*child, 0), here));
                        spawns.push((here, *child));
                    }
                    RootSpec::Accept { .. } | RootSpec::Child => {}
                }
            }
        }
        SpawnBounds {
            max_in_flight: match self.net {
                Net::Lossy { max_in_flight } => Some(max_in_flight),
                _ => None,
            },
            cuts: Arc::new(AtomicUsize::new(0)),
            pairs,
            spawns,
            per_segment: self.params.datagram.mtu - SEGMENT_OVERHEAD,
        }
    }

    /// Actor labels for traces.
    pub fn labels(&self) -> Vec<String> {
        self.actors.iter().map(|(l, _)| l.to_string()).collect()
    }

    /// Builds the stateright model.
    pub fn model(&self) -> SpawnModel {
        let bounds = self.bounds();
        let mut model = ActorModel::new(bounds, ());
        for (label, roots) in &self.actors {
            model = model.actor(SpawnNode {
                label,
                roots: roots.clone(),
                params: self.params,
                bugs: self.bugs,
            });
        }
        model = match self.net {
            Net::Ordered => model.init_network(Network::new_ordered([])),
            Net::Duplicating => model.init_network(Network::new_unordered_duplicating([])),
            Net::Lossy { .. } => model
                .init_network(Network::new_unordered_nonduplicating([]))
                .lossy_network(LossyNetwork::Yes)
                .within_boundary(|b, s| {
                    let ok = b.max_in_flight.is_none_or(|m| s.network.len() <= m);
                    if !ok {
                        // Logged: the count is printed under the configuration's row.
                        b.cuts.fetch_add(1, Ordering::Relaxed);
                    }
                    ok
                }),
        };
        self.add_properties(model)
    }

    fn add_properties(&self, model: SpawnModel) -> SpawnModel {
        let concurrent = self.actors.iter().any(|(_, r)| r.len() > 1);
        let datagrams = self.params.boot != Bootstrap::Stream;
        let spawns = self
            .actors
            .iter()
            .any(|(_, r)| r.iter().any(|s| matches!(s, RootSpec::Spawn { .. })));
        let mut model = model
            .property(
                Expectation::Always,
                "SPAWN-4 both roots agree on the inter-group",
                |m, s| {
                    m.cfg.pairs.iter().all(|&(i, a)| {
                        let (ri, ra) = (root(s, i), root(s, a));
                        let (Some(mi), Some(ma)) = (&ri.machine, &ra.machine) else {
                            return true;
                        };
                        match (mi.hs().intergroup(), ma.hs().intergroup()) {
                            (Some(x), Some(y)) => {
                                x.local == y.remote && x.remote == y.local && x.session == y.session
                            }
                            _ => true,
                        }
                    })
                },
            )
            .property(
                Expectation::Always,
                "SPAWN-4 SPAWN-7 members hold their root's inter-group",
                |_, s| {
                    all_roots(s).all(|r| {
                        let root_ig = r.machine.as_ref().and_then(|m| m.hs().intergroup());
                        r.members.iter().all(|mem| match mem.intergroup() {
                            None => true,
                            Some(ig) => root_ig.is_some_and(|rig| {
                                ig.session == rig.session
                                    && ig.local == rig.local
                                    && ig.remote == rig.remote
                                    && ig.remote_endpoints == rig.remote_endpoints
                                    && ig.remote_endpoints.len() == ig.remote.size as usize
                            }),
                        })
                    })
                },
            )
            .property(
                Expectation::Always,
                "SPAWN-8 a failed side holds no handle",
                |_, s| {
                    all_roots(s).all(|r| {
                        let failed = phase(r) == Some(Phase::Failed);
                        let app_agrees = r.handle.is_some() == ready(r);
                        app_agrees
                            && (!failed
                                || (r.handle.is_none()
                                    && r.members.iter().all(|m| m.intergroup().is_none())))
                    })
                },
            )
            .property(
                Expectation::Always,
                "SPAWN-16 Done implies the peer has our triple and table",
                |m, s| {
                    m.cfg.pairs.iter().all(|&(i, a)| {
                        [(i, a), (a, i)].into_iter().all(|(x, y)| {
                            let (rx, ry) = (root(s, x), root(s, y));
                            // A killed child has nothing to check.
                            let (Some(mx), Some(my)) = (&rx.machine, &ry.machine) else {
                                return true;
                            };
                            mx.hs().phase() != Phase::Done
                                || (my.hs().remote() == rx.local && ry.heard_endpoints)
                        })
                    })
                },
            )
            .property(
                Expectation::Always,
                "SPAWN-8 every terminal state is decided",
                |_, s| {
                    // Every root, and every member of a live group: a member its root
                    // never told waits forever.
                    !terminal(s)
                        || all_roots(s).all(|r| {
                            matches!(phase(r), None | Some(Phase::Done | Phase::Failed))
                                && (r.machine.is_none()
                                    || r.members
                                        .iter()
                                        .all(|m| m.intergroup().is_some() || m.error().is_some()))
                        })
                },
            );
        if spawns {
            model = model
                .property(
                    Expectation::Always,
                    "SPAWN-3 a spawn launches exactly once",
                    |m, s| m.cfg.spawns.iter().all(|&(p, _)| root(s, p).launches == 1),
                )
                .property(
                    Expectation::Always,
                    "SPAWN-8 a failed spawn kills its children",
                    |m, s| {
                        m.cfg.spawns.iter().all(|&(p, child)| {
                            let parent = root(s, p);
                            if phase(parent) != Some(Phase::Failed) {
                                return true;
                            }
                            // Killed once, and once everything settled no child runs.
                            let children = root(s, (child, 0));
                            parent.kills == 1 && (!terminal(s) || children.machine.is_none())
                        })
                    },
                );
        }
        if concurrent {
            model = model.property(
                Expectation::Always,
                "SPAWN-5 live context ids are unique",
                |_, s| {
                    s.actor_states.iter().all(|job| {
                        let live: Vec<u32> = job
                            .roots
                            .iter()
                            .filter_map(|r| r.handle.as_ref().map(|ig| ig.local.context_id))
                            .collect();
                        let distinct: BTreeSet<u32> = live.iter().copied().collect();
                        distinct.len() == live.len() && live.iter().all(|c| job.ctx.is_live(*c))
                    })
                },
            );
        }
        if datagrams {
            model = model.property(
                Expectation::Always,
                "SPAWN-11 SPAWN-12 datagram delivery is exactly once and as sent",
                |m, s| {
                    m.cfg.pairs.iter().all(|&(i, a)| {
                        [(i, a), (a, i)].into_iter().all(|(to, from)| {
                            let (rx, tx) = (root(s, to), root(s, from));
                            let once = rx.delivered.iter().collect::<BTreeSet<_>>().len()
                                == rx.delivered.len();
                            let seqs = tx.sent_seqs();
                            once && rx.delivered.iter().all(|d| {
                                seqs.iter().any(|q| tx.sent_message(*q).as_ref() == Some(d))
                            })
                        })
                    })
                },
            );
        }
        for r in self.reach {
            model = match r {
                Reach::BothReady => {
                    model.property(Expectation::Sometimes, "reach both roots ready", |m, s| {
                        m.cfg
                            .pairs
                            .iter()
                            .any(|&(i, a)| ready(root(s, i)) && ready(root(s, a)))
                    })
                }
                Reach::AllReady => model.property(
                    Expectation::Sometimes,
                    "reach every handshake ready",
                    |m, s| {
                        m.cfg
                            .pairs
                            .iter()
                            .all(|&(i, a)| ready(root(s, i)) && ready(root(s, a)))
                    },
                ),
                Reach::Failed => model.property(Expectation::Sometimes, "reach FAILED", |_, s| {
                    all_roots(s).any(|r| phase(r) == Some(Phase::Failed))
                }),
                Reach::ChildrenKilled => {
                    model.property(Expectation::Sometimes, "reach children killed", |_, s| {
                        all_roots(s).any(|r| r.killed)
                    })
                }
                Reach::Segmented => model.property(
                    Expectation::Sometimes,
                    "reach a segmented message delivered",
                    |m, s| {
                        all_roots(s)
                            .any(|r| r.delivered.iter().any(|d| d.len() > m.cfg.per_segment))
                    },
                ),
            };
        }
        model
    }
}

fn stream_params() -> HsParams {
    HsParams {
        boot: Bootstrap::Stream,
        timeout: Duration::from_secs(1),
        datagram: DatagramConfig::default(),
        endpoint_len: 8,
    }
}

fn dgram_params(max_retries: u32) -> HsParams {
    HsParams {
        boot: Bootstrap::Datagram,
        timeout: Duration::from_secs(1),
        // The smallest MTU the layer takes (93 payload bytes per segment), so a table of
        // two 60-byte endpoints needs two segments.
        datagram: DatagramConfig {
            mtu: dynres_core::spawn::datagram::MIN_MTU,
            rto: Duration::from_millis(20),
            max_retries,
        },
        endpoint_len: 60,
    }
}

/// The PR-tier spawn configurations (each exhaustive in seconds).
pub fn pr_configs() -> Vec<SpawnModelConfig> {
    use Reach::*;
    let spawn = |group_id, size, maxprocs, child, child_group_id| RootSpec::Spawn {
        group_id,
        size,
        maxprocs,
        child,
        child_group_id,
    };
    vec![
        SpawnModelConfig {
            name: "spawn-connect-stream",
            actors: vec![
                ("parent", vec![spawn(1, 2, 2, 1, 2)]),
                ("children", vec![RootSpec::Child]),
            ],
            params: stream_params(),
            net: Net::Ordered,
            reach: &[BothReady, Failed, ChildrenKilled],
            bugs: Bugs::NONE,
        },
        SpawnModelConfig {
            name: "spawn-connect-dgram-dup",
            actors: vec![
                (
                    "server",
                    vec![RootSpec::Accept {
                        group_id: 1,
                        size: 1,
                    }],
                ),
                (
                    "client",
                    vec![RootSpec::Connect {
                        group_id: 2,
                        size: 2,
                        to: (0, 0),
                    }],
                ),
            ],
            // Nothing is lost here, so retransmission is not needed for progress: it is
            // exercised by the lossy configuration, and without it this one stays small.
            params: dgram_params(0),
            net: Net::Duplicating,
            reach: &[BothReady, Failed, Segmented],
            bugs: Bugs::NONE,
        },
        SpawnModelConfig {
            name: "spawn-parent-dgram-dup",
            actors: vec![
                ("parent", vec![spawn(1, 1, 2, 1, 2)]),
                ("children", vec![RootSpec::Child]),
            ],
            params: dgram_params(0),
            net: Net::Duplicating,
            reach: &[BothReady, Failed, ChildrenKilled, Segmented],
            bugs: Bugs::NONE,
        },
        SpawnModelConfig {
            name: "spawn-connect-dgram-lossy",
            actors: vec![
                (
                    "server",
                    vec![RootSpec::Accept {
                        group_id: 1,
                        size: 1,
                    }],
                ),
                (
                    "client",
                    vec![RootSpec::Connect {
                        group_id: 2,
                        size: 2,
                        to: (0, 0),
                    }],
                ),
            ],
            params: dgram_params(1),
            net: Net::Lossy { max_in_flight: 3 },
            reach: &[BothReady, Failed, Segmented],
            bugs: Bugs::NONE,
        },
        SpawnModelConfig {
            name: "spawn-two-concurrent",
            actors: vec![
                ("parent", vec![spawn(1, 1, 1, 1, 10), spawn(1, 1, 1, 2, 11)]),
                ("children-a", vec![RootSpec::Child]),
                ("children-b", vec![RootSpec::Child]),
            ],
            params: stream_params(),
            net: Net::Ordered,
            reach: &[AllReady, Failed],
            bugs: Bugs::NONE,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planted::{corpus, hunt};
    use crate::run::check_spawn;

    fn config(name: &str) -> SpawnModelConfig {
        pr_configs()
            .into_iter()
            .find(|c| c.name == name)
            .expect("configuration exists")
    }

    #[test]
    fn stream_spawn_passes_and_reaches_every_outcome() {
        let o = check_spawn(&config("spawn-connect-stream"), 100_000, 1);
        assert!(o.passed(), "{:?}", o.failures);
        assert!(o.states > 1);
    }

    #[test]
    fn stream_spawn_bugs_are_caught() {
        for p in corpus()
            .into_iter()
            .filter(|p| p.config == "spawn-connect-stream")
        {
            let h = hunt(&p, 1);
            assert!(h.caught, "{:?} not caught", p.bug);
            assert!(!h.trace.is_empty());
        }
    }

    #[test]
    fn a_model_cut_too_small_fails_loudly() {
        // A state budget that stops the search is reported as a failure, never a pass.
        let o = check_spawn(&config("spawn-connect-stream"), 1, 1);
        assert!(!o.passed());
    }
}
