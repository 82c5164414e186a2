//! The planted-bug corpus: every bug is a named switch in `dynres-core` (feature
//! `planted-bugs`), and the gate demands that the model finds a counterexample for the
//! property that guards against it (`spec/verification.md` §4).

use std::collections::BTreeSet;
use std::hash::Hash;
use std::time::Instant;

use dynres_core::bugs::{Bug, Bugs};
use stateright::{Checker, Expectation, HasDiscoveries, Model};

use crate::models::{RcConfig, pr_configs};
use crate::run::render_path;
use crate::spawn_configs::{self, SpawnModelConfig};

/// One bug, where to plant it and what must catch it.
#[derive(Clone, Debug)]
pub struct Planted {
    /// The switch.
    pub bug: Bug,
    /// The configuration it is planted in.
    pub config: &'static str,
    /// The property that must fail.
    pub property: &'static str,
}

/// The corpus.
pub fn corpus() -> Vec<Planted> {
    use Bug::*;
    let p = |bug, config, property| Planted {
        bug,
        config,
        property,
    };
    vec![
        // issue 30: the master's tool desk, in every resource-change configuration
        p(
            ToolAnswerBeforeFinal,
            "rc-add-1n-2e-1new",
            "TOOL-1 TOOL-2 every tool hears its own request's outcome, once",
        ),
        p(
            ToolQueuedUnanswered,
            "rc-queue-1n-2e-1new",
            "TOOL-1 TOOL-2 every tool hears its own request's outcome, once",
        ),
        // issue 30: the runtime's failure detector (`liveness_model.rs`)
        p(
            SentCountsAsHeard,
            "liveness-2n-3b",
            "HB-2 NODE-1 a node silent past the bound is declared lost",
        ),
        p(
            SentCountsAsHeard,
            "liveness-2n-3b",
            "RT-3 HB-2 a daemon whose master fell silent ends its node",
        ),
        p(
            HeardRecordedAsSent,
            "liveness-2n-3b",
            "HB-2 HB-3 NODE-1 a node is declared lost only for a reason",
        ),
        p(
            ReturnedEndIsLoss,
            "liveness-2n-3b",
            "RC-20 a node given back is never declared lost",
        ),
        p(
            ConnectDeadlineNotArmed,
            "liveness-2n-3b",
            "HB-3 a daemon not connected within its bound is declared lost",
        ),
        p(
            LostMasterKillsAsShutdown,
            "liveness-2n-3b",
            "NODE-4 a daemon that ends its node on its own reports a loss",
        ),
        // issue 30: GROW-4's hold (`giveback_model.rs`)
        p(
            HoldRestartsOnRelease,
            "giveback-3n",
            "GROW-4 a released node goes back within the hold bound",
        ),
        p(
            OfferWithoutHold,
            "giveback-3n",
            "GROW-4 nodes emptied together go back together",
        ),
        p(
            DaemonKillIsRemoval,
            "ends-stall-2n-3r",
            "NODE-4 a job that exits 0 lost no rank's work",
        ),
        p(
            LostMasterKillsAsShutdown,
            "ends-stall-2n-3r",
            "NODE-4 a job that exits 0 lost no rank's work",
        ),
        p(
            AbortRestoresWholeJobData,
            "rc-spawn-add-1n-2e-2new",
            "SPAWN-17 SPAWN-19 a running child is in the job data and its spawn's pset",
        ),
        p(
            SpawnLaunchBeforeReplica,
            "rc-spawn-add-1n-2e-2new",
            "SPAWN-18 a child is launched only where the replica holds its pset and job data",
        ),
        p(
            SpawnNeverForgotten,
            "rc-spawn-add-1n-2e-2new",
            "SPAWN-19 a spawn whose children are gone leaves nothing behind",
        ),
        // SPAWN-25: an MPI library's spawn (`spawn_mpi_model.rs`)
        p(
            MpiSpawnAnsweredAtGrant,
            "spawn-mpi-2c",
            "SPAWN-25 an MPI spawn is answered once, Ok only once every child started",
        ),
        p(
            FailedSpawnKeepsChildren,
            "spawn-mpi-2c",
            "SPAWN-25 a child that ends first fails the spawn and leaves no child",
        ),
        // NAMES-1..3: one data server for two jobs (`names_model.rs`)
        p(
            ForwardReservedKey,
            "names-2j",
            "NAMES-1 no reserved key leaves the guest job",
        ),
        p(
            ForwardedReplyOfAnyKind,
            "names-2j",
            "NAMES-3 each request is answered at most once, in its kind",
        ),
        p(
            LostForwardUnanswered,
            "names-2j",
            "NAMES-3 with nothing in flight every guest's publish and unpublish is answered",
        ),
        p(
            SpawnChildIsLoss,
            "rc-spawn-add-1n-2e-2new",
            "SPAWN-19 SPAWN-24 a child of a handshake spawn is never a loss of the job",
        ),
        p(
            KillSpawnByAnyone,
            "rc-spawn-add-1n-2e-2new",
            "SPAWN-20 only the spawning application kills its children",
        ),
        p(
            NoDequeueOnFinalize,
            "rc-add-add-1n-2e-2new",
            "RC-15 every request is decided, queued ones included",
        ),
        p(
            MisattributeExit,
            "rc-add-sub-1n-2e-1new",
            "RC-19 a decided change is done once its processes are gone",
        ),
        p(
            ForgetAbortAtMasterOnly,
            "rc-add-1n-2e-1new",
            "RC-14 replicas match the master when quiet",
        ),
        p(
            ConfirmAnsweredAtOnce,
            "rc-add2-1n-2e-2new",
            "RC-1 every process sees the master's decision",
        ),
        p(
            NoDeadlineForSub,
            "rc-sub-1n-3e",
            "RC-1 every terminal state has every change decided",
        ),
        p(
            SubWaitsForExits,
            "rc-sub-1n-3e",
            "RC-8 SUB finalized <=> one accept per X_c pset",
        ),
        p(
            NoHandshakeDeadline,
            "spawn-connect-dgram-lossy",
            "SPAWN-8 every terminal state is decided",
        ),
        p(
            FailWithoutTellingMembers,
            "spawn-connect-dgram-lossy",
            "SPAWN-8 every terminal state is decided",
        ),
        p(
            MembersGetReversedTable,
            "spawn-connect-stream",
            "SPAWN-4 SPAWN-7 members hold their root's inter-group",
        ),
        p(
            EvictOnDone,
            "rc-add-1n-2e-1new",
            "every error an application is answered with is one its call allows",
        ),
        p(
            RelaunchOnTimeout,
            "spawn-parent-dgram-dup",
            "SPAWN-3 a spawn launches exactly once",
        ),
        p(
            NonAtomicBatch,
            "pset-ops-1n-2clients",
            "PSET-42 pset operations are linearizable",
        ),
        p(
            FinalizeSubOnFirstAccept,
            "rc-sub-2leaders-1n-3e",
            "RC-8 SUB finalized <=> one accept per X_c pset",
        ),
        // Issue 13, session 20: the properties no bug broke, the two RC-1 bugs that wrote
        // the status past `set_status` redone through the shipped paths, and the fuller
        // rollback check.
        p(
            AcceptChecksRemovedOnly,
            "rc-add-hasty-1n-2e-1new",
            "RC-9 ADD finalized => new pset is UNION(main, delta)",
        ),
        p(
            AddNodeSlotsOnly,
            "rc-grow-1n-2e-1new",
            "SLOT-6 processes run only on nodes of the job",
        ),
        p(
            FailKeepsIntergroup,
            "spawn-connect-dgram-lossy",
            "SPAWN-8 a failed side holds no handle",
        ),
        p(
            ValidateAcceptBeforeDecision,
            "rc-add-1n-2e-1new",
            "every error an application is answered with is one its call allows",
        ),
        p(
            DeadlineKeptOnFinalize,
            "rc-add-1n-2e-1new",
            "RC-10 a deadline once handled is not armed again",
        ),
        p(
            RollbackActiveOnly,
            "rc-sub-1n-3e",
            "RC-12 ABORTED => rolled back",
        ),
        p(
            ReplicaHandsOutFinalized,
            "rc-sub-grow-1n-2e-1new",
            "RC-14 replicas match the master when quiet",
        ),
        p(
            DequeueNewest,
            "rc-queue-1n-2e-1new",
            "RC-15 queued requests leave the queue in order",
        ),
        p(
            NoDequeueOnFinalize,
            "fair-rc-add-add-1n-2e-2new",
            "RC-15 under fairness every request is decided, queued ones included",
        ),
        p(
            ConfirmDoesNotDecide,
            "fair-rc-add-1n-2e-1new",
            "RC-9 RC-8 under fairness every change ends FINALIZED, no deadline passing first",
        ),
        p(
            FinalizeOnFirstConfirm,
            "rc-add2-1n-2e-2new",
            "RC-9 ADD finalized => every new process confirmed",
        ),
        p(
            LaunchNotRecordedLocal,
            "rc-add-1n-2e-1new",
            "every input the model gives a machine is accepted",
        ),
        p(
            NoBroadcastOnRollback,
            "rc-add-1n-2e-1new",
            "RC-14 replicas match the master when quiet",
        ),
        p(
            JobDataToLaunchNodesOnly,
            "rc-add-2n-2e-1new",
            "RC-14 replicas match the master when quiet",
        ),
        p(
            SkipJobDataRollback,
            "rc-sub-1n-3e",
            "RC-12 ABORTED => rolled back",
        ),
        p(
            KeepRefusedGrowth,
            "rc-grow-1n-2e-1new",
            "RC-21 a request refused for want of slots never starts",
        ),
        p(
            NoReplicaForAddedNode,
            "rc-grow-1n-2e-1new",
            "RC-14 replicas match the master when quiet",
        ),
        p(
            ModexNodeFromJobData,
            "rc-modex-sub-2n-3e",
            "MODEX-4 MODEX-6 a member's modex fails only for a lost member",
        ),
        p(
            ModexKeepStaleGather,
            "rc-modex-stale-2n-3e",
            "MODEX-3 once the network drains before any deadline, every member holds the table",
        ),
        p(
            ModexPartialBatch,
            "rc-modex-2n-3e",
            "MODEX-1 one batch per node and version",
        ),
        p(
            PmiBarrierEarly,
            "pmi-modex-2n-3e",
            "PMIS-5 after barrier_out every member's put is visible",
        ),
        p(
            ModexIgnoreVersion,
            "rc-modex-stale-2n-3e",
            "MODEX-3 every table is the pset at its version",
        ),
        p(
            ModexAnswerLastNodeOnly,
            "rc-modex-2n-3e",
            "MODEX-5 every member that runs gets an outcome",
        ),
        p(
            AnnounceAfterLaunch,
            "rc-add-1n-2e-1new",
            "RC-3 announced before launched",
        ),
        p(
            FinalizeOnAccept,
            "rc-add-1n-2e-1new",
            "RC-9 ADD finalized => every new process confirmed",
        ),
        p(
            ReuseRankAfterAbort,
            "rc-add-add-1n-2e-2new",
            "PSET-20 ranks are never reused",
        ),
        p(
            SkipRollback,
            "rc-add-1n-2e-1new",
            "RC-12 ABORTED => rolled back",
        ),
        p(
            RollbackOldVersions,
            "rc-add-1n-2e-1new",
            "RC-14 replicas never go backwards",
        ),
        p(
            StaleReplica,
            "rc-add-1n-2e-1new",
            "RC-14 replicas match the master when quiet",
        ),
        p(
            IgnoreLoss,
            "rc-add-lost-1n-2e-1new",
            "RC-18 a change undecided at a loss is never finalized",
        ),
        p(
            MisattributeExit,
            "rc-add-crash-1n-2e-1new",
            "RC-18 a dead process is not in the job data",
        ),
        p(
            ReturnBusyNode,
            "rc-sub-return-2n-2e-1new",
            "SLOT-5 nothing runs on a returned node",
        ),
        p(
            FreeSlotBeforeExit,
            "rc-sub-1n-3e",
            "SLOT-3 a running process holds its slot",
        ),
        p(
            NoKillOnAbort,
            "rc-add-1n-2e-1new",
            "RC-12 ABORTED => added processes killed",
        ),
        p(
            VersionBumpOnAttrUpdate,
            "rc-sub-1n-3e",
            "PSET-10 versions rise exactly with membership",
        ),
        p(
            LoseRecursiveApplication,
            "rc-sub-1n-3e",
            "PSET-34 inactive psets follow a finalized SUB",
        ),
        p(
            ReuseLiveContextId,
            "spawn-two-concurrent",
            "SPAWN-5 live context ids are unique",
        ),
        p(
            AcceptDuplicateDatagramTwice,
            "spawn-connect-dgram-dup",
            "SPAWN-11 SPAWN-12 datagram delivery is exactly once and as sent",
        ),
        p(
            NoKillOnSpawnFailure,
            "spawn-connect-stream",
            "SPAWN-8 a failed spawn kills its children",
        ),
        p(
            HelloAckEchoesPeerTriple,
            "spawn-connect-stream",
            "SPAWN-4 both roots agree on the inter-group",
        ),
        p(
            ReadyWithoutPeerAck,
            "spawn-connect-stream",
            "SPAWN-16 Done implies the peer has our triple and table",
        ),
        // Issue 13, two applications: only a job of two can show these.
        p(
            RollbackWorld,
            "rc-2apps-sub-add-1n-3e-1new",
            "RC-15 PSET-6 a step of one application leaves every other one's state alone",
        ),
        p(
            OneChangePerJob,
            "rc-2apps-sub-add-1n-3e-1new",
            "RC-15 every request is decided, queued ones included",
        ),
        p(
            OneChangePerJob,
            "fair-rc-2apps-sub-add-1n-3e-1new",
            "RC-15 under fairness every request is decided, queued ones included",
        ),
        // Issue 13: faults around resource changes.
        p(
            ConfirmFromAnyMember,
            "rc-add-rogue-1n-2e-1new",
            "RC-9 a confirm from a process the change did not add leaves the change untouched",
        ),
        p(
            LossAbortsEveryChange,
            "rc-2apps-sub-add-lost-1n-3e-1new",
            "RC-15 PSET-6 a step of one application leaves every other one's state alone",
        ),
        // The fair form with crashes: no crash-specific bug is left for it (those the
        // corpus has break a safety property first), so the liveness bug of the fair
        // form without faults shows that a crash-free path of this model still must
        // not wait for a deadline.
        p(
            ConfirmDoesNotDecide,
            "fair-rc-2apps-sub-add-lost-1n-3e-1new",
            "RC-10 RC-18 under fairness with crashes no change waits for its deadline",
        ),
        // issue 13, session 20: spawn scenarios
        p(
            NewestHelloWins,
            "spawn-two-initiators-dgram",
            "SPAWN-4 each connection pairs one initiator with one accept",
        ),
        p(
            NewestHelloWins,
            "spawn-two-initiators-dgram",
            "SPAWN-10 no root mixes two peers",
        ),
        p(
            MergeTieLocalFirst,
            "spawn-two-initiators-dgram",
            "SPAWN-15 both sides merge in the spec's order",
        ),
        p(
            SkipDatagramChecksum,
            "spawn-connect-dgram-corrupt",
            "SPAWN-10 SPAWN-12 a corrupted datagram is rejected and changes nothing",
        ),
        p(
            LaunchFailureKeepsListening,
            "spawn-launch-fails-stream",
            "SPAWN-8 a failed launch fails the spawn and leaves no handle",
        ),
        p(
            HybridRuleLocalSizeOnly,
            "spawn-connect-hybrid",
            "SPAWN-9 every message travels on the transport the rule gives",
        ),
        p(
            JoinCompareTags,
            "spawn-join-stream",
            "SPAWN-14 a join's ends take opposite roles, the lower port accepting",
        ),
        // issue 13, session 21: a port accepting twice
        p(
            ForgetServedConnections,
            "spawn-accept-twice-dgram",
            "SPAWN-21 an initiator is paired with at most one accept, the one that answered it",
        ),
        // issue 33: the two classes only golden counts saw
        p(
            GrowStartsBeforeReplica,
            "rc-grow-1n-2e-1new",
            "RC-22 a process is launched only where the replica holds WORLD, its application's pset and its job data",
        ),
        p(
            ModexFailBatchNodesOnly,
            "rc-modex-loss-2n-3e",
            "MODEX-4 a failed modex is sent to every node with a member, not only those with a batch",
        ),
        // issue 28: the authenticated bootstrap
        p(
            SkipBootstrapMac,
            "spawn-forged-hello-dgram",
            "SPAWN-22 a forged message is dropped and counted, never decides the handshake",
        ),
        p(
            SkipBootstrapMac,
            "spawn-forged-hello-dgram",
            "SPAWN-22 a stranger never becomes a root's peer",
        ),
    ]
}

/// The `always` properties of the PR tier that no planted bug of the corpus breaks: a
/// property that has never failed proves nothing, so the gate lists them.
pub fn unplanted() -> Vec<&'static str> {
    fn always<M: Model>(m: &M) -> Vec<&'static str> {
        m.properties()
            .into_iter()
            .filter(|p| p.expectation != Expectation::Sometimes)
            .map(|p| p.name)
            .collect()
    }
    let mut names: BTreeSet<&'static str> = BTreeSet::new();
    for cfg in pr_configs() {
        names.extend(always(&cfg.model()));
    }
    for cfg in crate::fair::fair_configs() {
        names.extend(always(&crate::fair::FairRc::new(&cfg)));
    }
    for cfg in spawn_configs::pr_configs() {
        names.extend(always(&cfg.model()));
    }
    for cfg in crate::pset_model::pr_configs() {
        names.extend(always(&cfg.model()));
    }
    for cfg in crate::ends_model::pr_configs() {
        names.extend(always(&cfg));
    }
    for cfg in crate::liveness_model::pr_configs() {
        names.extend(always(&cfg));
    }
    for cfg in crate::giveback_model::pr_configs() {
        names.extend(always(&cfg));
    }
    for cfg in crate::names_model::pr_configs() {
        names.extend(always(&cfg));
    }
    for cfg in crate::spawn_mpi_model::pr_configs() {
        names.extend(always(&cfg));
    }
    let planted: BTreeSet<&str> = corpus().iter().map(|p| p.property).collect();
    names.retain(|n| !planted.contains(n));
    names.into_iter().collect()
}

/// The result of hunting one planted bug.
#[derive(Clone, Debug)]
pub struct Hunt {
    /// What was planted.
    pub planted: Planted,
    /// Whether the expected property produced a counterexample.
    pub caught: bool,
    /// Seconds to the counterexample (or to exhaustion).
    pub seconds: f64,
    /// States explored.
    pub states: usize,
    /// The counterexample, one line per step.
    pub trace: String,
}

/// Plants one bug and searches for the expected counterexample.
pub fn hunt(planted: &Planted, threads: usize) -> Hunt {
    let bugs = Bugs::NONE.with(planted.bug);
    // The small models: a configuration with its bugs, no actor labels.
    macro_rules! hunt_small {
        ($($model:ident :: $config:ident),*) => {$(
            if let Some(base) = crate::$model::pr_configs()
                .into_iter()
                .find(|c| c.name == planted.config)
            {
                let cfg = crate::$model::$config { bugs, ..base };
                return hunt_in(planted, cfg, &[], threads);
            }
        )*};
    }
    hunt_small!(
        ends_model::EndsConfig,
        liveness_model::LiveConfig,
        giveback_model::GbConfig,
        names_model::NamesConfig,
        spawn_mpi_model::SpawnMpiConfig
    );
    if let Some(base) = spawn_configs::pr_configs()
        .into_iter()
        .find(|c| c.name == planted.config)
    {
        let cfg = SpawnModelConfig { bugs, ..base };
        return hunt_in(planted, cfg.model(), &cfg.labels(), threads);
    }
    if let Some(base) = crate::pset_model::pr_configs()
        .into_iter()
        .find(|c| c.name == planted.config)
    {
        let cfg = crate::pset_model::PsetConfig { bugs, ..base };
        let model = cfg.model();
        let labels = crate::run::rc_labels_of(&model.actors);
        return hunt_in(planted, model, &labels, threads);
    }
    // A fair model is named after its configuration (`fair.rs`).
    let (fair, name) = match planted.config.strip_prefix("fair-") {
        Some(name) => (true, name),
        None => (false, planted.config),
    };
    let base = pr_configs()
        .into_iter()
        .find(|c| c.name == name)
        .expect("corpus names existing configurations");
    let cfg = RcConfig { bugs, ..base };
    if fair {
        let model = crate::fair::FairRc::new(&cfg);
        let labels = crate::run::rc_labels(&model.inner);
        return hunt_in(planted, model, &labels, threads);
    }
    let model = cfg.model();
    let labels = crate::run::rc_labels(&model);
    hunt_in(planted, model, &labels, threads)
}

fn hunt_in<M>(planted: &Planted, model: M, labels: &[String], threads: usize) -> Hunt
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq + std::fmt::Debug,
{
    let started = Instant::now();
    let checker = model
        .clone()
        .checker()
        .threads(threads)
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([planted.property])))
        .spawn_dfs()
        .join();
    let seconds = started.elapsed().as_secs_f64();
    let found = checker.discovery(planted.property);
    Hunt {
        planted: planted.clone(),
        caught: found.is_some(),
        seconds,
        states: checker.unique_state_count(),
        trace: found
            .map(|p| render_path(&model, p, labels))
            .unwrap_or_default(),
    }
}
