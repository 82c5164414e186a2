//! # dynres-transports
//!
//! The data plane: a small device interface (environment, addresses, on-demand
//! connections, blocking and non-blocking send, receive into a posted buffer, progress)
//! with shared-memory, TCP and InfiniBand-verbs devices, and a router that picks a device
//! per peer.
//!
//! * [`device::Device`] is the whole contract a fabric has to meet.
//! * [`shm::ShmDevice`]: SPSC rings in shared memory, spin-then-block futex waiting.
//! * [`tcp::TcpDevice`]: non-blocking sockets, `TCP_NODELAY`, nom-parsed framing.
//! * `verbs::VerbsDevice` (feature `verbs`): UD datagrams for bootstrap, RC for data.
//! * [`router::Router`]: several devices at once, chosen per peer from its address set.
// Under `--cfg loom` only the ring and the waiter are exercised; the rest still compiles.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

pub mod addr;
pub mod device;
pub mod error;
pub mod header;
mod idmap;
mod matching;
pub mod router;
pub mod shm;
mod sync;
pub mod tcp;
#[cfg(feature = "verbs")]
pub mod verbs;

pub use addr::{HOST_ID_ENV, PeerAddrs, ShmAddr, VerbsAddr};
pub use device::{
    ConnId, Device, DeviceKind, FastRecv, Received, RecvHandle, RecvSpec, SendHandle,
};
pub use error::{Result, TransportError};
pub use header::MsgHeader;
pub use router::{PeerRef, Router};
