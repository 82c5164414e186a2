//! The vocabulary of resource changes (`spec/resource-change.md` §1).

use alloc::string::String;
use alloc::vec::Vec;
use core::hash::{Hash, Hasher};

use crate::process::ProcessId;
use crate::pset::PsetName;

/// A node of the job, as an index into the master's node list (one daemon per node).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

/// Identifies one request of one client to the runtime, for routing the reply.
pub type ReqId = u64;

/// The type of a resource change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RcType {
    /// Processes are added.
    Add,
    /// Processes are removed.
    Sub,
    /// Some processes are removed and others added in one change (the thesis' future
    /// work, §6.2.3).
    Replace,
}

/// The status of a resource change (`RC-1`): it only moves
/// `Null → Announced → Pending → Finalized | Aborted`, and the last two are final.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RcStatus {
    /// No valid change.
    Null,
    /// Announced: the application must adapt.
    Announced,
    /// The bound pset's root accepted; waiting for confirmations or further accepts.
    Pending,
    /// Applied.
    Finalized,
    /// Given up; job data rolled back.
    Aborted,
}

impl RcStatus {
    /// Whether the status can no longer change.
    pub fn is_final(self) -> bool {
        matches!(self, RcStatus::Finalized | RcStatus::Aborted)
    }

    /// Whether `self → next` is a legal step (`RC-1`).
    pub fn may_become(self, next: RcStatus) -> bool {
        use RcStatus::*;
        matches!(
            (self, next),
            (Null, Announced)
                | (Announced, Pending)
                | (Announced, Aborted)
                | (Pending, Finalized)
                | (Pending, Aborted)
        )
    }
}

/// Why the master ABORTED a change (`RC-12`), for the tools and logs that asked for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum AbortReason {
    /// The change was not decided within the job's change timeout (`RC-10`): the
    /// application did not accept it, or its new processes did not all confirm.
    NotDecidedInTime,
    /// A new process' confirm failed (`RC-12`).
    ConfirmFailed,
    /// A new process exited before the change was decided.
    NewProcessExited,
    /// A process of the application was lost while the change was in flight
    /// (`RC-18`).
    MemberLost,
}

impl core::fmt::Display for AbortReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            AbortReason::NotDecidedInTime => {
                "the change was not decided in time (the application did not accept it, or a new process did not confirm)"
            }
            AbortReason::ConfirmFailed => "a new process failed to confirm",
            AbortReason::NewProcessExited => "a new process exited before the change was decided",
            AbortReason::MemberLost => "a process of the application was lost",
        })
    }
}

/// A request to change the resources of an application (the `RES_CHANGE_DEFINE` event
/// or `request_res_change`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ChangeRequest {
    /// The application to change.
    pub app: String,
    /// What to change: the kind of change with exactly the fields that kind takes.
    pub change: Change,
}

/// What a change request does, by kind. Each kind holds only the fields it uses, so an
/// ADD cannot name victims and a SUB cannot name a bound pset (the wire's flat
/// encoding of such combinations is refused when decoded,
/// [`crate::wire::WireError::Inconsistent`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Change {
    /// ADD `n` processes.
    Add {
        /// How many processes to add (0 is refused by the master, `RC-2`).
        n: u32,
        /// The malleable pset to bind to; `None` lets the master pick one (`RC-6`).
        bound: Option<PsetName>,
    },
    /// SUB: remove these processes.
    Sub(Victims),
    /// REPLACE: remove some processes and add others in one change (the thesis' future
    /// work, §6.2.3).
    Replace {
        /// The processes to remove.
        remove: Victims,
        /// How many processes to add.
        add: u32,
    },
}

/// Which processes a SUB or REPLACE removes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Victims {
    /// This many, chosen by the master in stack order (`SLOT-2`); 0 is refused by the
    /// master (`RC-2`).
    Count(u32),
    /// Exactly these processes (`RC-5`).
    Named(NamedVictims),
}

/// Victims named by the requester: at least one process (an empty list is
/// [`Victims::Count`]'s stack order, so it has no second spelling). The master checks
/// that they are distinct running processes of the application (`RC-5`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NamedVictims(Vec<ProcessId>);

impl NamedVictims {
    /// The victims `pids`, or `None` if the list is empty.
    pub fn new(pids: Vec<ProcessId>) -> Option<Self> {
        (!pids.is_empty()).then_some(NamedVictims(pids))
    }

    /// The victims, in the order named.
    pub fn as_slice(&self) -> &[ProcessId] {
        &self.0
    }

    /// How many victims are named (at least 1).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always `false`: a named list holds at least one victim (for clippy's
    /// `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The victims as a list.
    pub fn into_vec(self) -> Vec<ProcessId> {
        self.0
    }
}

impl From<ProcessId> for NamedVictims {
    fn from(pid: ProcessId) -> Self {
        NamedVictims(alloc::vec![pid])
    }
}

impl Victims {
    /// How many processes are removed.
    pub fn count(&self) -> u32 {
        match self {
            Victims::Count(n) => *n,
            // At most `MAX_PROCS` on the wire; a longer list built in memory saturates
            // (the master refuses it as removing the whole application, `RC-2`).
            Victims::Named(v) => u32::try_from(v.len()).unwrap_or(u32::MAX),
        }
    }
}

impl Change {
    /// ADD, SUB or REPLACE.
    pub fn kind(&self) -> RcType {
        match self {
            Change::Add { .. } => RcType::Add,
            Change::Sub(_) => RcType::Sub,
            Change::Replace { .. } => RcType::Replace,
        }
    }

    /// How many processes are added (0 for a SUB).
    pub fn adds(&self) -> u32 {
        match self {
            Change::Add { n, .. } => *n,
            Change::Sub(_) => 0,
            Change::Replace { add, .. } => *add,
        }
    }

    /// The processes removed (`None` for an ADD).
    pub fn victims(&self) -> Option<&Victims> {
        match self {
            Change::Add { .. } => None,
            Change::Sub(v) | Change::Replace { remove: v, .. } => Some(v),
        }
    }
}

// Hashed as the flat struct it replaced hashed its fields (app, kind, add, sub, victims,
// bound; what the wire writes), so the machine fingerprints and hashed outputs in traces
// recorded before the enum still replay. Equal requests write equal fields.
impl Hash for ChangeRequest {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let victims = self.change.victims();
        let named: &[ProcessId] = match victims {
            Some(Victims::Named(v)) => v.as_slice(),
            Some(Victims::Count(_)) | None => &[],
        };
        let bound = match &self.change {
            Change::Add { bound, .. } => bound.as_ref(),
            Change::Sub(_) | Change::Replace { .. } => None,
        };
        self.app.hash(state);
        self.kind().hash(state);
        self.change.adds().hash(state);
        victims.map_or(0, Victims::count).hash(state);
        named.hash(state);
        bound.hash(state);
    }
}

impl ChangeRequest {
    /// Add `n` processes to `app`, bound to a malleable pset the master picks.
    pub fn add(app: impl Into<String>, n: u32) -> Self {
        ChangeRequest {
            app: app.into(),
            change: Change::Add { n, bound: None },
        }
    }

    /// Add `n` processes to `app`, bound to the malleable pset `bound` (`RC-6`).
    pub fn add_to(app: impl Into<String>, n: u32, bound: PsetName) -> Self {
        ChangeRequest {
            app: app.into(),
            change: Change::Add {
                n,
                bound: Some(bound),
            },
        }
    }

    /// Remove `n` processes from `app`, chosen in stack order (`SLOT-2`).
    pub fn sub(app: impl Into<String>, n: u32) -> Self {
        ChangeRequest {
            app: app.into(),
            change: Change::Sub(Victims::Count(n)),
        }
    }

    /// Remove exactly the processes `victims` from `app` (`RC-5`).
    pub fn sub_named(app: impl Into<String>, victims: NamedVictims) -> Self {
        ChangeRequest {
            app: app.into(),
            change: Change::Sub(Victims::Named(victims)),
        }
    }

    /// Remove `remove` processes from `app` (stack order) and add `add` new ones in one
    /// change.
    pub fn replace(app: impl Into<String>, remove: u32, add: u32) -> Self {
        ChangeRequest {
            app: app.into(),
            change: Change::Replace {
                remove: Victims::Count(remove),
                add,
            },
        }
    }

    /// Remove exactly the processes `victims` from `app` and add `add` new ones in one
    /// change.
    pub fn replace_named(app: impl Into<String>, victims: NamedVictims, add: u32) -> Self {
        ChangeRequest {
            app: app.into(),
            change: Change::Replace {
                remove: Victims::Named(victims),
                add,
            },
        }
    }

    /// ADD, SUB or REPLACE.
    pub fn kind(&self) -> RcType {
        self.change.kind()
    }
}

/// A change as the runtime replicates it to every daemon: what queries answer from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChangeInfo {
    /// The application.
    pub app: String,
    /// ADD, SUB or REPLACE.
    pub kind: RcType,
    /// The delta pset: the added processes (ADD, REPLACE) or the removed ones (SUB).
    pub delta: PsetName,
    /// REPLACE only: the delta pset of the removed processes.
    pub sub_delta: Option<PsetName>,
    /// The bound psets: one malleable pset for ADD and REPLACE, X_c(delta) for SUB.
    pub bound: Vec<PsetName>,
    /// Processes added.
    pub added: Vec<ProcessId>,
    /// Processes removed.
    pub removed: Vec<ProcessId>,
    /// Current status.
    pub status: RcStatus,
}

impl ChangeInfo {
    /// Whether `pid` is in one of the change's delta psets.
    pub fn includes(&self, pid: &ProcessId) -> bool {
        self.added.contains(pid) || self.removed.contains(pid)
    }
}

/// The answer to `get_res_change` (thesis Lst. 6.1).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueryAnswer {
    /// `None` is `MPI_RC_NULL`: no change for this query.
    pub kind: Option<RcType>,
    /// The delta pset (added processes for ADD/REPLACE).
    pub delta: Option<PsetName>,
    /// REPLACE only: the delta of removed processes.
    pub sub_delta: Option<PsetName>,
    /// Whether the caller is in a delta pset of the change.
    pub incl: bool,
    /// The change's status (`Null` when there is none).
    pub status: RcStatus,
}

impl QueryAnswer {
    /// `MPI_RC_NULL`.
    pub fn none() -> Self {
        QueryAnswer {
            kind: None,
            delta: None,
            sub_delta: None,
            incl: false,
            status: RcStatus::Null,
        }
    }
}

/// What an accept call learns (thesis Lst. 6.5).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AcceptOutcome {
    /// The change's status after this accept: `Pending` until it is decided.
    pub status: RcStatus,
    /// The pset to derive communication from.
    pub new_pset: PsetName,
    /// The processes that must terminate once `Finalized` (SUB, REPLACE).
    pub removed: Vec<ProcessId>,
}

/// One command of a spawn (`MPI_Comm_spawn`, or one entry of `MPI_Comm_spawn_multiple`):
/// start `count` processes of `program` with `args`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SpawnCommand {
    /// The program (a path or a name looked up in `PATH` by the launching daemon).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// How many processes run it (at least 1).
    pub count: u32,
}

/// Who tells a spawner that one of its children failed (`SPAWN-19`, `SPAWN-24`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SpawnWatch {
    /// The kernel's spawn handshake (`spec/spawn.md`), which dynres-native processes
    /// run: the spawner learns of a failed child there, so the job only logs the
    /// failure (`SPAWN-19`).
    #[default]
    Handshake,
    /// The spawner's MPI library, which connects to its children itself (PMI, PMIx):
    /// nothing would tell it, and it would wait for the dead child for ever. A failed
    /// child is a loss of the job, judged by `--on-loss` as every process of the job
    /// (`SPAWN-24`).
    Job,
}

/// What one spawned process runs: its command plus the environment the spawner added
/// (the parent's port, `SPAWN-3`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LaunchCommand {
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to its environment.
    pub env: Vec<(String, String)>,
}

/// One command of a spawn as a node launches it: what its children run, and which of
/// them run on that node (`SPAWN-18`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeLaunch {
    /// What they run.
    pub command: LaunchCommand,
    /// The command's children on the node.
    pub procs: Vec<ProcessId>,
}

/// The children of a granted spawn (`SPAWN-17`): a new application of the job, with its
/// own root pset `mpi://app/{app}` holding exactly `procs`, in spawn order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Spawned {
    /// The children's application (`spawn-{k}`, never reused in the job).
    pub app: String,
    /// The children, in the order of the commands.
    pub procs: Vec<ProcessId>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::Namespace;
    use crate::trace::fingerprint;
    use alloc::vec;

    /// The flat request the enum replaced, with its derived `Hash`.
    #[derive(Hash)]
    struct Flat {
        app: String,
        kind: RcType,
        add: u32,
        sub: u32,
        victims: Vec<ProcessId>,
        bound: Option<PsetName>,
    }

    /// A request hashes as the flat struct with the same fields did, so traces recorded
    /// before the enum (machine fingerprints, hashed outputs) still replay.
    #[test]
    fn a_request_hashes_as_the_flat_struct_did() {
        let p = ProcessId::new(Namespace::new("job"), 3);
        let flat = |kind, add, sub, victims: Vec<ProcessId>, bound| Flat {
            app: "app".into(),
            kind,
            add,
            sub,
            victims,
            bound,
        };
        let cases = [
            (
                ChangeRequest::add("app", 2),
                flat(RcType::Add, 2, 0, vec![], None),
            ),
            (
                ChangeRequest::add_to("app", 2, PsetName::world()),
                flat(RcType::Add, 2, 0, vec![], Some(PsetName::world())),
            ),
            (
                ChangeRequest::sub("app", 1),
                flat(RcType::Sub, 0, 1, vec![], None),
            ),
            (
                ChangeRequest::sub_named("app", p.clone().into()),
                flat(RcType::Sub, 0, 1, vec![p.clone()], None),
            ),
            (
                ChangeRequest::replace("app", 1, 4),
                flat(RcType::Replace, 4, 1, vec![], None),
            ),
            (
                ChangeRequest::replace_named("app", p.clone().into(), 4),
                flat(RcType::Replace, 4, 1, vec![p], None),
            ),
        ];
        for (request, flat) in cases {
            assert_eq!(fingerprint(&request), fingerprint(&flat), "{request:?}");
        }
    }
}
