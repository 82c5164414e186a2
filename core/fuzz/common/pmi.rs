//! What the PMI fuzz targets share: the session they feed.

use dynres_core::pmi::{PmiJob, PmiSession};
use dynres_core::pset::PsetName;
use dynres_core::{Duration, Namespace, ProcessId};

/// The session of rank 0 of a one-process job.
pub fn session() -> PmiSession {
    PmiSession::new(PmiJob {
        pid: ProcessId::new(Namespace::new("job"), 0),
        rank: 0,
        size: 1,
        appnum: 0,
        universe: 1,
        kvsname: "job".into(),
        mapping: None,
        group: PsetName::world(),
        barrier_timeout: Duration::from_secs(1),
        preput: Vec::new(),
        spawner: None,
    })
}
