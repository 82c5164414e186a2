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
use dynres_core::spawn::{
    Bootstrap, DatagramConfig, HsMsg, InterGroup, Phase, Role, Transport, merge_planted,
};
use stateright::Expectation;
use stateright::actor::{ActorModel, ActorModelState, LossyNetwork, Network};

use crate::spawn_model::{
    Faults, HsParams, JobState, RootSpec, RootState, Slot, SpawnNode, endpoints, port_of,
};

/// A root: (actor index, slot).
pub type RootAt = (usize, Slot);

/// The network a configuration runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Net {
    /// Ordered and reliable per pair of actors (streams: TCP, RC, shm).
    Ordered,
    /// Unordered, every message deliverable any number of times (UD duplicates).
    Duplicating,
    /// Unordered, every message delivered exactly once (nothing lost or duplicated:
    /// retransmissions still happen, when a timer fires before the acknowledgement).
    Unordered,
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
    /// An acceptor is ready with one initiator while another initiator of its port failed.
    OneServedOneRefused,
    /// Two connected roots with equal group ids are both ready (the merge's tie-break).
    EqualIdsReady,
    /// Both roots ready, and a segment whose corrupted copy was rejected was retransmitted.
    ReadyAfterCorruption,
    /// A corrupted copy was rejected and some root failed.
    FailedAfterCorruption,
    /// The launcher reported a failed launch and the children were killed.
    LaunchFailedKilled,
    /// Both roots ready with the endpoint tables carried on the stream (hybrid).
    TablesOnStream,
    /// Every handshake ready, and a later accept of a port refused a stale Hello of the
    /// connection the port served before (SPAWN-21).
    StaleHelloRefused,
    /// Both roots ready after a root dropped a stranger's forged datagrams (SPAWN-22).
    ReadyAfterForgery,
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
    /// Joins: (the end that must initiate, the end that must accept).
    pub joins: Vec<(RootAt, RootAt)>,
    /// Datagram payload bytes per segment.
    pub per_segment: usize,
    /// The bootstrap of every port.
    pub boot: Bootstrap,
    /// Bytes per endpoint address (to recompute a group's table, `endpoints`).
    pub endpoint_len: usize,
    /// Planted bugs, for the properties that call core functions themselves (`merge`).
    pub bugs: Bugs,
    /// The strangers' actors (SPAWN-22).
    pub strangers: Vec<usize>,
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
    /// Faults of the environment.
    pub faults: Faults,
}

fn root(s: &SpawnState, (a, slot): RootAt) -> &RootState {
    let job: &JobState = &s.actor_states[a];
    &job.roots[usize::from(slot)]
}

fn all_roots(s: &SpawnState) -> impl Iterator<Item = &RootState> {
    s.actor_states.iter().flat_map(|j| j.roots.iter())
}

/// Every root with where it is.
fn roots_at(s: &SpawnState) -> impl Iterator<Item = (RootAt, &RootState)> {
    s.actor_states.iter().enumerate().flat_map(|(a, j)| {
        j.roots
            .iter()
            .enumerate()
            .map(move |(slot, r)| ((a, slot as Slot), r))
    })
}

fn intergroup(r: &RootState) -> Option<&InterGroup> {
    r.machine.as_ref().and_then(|m| m.intergroup())
}

/// Whether initiator `i` and acceptor `a` talk to each other: each is the other's peer.
fn connected(s: &SpawnState, i: RootAt, a: RootAt) -> bool {
    root(s, a).peer == Some(i) && root(s, i).peer == Some(a)
}

/// `y`'s inter-group is `x`'s seen from the other side: same session, triples and
/// tables swapped, opposite roles.
fn mirrors(x: &InterGroup, y: &InterGroup) -> bool {
    x.session == y.session
        && x.role != y.role
        && x.local == y.remote
        && x.remote == y.local
        && x.local_endpoints == y.remote_endpoints
        && x.remote_endpoints == y.local_endpoints
}

/// SPAWN-15, from the spec's words rather than `merge`'s code: for the acceptor's and
/// the initiator's inter-groups and the two `high` flags, whether the acceptor's group
/// comes first, and the merged (group id, rank) list with its endpoints.
fn spec_merge_order(
    acc: &InterGroup,
    ini: &InterGroup,
    acc_high: bool,
    ini_high: bool,
) -> (bool, Vec<(u64, u32)>, Vec<dynres_core::spawn::Addr>) {
    let acc_first = if acc_high != ini_high {
        // The group that passed high = false comes first.
        !acc_high
    } else if acc.local.group_id != ini.local.group_id {
        // A tie: the smaller group id first...
        acc.local.group_id < ini.local.group_id
    } else {
        // ...the acceptor's on equal ids.
        true
    };
    let (first, second) = if acc_first { (acc, ini) } else { (ini, acc) };
    let mut members = Vec::new();
    let mut eps = Vec::new();
    for g in [first, second] {
        for (r, e) in g.local_endpoints.iter().enumerate() {
            members.push((g.local.group_id, r as u32));
            eps.push(e.clone());
        }
    }
    (acc_first, members, eps)
}

fn terminal(s: &SpawnState) -> bool {
    s.network.len() == 0 && s.timers_set.iter().all(|t| t.iter().next().is_none())
}

fn phase(r: &RootState) -> Option<Phase> {
    r.machine.as_ref().map(|m| m.phase())
}

fn ready(r: &RootState) -> bool {
    r.machine.as_ref().is_some_and(|m| m.intergroup().is_some())
}

impl SpawnModelConfig {
    fn bounds(&self) -> SpawnBounds {
        let mut pairs = Vec::new();
        let mut spawns = Vec::new();
        let mut joins = Vec::new();
        let mut strangers = Vec::new();
        for (a, (_, roots)) in self.actors.iter().enumerate() {
            for (slot, spec) in roots.iter().enumerate() {
                let here = (a, slot as Slot);
                match spec {
                    RootSpec::Connect { to, .. } | RootSpec::ConnectPosted { to, .. } => {
                        pairs.push((here, *to))
                    }
                    RootSpec::Spawn { child, .. } => {
                        // The children's root is slot 0 of their actor.
                        pairs.push(((*child, 0), here));
                        spawns.push((here, *child));
                    }
                    RootSpec::Join { partner, .. } if here < *partner => {
                        // SPAWN-14: the lower port accepts.
                        let boot = self.params.boot;
                        let mine = port_of(here.0, here.1, boot).to_string();
                        let theirs = port_of(partner.0, partner.1, boot).to_string();
                        pairs.push(if mine < theirs {
                            (*partner, here)
                        } else {
                            (here, *partner)
                        });
                        joins.push(*pairs.last().expect("just pushed"));
                    }
                    RootSpec::Stranger { .. } => strangers.push(a),
                    RootSpec::Accept { .. }
                    | RootSpec::AcceptAgain { .. }
                    | RootSpec::Child
                    | RootSpec::Join { .. } => {}
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
            joins,
            per_segment: self.params.datagram.mtu - SEGMENT_OVERHEAD,
            boot: self.params.boot,
            endpoint_len: self.params.endpoint_len,
            bugs: self.bugs,
            strangers,
        }
    }

    fn joins_are_empty(&self) -> bool {
        !self
            .actors
            .iter()
            .any(|(_, r)| r.iter().any(|s| matches!(s, RootSpec::Join { .. })))
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
                faults: self.faults,
            });
        }
        model = match self.net {
            Net::Ordered => model.init_network(Network::new_ordered([])),
            Net::Duplicating => model.init_network(Network::new_unordered_duplicating([])),
            Net::Unordered => model.init_network(Network::new_unordered_nonduplicating([])),
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
                        if ra.peer != Some(i) {
                            // The acceptor serves another initiator of its port; the
                            // pairing property below judges this one.
                            return true;
                        }
                        match (mi.intergroup(), ma.intergroup()) {
                            // SPAWN-23: and on its data-plane key.
                            (Some(x), Some(y)) => {
                                x.local == y.remote
                                    && x.remote == y.local
                                    && x.session == y.session
                                    && x.data_key == y.data_key
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
                        let root_ig = r.machine.as_ref().and_then(|m| m.intergroup());
                        r.members.iter().all(|mem| match mem.intergroup() {
                            None => true,
                            Some(ig) => root_ig.is_some_and(|rig| {
                                ig.session == rig.session
                                    && ig.data_key == rig.data_key
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
                |_, s| {
                    roots_at(s).all(|(_, rx)| {
                        let Some(mx) = &rx.machine else { return true };
                        if mx.phase() != Phase::Done {
                            return true;
                        }
                        // A Done acceptor learnt its peer from the Hello it took.
                        let Some(y) = rx.peer else { return false };
                        let ry = root(s, y);
                        // A killed child has nothing to check.
                        let Some(my) = &ry.machine else { return true };
                        my.remote() == rx.local && ry.heard_endpoints
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
            )
            .property(
                Expectation::Always,
                "SPAWN-4 each connection pairs one initiator with one accept",
                |_, s| {
                    roots_at(s).all(|(x, rx)| {
                        let Some(ig) = intergroup(rx) else {
                            return true;
                        };
                        let Some(y) = rx.peer else { return false };
                        // The peer, once ready, holds the mirror image and calls x its
                        // peer; no other root holds a mirror of x's inter-group.
                        let peer_ok = match intergroup(root(s, y)) {
                            Some(py) => mirrors(ig, py) && root(s, y).peer == Some(x),
                            None => true,
                        };
                        peer_ok
                            && roots_at(s).all(|(z, rz)| {
                                z == x || z == y || intergroup(rz).is_none_or(|iz| !mirrors(ig, iz))
                            })
                    })
                },
            )
            .property(
                Expectation::Always,
                "SPAWN-21 an initiator is paired with at most one accept, the one that answered it",
                |_, s| {
                    // An accept is paired with the initiator whose Hello opened its
                    // session (`peer`); an initiator is answered by the accept whose
                    // HelloAck it took (`served_by`). A later accept of a port that takes
                    // a stale Hello of the port's earlier connection pairs a second time
                    // with an initiator that another accept answered.
                    let acceptor = |r: &RootState| {
                        r.machine
                            .as_ref()
                            .and_then(|m| m.hs())
                            .is_some_and(|h| h.role() == Role::Acceptor)
                    };
                    roots_at(s).all(|(x, rx)| {
                        let Some(y) = rx.peer.filter(|_| acceptor(rx)) else {
                            return true;
                        };
                        root(s, y).served_by.is_none_or(|z| z == x)
                            && roots_at(s)
                                .all(|(z, rz)| z == x || !acceptor(rz) || rz.peer != Some(y))
                    })
                },
            )
            .property(
                Expectation::Always,
                "SPAWN-10 no root mixes two peers",
                |m, s| {
                    // The remote triple a root holds is its peer's, and so is the
                    // remote table (every group's table names its actor).
                    roots_at(s).all(|(_, rx)| {
                        let Some(mx) = &rx.machine else { return true };
                        let Some(remote) = mx.remote() else {
                            return true;
                        };
                        let Some(y) = rx.peer else { return false };
                        let triple_ok = root(s, y).local.is_none_or(|l| l == remote);
                        let table_ok = intergroup(rx).is_none_or(|ig| {
                            ig.remote_endpoints
                                == endpoints(remote.group_id, remote.size, m.cfg.endpoint_len, y.0)
                        });
                        triple_ok && table_ok
                    })
                },
            )
            .property(
                Expectation::Always,
                "SPAWN-15 both sides merge in the spec's order",
                |m, s| {
                    // Every connected pair that both hold the inter-group, roots and
                    // members, all four `high` combinations.
                    m.cfg.pairs.iter().all(|&(i, a)| {
                        if !connected(s, i, a) {
                            return true;
                        }
                        let (ri, ra) = (root(s, i), root(s, a));
                        let (Some(ini), Some(acc)) = (intergroup(ri), intergroup(ra)) else {
                            return true;
                        };
                        let side = |r: &'_ RootState| -> Vec<InterGroup> {
                            intergroup(r)
                                .into_iter()
                                .cloned()
                                .chain(r.members.iter().filter_map(|mem| mem.intergroup().cloned()))
                                .collect()
                        };
                        let (acc_side, ini_side) = (side(ra), side(ri));
                        [(false, false), (false, true), (true, false), (true, true)]
                            .into_iter()
                            .all(|(ha, hi)| {
                                let (acc_first, members, eps) = spec_merge_order(acc, ini, ha, hi);
                                let check = |ig: &InterGroup, mine: bool, theirs: bool| {
                                    let got = merge_planted(ig, mine, theirs, m.cfg.bugs);
                                    let local_first = acc_first == (ig.role == Role::Acceptor);
                                    let offset = if local_first { 0 } else { ig.remote.size };
                                    got.members == members
                                        && got.endpoints == eps
                                        && got.rank == offset + ig.local_rank
                                };
                                acc_side.iter().all(|ig| check(ig, ha, hi))
                                    && ini_side.iter().all(|ig| check(ig, hi, ha))
                            })
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
        if self.faults.corrupt.is_some() {
            model = model.property(
                Expectation::Always,
                "SPAWN-10 SPAWN-12 a corrupted datagram is rejected and changes nothing",
                |_, s| all_roots(s).all(|r| !r.corrupt_accepted),
            );
        }
        if let Bootstrap::Hybrid { .. } = self.params.boot {
            model = model.property(
                Expectation::Always,
                "SPAWN-9 every message travels on the transport the rule gives",
                |m, s| {
                    all_roots(s).all(|r| {
                        let Some(mach) = &r.machine else { return true };
                        // Hello and HelloAck never go on the stream.
                        let hello_ok = !r.stream_kinds.contains("Hello")
                            && !r.stream_kinds.contains("HelloAck");
                        let (Some(local), Some(remote)) = (r.local, mach.remote()) else {
                            return hello_ok;
                        };
                        let rule = m.cfg.boot.endpoint_transport(local.size, remote.size);
                        let via_ok = mach
                            .hs()
                            .and_then(|h| h.endpoints_via())
                            .is_none_or(|v| v == rule);
                        let tables = ["Endpoints", "EndpointsAck"];
                        let on_stream = tables.iter().any(|k| r.stream_kinds.contains(k));
                        let on_dgram = r.sent_seqs().into_iter().any(|q| {
                            r.sent_message(q)
                                .and_then(|b| HsMsg::decode(&b).ok())
                                .is_some_and(|msg| tables.contains(&msg.name()))
                        });
                        hello_ok
                            && via_ok
                            && match rule {
                                Transport::Stream => !on_dgram,
                                Transport::Datagram => !on_stream,
                            }
                    })
                },
            );
        }
        if !self.joins_are_empty() {
            model = model.property(
                Expectation::Always,
                "SPAWN-14 a join's ends take opposite roles, the lower port accepting",
                |m, s| {
                    m.cfg.joins.iter().all(|&(i, a)| {
                        let role = |x| {
                            root(s, x)
                                .machine
                                .as_ref()
                                .and_then(|m| m.hs())
                                .map(|h| h.role())
                        };
                        role(i).is_none_or(|r| r == Role::Initiator)
                            && role(a).is_none_or(|r| r == Role::Acceptor)
                    })
                },
            );
        }
        if self.faults.launch_may_fail {
            model = model.property(
                Expectation::Always,
                "SPAWN-8 a failed launch fails the spawn and leaves no handle",
                |m, s| {
                    m.cfg.spawns.iter().all(|&(p, child)| {
                        let parent = root(s, p);
                        if !parent.launch_failed {
                            return true;
                        }
                        let children = root(s, (child, 0));
                        let no_handle = |r: &RootState| {
                            r.handle.is_none()
                                && intergroup(r).is_none()
                                && r.members.iter().all(|mem| mem.intergroup().is_none())
                        };
                        // The parent's context id went back with the failed attempt.
                        let ctx_free = parent
                            .local
                            .is_none_or(|l| !s.actor_states[p.0].ctx.is_live(l.context_id));
                        // A child may be Ready for a moment (the parent's table and ack
                        // were on their way when the launch failed) until the parent's
                        // Abort or kill reaches it: judged once everything settled.
                        phase(parent) == Some(Phase::Failed)
                            && no_handle(parent)
                            && ctx_free
                            && (!terminal(s) || no_handle(children))
                    })
                },
            );
        }
        let strangers = self
            .actors
            .iter()
            .any(|(_, r)| r.iter().any(|s| matches!(s, RootSpec::Stranger { .. })));
        if strangers {
            model = model
                .property(
                    Expectation::Always,
                    "SPAWN-22 a forged message is dropped and counted, never decides the handshake",
                    |_, s| all_roots(s).all(|r| !r.forged_accepted),
                )
                .property(
                    Expectation::Always,
                    "SPAWN-22 a stranger never becomes a root's peer",
                    |m, s| {
                        all_roots(s)
                            .all(|r| r.peer.is_none_or(|(a, _)| !m.cfg.strangers.contains(&a)))
                    },
                );
        }
        if datagrams {
            model = model.property(
                Expectation::Always,
                "SPAWN-11 SPAWN-12 datagram delivery is exactly once and as sent",
                |_, s| {
                    // What a root delivered came from its peer (an acceptor has one once
                    // a Hello opened its session; before, it delivered nothing).
                    roots_at(s).all(|(_, rx)| {
                        let once = rx.delivered.iter().collect::<BTreeSet<_>>().len()
                            == rx.delivered.len();
                        let Some(y) = rx.peer else {
                            return once && rx.delivered.is_empty();
                        };
                        let tx = root(s, y);
                        let seqs = tx.sent_seqs();
                        once && rx
                            .delivered
                            .iter()
                            .all(|d| seqs.iter().any(|q| tx.sent_message(*q).as_ref() == Some(d)))
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
                Reach::OneServedOneRefused => model.property(
                    Expectation::Sometimes,
                    "reach one initiator served, another of the port refused",
                    |m, s| {
                        m.cfg.pairs.iter().any(|&(i, a)| {
                            ready(root(s, i))
                                && ready(root(s, a))
                                && m.cfg.pairs.iter().any(|&(j, b)| {
                                    b == a && j != i && phase(root(s, j)) == Some(Phase::Failed)
                                })
                        })
                    },
                ),
                Reach::EqualIdsReady => model.property(
                    Expectation::Sometimes,
                    "reach both roots ready with equal group ids",
                    |m, s| {
                        m.cfg.pairs.iter().any(|&(i, a)| {
                            connected(s, i, a)
                                && match (intergroup(root(s, i)), intergroup(root(s, a))) {
                                    (Some(x), Some(y)) => x.local.group_id == y.local.group_id,
                                    _ => false,
                                }
                        })
                    },
                ),
                Reach::ReadyAfterCorruption => model.property(
                    Expectation::Sometimes,
                    "reach both roots ready after a corrupted segment was retransmitted",
                    |m, s| {
                        m.cfg.pairs.iter().any(|&(i, a)| {
                            let (ri, ra) = (root(s, i), root(s, a));
                            ready(ri)
                                && ready(ra)
                                && [(ri, ra), (ra, ri)].into_iter().any(|(rx, tx)| {
                                    rx.corrupt_rejected
                                        .iter()
                                        .any(|id| tx.retransmitted.contains(id))
                                })
                        })
                    },
                ),
                Reach::FailedAfterCorruption => model.property(
                    Expectation::Sometimes,
                    "reach FAILED after a corrupted datagram was rejected",
                    |_, s| {
                        all_roots(s).any(|r| !r.corrupt_rejected.is_empty())
                            && all_roots(s).any(|r| phase(r) == Some(Phase::Failed))
                    },
                ),
                Reach::TablesOnStream => model.property(
                    Expectation::Sometimes,
                    "reach both roots ready with the tables on the stream",
                    |m, s| {
                        m.cfg.pairs.iter().any(|&(i, a)| {
                            [i, a].into_iter().all(|x| {
                                let r = root(s, x);
                                ready(r)
                                    && r.machine
                                        .as_ref()
                                        .and_then(|m| m.hs())
                                        .and_then(|h| h.endpoints_via())
                                        == Some(Transport::Stream)
                            })
                        })
                    },
                ),
                Reach::StaleHelloRefused => model.property(
                    Expectation::Sometimes,
                    "reach every handshake ready after a later accept refused a stale Hello",
                    |m, s| {
                        all_roots(s).any(|r| r.stale_refused)
                            && m.cfg
                                .pairs
                                .iter()
                                .all(|&(i, a)| ready(root(s, i)) && ready(root(s, a)))
                    },
                ),
                Reach::ReadyAfterForgery => model.property(
                    Expectation::Sometimes,
                    "reach both roots ready after forged datagrams were dropped",
                    |m, s| {
                        all_roots(s).any(|r| r.forged_dropped > 0)
                            && m.cfg
                                .pairs
                                .iter()
                                .any(|&(i, a)| ready(root(s, i)) && ready(root(s, a)))
                    },
                ),
                Reach::LaunchFailedKilled => model.property(
                    Expectation::Sometimes,
                    "reach a failed launch with its children killed",
                    |m, s| {
                        m.cfg.spawns.iter().any(|&(p, child)| {
                            root(s, p).launch_failed && root(s, (child, 0)).killed
                        })
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
        // The smallest MTU the layer takes plus the tag (SPAWN-22): 95 payload bytes per
        // segment, as before issue 28 added the tag, so every message has as many
        // segments as it had (a table of two 60-byte endpoints two, of one one) and the
        // models' state spaces stay the ones the golden counts pinned.
        datagram: DatagramConfig {
            mtu: dynres_core::spawn::datagram::MIN_MTU + dynres_core::spawn::TAG_LEN,
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
    let accept = |group_id, size| vec![RootSpec::Accept { group_id, size }];
    let connect = |group_id, size, to| vec![RootSpec::Connect { group_id, size, to }];
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
            faults: Faults::default(),
        },
        SpawnModelConfig {
            name: "spawn-connect-dgram-dup",
            actors: vec![("server", accept(1, 1)), ("client", connect(2, 2, (0, 0)))],
            // Nothing is lost here, so retransmission is not needed for progress: it is
            // exercised by the lossy configuration, and without it this one stays small.
            params: dgram_params(0),
            net: Net::Duplicating,
            reach: &[BothReady, Failed, Segmented],
            bugs: Bugs::NONE,
            faults: Faults::default(),
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
            faults: Faults::default(),
        },
        SpawnModelConfig {
            name: "spawn-connect-dgram-lossy",
            actors: vec![("server", accept(1, 1)), ("client", connect(2, 2, (0, 0)))],
            params: dgram_params(1),
            net: Net::Lossy { max_in_flight: 3 },
            reach: &[BothReady, Failed, Segmented],
            bugs: Bugs::NONE,
            faults: Faults::default(),
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
            faults: Faults::default(),
        },
        // Issue 13: two initiators on one port. Both clients' groups have id 2 (two
        // jobs: group ids are unique only in a job), so their sessions are equal and only
        // the address tells them apart; the server's group has id 2 as well, so the merge's
        // equal-id tie-break is reached. Tables of 8-byte endpoints are one segment.
        SpawnModelConfig {
            name: "spawn-two-initiators-dgram",
            actors: vec![
                ("server", accept(2, 2)),
                ("client-a", connect(2, 1, (0, 0))),
                ("client-b", connect(2, 1, (0, 0))),
            ],
            params: HsParams {
                endpoint_len: 8,
                ..dgram_params(0)
            },
            net: Net::Unordered,
            reach: &[BothReady, Failed, OneServedOneRefused, EqualIdsReady],
            bugs: Bugs::NONE,
            faults: Faults::default(),
        },
        // Issue 13: the hybrid bootstrap (spec/spawn.md §6) with the threshold below the
        // client's size: Hello / HelloAck on datagrams, the tables on the stream the
        // client opens. FIFO links, as in the stream configurations.
        SpawnModelConfig {
            name: "spawn-connect-hybrid",
            actors: vec![("server", accept(1, 1)), ("client", connect(2, 2, (0, 0)))],
            params: HsParams {
                boot: Bootstrap::Hybrid { threshold: 1 },
                endpoint_len: 8,
                ..dgram_params(0)
            },
            net: Net::Ordered,
            reach: &[BothReady, Failed, TablesOnStream],
            bugs: Bugs::NONE,
            faults: Faults::default(),
        },
        // Issue 13: `MPI_Comm_join` (spec/spawn.md §3, SPAWN-14): two singleton groups
        // swap ports on their join stream, the lower port accepts; stream bootstrap.
        SpawnModelConfig {
            name: "spawn-join-stream",
            actors: vec![
                (
                    "left",
                    vec![RootSpec::Join {
                        group_id: 1,
                        partner: (1, 0),
                    }],
                ),
                (
                    "right",
                    vec![RootSpec::Join {
                        group_id: 2,
                        partner: (0, 0),
                    }],
                ),
            ],
            params: stream_params(),
            net: Net::Ordered,
            reach: &[BothReady, Failed],
            bugs: Bugs::NONE,
            faults: Faults::default(),
        },
        // Issue 13: the launcher reports a failed launch, at any point before the
        // children's Hello; the launch may still have started them (a partial launch).
        // Both groups have a member, so failures must reach members too.
        SpawnModelConfig {
            name: "spawn-launch-fails-stream",
            actors: vec![
                ("parent", vec![spawn(1, 2, 2, 1, 2)]),
                ("children", vec![RootSpec::Child]),
            ],
            params: stream_params(),
            net: Net::Ordered,
            reach: &[BothReady, Failed, ChildrenKilled, LaunchFailedKilled],
            bugs: Bugs::NONE,
            faults: Faults {
                launch_may_fail: true,
                ..Faults::default()
            },
        },
        // Issue 13: corrupted datagrams. The client's link corrupts one segment, any one
        // (a flipped payload byte or one byte cut off); one retransmission per segment.
        // The links are FIFO (reordering, loss and duplicates are the other datagram
        // configurations' part): on an unordered or lossy network the same scenario has
        // millions of states.
        SpawnModelConfig {
            name: "spawn-connect-dgram-corrupt",
            actors: vec![("server", accept(1, 1)), ("client", connect(2, 1, (0, 0)))],
            params: HsParams {
                endpoint_len: 8,
                ..dgram_params(1)
            },
            net: Net::Ordered,
            reach: &[
                BothReady,
                Failed,
                ReadyAfterCorruption,
                FailedAfterCorruption,
            ],
            bugs: Bugs::NONE,
            faults: Faults {
                corrupt: Some(1),
                ..Faults::default()
            },
        },
        // Issue 13: two initiators on one stream port (spec/spawn.md §10): the driver
        // takes no second stream while it holds one, so the second waits unread and
        // times out; its close is not the first connection's. Equal group ids, as in the
        // datagram twin.
        SpawnModelConfig {
            name: "spawn-two-initiators-stream",
            actors: vec![
                ("server", accept(2, 2)),
                ("client-a", connect(2, 1, (0, 0))),
                ("client-b", connect(2, 1, (0, 0))),
            ],
            params: stream_params(),
            net: Net::Ordered,
            reach: &[BothReady, Failed, OneServedOneRefused, EqualIdsReady],
            bugs: Bugs::NONE,
            faults: Faults::default(),
        },
        // Issue 13: a port accepts twice in sequence (spec/spawn.md SPAWN-21). The first
        // accept serves client-a, whose link delivers its Hello twice; once the first
        // accept is decided the server posts a second one on the same port and tells
        // client-b, which connects. The stale copy of client-a's Hello may reach the
        // second accept before or after client-b's. Both clients' groups have id 2 (two
        // jobs), so their sessions and triples are equal: only the address tells the
        // stale Hello from client-b's.
        SpawnModelConfig {
            name: "spawn-accept-twice-dgram",
            actors: vec![
                (
                    "server",
                    vec![
                        RootSpec::Accept {
                            group_id: 1,
                            size: 1,
                        },
                        RootSpec::AcceptAgain {
                            after: 0,
                            client: 2,
                        },
                    ],
                ),
                ("client-a", connect(2, 1, (0, 0))),
                (
                    "client-b",
                    vec![RootSpec::ConnectPosted {
                        group_id: 2,
                        size: 1,
                        to: (0, 1),
                    }],
                ),
            ],
            params: HsParams {
                endpoint_len: 8,
                ..dgram_params(0)
            },
            net: Net::Ordered,
            reach: &[BothReady, AllReady, Failed, StaleHelloRefused],
            bugs: Bugs::NONE,
            faults: Faults {
                duplicate_hello: Some(1),
                ..Faults::default()
            },
        },
        // Issue 28 (SPAWN-22): a stranger who knows the parent's port address, the
        // children's group id and size and the child root's address, but not the spawn's
        // key, sends the listening parent a Hello of the children's group and an Abort
        // of their session "from" the child root, at any point of the handshake. Both
        // are dropped and counted; the spawn completes with the real children. FIFO
        // links: the interleavings that matter are between the actors.
        SpawnModelConfig {
            name: "spawn-forged-hello-dgram",
            actors: vec![
                ("parent", vec![spawn(1, 1, 1, 1, 2)]),
                ("children", vec![RootSpec::Child]),
                (
                    "stranger",
                    vec![RootSpec::Stranger {
                        target: (0, 0),
                        group_id: 2,
                        size: 1,
                        spoof: (1, 0),
                    }],
                ),
            ],
            params: HsParams {
                endpoint_len: 8,
                ..dgram_params(0)
            },
            net: Net::Ordered,
            reach: &[BothReady, Failed, ChildrenKilled, ReadyAfterForgery],
            bugs: Bugs::NONE,
            faults: Faults::default(),
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
    fn a_ghost_connection_is_caught_only_by_spawn_21() {
        // SPAWN-21: without the port's record of served connections the second accept
        // takes client-a's late Hello. Of the always-properties only the pairing one
        // sees it: every other holds for the ghost (its triple is client-b's, its
        // datagrams are client-a's own), and client-b just times out. The refusal the
        // fix makes is then never reached either.
        let bugs = Bugs::NONE.with(dynres_core::bugs::Bug::ForgetServedConnections);
        let cfg = SpawnModelConfig {
            bugs,
            ..config("spawn-accept-twice-dgram")
        };
        let o = check_spawn(&cfg, 1_000_000, 1);
        let failed: Vec<&str> = o.failures.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            failed,
            vec![
                "SPAWN-21 an initiator is paired with at most one accept, the one that answered it",
                "reach every handshake ready after a later accept refused a stale Hello",
            ],
        );
    }

    #[test]
    fn an_unauthenticated_bootstrap_is_caught_by_spawn_22() {
        // SPAWN-22: without the tag check the stranger's Hello opens the parent's
        // handshake (its peer is the stranger, its children are refused) or its Abort
        // ends the spawn; both SPAWN-22 properties see it. The clean model passes.
        let clean = check_spawn(&config("spawn-forged-hello-dgram"), 100_000, 1);
        assert!(clean.passed(), "{:?}", clean.failures);
        let bugs = Bugs::NONE.with(dynres_core::bugs::Bug::SkipBootstrapMac);
        let cfg = SpawnModelConfig {
            bugs,
            ..config("spawn-forged-hello-dgram")
        };
        let o = check_spawn(&cfg, 100_000, 1);
        let failed: Vec<&str> = o.failures.iter().map(|(p, _)| p.as_str()).collect();
        for p in [
            "SPAWN-22 a forged message is dropped and counted, never decides the handshake",
            "SPAWN-22 a stranger never becomes a root's peer",
        ] {
            assert!(failed.contains(&p), "{p} not violated: {failed:?}");
        }
    }

    #[test]
    fn a_model_cut_too_small_fails_loudly() {
        // A state budget that stops the search is reported as a failure, never a pass.
        let o = check_spawn(&config("spawn-connect-stream"), 1, 1);
        assert!(!o.passed());
    }
}
