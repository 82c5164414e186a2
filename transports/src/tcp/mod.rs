//! TCP device: non-blocking sockets with `TCP_NODELAY`, nom-parsed framing.
//!
//! Waiting spins on non-blocking reads for a calibrated budget ([`calibrated_spin`])
//! before blocking in `poll(2)`, so a message that arrives within the spin costs no
//! wake-up; a blocking receive on one connection reads that socket directly (a fast
//! path that leaves anything it cannot finish to the general, matching path).
//!
//! Each connection starts with a HELLO frame carrying the sender's listening address,
//! so an accepted connection is reused when the accepting side later "connects" back.
//! Peer close, reset and garbage become typed errors on the receives and sends that
//! depended on the connection, and the connection is closed; nothing panics or hangs.

pub mod framing;

mod device;

pub use device::{SOCKBUF_ENV, SPIN_ENV, TcpConfig, TcpDevice, calibrated_spin};
