//! TCP device: non-blocking sockets with `TCP_NODELAY`, nom-parsed framing.

pub mod framing;
