//! Spawn through the runtime: the [`ChildLauncher`] that asks the master to start the
//! children (`SPAWN-17`, one `Spawn` request), kills them on failure (`SPAWN-20`) and
//! watches them through the local daemon's replica, plus the calls an application under
//! `dynres run` makes: spawn from a session, and `get_parent` in a child.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dynres_core::rc::RcError;

use dynres_core::pset::PsetName;
use dynres_core::spawn::SpawnEnv;

use super::calls::{get_parent_with, spawn};
use super::intercomm::InterComm;
use super::launch::{ChildLauncher, LaunchedGroup, NoLauncher, SpawnCommand};
use crate::Session;
use crate::comm::{Communicator, Transport};
use crate::error::{ClientError, CommError};

/// How long a spawn short of slots is asked again at most, by default: the children of
/// an earlier spawn that disconnected may still be exiting (their slots come back when
/// they are gone, `SPAWN-19`).
pub const SLOT_WAIT: Duration = Duration::from_secs(2);

/// Starts children through the runtime of `session`.
pub struct RuntimeLauncher<'s> {
    session: &'s mut Session,
    /// How long a spawn refused for want of slots is asked again.
    slot_wait: Duration,
    /// Each launched group's application (`spawn-{k}`) and root pset.
    groups: BTreeMap<u64, (String, PsetName)>,
    next: u64,
}

impl<'s> RuntimeLauncher<'s> {
    /// A launcher asking `session`'s runtime.
    pub fn new(session: &'s mut Session) -> Self {
        RuntimeLauncher {
            session,
            slot_wait: SLOT_WAIT,
            groups: BTreeMap::new(),
            next: 0,
        }
    }
}

impl RuntimeLauncher<'_> {
    /// Asks again for up to `wait` (instead of [`SLOT_WAIT`]) while the runtime has too
    /// few free slots; zero refuses at once.
    pub fn slot_wait(mut self, wait: Duration) -> Self {
        self.slot_wait = wait;
        self
    }
}

/// Whether the runtime refused for want of free slots (`SPAWN-17`).
fn short_of_slots(e: &ClientError) -> bool {
    let slots = RcError::CODE_SLOTS;
    matches!(e, ClientError::Rc(RcError::Slots(_)))
        || matches!(e, ClientError::Rc(RcError::Refused { code, .. }) if *code == slots)
}

impl ChildLauncher for RuntimeLauncher<'_> {
    fn launch(
        &mut self,
        cmds: &[SpawnCommand],
        env: &[(String, String)],
    ) -> Result<LaunchedGroup, String> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        let spawned = loop {
            match self.session.spawn_children(cmds.to_vec(), env.to_vec()) {
                Ok(s) => break s,
                Err(e) if short_of_slots(&e) && start.elapsed() + pause < self.slot_wait => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                Err(e) => return Err(format!("the runtime refused the spawn: {e}")),
            }
        };
        let pset = PsetName::app_root(&spawned.app).map_err(|e| e.to_string())?;
        self.next += 1;
        self.groups.insert(self.next, (spawned.app, pset));
        Ok(LaunchedGroup { id: self.next })
    }

    fn kill(&mut self, g: &LaunchedGroup) {
        if let Some((app, _)) = self.groups.get(&g.id) {
            if let Err(e) = self.session.kill_spawn(app) {
                tracing::warn!(%app, error = %e, "killing the children of a failed spawn");
            }
        }
    }

    /// The runtime forgets a spawn once every child is gone (`SPAWN-19`), and the local
    /// daemon answers from its replica: a spawn whose pset is gone before the handshake
    /// ended lost its children. (A child that dies while others live is seen once they
    /// give up: their modex or their handshake with the lost root fails and they exit.)
    fn lost(&mut self, g: &LaunchedGroup) -> Option<String> {
        let (app, pset) = self.groups.get(&g.id)?;
        match self.session.pset_info(pset) {
            Ok(_) => None,
            Err(e) => Some(format!("the children of {app} are gone ({e})")),
        }
    }
}

/// A group of one: this process alone, for the single-process forms of the calls.
pub fn self_comm(session: &Session, transport: &Transport) -> Result<Communicator, CommError> {
    let me = (session.rank(), transport.local_addrs());
    // A context of its own per process: the group has no peers to match it.
    let context = crate::comm::fnv32(format!("dynres/self/{}", session.pid()).as_bytes());
    Communicator::from_table(transport, "self", vec![me], 0, context)
}

impl Session {
    /// `MPI_Comm_spawn` from this process alone: starts `cmd.count` processes of
    /// `cmd.program` through the runtime and returns the inter-communicator to them,
    /// once their root connected back within `timeout`. On failure the children are
    /// killed and their slots come back.
    pub fn spawn(
        &mut self,
        transport: &Transport,
        cmd: SpawnCommand,
        timeout: Duration,
    ) -> Result<InterComm, CommError> {
        let comm = self_comm(self, transport)?;
        self.spawn_over(&comm, 0, &[cmd], timeout)
    }

    /// `MPI_Comm_spawn(_multiple)`, collective over `comm`: the process at `root` starts
    /// the children of `cmds` (the other members' `cmds` are ignored).
    pub fn spawn_over(
        &mut self,
        comm: &Communicator,
        root: usize,
        cmds: &[SpawnCommand],
        timeout: Duration,
    ) -> Result<InterComm, CommError> {
        if comm.rank() == root {
            let wait = SLOT_WAIT.min(timeout / 2);
            let mut launcher = RuntimeLauncher::new(self).slot_wait(wait);
            spawn(comm, root, &mut launcher, cmds, timeout)
        } else {
            spawn(comm, root, &mut NoLauncher, &[], timeout)
        }
    }

    /// `MPI_Comm_get_parent` in a spawned child: its own group (the spawn's application,
    /// wired up by one modex when it has several members) and the inter-communicator
    /// to the parents; `None` when this process was not spawned.
    pub fn get_parent(
        &mut self,
        transport: &Transport,
        timeout: Duration,
    ) -> Result<Option<(Communicator, InterComm)>, CommError> {
        let vars: Vec<(String, String)> = std::env::vars().collect();
        let env = SpawnEnv::from_env(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        let Some(env) = env else {
            return Ok(None);
        };
        let world = if env.size == 1 {
            self_comm(self, transport)?
        } else {
            Communicator::create(self, transport, &self.app_pset())?
        };
        let inter = get_parent_with(&world, Some(env), timeout)?
            .ok_or(CommError::Malformed("spawn environment vanished"))?;
        Ok(Some((world, inter)))
    }
}
