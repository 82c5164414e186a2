//! What the job does when it loses a process (`spec/resource-change.md` RC-18,
//! `spec/runtime.md` NODE-2, NODE-4, SPAWN-19): the `--on-loss` policy as one decision
//! of the kernel, so every driver (the master's own node, a remote node's report, a
//! node lost whole) takes it the same way, after [`judge`](super::ends::judge) said
//! whether the end is a loss at all.

use super::ends::Verdict;

/// What the runtime does when the job loses a process (`RC-18`): a process it did not
/// remove exited with a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum OnLoss {
    /// End the job: kill every other process and report the loss (the default, as an
    /// MPI job whose errors are fatal).
    #[default]
    EndJob,
    /// Go on with the survivors: the change in flight was aborted and fences waiting for
    /// the lost process failed; the application decides what to do.
    Continue,
}

/// What an end means for the job, under its policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LossAction {
    /// Not a loss (finished, removed, or ended with the job): nothing to report.
    None,
    /// A spawn's child failed: its spawner learns of it through the handshake
    /// (`SPAWN-19`); the job only logs it and does not count it.
    Logged,
    /// A loss the job goes on without (`--on-loss continue`): counted, reported.
    Continue,
    /// A loss that ends the job (`--on-loss end`): counted, every other process is
    /// killed on the job's account.
    EndJob,
    /// A loss while the job is ending already: counted and reported, nothing more.
    Counted,
}

impl LossAction {
    /// Whether the job counts the end as a failure (its exit status is then non-zero).
    pub fn counts(self) -> bool {
        matches!(
            self,
            LossAction::Continue | LossAction::EndJob | LossAction::Counted
        )
    }
}

/// RC-18, NODE-2: what the job does with an end judged `verdict`, under `policy`;
/// `spawned` for a spawn's child, `ending` when the job is ending already.
pub fn on_loss(policy: OnLoss, verdict: Verdict, spawned: bool, ending: bool) -> LossAction {
    if !verdict.is_loss() {
        return LossAction::None;
    }
    match (spawned, policy, ending) {
        (true, _, _) => LossAction::Logged,
        (false, OnLoss::Continue, _) => LossAction::Continue,
        (false, OnLoss::EndJob, false) => LossAction::EndJob,
        (false, OnLoss::EndJob, true) => LossAction::Counted,
    }
}

/// PMIS-7: what the job does when one of its processes calls `MPI_Abort` (a PMI
/// `abort`, `PMIx_Abort`, or a daemon's `Aborted` report): it ends, under either
/// policy — `MPI_Abort` aborts every process of the communicator, and the MPI library
/// waits for its launcher to do it, so going on would leave the caller's peers hanging.
/// A job that is ending already only counts it.
pub fn on_abort(policy: OnLoss, ending: bool) -> LossAction {
    match (policy, ending) {
        (_, true) => LossAction::Counted,
        (OnLoss::EndJob | OnLoss::Continue, false) => LossAction::EndJob,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rc::ends::{KillCause, judge};

    const VERDICTS: [Verdict; 4] = [
        Verdict::Finished,
        Verdict::Removed,
        Verdict::Ended,
        Verdict::Failed,
    ];

    /// RC-18, NODE-4: only a loss is counted, whatever the policy; a counted loss
    /// under `end` ends the job once.
    #[test]
    fn only_a_loss_counts_and_ends_the_job_once() {
        for v in VERDICTS {
            for policy in [OnLoss::EndJob, OnLoss::Continue] {
                for spawned in [false, true] {
                    for ending in [false, true] {
                        let a = on_loss(policy, v, spawned, ending);
                        assert_eq!(a.counts(), v.is_loss() && !spawned, "{v:?} {policy:?}");
                        assert_eq!(
                            a == LossAction::EndJob,
                            v.is_loss() && !spawned && policy == OnLoss::EndJob && !ending
                        );
                    }
                }
            }
        }
    }

    /// NODE-4 through RC-18: a daemon's own kill (a lost master) ends a job under the
    /// default policy — never the exit 0 of a deliberate kill.
    #[test]
    fn a_daemons_own_kill_ends_the_job() {
        let v = judge(128 + 9, KillCause::NodeEnding);
        assert_eq!(
            on_loss(OnLoss::default(), v, false, false),
            LossAction::EndJob
        );
        let v = judge(128 + 9, KillCause::Removed);
        assert_eq!(
            on_loss(OnLoss::default(), v, false, false),
            LossAction::None
        );
    }

    /// PMIS-7: an `MPI_Abort` ends the job whatever `--on-loss` says, once.
    #[test]
    fn an_mpi_abort_ends_the_job_under_either_policy() {
        for policy in [OnLoss::EndJob, OnLoss::Continue] {
            assert_eq!(on_abort(policy, false), LossAction::EndJob);
            assert_eq!(on_abort(policy, true), LossAction::Counted);
        }
    }

    /// SPAWN-19: a spawn's child's failure is its spawner's to handle.
    #[test]
    fn a_spawned_childs_failure_is_only_logged() {
        assert_eq!(
            on_loss(OnLoss::EndJob, Verdict::Failed, true, false),
            LossAction::Logged
        );
        assert!(!LossAction::Logged.counts());
    }
}
