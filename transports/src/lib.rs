//! # dynres-transports
//!
//! The data plane: a small device interface (environment, addresses, on-demand
//! connections, blocking and non-blocking send, receive into a posted buffer, progress)
//! with shared-memory, TCP and InfiniBand-verbs devices, and a router that picks a device
//! per peer. Filled in by issue 6.
#![warn(missing_docs)]
