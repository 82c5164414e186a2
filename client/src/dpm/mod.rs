//! Dynamic processes for applications (MPI-2 `spawn` / `get_parent`, `open_port` /
//! `accept` / `connect` / `close_port`, `join`, `disconnect`, `merge`), driving the
//! kernel's handshake machines (`dynres_core::spawn`, `spec/spawn.md`) over real
//! sockets and the communicator's transports.
//!
//! * [`endpoint`]: process and socket addresses in the kernel's 64-byte addresses.
//! * [`port`]: a port's sockets and name.
//! * `bootstrap`: the driver that runs one root machine to its outcome.
//! * [`InterComm`]: the resulting inter-communicator.
//! * the calls, collective over a [`crate::comm::Communicator`] with a root, and the
//!   [`ChildLauncher`] a spawn needs from the runtime.

mod bootstrap;
mod calls;
pub mod endpoint;
mod intercomm;
mod launch;
pub mod port;
mod random;
mod runtime;

#[cfg(test)]
mod tests;

pub use bootstrap::LOST_POLL;
pub use calls::{MEMBER_GRACE, accept, connect, get_parent, get_parent_with, join, spawn};
pub use intercomm::{InterComm, RESERVED_TAGS, Side};
pub use launch::{ChildLauncher, LaunchedGroup, NoLauncher, SpawnCommand};
pub use port::{Port, close_port, open_port};
pub use runtime::{RuntimeLauncher, SLOT_WAIT, self_comm};
