//! How a process' end counts for its job (`spec/runtime.md`, NODE-4, LINK-4, RC-18):
//! the one decision every driver (the master's own node, a remote node's report over
//! the link) takes through [`judge`], so that a process the job did not remove is never
//! counted as removed.
//!
//! The runtime may SIGKILL a process for three reasons, and they must not be confused:
//! core removed it (a change's `Kill`), the job is ending by the master's decision, or a
//! node's daemon ended it on its own because it lost its master (RT-3) or was signalled.
//! Only the first two are the job's will; the third is a loss like any crash, whatever
//! signal delivered it.

use crate::bugs::{Bug, Bugs};

/// Why the runtime killed a process, if it did. On the link as one byte (`Ended`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum KillCause {
    /// The runtime did not kill it: it exited by itself, or something else ended it.
    #[default]
    None,
    /// Core removed it: a change's (or a spawn's) `Kill` (RC-11, SPAWN-20).
    Removed,
    /// The job is ending by the master's decision: its `Shutdown` (LINK-5), an
    /// interrupt of `dynres run`, or a loss that ends the job (RC-18).
    JobEnding,
    /// Its node's daemon ended it on its own: it lost or stopped hearing its master
    /// (RT-3, HB-2), or it was signalled. Not the job's will: a loss.
    NodeEnding,
}

impl KillCause {
    /// The cause's byte on the link.
    pub fn code(self) -> u8 {
        match self {
            KillCause::None => 0,
            KillCause::Removed => 1,
            KillCause::JobEnding => 2,
            KillCause::NodeEnding => 3,
        }
    }

    /// The cause a link byte names; `None` for an unknown byte.
    pub fn from_code(b: u8) -> Option<KillCause> {
        Some(match b {
            0 => KillCause::None,
            1 => KillCause::Removed,
            2 => KillCause::JobEnding,
            3 => KillCause::NodeEnding,
            _ => return None,
        })
    }
}

/// What a process' end means for its job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// It exited with status 0: it finished its work.
    Finished,
    /// The job removed it (a change or a spawn's kill).
    Removed,
    /// The job was ending by the master's decision; the job's outcome says why.
    Ended,
    /// A loss: a non-zero exit or a signal the job did not ask for (RC-18, NODE-2).
    Failed,
}

impl Verdict {
    /// Whether the job lost work with this end.
    pub fn is_loss(self) -> bool {
        self == Verdict::Failed
    }
}

/// NODE-4: judges an end by its exit `code` (0–255, or 128 + signal) and why the
/// runtime killed it. Status 0 is always finished work; a kill counts as the job's will
/// only when core removed the process or the master was ending the job.
pub fn judge(code: u32, cause: KillCause) -> Verdict {
    judge_with(Bugs::NONE, code, cause)
}

/// [`judge`] with planted bugs (the verification crate's models).
pub fn judge_with(bugs: Bugs, code: u32, cause: KillCause) -> Verdict {
    if code == 0 {
        return Verdict::Finished;
    }
    match cause {
        KillCause::Removed => Verdict::Removed,
        KillCause::NodeEnding if bugs.has(Bug::DaemonKillIsRemoval) => Verdict::Removed,
        KillCause::JobEnding => Verdict::Ended,
        KillCause::None | KillCause::NodeEnding => Verdict::Failed,
    }
}

/// NODE-4, RT-3: the cause a node daemon gives the kills of its node's processes when it
/// ends them all: the job's end only when its master said so (`Shutdown`,
/// `master_said_so`); otherwise — a lost or silent master, a signal to the daemon — its
/// own decision.
pub fn daemon_kill_cause(master_said_so: bool) -> KillCause {
    daemon_kill_cause_with(Bugs::NONE, master_said_so)
}

/// [`daemon_kill_cause`] with planted bugs (the verification crate's models).
pub fn daemon_kill_cause_with(bugs: Bugs, master_said_so: bool) -> KillCause {
    if master_said_so || bugs.has(Bug::LostMasterKillsAsShutdown) {
        KillCause::JobEnding
    } else {
        KillCause::NodeEnding
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAUSES: [KillCause; 4] = [
        KillCause::None,
        KillCause::Removed,
        KillCause::JobEnding,
        KillCause::NodeEnding,
    ];

    /// NODE-4 over every code and cause: a loss is exactly a non-zero end the job did
    /// not ask for; a daemon's own kill is a loss however it was delivered.
    #[test]
    fn a_kill_the_job_did_not_ask_for_is_a_loss() {
        for code in 0..=255u32 {
            for cause in CAUSES {
                let v = judge(code, cause);
                let wanted = code != 0 && matches!(cause, KillCause::None | KillCause::NodeEnding);
                assert_eq!(v.is_loss(), wanted, "code {code}, {cause:?}: {v:?}");
            }
        }
        assert_eq!(judge(137, KillCause::NodeEnding), Verdict::Failed);
        assert_eq!(judge(137, KillCause::Removed), Verdict::Removed);
        assert_eq!(judge(137, KillCause::JobEnding), Verdict::Ended);
        assert_eq!(judge(0, KillCause::NodeEnding), Verdict::Finished);
    }

    /// RT-3, NODE-4: only the master's `Shutdown` makes a daemon's kills the job's end.
    #[test]
    fn a_daemon_ends_on_the_jobs_account_only_when_told() {
        assert_eq!(daemon_kill_cause(true), KillCause::JobEnding);
        assert_eq!(daemon_kill_cause(false), KillCause::NodeEnding);
        assert!(judge(137, daemon_kill_cause(false)).is_loss());
        assert!(!judge(137, daemon_kill_cause(true)).is_loss());
    }

    #[test]
    fn causes_round_trip_through_their_link_byte() {
        for c in CAUSES {
            assert_eq!(KillCause::from_code(c.code()), Some(c));
        }
        assert_eq!(KillCause::from_code(4), None);
        assert_eq!(KillCause::from_code(0xff), None);
    }
}
