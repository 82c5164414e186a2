//! Pset operations from several clients at once (`PSET-42`, `RC-14`): the shipped master
//! and daemons serve scripted clients, and every request/reply pair goes into stateright's
//! `LinearizabilityTester` against a sequential pset store.
//!
//! The sequential store is [`PsetOracle`], written from
//! `spec/psets.md` without calling the registry, started with the same job as the
//! master. So the check covers both what forwarding through daemons, serialization at the
//! master and reply routing add — whatever the interleaving, each client's answers must
//! be those of *some* order of the requests that respects real time — and the registry's
//! own answers to these scripts: a semantic defect of `PsetRegistry` is no longer on both
//! sides. (Until issue 13 the store was `PsetRegistry` itself.) Refusals are compared
//! without their free-text reasons ([`without_reasons`]).

use dynres_core::bugs::Bugs;
use dynres_core::pset::{AttrUpdate, OpOutcome, PsetName, PsetOp, SetOp};
use dynres_core::rc::{ClientReply, ClientRequest, MasterConfig, NodeId, RcError};
use dynres_core::slots::NodeSpec;
use dynres_core::{Duration, Namespace, ProcessId};
use stateright::actor::{ActorModel, Envelope, Network};
use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};
use stateright::{Expectation, Model};

use crate::adapter::{APP, Layout, Msg, NAMESPACE, RcActor, RcMsg, RcNode, RcState, Role};
use crate::pset_oracle::{PsetOracle, without_reasons};
use crate::run::Outcome;

/// The sequential pset store: the independent oracle, for one application's processes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PsetStore(PsetOracle);

impl SequentialSpec for PsetStore {
    type Op = (ProcessId, Vec<PsetOp>);
    type Ret = Result<Vec<OpOutcome>, RcError>;

    fn invoke(&mut self, (pid, ops): &Self::Op) -> Self::Ret {
        self.0
            .apply_batch(APP, pid, ops)
            .map_err(|e| RcError::from(without_reasons(&e)))
    }
}

/// A reply as the history records it: a pset refusal without its free-text reasons, as
/// the oracle's are (the spec fixes what is refused, not the wording).
fn comparable(ret: &Result<Vec<OpOutcome>, RcError>) -> Result<Vec<OpOutcome>, RcError> {
    match ret {
        Err(RcError::Pset(e)) => Err(RcError::from(without_reasons(&e.0))),
        other => other.clone(),
    }
}

/// The history the model keeps: per client rank, invocations and returns.
pub type History = LinearizabilityTester<u32, PsetStore>;
/// The model type.
/// Its config parameter is the number of daemons (actor ids of clients follow them).
pub type PsetModel = ActorModel<RcNode, usize, History>;

/// A pset-operations configuration.
#[derive(Clone, Debug)]
pub struct PsetConfig {
    /// Name in the table and the golden file.
    pub name: &'static str,
    /// Nodes (one daemon each); clients are spread round-robin by slot order.
    pub nodes: u32,
    /// One script per client process (ranks 0, 1, …).
    pub scripts: Vec<Vec<Vec<PsetOp>>>,
    /// Planted bugs of the master and daemons (none for the clean gate).
    pub bugs: Bugs,
}

fn name(s: &str) -> PsetName {
    PsetName::parse(s).expect("valid name")
}

fn set(op: SetOp, a: &str, b: &str, target: &str) -> PsetOp {
    PsetOp::Set {
        op,
        pset1: name(a),
        pset2: name(b),
        target: Some(name(target)),
        attrs: AttrUpdate::none(),
    }
}

/// The PR-tier configurations: two clients racing for one name, versioning the shared
/// root and updating attributes; once with one daemon, once with a daemon each.
pub fn pr_configs() -> Vec<PsetConfig> {
    let root = "mpi://app/app";
    let racing = |n| PsetConfig {
        name: if n == 1 {
            "pset-ops-1n-2clients"
        } else {
            "pset-ops-2n-2clients"
        },
        nodes: n,
        scripts: vec![
            vec![
                vec![set(SetOp::Union, root, "mpi://SELF", "mpi://app/app/a")],
                vec![set(SetOp::Difference, root, "mpi://SELF", root)],
                // A batch whose second operation fails (an empty result, PSET-30): the
                // first must not take effect either, which client 1's definition of the
                // same name shows.
                vec![
                    set(SetOp::Union, root, "mpi://SELF", "mpi://app/app/b"),
                    set(SetOp::Difference, root, root, "mpi://app/app/c"),
                ],
            ],
            vec![
                vec![set(
                    SetOp::Intersection,
                    root,
                    "mpi://SELF",
                    "mpi://app/app/a",
                )],
                vec![
                    PsetOp::Null {
                        target: name(root),
                        attrs: AttrUpdate::none().with_sched("mpi_ps_sched_x", "1"),
                    },
                    set(SetOp::Union, root, "mpi://SELF", root),
                ],
                vec![set(SetOp::Union, root, "mpi://SELF", "mpi://app/app/b")],
            ],
        ],
        bugs: Bugs::NONE,
    };
    vec![racing(1), racing(2)]
}

impl PsetConfig {
    /// Builds the model.
    pub fn model(&self) -> PsetModel {
        let clients = self.scripts.len() as u32;
        let layout = Layout {
            daemons: self.nodes as usize,
        };
        let cfg = MasterConfig {
            namespace: Namespace::new(NAMESPACE),
            // One slot per node, so clients land on different nodes when there are several.
            nodes: (0..self.nodes)
                .map(|i| NodeSpec {
                    name: format!("n{i}"),
                    slots: clients.div_ceil(self.nodes),
                })
                .collect(),
            apps: vec![(APP.to_string(), clients)],
            change_timeout: Duration::from_millis(500),
            grace: Duration::from_millis(100),
            max_queued: 2,
            grow_wait: None,
            data_server: Default::default(),
        };
        let procs: Vec<ProcessId> = (0..clients)
            .map(|r| ProcessId::new(Namespace::new(NAMESPACE), r))
            .collect();
        // The job as the master starts it: one application of `clients` ranks.
        let store = PsetOracle::start_job(&[(APP, &procs)]).expect("a valid job");
        let node = |actor| RcNode {
            actor,
            fair: false,
            layout,
            initial: clients,
        };
        let mut model = ActorModel::new(
            self.nodes as usize,
            LinearizabilityTester::new(PsetStore(store)),
        )
        .actor(node(RcActor::Master(cfg, self.bugs)))
        .actor(node(RcActor::Scheduler(Vec::new(), None, None)));
        for n in 0..self.nodes {
            model = model.actor(node(RcActor::Daemon(NodeId(n), self.bugs, false, false)));
        }
        for (pid, script) in procs.into_iter().zip(&self.scripts) {
            model = model.actor(node(RcActor::Proc {
                pid,
                role: Role::Scripted,
                polls: 0,
                script: script.clone(),
            }));
        }
        model
            .init_network(Network::new_ordered([]))
            .record_msg_out(|daemons, history, env: Envelope<&Msg>| match &**env.msg {
                RcMsg::Req(_, ClientRequest::PsetOp { ops }) => {
                    let rank = (usize::from(env.src) - 2 - daemons) as u32;
                    let pid = ProcessId::new(Namespace::new(NAMESPACE), rank);
                    let mut h = history.clone();
                    let _ = h.on_invoke(rank, (pid, ops.clone()));
                    Some(h)
                }
                _ => None,
            })
            .record_msg_in(|daemons, history, env: Envelope<&Msg>| match &**env.msg {
                RcMsg::Reply(_, ClientReply::PsetOp(ret)) => {
                    let rank = (usize::from(env.dst) - 2 - daemons) as u32;
                    let mut h = history.clone();
                    let _ = h.on_return(rank, comparable(ret));
                    Some(h)
                }
                _ => None,
            })
            .property(
                Expectation::Always,
                "PSET-42 pset operations are linearizable",
                |_, s| s.history.serialized_history().is_some(),
            )
            .property(
                Expectation::Always,
                "RC-14 replicas never go backwards",
                |_, s| {
                    s.actor_states.iter().all(|a| match &**a {
                        RcState::Daemon(d) => d.regressions == 0,
                        _ => true,
                    })
                },
            )
            .property(
                Expectation::Sometimes,
                "every client finishes its script",
                |model, s| {
                    model.actors.iter().zip(&s.actor_states).all(|(a, st)| {
                        match (&a.actor, &**st) {
                            (RcActor::Proc { script, .. }, RcState::Proc(p)) => {
                                p.script_pos as usize == script.len()
                            }
                            _ => true,
                        }
                    })
                },
            )
    }
}

/// Exhaustive DFS of one pset configuration.
pub fn check(cfg: &PsetConfig, max_states: usize, threads: usize) -> Outcome {
    let model = cfg.model();
    crate::run::explore_all(cfg.name, &model, max_states, threads, |path| {
        path.into_actions()
            .iter()
            .enumerate()
            .map(|(i, a)| format!("    {i:>3}. {}\n", model.format_action(a)))
            .collect()
    })
}
