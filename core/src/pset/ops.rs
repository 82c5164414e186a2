//! Pset operations (Def. 5 and its named gaps; `spec/psets.md` §4): UNION,
//! DIFFERENCE, INTERSECTION, NULL, SPLIT, and atomic batches of them.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::vec::Vec;

use super::attrs::{AttrUpdate, Attributes};
use super::error::PsetError;
use super::members::MemberSet;
use super::name::{Domain, PsetName};
use super::registry::{Origin, Pset, PsetRegistry, Slot, Undo, check_sched_keys};
use crate::process::ProcessId;

/// The binary set operations of Def. 5.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetOp {
    /// `A ∪ B`.
    Union,
    /// `A ∖ B`.
    Difference,
    /// `A ∩ B`.
    Intersection,
}

impl SetOp {
    /// Applies the operation to two member sets.
    pub fn eval(self, a: &MemberSet, b: &MemberSet) -> MemberSet {
        match self {
            SetOp::Union => a.union(b),
            SetOp::Difference => a.difference(b),
            SetOp::Intersection => a.intersection(b),
        }
    }
}

/// How SPLIT partitions a pset.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SplitBy {
    /// Consecutive parts of these sizes, in process-table order (rank creation order).
    /// Every size is at least 1 and they add up to the pset's size.
    Sizes(Vec<usize>),
    /// One part per distinct colour, in ascending colour order. Members not listed are
    /// in no part (MPI's `MPI_UNDEFINED`); listing a non-member or a process twice is an
    /// error.
    Colours(Vec<(ProcessId, u32)>),
}

/// One pset request.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PsetOp {
    /// `pset_create_op(op, pset1, pset2)` with an optional preferred result name.
    Set {
        /// The operation.
        op: SetOp,
        /// `A`; naming the result like `pset1` makes a new version of it (`PSET-32`).
        pset1: PsetName,
        /// `B`; if it is a delta pset the op is also applied to X_a (`PSET-34`).
        pset2: PsetName,
        /// Preferred result name, honoured only in the caller's app domain (`PSET-31`).
        target: Option<PsetName>,
        /// Attributes for the result; the rest are inherited from `pset1`.
        attrs: AttrUpdate,
    },
    /// `MPI_PSETOP_NULL`: update attributes of `target` only (`PSET-33`).
    Null {
        /// The pset whose attributes change.
        target: PsetName,
        /// The change.
        attrs: AttrUpdate,
    },
    /// SPLIT a pset into parts (the thesis' §6.3.3 gap for task graphs; `PSET-36`).
    Split {
        /// The pset to split.
        pset: PsetName,
        /// The partition.
        by: SplitBy,
        /// Preferred names of the parts, by position; missing ones are generated.
        targets: Vec<PsetName>,
        /// Attributes for every part; the rest are inherited from `pset`.
        attrs: AttrUpdate,
    },
}

/// What a successful request did.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpOutcome {
    /// The result pset(s): one for set ops and NULL, one per part for SPLIT.
    pub results: Vec<PsetName>,
    /// Recursively affected psets that got a new version (`PSET-34`).
    pub recursive: Vec<PsetName>,
    /// Recursively affected psets that would have become empty and were pruned.
    pub pruned: Vec<PsetName>,
}

impl PsetRegistry {
    /// Applies one request atomically: on error nothing changed (`PSET-40`).
    pub fn apply(&mut self, origin: &Origin, op: &PsetOp) -> Result<OpOutcome, PsetError> {
        let result = self.apply_one(origin, op);
        match result {
            Ok(_) => self.commit(),
            Err(_) => self.rollback(),
        }
        if let Ok(out) = &result {
            tracing::debug!(?op, results = ?out.results, recursive = ?out.recursive, "pset op applied");
        }
        result
    }

    /// Applies several requests as one: all of them or none (`PSET-41`). Later
    /// requests see the results of earlier ones.
    pub fn apply_batch(
        &mut self,
        origin: &Origin,
        ops: &[PsetOp],
    ) -> Result<Vec<OpOutcome>, PsetError> {
        let mut outs = Vec::with_capacity(ops.len());
        for (index, op) in ops.iter().enumerate() {
            match self.apply_one(origin, op) {
                Ok(out) => outs.push(out),
                Err(e) => {
                    self.rollback();
                    return Err(PsetError::InBatch {
                        index,
                        source: Box::new(e),
                    });
                }
            }
        }
        self.commit();
        Ok(outs)
    }

    fn apply_one(&mut self, origin: &Origin, op: &PsetOp) -> Result<OpOutcome, PsetError> {
        match op {
            PsetOp::Set {
                op,
                pset1,
                pset2,
                target,
                attrs,
            } => self.apply_set(origin, *op, pset1, pset2, target.as_ref(), attrs),
            PsetOp::Null { target, attrs } => {
                self.apply_null(origin, target, attrs)?;
                Ok(OpOutcome {
                    results: alloc::vec![target.clone()],
                    ..OpOutcome::default()
                })
            }
            PsetOp::Split {
                pset,
                by,
                targets,
                attrs,
            } => self.apply_split(origin, pset, by, targets, attrs),
        }
    }

    fn apply_set(
        &mut self,
        origin: &Origin,
        op: SetOp,
        pset1: &PsetName,
        pset2: &PsetName,
        target: Option<&PsetName>,
        update: &AttrUpdate,
    ) -> Result<OpOutcome, PsetError> {
        check_sched_keys(update)?;
        let (a, a_attrs) = self.resolve(origin, pset1)?;
        let (b, b_attrs) = self.resolve(origin, pset2)?;
        let (a, a_attrs) = (a.into_owned(), a_attrs.into_owned());
        let (b, b_epoch) = (b.into_owned(), b_attrs.epoch);
        let c = op.eval(&a, &b);
        // Def. 1: a set op's result carries the larger operand epoch (`PSET-12`).
        let epoch = a_attrs.epoch.max(b_epoch);
        let name = self.result_name(origin, target)?;
        if c.is_empty() {
            return Err(PsetError::EmptyResult(name));
        }
        if name == *pset1 {
            self.new_version(origin, pset1, c, epoch, update)?;
        } else {
            self.ensure_unused(&name)?;
            let mut attrs = Attributes {
                version: 0,
                epoch,
                ..a_attrs
            };
            attrs.apply(update);
            self.put(name.clone(), Slot::Live(Pset { members: c, attrs }));
        }
        let mut out = OpOutcome {
            results: alloc::vec![name.clone()],
            ..OpOutcome::default()
        };
        if pset2.is_delta() && !self.bugs.has(crate::bugs::Bug::LoseRecursiveApplication) {
            // `PSET-34`: the same op on every recursively affected pset, computed
            // against pset1's members before the op.
            let app = pset2.app().unwrap_or_default();
            for t in self.recursively_affected_in(app, &a, &b) {
                if t == name {
                    continue;
                }
                let old = self.live(&t)?.clone();
                let members = op.eval(&old.members, &b);
                if members == old.members {
                    continue;
                }
                if members.is_empty() {
                    // An application's root is mandatory and cannot be pruned (`PSET-3`,
                    // `PSET-35`), so the request would leave it empty: refused
                    // (`PSET-30`); the caller's rollback undoes the result.
                    if t.is_app_root() {
                        return Err(PsetError::EmptyResult(t));
                    }
                    self.put(t.clone(), Slot::Pruned);
                    out.pruned.push(t);
                    continue;
                }
                let mut attrs = old.attrs;
                attrs.version += 1;
                attrs.epoch = attrs.epoch.max(b_epoch);
                self.put(t.clone(), Slot::Live(Pset { members, attrs }));
                out.recursive.push(t);
            }
        }
        Ok(out)
    }

    /// Replaces `name`'s members by the result of an op on it (`PSET-32`). Its version
    /// rises by one iff the members change (`PSET-10`); so does its epoch.
    fn new_version(
        &mut self,
        origin: &Origin,
        name: &PsetName,
        members: MemberSet,
        epoch: u64,
        update: &AttrUpdate,
    ) -> Result<(), PsetError> {
        let old = self.live(name)?.clone();
        if matches!(origin, Origin::Runtime) && old.attrs.active {
            return Err(PsetError::Active(name.clone()));
        }
        let mut attrs = old.attrs;
        if members != old.members {
            attrs.version += 1;
            attrs.epoch = epoch;
        }
        attrs.apply(update);
        self.put(name.clone(), Slot::Live(Pset { members, attrs }));
        Ok(())
    }

    fn apply_null(
        &mut self,
        origin: &Origin,
        target: &PsetName,
        update: &AttrUpdate,
    ) -> Result<(), PsetError> {
        check_sched_keys(update)?;
        let allowed = match origin {
            // `mpi_ps_active` is the application's to assign (§6.1.3).
            Origin::Runtime => update.active.is_none(),
            Origin::Process { app, .. } => target.in_app_domain(app),
        };
        if !allowed {
            return Err(PsetError::NotPermitted {
                name: target.clone(),
                why: "attributes of this pset are not the caller's to set",
            });
        }
        let mut pset = self.live(target)?.clone();
        // Attributes only: never the version (`PSET-10`, `PSET-33`).
        pset.attrs.apply(update);
        self.planted_bump_version_on_attrs(&mut pset);
        self.put(target.clone(), Slot::Live(pset));
        Ok(())
    }

    /// Planted `VersionBumpOnAttrUpdate`: an attribute-only update counted as a new
    /// version (PSET-10 forbids it).
    fn planted_bump_version_on_attrs(&self, pset: &mut Pset) {
        if self.bugs.has(crate::bugs::Bug::VersionBumpOnAttrUpdate) {
            pset.attrs.version += 1;
        }
    }

    fn apply_split(
        &mut self,
        origin: &Origin,
        pset: &PsetName,
        by: &SplitBy,
        targets: &[PsetName],
        update: &AttrUpdate,
    ) -> Result<OpOutcome, PsetError> {
        check_sched_keys(update)?;
        let (members, attrs) = self.resolve(origin, pset)?;
        let (members, attrs) = (members.into_owned(), attrs.into_owned());
        let bad = |why| PsetError::BadSplit {
            name: pset.clone(),
            why,
        };
        let parts = match by {
            SplitBy::Sizes(sizes) => members
                .split_sizes(sizes)
                .ok_or_else(|| bad("sizes must be non-zero and add up to the pset's size"))?,
            SplitBy::Colours(colours) => {
                let mut by_colour: BTreeMap<u32, MemberSet> = BTreeMap::new();
                let mut seen = MemberSet::new();
                for (pid, colour) in colours {
                    let i = self
                        .table
                        .index_of(pid)
                        .filter(|&i| members.contains(i))
                        .ok_or(PsetError::Process {
                            pid: pid.clone(),
                            why: "is not a member of the pset being split",
                        })?;
                    if !seen.insert(i) {
                        return Err(bad("a process is coloured twice"));
                    }
                    by_colour.entry(*colour).or_default().insert(i);
                }
                by_colour.into_values().collect()
            }
        };
        if parts.is_empty() {
            return Err(PsetError::EmptyResult(pset.clone()));
        }
        let mut out = OpOutcome::default();
        for (k, part) in parts.into_iter().enumerate() {
            let name = self.result_name(origin, targets.get(k))?;
            if name == *pset {
                return Err(bad("a part cannot be named like the pset being split"));
            }
            self.ensure_unused(&name)?;
            let mut part_attrs = Attributes {
                version: 0,
                ..attrs.clone()
            };
            part_attrs.apply(update);
            self.put(
                name.clone(),
                Slot::Live(Pset {
                    members: part,
                    attrs: part_attrs,
                }),
            );
            out.results.push(name);
        }
        Ok(out)
    }

    /// The name a result gets (`PSET-31`): an application's preferred name if it lies
    /// in the caller's own app domain, otherwise a fresh `mpi://app/{app}/op/{n}`; the
    /// runtime must name its results itself, in `mpi://rte/` or as a new version.
    fn result_name(
        &mut self,
        origin: &Origin,
        target: Option<&PsetName>,
    ) -> Result<PsetName, PsetError> {
        match origin {
            Origin::Process { app, .. } => match target {
                Some(t) if t.in_app_domain(app) => Ok(t.clone()),
                _ => self.generate_name(app),
            },
            Origin::Runtime => match target {
                Some(t) if t.domain() == Domain::Rte && !t.is_delta() => Ok(t.clone()),
                // Naming an existing pset: only as a new version of pset1, and
                // `new_version` refuses active ones (`PSET-13`).
                Some(t) if self.live(t).is_ok() => Ok(t.clone()),
                Some(t) => Err(PsetError::NotPermitted {
                    name: t.clone(),
                    why: "the runtime writes only in mpi://rte/ or to inactive psets",
                }),
                None => Err(PsetError::NotPermitted {
                    name: PsetName::world(),
                    why: "runtime requests must name their result",
                }),
            },
        }
    }

    fn generate_name(&mut self, app: &str) -> Result<PsetName, PsetError> {
        let base = PsetName::app_root(app)?;
        self.journal.push(Undo::Generated(self.generated));
        loop {
            self.generated += 1;
            let name = PsetName::parse(&format!("{base}/op/{}", self.generated))?;
            if !self.psets.contains_key(&name) {
                return Ok(name);
            }
        }
    }
}
