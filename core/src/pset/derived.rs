//! The derived sets of Defs. 2–4 (`spec/psets.md` §3.3): malleable X_m, reference
//! counted X_c(U) and recursively affected X_a(op(S, U)).

use alloc::vec::Vec;

use super::error::PsetError;
use super::members::MemberSet;
use super::name::PsetName;
use super::registry::{Pset, PsetRegistry};

impl PsetRegistry {
    /// Def. 2, X_m(app): active psets of `mpi://app/{app}/…` not strictly contained in
    /// another active pset of that domain. Resource changes of type ADD bind to one of
    /// these (`PSET-21`).
    pub fn malleable(&self, app: &str) -> Vec<PsetName> {
        let active: Vec<(&PsetName, &Pset)> = self
            .app_psets(app)
            .filter(|(_, p)| p.attrs.active)
            .collect();
        active
            .iter()
            .filter(|(_, s)| {
                !active
                    .iter()
                    .any(|(_, t)| s.members.is_strict_subset(&t.members))
            })
            .map(|(n, _)| (*n).clone())
            .collect()
    }

    /// Def. 3, X_c(U) for a delta pset `U`: the malleable psets of U's application that
    /// share a member with U. A SUB binds to these and needs one accept per member of
    /// X_c(U) (`PSET-22`).
    pub fn reference_counted(&self, delta: &PsetName) -> Result<Vec<PsetName>, PsetError> {
        let u = &self.delta_pset(delta)?.members;
        let app = delta.app().unwrap_or_default();
        Ok(self
            .malleable(app)
            .into_iter()
            .filter(|n| self.live(n).is_ok_and(|p| p.members.intersects(u)))
            .collect())
    }

    /// Def. 4, X_a(op(S, U)) for a pset `S` and a delta pset `U`: inactive psets of U's
    /// application that share a member with U or strictly contain S (`PSET-23`); the
    /// psets an op with delta `U` is also applied to (`PSET-34`).
    pub fn recursively_affected(
        &self,
        s: &PsetName,
        delta: &PsetName,
    ) -> Result<Vec<PsetName>, PsetError> {
        let u = &self.delta_pset(delta)?.members;
        let s = &self.live(s)?.members;
        Ok(self.recursively_affected_in(delta.app().unwrap_or_default(), s, u))
    }

    pub(crate) fn recursively_affected_in(
        &self,
        app: &str,
        s: &MemberSet,
        u: &MemberSet,
    ) -> Vec<PsetName> {
        self.app_psets(app)
            .filter(|(_, t)| {
                !t.attrs.active && (t.members.intersects(u) || s.is_strict_subset(&t.members))
            })
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn delta_pset(&self, delta: &PsetName) -> Result<&Pset, PsetError> {
        if !delta.is_delta() {
            return Err(PsetError::NotPermitted {
                name: delta.clone(),
                why: "not a delta pset (mpi://rte/{app}/rc/…)",
            });
        }
        self.live(delta)
    }

    fn app_psets(&self, app: &str) -> impl Iterator<Item = (&PsetName, &Pset)> {
        self.live_psets().filter(move |(n, _)| n.in_app_domain(app))
    }
}
