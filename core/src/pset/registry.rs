//! The pset registry: every pset of one job, its members and attributes, and who may do
//! what to it (`spec/psets.md` §3–§5).
//!
//! Requests that change psets go through `apply`/`apply_batch` (in `ops`) or the
//! runtime-only definitions here. Every write goes through [`PsetRegistry::put`], which
//! journals the previous value, so a failing request leaves the registry exactly as it
//! was (`PSET-40`). Methods take `&mut self`: the master applies requests one at a time
//! (`PSET-42`).

use alloc::borrow::Cow;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use super::attrs::{
    AttrUpdate, AttrValue, Attributes, MPI_PS_ACTIVE, MPI_PS_EPOCH, MPI_PS_VERSION, MPI_SIZE,
    PsetInfo, SCHED_PREFIX,
};
use super::error::PsetError;
use super::members::MemberSet;
use super::name::{Domain, PsetName};
use super::table::ProcessTable;
use crate::process::ProcessId;

/// Who is asking: the runtime itself, or an application process.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// The runtime (master): may define psets in `mpi://rte/…`.
    Runtime,
    /// An application process: may write only in `mpi://app/{app}/…` (`PSET-6`).
    Process {
        /// The caller's application.
        app: String,
        /// The caller (what `mpi://SELF` means).
        process: ProcessId,
    },
}

impl Origin {
    /// An application process as the caller.
    pub fn process(app: impl Into<String>, process: ProcessId) -> Self {
        Origin::Process {
            app: app.into(),
            process,
        }
    }
}

/// One live pset.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pset {
    /// Members, as indices into the registry's process table.
    pub members: MemberSet,
    /// Attributes.
    pub attrs: Attributes,
}

/// A name's state: live, or pruned (kept so the name is never reused, `PSET-5`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Slot {
    Live(Pset),
    Pruned,
}

/// One journalled write, undone in reverse order when a request fails.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Undo {
    Slot(PsetName, Option<Slot>),
    Generated(u64),
    DeltaEpoch(String, Option<u64>),
}

/// All psets of one job.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PsetRegistry {
    pub(crate) table: ProcessTable,
    pub(crate) psets: BTreeMap<PsetName, Slot>,
    /// Highest epoch ever given to a delta pset, per app (Def. 1, `PSET-11`); pruned
    /// deltas still count, so epochs never repeat.
    pub(crate) delta_epoch: BTreeMap<String, u64>,
    /// Counter behind generated result names (`mpi://app/{app}/op/{n}`).
    pub(crate) generated: u64,
    pub(crate) journal: Vec<Undo>,
    /// Planted bugs (always empty in shipped builds).
    pub(crate) bugs: crate::bugs::Bugs,
}

impl PsetRegistry {
    /// An empty registry; the job starts with [`PsetRegistry::start_job`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Defines the job's initial psets: `mpi://WORLD` (every process, runtime-managed,
    /// inactive) and one active `mpi://app/{app}` per application, all at version 0 and
    /// epoch 0 (`PSET-3`, `PSET-11`).
    pub fn start_job(&mut self, apps: &[(&str, &[ProcessId])]) -> Result<(), PsetError> {
        if !self.psets.is_empty() {
            return Err(PsetError::Job("already started"));
        }
        let mut world = MemberSet::new();
        let mut roots = Vec::new();
        for (app, procs) in apps {
            let name = PsetName::app_root(app)?;
            let members = self.intern_all(procs)?;
            if members.is_empty() {
                return Err(PsetError::EmptyResult(name));
            }
            if roots.iter().any(|(n, _)| *n == name) {
                return Err(PsetError::NameTaken(name));
            }
            if world.intersects(&members) {
                return Err(PsetError::Job("a process belongs to two applications"));
            }
            world = world.union(&members);
            roots.push((name, members));
        }
        if world.is_empty() {
            return Err(PsetError::Job("has no process"));
        }
        self.psets.insert(
            PsetName::world(),
            Slot::Live(Pset {
                members: world,
                attrs: Attributes::new(0, false),
            }),
        );
        for (name, members) in roots {
            let attrs = Attributes::new(0, true);
            self.psets.insert(name, Slot::Live(Pset { members, attrs }));
        }
        Ok(())
    }

    /// The process table that member indices refer to.
    pub fn table(&self) -> &ProcessTable {
        &self.table
    }

    /// Enters processes (e.g. new ranks of an ADD) into the table; returns their set.
    pub fn intern_all(&mut self, procs: &[ProcessId]) -> Result<MemberSet, PsetError> {
        let mut set = MemberSet::new();
        for p in procs {
            set.insert(self.table.intern(p).ok_or(PsetError::TableFull)?);
        }
        Ok(set)
    }

    /// Defines a runtime pset in `mpi://rte/{app}/…` (not the delta sub-domain: deltas
    /// come from [`PsetRegistry::define_delta`] so that Def. 1 holds) (`PSET-7`).
    pub fn define(
        &mut self,
        name: PsetName,
        procs: &[ProcessId],
        update: &AttrUpdate,
    ) -> Result<(), PsetError> {
        if name.domain() != Domain::Rte || name.is_delta() {
            return Err(PsetError::NotPermitted {
                name,
                why: "the runtime defines psets only in mpi://rte/{app}/ outside rc/",
            });
        }
        check_sched_keys(update)?;
        self.ensure_unused(&name)?;
        let members = self.intern_all(procs)?;
        if members.is_empty() {
            return Err(PsetError::EmptyResult(name));
        }
        let mut attrs = Attributes::new(0, false);
        attrs.apply(update);
        self.put(name, Slot::Live(Pset { members, attrs }));
        self.commit();
        Ok(())
    }

    /// Defines the next delta pset of `app`, `mpi://rte/{app}/rc/{e}`, whose epoch `e`
    /// is one more than that of every earlier delta of `app` (Def. 1, `PSET-11`).
    pub fn define_delta(&mut self, app: &str, procs: &[ProcessId]) -> Result<PsetName, PsetError> {
        let root = PsetName::app_root(app)?;
        self.live(&root)?;
        let epoch = self.delta_epoch.get(app).copied().unwrap_or(0) + 1;
        let name = PsetName::delta(app, epoch)?;
        self.ensure_unused(&name)?;
        let members = self.intern_all(procs)?;
        if members.is_empty() {
            return Err(PsetError::EmptyResult(name));
        }
        let old = self.delta_epoch.insert(String::from(app), epoch);
        self.journal.push(Undo::DeltaEpoch(String::from(app), old));
        let attrs = Attributes::new(epoch, false);
        self.put(name.clone(), Slot::Live(Pset { members, attrs }));
        self.commit();
        Ok(name)
    }

    /// Replaces the members of a runtime-managed (inactive) pset, e.g. `mpi://WORLD`
    /// after a resource change finalizes. Refused on active psets (`PSET-13`); the
    /// version rises by one iff the members change (`PSET-10`).
    pub fn runtime_set_members(
        &mut self,
        name: &PsetName,
        members: MemberSet,
        epoch: u64,
    ) -> Result<(), PsetError> {
        let old = self.live(name)?.clone();
        if old.attrs.active {
            return Err(PsetError::Active(name.clone()));
        }
        if members.is_empty() {
            return Err(PsetError::EmptyResult(name.clone()));
        }
        if members == old.members {
            return Ok(());
        }
        let mut attrs = old.attrs;
        attrs.version += 1;
        attrs.epoch = attrs.epoch.max(epoch);
        self.put(name.clone(), Slot::Live(Pset { members, attrs }));
        self.commit();
        Ok(())
    }

    /// The live pset called `name`.
    pub fn get(&self, name: &PsetName) -> Result<&Pset, PsetError> {
        self.live(name)
    }

    /// Size and attributes of a pset (`mpi://SELF` needs a process origin).
    pub fn info(&self, origin: &Origin, name: &PsetName) -> Result<PsetInfo, PsetError> {
        let (members, attrs) = self.resolve(origin, name)?;
        Ok(PsetInfo {
            name: name.clone(),
            size: members.len(),
            attrs: attrs.into_owned(),
        })
    }

    /// One attribute by its key: `mpi_size`, `mpi_ps_version`, `mpi_ps_epoch`,
    /// `mpi_ps_active` or an `mpi_ps_sched_*` hint (`None` if that hint is unset).
    pub fn attribute(
        &self,
        origin: &Origin,
        name: &PsetName,
        key: &str,
    ) -> Result<Option<AttrValue>, PsetError> {
        let info = self.info(origin, name)?;
        Ok(match key {
            MPI_SIZE => Some(AttrValue::Int(info.size as u64)),
            MPI_PS_VERSION => Some(AttrValue::Int(info.attrs.version)),
            MPI_PS_EPOCH => Some(AttrValue::Int(info.attrs.epoch)),
            MPI_PS_ACTIVE => Some(AttrValue::Bool(info.attrs.active)),
            k if k.starts_with(SCHED_PREFIX) => {
                info.attrs.sched.get(k).cloned().map(AttrValue::Text)
            }
            _ => {
                return Err(PsetError::BadAttribute {
                    key: String::from(key),
                    why: "unknown key",
                });
            }
        })
    }

    /// The members of a pset as process ids, in table order.
    pub fn members(&self, origin: &Origin, name: &PsetName) -> Result<Vec<ProcessId>, PsetError> {
        let (members, _) = self.resolve(origin, name)?;
        Ok(members.iter().filter_map(|i| self.table.get(i)).collect())
    }

    /// Names of the live psets `pid` belongs to, in name order, `mpi://SELF` included
    /// for a known process (MPI's `get_num_psets`/`get_nth_pset`).
    pub fn psets_containing(&self, pid: &ProcessId) -> Vec<PsetName> {
        let Some(i) = self.table.index_of(pid) else {
            return Vec::new();
        };
        let mut names: Vec<PsetName> = self
            .live_psets()
            .filter(|(_, p)| p.members.contains(i))
            .map(|(n, _)| n.clone())
            .collect();
        names.push(PsetName::self_set());
        names.sort();
        names
    }

    /// Every live pset, in name order.
    pub fn live_psets(&self) -> impl Iterator<Item = (&PsetName, &Pset)> {
        self.psets.iter().filter_map(|(n, s)| match s {
            Slot::Live(p) => Some((n, p)),
            Slot::Pruned => None,
        })
    }

    /// Whether `name` was pruned.
    pub fn is_pruned(&self, name: &PsetName) -> bool {
        matches!(self.psets.get(name), Some(Slot::Pruned))
    }

    /// Prunes a pset: it becomes invalid for new use and its name is never reused
    /// (`PSET-35`). `mpi://WORLD`, `mpi://SELF` and `mpi://app/{app}` are mandatory and
    /// cannot be pruned (`PSET-3`); applications prune only in their own domain,
    /// the runtime only in `mpi://rte/` (`PSET-6`, `PSET-7`).
    pub fn prune(&mut self, origin: &Origin, name: &PsetName) -> Result<(), PsetError> {
        if matches!(name.domain(), Domain::World | Domain::SelfSet) || name.is_app_root() {
            return Err(PsetError::NotPermitted {
                name: name.clone(),
                why: "mandatory psets cannot be pruned",
            });
        }
        self.live(name)?;
        let allowed = match origin {
            Origin::Runtime => name.domain() == Domain::Rte,
            Origin::Process { app, .. } => name.in_app_domain(app),
        };
        if !allowed {
            return Err(PsetError::NotPermitted {
                name: name.clone(),
                why: "outside the caller's domain",
            });
        }
        self.put(name.clone(), Slot::Pruned);
        self.commit();
        Ok(())
    }

    /// Defines the root pset `mpi://app/{app}` of an application that starts during the
    /// job — a spawn's children (`SPAWN-17`): active, version 0, epoch 0, like the
    /// roots [`PsetRegistry::start_job`] makes, but not added to `mpi://WORLD` (the
    /// children's world is their own application, as `MPI_COMM_WORLD` is for spawned
    /// MPI processes). Refused if the name is live or pruned (`PSET-35`).
    pub fn add_app(&mut self, app: &str, procs: &[ProcessId]) -> Result<PsetName, PsetError> {
        let name = PsetName::app_root(app)?;
        self.ensure_unused(&name)?;
        let members = self.intern_all(procs)?;
        if members.is_empty() {
            return Err(PsetError::EmptyResult(name));
        }
        let attrs = Attributes::new(0, true);
        self.put(name.clone(), Slot::Live(Pset { members, attrs }));
        self.commit();
        Ok(name)
    }

    /// Forgets every pset of `app` — its root, `mpi://app/{app}/…` and
    /// `mpi://rte/{app}/…` — once none of its processes is left (`SPAWN-19`), so a job
    /// that spawns again and again does not grow. The caller guarantees `app` is never
    /// used again (the master names spawns `spawn-{k}` from a counter), which keeps
    /// `PSET-35` true although the names leave the registry. Returns the names.
    pub fn forget_app(&mut self, app: &str) -> Vec<PsetName> {
        let gone: Vec<PsetName> = self
            .psets
            .keys()
            .filter(|n| matches!(n.domain(), Domain::App | Domain::Rte) && n.app() == Some(app))
            .cloned()
            .collect();
        for n in &gone {
            self.psets.remove(n);
        }
        self.delta_epoch.remove(app);
        self.commit();
        gone
    }

    /// Forgets a delta pset of `app` entirely — members and name — once the runtime no
    /// longer needs it (`RC-19`). Only names the epoch counter has already passed are
    /// forgotten, so PSET-5 still holds: `define_delta` never makes them again, and
    /// applications cannot create names in `mpi://rte/` (PSET-6). Returns whether the
    /// name was known.
    pub fn forget_delta(&mut self, app: &str, name: &PsetName) -> bool {
        let Ok(prefix) = PsetName::delta(app, 0) else {
            return false;
        };
        // `mpi://rte/{app}/rc/0` → the domain prefix `mpi://rte/{app}/rc/`.
        let stem = prefix.as_str().trim_end_matches('0');
        let epoch = name
            .as_str()
            .strip_prefix(stem)
            .and_then(|e| e.parse::<u64>().ok());
        let passed = self.delta_epoch.get(app).copied().unwrap_or(0);
        match epoch {
            Some(e) if e >= 1 && e <= passed => self.psets.remove(name).is_some(),
            _ => false,
        }
    }

    /// The process-table indices some live pset holds: the processes the registry
    /// cannot forget (`PSET-24`).
    pub(crate) fn held(&self) -> MemberSet {
        self.live_psets()
            .fold(MemberSet::new(), |all, (_, p)| all.union(&p.members))
    }

    /// Drops every process-table entry `keep` does not hold and renumbers the rest in
    /// their order, every live pset alike (`PSET-24`). `keep` must hold [`Self::held`]
    /// (members outside it would be dropped from their psets). Runs between requests:
    /// the journal refers to no index then.
    pub(crate) fn compact(&mut self, keep: &MemberSet) {
        debug_assert!(self.journal.is_empty(), "compaction inside a request");
        debug_assert!(self.held().is_subset(keep), "a live pset's member dropped");
        self.table.compact(keep);
        for slot in self.psets.values_mut() {
            if let Slot::Live(p) = slot {
                p.members = p.members.compress(keep);
            }
        }
    }

    // ----- internals shared with `ops` and `derived` -----

    pub(crate) fn live(&self, name: &PsetName) -> Result<&Pset, PsetError> {
        match self.psets.get(name) {
            Some(Slot::Live(p)) => Ok(p),
            Some(Slot::Pruned) => Err(PsetError::Pruned(name.clone())),
            None => Err(PsetError::NotFound(name.clone())),
        }
    }

    /// Members and attributes of `name`, resolving `mpi://SELF` to the caller.
    pub(crate) fn resolve(
        &self,
        origin: &Origin,
        name: &PsetName,
    ) -> Result<(Cow<'_, MemberSet>, Cow<'_, Attributes>), PsetError> {
        if name.domain() == Domain::SelfSet {
            let Origin::Process { process, .. } = origin else {
                return Err(PsetError::SelfWithoutProcess);
            };
            let i = self
                .table
                .index_of(process)
                .ok_or_else(|| PsetError::Process {
                    pid: process.clone(),
                    why: "is not a process of this job",
                })?;
            let members: MemberSet = core::iter::once(i).collect();
            return Ok((Cow::Owned(members), Cow::Owned(Attributes::new(0, true))));
        }
        let p = self.live(name)?;
        Ok((Cow::Borrowed(&p.members), Cow::Borrowed(&p.attrs)))
    }

    /// Fails unless `name` has never been used (`PSET-5`).
    pub(crate) fn ensure_unused(&self, name: &PsetName) -> Result<(), PsetError> {
        if self.psets.contains_key(name) || matches!(name.domain(), Domain::World | Domain::SelfSet)
        {
            return Err(PsetError::NameTaken(name.clone()));
        }
        Ok(())
    }

    /// Writes a slot, journalling its previous value.
    pub(crate) fn put(&mut self, name: PsetName, slot: Slot) {
        let old = self.psets.insert(name.clone(), slot);
        self.journal.push(Undo::Slot(name, old));
    }

    /// Forgets the journal: the request succeeded.
    pub(crate) fn commit(&mut self) {
        self.journal.clear();
    }

    /// Undoes every journalled write: the request failed.
    pub(crate) fn rollback(&mut self) {
        while let Some(undo) = self.journal.pop() {
            match undo {
                Undo::Slot(name, Some(old)) => {
                    self.psets.insert(name, old);
                }
                Undo::Slot(name, None) => {
                    self.psets.remove(&name);
                }
                Undo::Generated(n) => self.generated = n,
                Undo::DeltaEpoch(app, Some(e)) => {
                    self.delta_epoch.insert(app, e);
                }
                Undo::DeltaEpoch(app, None) => {
                    self.delta_epoch.remove(&app);
                }
            }
        }
    }
}

/// Scheduling hints must carry the `mpi_ps_sched_` prefix (`PSET-14`).
pub(crate) fn check_sched_keys(update: &AttrUpdate) -> Result<(), PsetError> {
    match update
        .sched
        .keys()
        .find(|k| !k.starts_with(SCHED_PREFIX) || k.len() == SCHED_PREFIX.len())
    {
        Some(k) => Err(PsetError::BadAttribute {
            key: k.clone(),
            why: "scheduling hints are named mpi_ps_sched_<name>",
        }),
        None => Ok(()),
    }
}
