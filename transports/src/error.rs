//! The one error type every device returns.

use std::io;

use crate::device::DeviceKind;
use crate::tcp::auth::HandshakeFailure;
use crate::tcp::framing::FramingError;

/// Result alias used throughout the crate.
pub type Result<T, E = TransportError> = std::result::Result<T, E>;

/// Everything that can go wrong on the data plane. Peer misbehaviour (close, reset,
/// garbage, death) always ends up here, never in a panic.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// An OS call failed.
    #[error("{what}: {source}")]
    Io {
        /// What we were doing.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The peer closed the connection (cleanly, or by exiting).
    #[error("peer closed connection {conn}{}", if *.mid_message { " in the middle of a message" } else { "" })]
    PeerClosed {
        /// Connection id on this device.
        conn: u64,
        /// Whether a message was partially transferred when the peer went away.
        mid_message: bool,
    },
    /// The peer reset the connection.
    #[error("connection {conn} reset by peer")]
    ConnectionReset {
        /// Connection id on this device.
        conn: u64,
    },
    /// A shared-memory peer process died (killed or crashed).
    #[error("peer process {pid} died (connection {conn}){}", if *.mid_message { " in the middle of a message" } else { "" })]
    PeerDied {
        /// Connection id on this device.
        conn: u64,
        /// The dead process.
        pid: u32,
        /// Whether a message was partially transferred when the peer died.
        mid_message: bool,
    },
    /// The peer sent bytes that are not a valid frame; the connection was closed.
    #[error("malformed frame on connection {conn}: {source}")]
    Malformed {
        /// Connection id on this device.
        conn: u64,
        /// What was wrong.
        #[source]
        source: FramingError,
    },
    /// A TCP connection's handshake failed (`spec/dataplane.md`): the peer could not
    /// prove it holds the key, claimed an address it may not, or broke the protocol.
    /// The connection was closed before anything it sent was believed.
    #[error("connection {conn} not authenticated: {reason}")]
    Handshake {
        /// Connection id on this device.
        conn: u64,
        /// What went wrong.
        #[source]
        reason: HandshakeFailure,
    },
    /// A peer sent more messages nobody asked for than the device buffers for one peer
    /// (DATA-6); its connection was closed.
    #[error(
        "connection {conn} cut off: more than {messages} unexpected messages or {bytes} unexpected bytes"
    )]
    UnexpectedLimit {
        /// Connection id on this device.
        conn: u64,
        /// The message limit.
        messages: usize,
        /// The byte limit.
        bytes: u64,
    },
    /// A shared-memory segment is not ours or is corrupt.
    #[error("bad shared-memory segment {name}: {reason}")]
    BadSegment {
        /// Segment name.
        name: String,
        /// What was wrong.
        reason: &'static str,
    },
    /// A shared-memory segment belongs to another user: someone else created the name
    /// (squatting), so it is not mapped.
    #[error("shared-memory segment {name} is owned by uid {owner}, not by us (uid {euid})")]
    SegmentNotOwned {
        /// Segment name.
        name: String,
        /// The segment's owner.
        owner: u32,
        /// Our effective uid.
        euid: u32,
    },
    /// A shared-memory segment can be read or written by group or others, so someone
    /// else may have planted or be tampering with it; it is not mapped.
    #[error("shared-memory segment {name} has mode {mode:o}: open to group or others")]
    SegmentPermissions {
        /// Segment name.
        name: String,
        /// Its permission bits.
        mode: u32,
    },
    /// Every name tried for a new segment already existed (all taken, or squatted by
    /// someone who can predict them).
    #[error("no unused shared-memory segment name after {attempts} attempts (last: {last})")]
    SegmentNamesExhausted {
        /// How many names were tried.
        attempts: u32,
        /// The last name tried.
        last: String,
    },
    /// The peer's inbox has no free connection slot.
    #[error("shared-memory segment {name} has no free connection slot")]
    NoFreeSlot {
        /// Segment name.
        name: String,
    },
    /// The message is larger than the posted receive buffer.
    #[error("message of {len} bytes truncated: posted buffer holds {capacity}")]
    Truncated {
        /// Message length.
        len: u64,
        /// Posted buffer length.
        capacity: usize,
    },
    /// A message is larger than this device accepts.
    #[error("message of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Requested length.
        len: u64,
        /// Limit.
        max: u64,
    },
    /// Unknown connection id.
    #[error("unknown connection {0}")]
    UnknownConn(u64),
    /// Unknown send or receive handle.
    #[error("unknown handle {0}")]
    UnknownHandle(u64),
    /// The address is not one this device can use.
    #[error("{kind:?} device cannot use address: {reason}")]
    BadAddress {
        /// The device.
        kind: DeviceKind,
        /// Why.
        reason: String,
    },
    /// A blocking operation ran out of time.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(std::time::Duration, &'static str),
    /// No device can reach the peer.
    #[error("no device can reach peer {0}")]
    NoRoute(String),
    /// The peer record was released.
    #[error("peer record released")]
    PeerReleased,
    /// This machine has no RDMA device (or no kernel support for RDMA).
    #[error("no RDMA device: {0}")]
    NoRdmaDevice(String),
    /// A verbs call failed.
    #[error("verbs {what}: {source}")]
    Verbs {
        /// What we were doing.
        what: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A datagram exceeds the UD MTU; segmentation is the caller's job.
    #[error("datagram of {len} bytes exceeds the MTU of {mtu}")]
    DatagramTooLarge {
        /// Datagram length.
        len: usize,
        /// The MTU.
        mtu: usize,
    },
    /// The device was finalized.
    #[error("device finalized")]
    Finalized,
    /// A shared-memory sender withdrew a single-copy message (its send timed out, or it
    /// closed the connection) before we read it; the receive it matched gets nothing.
    #[error("sender withdrew a {len}-byte message on connection {conn} before it was read")]
    SendWithdrawn {
        /// Connection id on this device.
        conn: u64,
        /// The message's length.
        len: u64,
    },
}

impl TransportError {
    /// Wraps an OS error with what we were doing.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }

    /// A copy suitable for failing several requests with the same cause (io errors are
    /// not `Clone`, so they are re-created from kind and message).
    pub fn duplicate(&self) -> Self {
        match self {
            Self::Io { what, source } => Self::Io {
                what: what.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            },
            Self::PeerClosed { conn, mid_message } => Self::PeerClosed {
                conn: *conn,
                mid_message: *mid_message,
            },
            Self::ConnectionReset { conn } => Self::ConnectionReset { conn: *conn },
            Self::SendWithdrawn { conn, len } => Self::SendWithdrawn {
                conn: *conn,
                len: *len,
            },
            Self::PeerDied {
                conn,
                pid,
                mid_message,
            } => Self::PeerDied {
                conn: *conn,
                pid: *pid,
                mid_message: *mid_message,
            },
            Self::Malformed { conn, source } => Self::Malformed {
                conn: *conn,
                source: source.clone(),
            },
            Self::Handshake { conn, reason } => Self::Handshake {
                conn: *conn,
                reason: reason.clone(),
            },
            Self::UnexpectedLimit {
                conn,
                messages,
                bytes,
            } => Self::UnexpectedLimit {
                conn: *conn,
                messages: *messages,
                bytes: *bytes,
            },
            Self::Verbs { what, source } => Self::Verbs {
                what,
                source: io::Error::new(source.kind(), source.to_string()),
            },
            other => Self::Io {
                what: other.to_string(),
                source: io::Error::other("repeated error"),
            },
        }
    }
}
