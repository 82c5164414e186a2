//! Planted protocol bugs: named switches that only the verification crate turns on, to
//! prove that its models catch each one (`spec/verification.md` §4).
//!
//! Without the `planted-bugs` feature [`Bugs::has`] is the constant `false` and no switch
//! can be set, so shipped builds carry none of these paths' effects.

/// One planted bug. Each names the rule whose check must catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bug {
    /// Launch new processes before announcing the change (`RC-3`).
    AnnounceAfterLaunch,
    /// Finalize an ADD on the accept, before the new processes confirmed (`RC-9`).
    FinalizeOnAccept,
    /// Hand out the ranks of an aborted change again (`PSET-20`).
    ReuseRankAfterAbort,
    /// Leave the application's psets as they are on abort (`RC-12`).
    SkipRollback,
    /// Restore the snapshot's *versions* on abort, so replicas go backwards (`RC-14`).
    RollbackOldVersions,
    /// `check_accept` validates an accept before it looks at the change's status, so an
    /// accept that raced an abort is checked against the rolled-back psets and refused
    /// (`NewPsetMismatch`) instead of being answered with the decision (`RC-13`).
    ValidateAcceptBeforeDecision,
    /// Daemons ignore updates of psets they already hold (`RC-14`).
    StaleReplica,
    /// Free removed processes' slots at finalization instead of at exit (`SLOT-3`).
    FreeSlotBeforeExit,
    /// Do not kill added processes on abort (`RC-12`).
    NoKillOnAbort,
    /// `finalize` leaves the change's deadline armed: when it passes, the abort it
    /// triggers is refused (the change is final) and the deadline stays, so the master
    /// asks to be woken for it again at once, forever (`RC-10`).
    DeadlineKeptOnFinalize,
    /// Bump the version on an attribute-only (NULL) update (`PSET-10`).
    VersionBumpOnAttrUpdate,
    /// Skip the recursive application to X_a when pset2 is a delta (`PSET-34`).
    LoseRecursiveApplication,
    /// `ContextIds::allocate` hands out the smallest id without skipping live ones, so two
    /// concurrent handshakes of one job share a context id (`SPAWN-5`).
    ReuseLiveContextId,
    /// The datagram layer delivers a message again when a duplicate of one of its
    /// segments arrives after delivery (`SPAWN-11`, `SPAWN-12`).
    AcceptDuplicateDatagramTwice,
    /// A failed spawn does not kill the children it launched (`SPAWN-8`).
    NoKillOnSpawnFailure,
    /// The acceptor's HelloAck carries the initiator's triple instead of its own, so the
    /// two sides disagree on the inter-group (`SPAWN-4`).
    HelloAckEchoesPeerTriple,
    /// A root reports `Ready` once it has the peer's table, without waiting for the
    /// peer's acknowledgement of its own (`SPAWN-16`).
    ReadyWithoutPeerAck,
    /// A lost process does not abort its application's undecided change (`RC-18`).
    IgnoreLoss,
    /// An exit is filed against the first change naming the process, decided or not
    /// — the defect issue 10 found: a process added long ago that dies is not lost
    /// (`RC-18`).
    MisattributeExit,
    /// A node is given back while a process of the job is placed on it (`RC-20`,
    /// `SLOT-5`).
    ReturnBusyNode,
    /// A daemon sends each member's modex value on its own instead of one batch per
    /// node (`MODEX-1`).
    ModexPartialBatch,
    /// The master joins modex batches of different pset versions (`MODEX-2`).
    ModexIgnoreVersion,
    /// The master sends a completed modex's table only to the node whose batch completed
    /// it, as if answering a request (`MODEX-3`, `MODEX-5`).
    ModexAnswerLastNodeOnly,
    /// A PMI session answers `barrier_in` at once and serves the next commands before
    /// the modex completed, so other processes' puts are not visible yet (`PMIS-5`).
    PmiBarrierEarly,
    /// A node added at run time gets no replica: its daemon holds no pset, job data or
    /// change until the next update of each (`RC-21`, `RC-14`).
    NoReplicaForAddedNode,
    /// The master checks where a modex batch's members run against the job data
    /// instead of the slot map, so the batch of processes a just-announced SUB is
    /// removing is refused (`MODEX-6`) — the defect an e2e test found under load.
    ModexNodeFromJobData,
    /// An abort restores the psets' membership at the master but does not replicate
    /// the restored versions to the daemons (`RC-12`, `RC-14`).
    NoBroadcastOnRollback,
    /// Phase 1's job data update goes only to the nodes that launch processes (`RC-14`).
    JobDataToLaunchNodesOnly,
    /// An aborted change's job data is not rolled back: a SUB's victims stay out of the
    /// job data though they keep running (`RC-12`).
    SkipJobDataRollback,
    /// A request refused for want of slots keeps waiting and starts when a node is
    /// added after all (`RC-21`).
    KeepRefusedGrowth,
    /// A daemon keeps a gather it has not forwarded when its replica's version of the
    /// pset changes, instead of failing it with `Stale` (`MODEX-2`): its members wait
    /// for the timeout.
    ModexKeepStaleGather,
    /// A daemon does not record the processes it launches as local, so it refuses their
    /// requests as coming from a process that does not run on its node.
    LaunchNotRecordedLocal,
    /// An ADD is finalized once *a* new process confirmed, not every one (`RC-9`): only
    /// a change adding two or more processes tells them apart.
    FinalizeOnFirstConfirm,
    /// An abort restores the whole job data of its snapshot instead of undoing its own
    /// edits, dropping the children a spawn started meanwhile (`RC-12`, `SPAWN-19`) —
    /// the defect the spawn model found in the master.
    AbortRestoresWholeJobData,
    /// The master has the children of a spawn launched before their pset and job data
    /// reach the daemons (`SPAWN-18`).
    SpawnLaunchBeforeReplica,
    /// A spawn whose children are all gone is never forgotten (`SPAWN-19`).
    SpawnNeverForgotten,
    /// Every child of a spawn that exits is a loss of the job, also when its spawner
    /// runs the kernel's handshake and learns of it there (`SPAWN-19`, `SPAWN-24`).
    SpawnChildIsLoss,
    /// A job that uses another job's data server forwards the protocol's own keys too
    /// (`NAMES-1`): its changes' accept and confirm keys leave the job.
    ForwardReservedKey,
    /// The answer of the other job to a forwarded request reaches the client whatever
    /// its kind (`NAMES-3`): a peer's answer is trusted to match the request.
    ForwardedReplyOfAnyKind,
    /// A forwarded request that got no answer (the serving job unreachable) is
    /// forgotten instead of answered with an error (`NAMES-3`): its client waits for
    /// ever.
    LostForwardUnanswered,
    /// An MPI library's spawn is answered when granted, not once its children started
    /// (`SPAWN-25`): a child that dies first leaves its spawner waiting for ever.
    MpiSpawnAnsweredAtGrant,
    /// A spawn that failed because a child ended before every child started keeps its
    /// other children running (`SPAWN-25`).
    FailedSpawnKeepsChildren,
    /// Any process may kill a spawn's children, the children themselves included
    /// (`SPAWN-20`).
    KillSpawnByAnyone,
    /// A FINALIZED change does not start its application's next queued request, which
    /// then waits forever (`RC-15`): no safety property sees a request that never
    /// starts, only the liveness check of every request.
    NoDequeueOnFinalize,
    /// The queue hands out its newest request first (`RC-15`).
    DequeueNewest,
    /// Only the accept decides an ADD: a confirm arriving after the accept does not
    /// finalize it, so the change waits for its deadline and is ABORTED (`RC-9`) —
    /// every safe state allows that, only the fairness check sees it.
    ConfirmDoesNotDecide,
    /// An ABORTED change whose processes are gone is forgotten at the master only:
    /// daemons keep answering queries with it (`RC-14`, `RC-19`).
    ForgetAbortAtMasterOnly,
    /// A confirm is answered `Ok` at once instead of at the decision, so a new process
    /// believes in a change that may still abort (`RC-1`, `RC-9`).
    ConfirmAnsweredAtOnce,
    /// Only ADD and REPLACE get a decision deadline: a SUB nobody accepts stays
    /// undecided forever (`RC-10`).
    NoDeadlineForSub,
    /// A SUB with every accept in still waits (for its victims to exit) instead of
    /// being FINALIZED (`RC-8`).
    SubWaitsForExits,
    /// A handshake arms only its datagram retransmissions, not its overall deadline: a
    /// peer that stops answering leaves it undecided forever (`SPAWN-8`).
    NoHandshakeDeadline,
    /// A failing root does not tell its members, which keep the inter-group they may
    /// already hold (`SPAWN-8`).
    FailWithoutTellingMembers,
    /// A root hands its members the remote table in reverse order, so member `r`
    /// would talk to the wrong remote rank (`SPAWN-4`, `SPAWN-7`).
    MembersGetReversedTable,
    /// A change is forgotten as soon as it is done instead of after [`DONE_KEPT`] more
    /// (`RC-19`): a root polling its accept gets `NoSuchChange` instead of the decision
    /// (`RC-1`).
    ///
    /// [`DONE_KEPT`]: crate::rc::master::DONE_KEPT
    EvictOnDone,
    /// A spawn whose children have not said Hello by its deadline launches them again
    /// instead of failing (`SPAWN-3`).
    RelaunchOnTimeout,
    /// The master applies a client's pset batch one operation at a time, so a batch
    /// that fails keeps its earlier operations (`PSET-42`: a batch is atomic).
    NonAtomicBatch,
    /// A SUB is finalized on its first accept, not once every pset of X_c accepted
    /// (`RC-8`): only a victim in two malleable psets tells them apart.
    FinalizeSubOnFirstAccept,
    // issue 13, session 20: properties no bug broke
    /// `check_accept` checks an accept's new pset only for removed processes (what a
    /// SUB needs), not for the processes an ADD added, so an accept naming a pset the
    /// application has not yet UNIONed with the delta is taken (`RC-8`, `RC-9`).
    AcceptChecksRemovedOnly,
    /// `SlotMap::add_node` appends the node's slots but not the node itself: processes
    /// placed there run on a node the job's node list lacks, whose index the next added
    /// node would get again (`SLOT-6`).
    AddNodeSlotsOnly,
    /// `Handshake::fail` records the error only if no result is held yet
    /// (`get_or_insert`), so a handshake revoked after `Done` (the peer's `Abort`) fails
    /// but keeps its inter-group: the application is told `Failed` while the machine
    /// still hands out a handle (`SPAWN-8`).
    FailKeepsIntergroup,
    /// An abort restores the membership of the application's active psets only, taking
    /// the inactive ones to follow them as they follow a delta (`PSET-34`); nothing makes
    /// them follow a rollback, so an inactive pset keeps the aborted change's phase-2
    /// result (`RC-12`).
    RollbackActiveOnly,
    /// A new node's daemon is handed every change not yet done, finalized ones still
    /// waiting for their removed processes included, which the other daemons dropped
    /// at finalization and nothing withdraws again (`RC-14`): the defect issue 13's
    /// review found in `send_replica`.
    ReplicaHandsOutFinalized,
    // issue 13, session 20: two applications
    /// An abort restores `mpi://WORLD` to its membership at the change's announcement,
    /// undoing what another application's change FINALIZED meanwhile (`RC-12`, `RC-11`):
    /// a removed process back in WORLD, or an added one gone from it. With one
    /// application nothing else can change WORLD while a change is undecided, so the
    /// restore changed nothing — the defect the two-application model found.
    RollbackWorld,
    /// A request waits in the queue while *any* application has an undecided change,
    /// as if `RC-15` allowed one per job, while the queue is still released per
    /// application: the other application's request is never started (`RC-15`).
    OneChangePerJob,
    // issue 13, session 20: spawn scenarios
    /// An acceptor takes a Hello from another address, while it swaps endpoint tables,
    /// for its initiator restarting and starts over with the sender, instead of refusing
    /// it (`UnknownPeer`): the first initiator may already be `Ready` with it
    /// (`SPAWN-4`, `SPAWN-10`).
    NewestHelloWins,
    /// On equal `high` flags the merge puts the group with the smaller *or equal* id
    /// first, without the acceptor tie-break: with equal group ids each side puts itself
    /// first (`SPAWN-15`).
    MergeTieLocalFirst,
    /// The datagram layer does not verify a frame's CRC-32, trusting the link's own
    /// checksum (InfiniBand's ICRC), so a corrupted payload is parsed (`SPAWN-12`).
    SkipDatagramChecksum,
    /// A spawn parent told that the launch failed reports `Failed` and kills the
    /// children but leaves its handshake listening, so a child that did start still
    /// connects and the spawn turns `Ready` (`SPAWN-8`).
    LaunchFailureKeepsListening,
    /// The acceptor applies the hybrid rule to its own group's size only, not the
    /// larger of both, so a large initiator's table is sent on datagrams (`SPAWN-9`).
    HybridRuleLocalSizeOnly,
    /// The ends of a join compare their ports' tags instead of the whole names: two
    /// processes' first ports share tag 0, so both take the same role (`SPAWN-14`).
    JoinCompareTags,
    // issue 13: faults around resource changes
    /// `confirm` checks the caller the way `check_accept` does, by the change's
    /// application, instead of by the change's added processes: any process of the
    /// application may confirm, and one whose confirm fails (its fence over a delta it
    /// is not in is refused) aborts the change (`RC-9`).
    ConfirmFromAnyMember,
    /// A lost process aborts every application's undecided change, not only its own
    /// application's (`RC-18`, `RC-15`): only a job of two applications tells them
    /// apart.
    LossAbortsEveryChange,
    // issue 13, session 21: a port accepting twice
    /// A later accept on a port ignores the connections earlier accepts opened
    /// (`HandshakeConfig::served`), so a late copy of the previous connection's Hello
    /// opens a ghost connection with an initiator already answered (`SPAWN-21`).
    ForgetServedConnections,
    // issue 28: how a process' end counts (NODE-4)
    /// `judge` counts a kill its node's daemon decided on its own (a lost master) as a
    /// removal, so the job exits 0 without that process' work (`NODE-4`).
    DaemonKillIsRemoval,
    /// A daemon that lost its master reports its kills as the job's end (as after
    /// `Shutdown`), which the master does not count as a loss (`NODE-4`).
    LostMasterKillsAsShutdown,
    // issue 28: authenticated bootstrap
    /// Bootstrap messages are not authenticated: the receiver skips the tag check, so
    /// a process without the key opens a spawn's handshake with a forged Hello and the
    /// children are refused (`SPAWN-22`).
    SkipBootstrapMac,
    // issue 30: the runtime's failure detector as a machine (`rc::liveness`)
    /// Writing to a peer counts as hearing from it, so a node the master keeps sending
    /// heartbeats to is never found silent: a daemon that stopped is never declared
    /// lost (`HB-2`, `NODE-1`) — the silent loss.
    SentCountsAsHeard,
    /// A frame from the peer is recorded as one sent to it, so a node heard every
    /// heartbeat is declared silent once the bound passes after it came up (`HB-2`):
    /// a false loss.
    HeardRecordedAsSent,
    /// The end of a given-back node's link is declared a loss, as for a live one
    /// (`RC-20`, `GROW-2`, `NODE-1`): the job loses a node it gave back on purpose.
    ReturnedEndIsLoss,
    /// The detector asks to be woken for heartbeats and silences only, not for the
    /// connect bound of a daemon still starting: with no node up, a daemon that never
    /// connects is never lost (`HB-3`).
    ConnectDeadlineNotArmed,
    /// Every node released restarts the hold of the batch (`since = now`), so a node
    /// that never empties keeps the others as long as nodes keep being released
    /// (`GROW-4`: at most the bound after the first was held).
    HoldRestartsOnRelease,
    /// A released node is offered back at once, alone, while another node of the same
    /// change is still emptying: Slurm without accounting refuses the second update
    /// (`GROW-4`).
    OfferWithoutHold,
    // issue 33: classes only golden counts saw
    /// The master starts the request that waited for a new node (`RC-21`) before it
    /// sends that node's daemon its replica, so the change's launch reaches a daemon
    /// that holds no pset of the job and only the new processes' job data (`RC-22`).
    GrowStartsBeforeReplica,
    /// A modex the master fails (a member lost, its deadline passed) is reported only to
    /// the nodes whose batch arrived, not to every node with a member: a daemon still
    /// gathering waits for its own deadline (`MODEX-4`).
    ModexFailBatchNodesOnly,
    /// A waiting tool is answered at its change's first status after the start, not
    /// at the final one, so it is told FINALIZED while the change may still abort
    /// (`TOOL-2`).
    ToolAnswerBeforeFinal,
    /// A `nowait` tool whose request was queued is never told so: it waits for an
    /// answer that does not come (`TOOL-1`).
    ToolQueuedUnanswered,
}

/// A set of planted bugs (empty in every shipped build). One bit per [`Bug`], so the
/// enum must stay below 128 variants (`Bugs::with` panics past that).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bugs(u128);

impl Bugs {
    /// No bug.
    pub const NONE: Bugs = Bugs(0);

    /// This set plus `bug`.
    #[cfg(feature = "planted-bugs")]
    pub fn with(self, bug: Bug) -> Bugs {
        // More than 128 variants would not fit: fail loudly rather than alias two bugs.
        let bit = 1u128
            .checked_shl(bug as u32)
            .expect("at most 128 planted bugs fit in Bugs");
        Bugs(self.0 | bit)
    }

    /// Whether `bug` is planted. Always `false` without the `planted-bugs` feature.
    #[inline]
    pub fn has(self, bug: Bug) -> bool {
        cfg!(feature = "planted-bugs") && self.0 & 1u128.checked_shl(bug as u32).unwrap_or(0) != 0
    }
}
