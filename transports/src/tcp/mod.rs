//! TCP device: non-blocking sockets with `TCP_NODELAY`, nom-parsed framing.
//!
//! Each connection starts with a HELLO frame carrying the sender's listening address,
//! so an accepted connection is reused when the accepting side later "connects" back.
//! Peer close, reset and garbage become typed errors on the receives and sends that
//! depended on the connection, and the connection is closed; nothing panics or hangs.

pub mod framing;

mod device;

pub use device::{SPIN_ENV, TcpConfig, TcpDevice, calibrated_spin};
