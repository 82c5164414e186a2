//! TCP device: non-blocking sockets with `TCP_NODELAY`, nom-parsed framing.
//!
//! Waiting spins on non-blocking reads for a calibrated budget ([`calibrated_spin`])
//! before blocking in `poll(2)`, so a message that arrives within the spin costs no
//! wake-up; a blocking receive on one connection reads that socket directly (a fast
//! path that leaves anything it cannot finish to the general, matching path).
//!
//! Each connection starts with a handshake (`spec/dataplane.md`, [`auth`]): the
//! connector's HELLO (its listening address, the id of the key it uses, a nonce), the
//! acceptor's CHALLENGE and the connector's AUTH prove to each side that the other
//! holds the job's key, before anything either says is believed. An authenticated
//! accepted connection is bound to the address its HELLO claimed, so it is reused when
//! the accepting side later "connects" back. Strangers are dropped and counted
//! ([`TcpDevice::refused`]), never fatal. Peer close, reset and garbage become typed
//! errors on the receives and sends that depended on the connection, and the
//! connection is closed; nothing panics or hangs.

pub mod auth;
pub mod framing;

mod device;

pub use auth::{DataKey, KeyError, KeyId, TcpKeys};
pub use device::{SOCKBUF_ENV, SPIN_ENV, TcpConfig, TcpDevice, calibrated_spin};
