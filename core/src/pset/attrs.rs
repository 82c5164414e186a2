//! Pset attributes (thesis §6.1.3; `spec/psets.md` §2).

use alloc::collections::BTreeMap;
use alloc::string::String;

use super::name::PsetName;

/// Key of the size attribute (MPI-4): the member count, never stored (`PSET-15`).
pub const MPI_SIZE: &str = "mpi_size";
/// Key of the version attribute (`PSET-10`).
pub const MPI_PS_VERSION: &str = "mpi_ps_version";
/// Key of the epoch attribute (`PSET-11`, `PSET-12`).
pub const MPI_PS_EPOCH: &str = "mpi_ps_epoch";
/// Key of the active flag (`PSET-13`).
pub const MPI_PS_ACTIVE: &str = "mpi_ps_active";
/// Prefix of the free-form scheduling hints (`PSET-14`).
pub const SCHED_PREFIX: &str = "mpi_ps_sched_";

/// The attributes cached on a pset, except `mpi_size` which is its member count.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Attributes {
    /// `mpi_ps_version`: 0 at creation, +1 whenever the members change.
    pub version: u64,
    /// `mpi_ps_epoch`: index of the latest resource change that changed the members.
    pub epoch: u64,
    /// `mpi_ps_active`: the application manages this pset; the runtime must not change
    /// its members.
    pub active: bool,
    /// `mpi_ps_sched_*` hints, keys including the prefix.
    pub sched: BTreeMap<String, String>,
}

impl Attributes {
    /// Attributes of a pset created now with the given epoch and active flag.
    pub fn new(epoch: u64, active: bool) -> Self {
        Attributes {
            version: 0,
            epoch,
            active,
            sched: BTreeMap::new(),
        }
    }

    /// Applies the application-assignable part of an update.
    pub(crate) fn apply(&mut self, update: &AttrUpdate) {
        if let Some(active) = update.active {
            self.active = active;
        }
        for (k, v) in &update.sched {
            self.sched.insert(k.clone(), v.clone());
        }
    }
}

/// Attributes an operation request may set on its result (the thesis' info keys).
/// Anything left out is inherited from `pset1` (`PSET-31`).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttrUpdate {
    /// New value of `mpi_ps_active`, if any.
    pub active: Option<bool>,
    /// `mpi_ps_sched_*` hints to set (keys must carry the prefix).
    pub sched: BTreeMap<String, String>,
}

impl AttrUpdate {
    /// No change.
    pub fn none() -> Self {
        Self::default()
    }

    /// Sets `mpi_ps_active`.
    pub fn active(active: bool) -> Self {
        AttrUpdate {
            active: Some(active),
            ..Self::default()
        }
    }

    /// Adds a scheduling hint.
    pub fn with_sched(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.sched.insert(key.into(), value.into());
        self
    }
}

/// The value of one attribute, as `get_pset_info` returns it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AttrValue {
    /// An integer attribute (`mpi_size`, `mpi_ps_version`, `mpi_ps_epoch`).
    Int(u64),
    /// A boolean attribute (`mpi_ps_active`).
    Bool(bool),
    /// A free-form hint (`mpi_ps_sched_*`).
    Text(String),
}

/// Everything a process can learn about a pset in one look-up.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PsetInfo {
    /// The pset's canonical name.
    pub name: PsetName,
    /// `mpi_size`.
    pub size: usize,
    /// The other attributes.
    pub attrs: Attributes,
}
