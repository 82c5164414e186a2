//! The stub built without libpmix: every method fails with [`PmixError::Unavailable`].

use std::path::Path;
use std::sync::mpsc::Sender;

use crate::{Namespace, PmixError, Request};

/// The PMIx server of this process. This build has no libpmix, so none can start:
/// see [`crate::unavailable_reason`].
#[derive(Debug)]
pub struct Server {
    _never: std::convert::Infallible,
}

fn unavailable() -> PmixError {
    PmixError::Unavailable(
        crate::unavailable_reason()
            .unwrap_or("libpmix is not available")
            .to_string(),
    )
}

impl Server {
    /// Starts the server; in this build always [`PmixError::Unavailable`].
    pub fn start(tmpdir: &Path, events: Sender<Request>) -> Result<Server, PmixError> {
        let _ = (tmpdir, events);
        Err(unavailable())
    }

    /// Registers a namespace (unreachable: no server can exist in this build).
    pub fn register_namespace(&self, ns: &Namespace) -> Result<(), PmixError> {
        let _ = ns;
        match self._never {}
    }

    /// Deregisters a namespace (unreachable: no server can exist in this build).
    pub fn deregister_namespace(&self, name: &str) {
        let _ = name;
        match self._never {}
    }

    /// Registers a client (unreachable: no server can exist in this build).
    pub fn register_client(
        &self,
        ns: &str,
        rank: u32,
        uid: u32,
        gid: u32,
    ) -> Result<(), PmixError> {
        let _ = (ns, rank, uid, gid);
        match self._never {}
    }

    /// The child's PMIx variables (unreachable: no server can exist in this build).
    pub fn setup_fork(&self, ns: &str, rank: u32) -> Result<Vec<(String, String)>, PmixError> {
        let _ = (ns, rank);
        match self._never {}
    }

    /// Asks for a local process's data (unreachable: no server can exist in this build).
    pub fn dmodex_request(
        &self,
        ns: &str,
        rank: u32,
        done: impl FnOnce(Result<Vec<u8>, crate::Status>) + Send + 'static,
    ) -> Result<(), PmixError> {
        let _ = (ns, rank, done);
        match self._never {}
    }
}

impl Drop for Server {
    /// Finalizes the server (unreachable: no server can exist in this build).
    fn drop(&mut self) {
        match self._never {}
    }
}
