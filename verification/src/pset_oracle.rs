//! An independent sequential pset store, written from `spec/psets.md` alone: the oracle
//! `PSET-42`'s linearizability check compares the shipped master with
//! (`pset_model::PsetStore`).
//!
//! Until issue 13 that check's sequential store was `PsetRegistry` itself, so a defect in
//! the registry's semantics sat on both sides and could never show. This store shares no
//! semantic code with `dynres-core`: it uses core's types as plain data (`PsetName` and
//! its parsed parts, `PsetOp`, `OpOutcome`, `PsetError`, `ProcessId`), keeps members as
//! `BTreeSet`s of process ids, and decides every rule itself; each branch cites the rule
//! it implements. `verification/tests/pset_oracle_vs_registry.rs` runs random requests
//! through both and requires the same answers and the same stores.
//!
//! Scope: requests of application processes (any application of the job), which is
//! every request `PSET-42` is about — the master refuses a pset request from a process
//! that is not an application's before the registry sees it. The runtime's own
//! operation requests (`PSET-7`) are not modelled; the runtime's definitions a
//! resource change makes (delta psets, `PSET-11`) and the job start (`PSET-3`) are,
//! so that recursive application (`PSET-34`) can be exercised.
//!
//! Where the spec leaves the order of checks open, a request is checked in the order
//! the spec introduces its parts: the request's own attributes (`PSET-14`), then its
//! operands (`PSET-35`), the result and its name (`PSET-31`), emptiness (`PSET-30`)
//! and last whether the name is free (`PSET-5`, `PSET-32`).

use std::collections::{BTreeMap, BTreeSet};

use dynres_core::ProcessId;
use dynres_core::pset::{
    AttrUpdate, Domain, OpOutcome, PsetError, PsetName, PsetOp, SetOp, SplitBy,
};

/// One live pset: its members and the attributes the registry keeps (`PSET-10`..`PSET-14`;
/// `mpi_size` is `members.len()`, `PSET-15`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OraclePset {
    /// The members.
    pub members: BTreeSet<ProcessId>,
    /// `mpi_ps_version`.
    pub version: u64,
    /// `mpi_ps_epoch`.
    pub epoch: u64,
    /// `mpi_ps_active`.
    pub active: bool,
    /// `mpi_ps_sched_*` hints, keys with the prefix.
    pub hints: BTreeMap<String, String>,
}

impl OraclePset {
    /// A pset created now (`PSET-10`: version 0).
    fn new(members: BTreeSet<ProcessId>, epoch: u64, active: bool) -> Self {
        OraclePset {
            members,
            version: 0,
            epoch,
            active,
            hints: BTreeMap::new(),
        }
    }

    /// Sets what the request sets; the rest stays (inherited, `PSET-31`).
    fn update(&mut self, attrs: &AttrUpdate) {
        if let Some(active) = attrs.active {
            self.active = active;
        }
        for (k, v) in &attrs.sched {
            self.hints.insert(k.clone(), v.clone());
        }
    }
}

/// What a name denotes: a pset, or nothing any more (`PSET-35`: the name stays retired,
/// `PSET-5`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Entry {
    /// A live pset.
    Live(OraclePset),
    /// A pruned pset.
    Pruned,
}

/// The sequential pset store of one job.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PsetOracle {
    /// Every process of the job in the order it was first seen: rank creation order, the
    /// order SPLIT by sizes cuts in (`PSET-20`, `PSET-36`).
    born: Vec<ProcessId>,
    /// Every name ever used, live or pruned (`PSET-5`).
    names: BTreeMap<PsetName, Entry>,
    /// Highest epoch ever given to a delta pset, per application (`PSET-11`).
    delta_epochs: BTreeMap<String, u64>,
    /// Highest `n` ever given to a generated name `mpi://app/{app}/op/{n}` (`PSET-31`).
    generated: u64,
}

/// The prefix every scheduling hint's key carries (`PSET-14`).
const HINT_PREFIX: &str = "mpi_ps_sched_";

fn parse(text: &str) -> Result<PsetName, PsetError> {
    PsetName::parse(text).map_err(PsetError::Name)
}

/// `mpi://app/{app}` (`PSET-3`).
fn app_root(app: &str) -> Result<PsetName, PsetError> {
    parse(&format!("mpi://app/{app}"))
}

/// Whether `name` lies in the application domain `mpi://app/{app}/…`, root included
/// (`PSET-4`, `PSET-6`).
fn in_domain_of(name: &PsetName, app: &str) -> bool {
    name.domain() == Domain::App && name.app() == Some(app)
}

/// Whether `name` is in the delta sub-domain `mpi://rte/{app}/rc/…` (`PSET-4`).
fn is_delta(name: &PsetName) -> bool {
    name.domain() == Domain::Rte && name.path().next() == Some("rc")
}

/// Whether `name` is a mandatory pset: `mpi://WORLD`, `mpi://SELF` or an application's
/// root (`PSET-3`).
fn is_mandatory(name: &PsetName) -> bool {
    match name.domain() {
        Domain::World | Domain::SelfSet => true,
        Domain::App => name.path().next().is_none(),
        Domain::Rte => false,
    }
}

/// Refuses a request setting any key but `mpi_ps_active` and `mpi_ps_sched_{name}` with a
/// non-empty `{name}` (`PSET-14`), the first bad key in key order.
fn check_hints(attrs: &AttrUpdate) -> Result<(), PsetError> {
    for key in attrs.sched.keys() {
        let ok = key.strip_prefix(HINT_PREFIX).is_some_and(|n| !n.is_empty());
        if !ok {
            return Err(PsetError::BadAttribute {
                key: key.clone(),
                why: "PSET-14: hints are mpi_ps_sched_{name}",
            });
        }
    }
    Ok(())
}

impl PsetOracle {
    /// The store at job start (`PSET-3`): `mpi://WORLD` holds every process and is
    /// inactive; each application's `mpi://app/{app}` holds its processes and is active;
    /// all at version 0, epoch 0. Applications may not share a process.
    pub fn start_job(apps: &[(&str, &[ProcessId])]) -> Result<Self, PsetError> {
        let mut store = PsetOracle {
            born: Vec::new(),
            names: BTreeMap::new(),
            delta_epochs: BTreeMap::new(),
            generated: 0,
        };
        let mut world = BTreeSet::new();
        for (app, procs) in apps {
            let root = app_root(app)?;
            let members: BTreeSet<ProcessId> = procs.iter().cloned().collect();
            if members.is_empty() {
                return Err(PsetError::EmptyResult(root));
            }
            if store.names.contains_key(&root) {
                return Err(PsetError::NameTaken(root));
            }
            if !world.is_disjoint(&members) {
                return Err(PsetError::Job("a process belongs to two applications"));
            }
            store.see(procs);
            world.extend(members.iter().cloned());
            store
                .names
                .insert(root, Entry::Live(OraclePset::new(members, 0, true)));
        }
        if world.is_empty() {
            return Err(PsetError::Job("has no process"));
        }
        store.names.insert(
            PsetName::world(),
            Entry::Live(OraclePset::new(world, 0, false)),
        );
        Ok(store)
    }

    /// Every live pset, in name order.
    pub fn live(&self) -> impl Iterator<Item = (&PsetName, &OraclePset)> {
        self.names.iter().filter_map(|(n, e)| match e {
            Entry::Live(p) => Some((n, p)),
            Entry::Pruned => None,
        })
    }

    /// Every name ever used, live or pruned, in name order.
    pub fn names(&self) -> impl Iterator<Item = (&PsetName, &Entry)> {
        self.names.iter()
    }

    /// Every process of the job in rank creation order (`PSET-20`).
    pub fn processes(&self) -> &[ProcessId] {
        &self.born
    }

    /// Records processes not seen before, in the order given (`PSET-20`).
    fn see(&mut self, procs: &[ProcessId]) {
        for p in procs {
            if !self.born.contains(p) {
                self.born.push(p.clone());
            }
        }
    }

    /// The live pset `name` (`PSET-35`: a pruned one cannot be used).
    fn get(&self, name: &PsetName) -> Result<&OraclePset, PsetError> {
        match self.names.get(name) {
            Some(Entry::Live(p)) => Ok(p),
            Some(Entry::Pruned) => Err(PsetError::Pruned(name.clone())),
            None => Err(PsetError::NotFound(name.clone())),
        }
    }

    /// Defines the next delta pset of `app` (`PSET-11`): `mpi://rte/{app}/rc/{e}`, `e`
    /// one above every epoch an earlier delta of `app` got (pruned ones count), inactive
    /// (`PSET-13`), version 0. The application must be running (its root live).
    pub fn define_delta(&mut self, app: &str, procs: &[ProcessId]) -> Result<PsetName, PsetError> {
        self.get(&app_root(app)?)?;
        let epoch = self.delta_epochs.get(app).copied().unwrap_or(0) + 1;
        let name = parse(&format!("mpi://rte/{app}/rc/{epoch}"))?;
        // PSET-5: never a name used before.
        if self.names.contains_key(&name) {
            return Err(PsetError::NameTaken(name));
        }
        // PSET-30: no empty definition.
        let members: BTreeSet<ProcessId> = procs.iter().cloned().collect();
        if members.is_empty() {
            return Err(PsetError::EmptyResult(name));
        }
        self.see(procs);
        self.delta_epochs.insert(app.to_string(), epoch);
        let pset = OraclePset::new(members, epoch, false);
        self.names.insert(name.clone(), Entry::Live(pset));
        Ok(name)
    }

    /// An application's process prunes `name` (`PSET-35`): never a mandatory pset
    /// (`PSET-3`), only a live one, only in the caller's own domain (`PSET-6`).
    pub fn prune(&mut self, app: &str, name: &PsetName) -> Result<(), PsetError> {
        if is_mandatory(name) {
            return Err(PsetError::NotPermitted {
                name: name.clone(),
                why: "PSET-3: mandatory",
            });
        }
        self.get(name)?;
        if !in_domain_of(name, app) {
            return Err(PsetError::NotPermitted {
                name: name.clone(),
                why: "PSET-6: not the caller's domain",
            });
        }
        self.names.insert(name.clone(), Entry::Pruned);
        Ok(())
    }

    /// A batch of requests from `caller`, a process of `app` (`PSET-41`): applied in
    /// order on a copy, each seeing the ones before; the copy replaces the store only if
    /// every request succeeded (`PSET-40`), otherwise the error names the failing one.
    pub fn apply_batch(
        &mut self,
        app: &str,
        caller: &ProcessId,
        ops: &[PsetOp],
    ) -> Result<Vec<OpOutcome>, PsetError> {
        let mut next = self.clone();
        let mut outs = Vec::with_capacity(ops.len());
        for (index, op) in ops.iter().enumerate() {
            match next.apply(app, caller, op) {
                Ok(out) => outs.push(out),
                Err(e) => {
                    return Err(PsetError::InBatch {
                        index,
                        source: Box::new(e),
                    });
                }
            }
        }
        *self = next;
        Ok(outs)
    }

    /// One request. On error the store may be half-changed: only
    /// [`PsetOracle::apply_batch`], which works on a copy, calls this.
    fn apply(
        &mut self,
        app: &str,
        caller: &ProcessId,
        op: &PsetOp,
    ) -> Result<OpOutcome, PsetError> {
        match op {
            PsetOp::Set {
                op,
                pset1,
                pset2,
                target,
                attrs,
            } => self.set_op(app, caller, *op, pset1, pset2, target.as_ref(), attrs),
            PsetOp::Null { target, attrs } => {
                self.null(app, target, attrs)?;
                Ok(OpOutcome {
                    results: vec![target.clone()],
                    ..OpOutcome::default()
                })
            }
            PsetOp::Split {
                pset,
                by,
                targets,
                attrs,
            } => self.split(app, caller, pset, by, targets, attrs),
        }
    }

    /// Members and attributes of an operand. `mpi://SELF` is the caller alone (`PSET-3`),
    /// epoch 0 (`PSET-12`), version 0 and no hints; it counts as active, as the results
    /// it feeds land in the caller's application domain, where psets are active
    /// (`PSET-13`).
    fn operand(&self, caller: &ProcessId, name: &PsetName) -> Result<OraclePset, PsetError> {
        if name.domain() == Domain::SelfSet {
            if !self.born.contains(caller) {
                return Err(PsetError::Process {
                    pid: caller.clone(),
                    why: "PSET-3: mpi://SELF of a process not in the job",
                });
            }
            let me = BTreeSet::from([caller.clone()]);
            return Ok(OraclePset::new(me, 0, true));
        }
        self.get(name).cloned()
    }

    /// The name of a result (`PSET-31`): the preferred one iff it lies in the caller's
    /// own application domain, else `mpi://app/{app}/op/{n}` with the smallest unused `n`
    /// above every `n` given before.
    fn result_name(
        &mut self,
        app: &str,
        preferred: Option<&PsetName>,
    ) -> Result<PsetName, PsetError> {
        if let Some(t) = preferred.filter(|t| in_domain_of(t, app)) {
            return Ok(t.clone());
        }
        loop {
            self.generated += 1;
            let name = parse(&format!("mpi://app/{app}/op/{}", self.generated))?;
            if !self.names.contains_key(&name) {
                return Ok(name);
            }
        }
    }

    /// UNION, DIFFERENCE or INTERSECTION (`PSET-31`, Def. 5), with the new-version rule
    /// (`PSET-32`) and recursive application to X_a when `pset2` is a delta (`PSET-34`).
    #[allow(clippy::too_many_arguments)] // the fields of one `PsetOp::Set`
    fn set_op(
        &mut self,
        app: &str,
        caller: &ProcessId,
        op: SetOp,
        pset1: &PsetName,
        pset2: &PsetName,
        target: Option<&PsetName>,
        attrs: &AttrUpdate,
    ) -> Result<OpOutcome, PsetError> {
        check_hints(attrs)?;
        let a = self.operand(caller, pset1)?;
        let b = self.operand(caller, pset2)?;
        let c = eval(op, &a.members, &b.members);
        // PSET-12: a result carries the larger operand epoch.
        let epoch = a.epoch.max(b.epoch);
        let name = self.result_name(app, target)?;
        // PSET-30: no empty result.
        if c.is_empty() {
            return Err(PsetError::EmptyResult(name));
        }
        // PSET-34: X_a(op(pset1, U)) on the store as it was before this request.
        let affected = if is_delta(pset2) {
            self.recursively_affected(pset2.app().unwrap_or_default(), &a.members, &b.members)
        } else {
            Vec::new()
        };
        if name == *pset1 {
            // PSET-32: a new version of pset1. PSET-10: the version (and, PSET-12, the
            // epoch) moves iff the members change; attributes are updated either way.
            let mut p = self.get(pset1)?.clone();
            if p.members != c {
                p.members = c;
                p.version += 1;
                p.epoch = epoch;
            }
            p.update(attrs);
            self.names.insert(name.clone(), Entry::Live(p));
        } else {
            // PSET-5, PSET-32: any other used name is taken.
            if self.names.contains_key(&name) {
                return Err(PsetError::NameTaken(name));
            }
            // PSET-31: unset attributes are inherited from pset1; PSET-10: version 0.
            let mut p = OraclePset {
                members: c,
                version: 0,
                epoch,
                ..a
            };
            p.update(attrs);
            self.names.insert(name.clone(), Entry::Live(p));
        }
        let mut out = OpOutcome {
            results: vec![name.clone()],
            ..OpOutcome::default()
        };
        for t in affected.into_iter().filter(|t| *t != name) {
            let mut p = self.get(&t)?.clone();
            let members = eval(op, &p.members, &b.members);
            if members == p.members {
                // PSET-10: no new version when nothing changes.
                continue;
            }
            if members.is_empty() {
                // PSET-3, PSET-35: an application's root cannot be pruned, so PSET-30
                // refuses the request.
                if is_mandatory(&t) {
                    return Err(PsetError::EmptyResult(t));
                }
                // PSET-34, PSET-30, PSET-35: pruned instead of emptied.
                self.names.insert(t.clone(), Entry::Pruned);
                out.pruned.push(t);
                continue;
            }
            // PSET-34 as a new version (PSET-10); PSET-12: max(T.epoch, U.epoch).
            p.members = members;
            p.version += 1;
            p.epoch = p.epoch.max(b.epoch);
            self.names.insert(t.clone(), Entry::Live(p));
            out.recursive.push(t);
        }
        Ok(out)
    }

    /// X_a(op(S, U)) (`PSET-23`, Def. 4): the inactive live psets of `mpi://app/{app}/…`
    /// (`app` being U's application) that share a member with `U` or strictly contain
    /// `S`, in name order.
    fn recursively_affected(
        &self,
        app: &str,
        s: &BTreeSet<ProcessId>,
        u: &BTreeSet<ProcessId>,
    ) -> Vec<PsetName> {
        self.live()
            .filter(|(n, t)| {
                in_domain_of(n, app)
                    && !t.active
                    && (!t.members.is_disjoint(u) || (s.is_subset(&t.members) && s != &t.members))
            })
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// NULL (`PSET-33`): attributes of `target` only, never members or version
    /// (`PSET-10`); an application only in its own domain (`PSET-6`).
    fn null(&mut self, app: &str, target: &PsetName, attrs: &AttrUpdate) -> Result<(), PsetError> {
        check_hints(attrs)?;
        if !in_domain_of(target, app) {
            return Err(PsetError::NotPermitted {
                name: target.clone(),
                why: "PSET-33: not the caller's domain",
            });
        }
        let mut p = self.get(target)?.clone();
        p.update(attrs);
        self.names.insert(target.clone(), Entry::Live(p));
        Ok(())
    }

    /// SPLIT (`PSET-36`): parts by sizes (consecutive in rank creation order) or by
    /// colours (ascending; uncoloured members in no part), each named per `PSET-31`,
    /// never like the pset split, with its attributes at version 0 and its epoch
    /// (`PSET-12`).
    fn split(
        &mut self,
        app: &str,
        caller: &ProcessId,
        pset: &PsetName,
        by: &SplitBy,
        targets: &[PsetName],
        attrs: &AttrUpdate,
    ) -> Result<OpOutcome, PsetError> {
        check_hints(attrs)?;
        let base = self.operand(caller, pset)?;
        let members = &base.members;
        let bad = |why| PsetError::BadSplit {
            name: pset.clone(),
            why,
        };
        let parts: Vec<BTreeSet<ProcessId>> = match by {
            SplitBy::Sizes(sizes) => {
                if sizes.contains(&0) || sizes.iter().sum::<usize>() != members.len() {
                    return Err(bad("PSET-36: sizes >= 1 summing to the size"));
                }
                let mut ordered = self.born.iter().filter(|p| members.contains(*p)).cloned();
                sizes
                    .iter()
                    .map(|&k| ordered.by_ref().take(k).collect())
                    .collect()
            }
            SplitBy::Colours(colours) => {
                let mut by_colour: BTreeMap<u32, BTreeSet<ProcessId>> = BTreeMap::new();
                let mut coloured = BTreeSet::new();
                for (pid, colour) in colours {
                    if !members.contains(pid) {
                        return Err(PsetError::Process {
                            pid: pid.clone(),
                            why: "PSET-36: coloured but not a member",
                        });
                    }
                    if !coloured.insert(pid.clone()) {
                        return Err(bad("PSET-36: coloured twice"));
                    }
                    by_colour.entry(*colour).or_default().insert(pid.clone());
                }
                by_colour.into_values().collect()
            }
        };
        // PSET-30: a split into nothing (no member coloured) has no result.
        if parts.is_empty() {
            return Err(PsetError::EmptyResult(pset.clone()));
        }
        let mut out = OpOutcome::default();
        for (k, part) in parts.into_iter().enumerate() {
            let name = self.result_name(app, targets.get(k))?;
            if name == *pset {
                return Err(bad("PSET-36: a part named like the pset"));
            }
            if self.names.contains_key(&name) {
                return Err(PsetError::NameTaken(name));
            }
            let mut p = OraclePset {
                members: part,
                version: 0,
                ..base.clone()
            };
            p.update(attrs);
            self.names.insert(name.clone(), Entry::Live(p));
            out.results.push(name);
        }
        Ok(out)
    }
}

/// Def. 5 (`PSET-31`) on plain sets.
fn eval(op: SetOp, a: &BTreeSet<ProcessId>, b: &BTreeSet<ProcessId>) -> BTreeSet<ProcessId> {
    match op {
        SetOp::Union => a.union(b).cloned().collect(),
        SetOp::Difference => a.difference(b).cloned().collect(),
        SetOp::Intersection => a.intersection(b).cloned().collect(),
    }
}

/// `e` with its free-text explanations blanked. The spec names refusals (`NameTaken`,
/// `EmptyResult`, …) and what they concern, not their wording, so answers are compared
/// with this applied to both sides.
pub fn without_reasons(e: &PsetError) -> PsetError {
    let mut e = e.clone();
    match &mut e {
        PsetError::NotPermitted { why, .. }
        | PsetError::Process { why, .. }
        | PsetError::BadSplit { why, .. }
        | PsetError::BadAttribute { why, .. }
        | PsetError::Job(why) => *why = "",
        PsetError::InBatch { source, .. } => **source = without_reasons(source),
        _ => {}
    }
    e
}
