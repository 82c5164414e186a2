//! Rolling an application's psets back to a snapshot when a resource change is aborted
//! (`RC-12`). Versions keep rising: a restored membership is a new version, so
//! replicated queries never see a version go backwards (`RC-14`).

use alloc::vec::Vec;

use super::name::{Domain, PsetName};
use super::registry::{Pset, PsetRegistry, Slot};

/// What a rollback changed, for replicating it to the daemons.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RollbackReport {
    /// Psets whose membership was restored (as a new version).
    pub restored: Vec<PsetName>,
    /// Psets created since the snapshot, now pruned.
    pub pruned: Vec<PsetName>,
}

impl PsetRegistry {
    /// Restores the membership every pset of `app` (both of its domains) had in
    /// `snapshot`. Psets created since are pruned (their names stay retired, `PSET-5`);
    /// attributes other than version are kept. This is the one place the runtime
    /// changes active psets: the application's own phase-2 results for an aborted
    /// change are undone with it (`RC-12`, an exception to `PSET-13`).
    ///
    /// `mpi://WORLD` is left alone: it changes only when a change is FINALIZED
    /// (`RC-11`), so an aborted change never changed it, and restoring the snapshot
    /// would undo what other applications' changes finalized since.
    pub fn roll_back_app(&mut self, snapshot: &PsetRegistry, app: &str) -> RollbackReport {
        let mut report = RollbackReport::default();
        let touched: Vec<PsetName> = self
            .live_psets()
            .map(|(n, _)| n.clone())
            .filter(|n| n.app() == Some(app) || self.planted_rolls_back_world(n))
            .collect();
        for name in touched {
            let Ok(now) = self.live(&name) else { continue };
            let skip = self.planted_skips_inactive(now);
            match snapshot.live(&name) {
                Ok(then) if then.members == now.members || skip => {}
                Ok(then) => {
                    let mut attrs = now.attrs.clone();
                    attrs.version += 1;
                    let members = then.members.clone();
                    self.put(name.clone(), Slot::Live(Pset { members, attrs }));
                    report.restored.push(name);
                }
                Err(_) => {
                    self.put(name.clone(), Slot::Pruned);
                    report.pruned.push(name);
                }
            }
        }
        self.commit();
        report
    }

    /// Planted `RollbackWorld`: `mpi://WORLD` restored with the application's psets.
    fn planted_rolls_back_world(&self, name: &PsetName) -> bool {
        self.bugs.has(crate::bugs::Bug::RollbackWorld) && name.domain() == Domain::World
    }

    /// Planted `RollbackActiveOnly`: inactive psets taken to follow the active ones, as
    /// they follow a delta (PSET-34); a rollback is no op with a delta, so they do not.
    fn planted_skips_inactive(&self, now: &Pset) -> bool {
        self.bugs.has(crate::bugs::Bug::RollbackActiveOnly) && !now.attrs.active
    }

    /// Sets a version directly: only the planted bug `RollbackOldVersions` does this.
    pub(crate) fn force_version(&mut self, name: &PsetName, version: u64) {
        if let Some(Slot::Live(p)) = self.psets.get_mut(name) {
            p.attrs.version = version;
        }
    }
}
