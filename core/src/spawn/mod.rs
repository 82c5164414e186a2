//! MPI-2 style dynamic processes as sans-I/O state machines (`spec/spawn.md`):
//! `spawn` / `get_parent`, `open_port` / `accept` / `connect` / `close_port`, `join`,
//! `disconnect` and `merge`.
//!
//! Every connection is one handshake between two *roots* ([`Handshake`]): the initiator
//! (spawned child root, connect client, higher join port) sends its (group id, size,
//! context id) in one small `Hello`; the acceptor (spawning parent root, accept server,
//! lower join port) answers with its own triple in `HelloAck`; both roots tell their
//! local members ([`Member`]) and swap per-rank endpoint tables; each acknowledges the
//! other's table. [`SpawnParent`] adds the launch and the kill of orphans around an
//! acceptor; [`Join`] decides the roles over an existing byte stream.
//!
//! All machines share the kernel's shape: `handle(now, input)`, `poll_output()`,
//! `poll_timeout()`. `handle` returns `Err` only for an input it rejects (malformed or
//! foreign peer bytes, an input the machine does not take) and then leaves the state
//! unchanged (SPAWN-10); the outcome of the handshake itself is an [`Output`].

mod addr;
pub mod auth;
mod crc;
pub mod datagram;
mod group;
mod handshake;
mod join;
pub mod member_wire;
mod merge;
pub mod msg;
mod parent;
pub mod port;
mod role;
pub mod stream;
pub mod trace;
mod types;

use alloc::string::String;
use alloc::vec::Vec;

pub use auth::{BootKey, TAG_LEN};
pub use crc::crc32;
pub use datagram::DatagramConfig;
pub use group::{ContextIds, InterGroup, Member, MemberOutput};
pub use handshake::Handshake;
pub use join::Join;
#[cfg(feature = "planted-bugs")]
pub use merge::merge_planted;
pub use merge::{MergedGroup, merge};
pub use msg::{AbortReason, Addr, GroupHeader, HsMsg, JoinPort};
pub use parent::{SpawnEnv, SpawnParent};
pub use port::{Bootstrap, PortAddress, PortName, Ports, Transport};
pub use role::Role;
pub use types::{HandshakeConfig, MemberMsg, Phase, Served, SpawnConfig};

use crate::process::{Namespace, Rank};
use crate::wire::WireError;

/// Everything that can go wrong in a spawn / connect / join.
///
/// It comes back two ways: as the `Err` of a machine's `handle` (the input was rejected
/// and nothing changed, SPAWN-10: the driver drops the input and goes on) and in
/// [`Output::Failed`] (the attempt is over: the application's call fails with it).
///
/// Non-exhaustive: a caller acts on the kinds it knows (e.g. retries after
/// [`SpawnError::Timeout`]) and reports any other as a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// Peer bytes were malformed or corrupted; they were dropped.
    #[error("malformed input from peer: {0}")]
    Wire(#[from] WireError),
    /// A port name did not parse.
    #[error("bad port name {name:?}: {reason}")]
    BadPort {
        /// The name (at most its first 64 characters).
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The port is not open in this process.
    #[error("port {0} is not open")]
    PortNotOpen(String),
    /// The handshake did not complete before its deadline (SPAWN-8).
    #[error("timed out in phase {phase:?}")]
    Timeout {
        /// Where it was stuck.
        phase: Phase,
    },
    /// A datagram went unacknowledged through all retries (SPAWN-13).
    #[error("peer unreachable: no acknowledgement after {retries} retransmissions")]
    PeerUnreachable {
        /// Retransmissions made.
        retries: u32,
    },
    /// An endpoint table does not have one entry per rank of its group (SPAWN-7).
    #[error("endpoint table has {got} entries for a group of {expected}")]
    EndpointCount {
        /// The group size.
        expected: u32,
        /// Entries received.
        got: u64,
    },
    /// The remote group is not the one this side expected (a spawn's children). Since
    /// SPAWN-22 the kernel drops such a Hello instead ([`SpawnError::Forged`]); the
    /// variant stays for the member wire format (code 7).
    #[error(
        "expected remote group {expected_group} of size {expected_size}, got {got_group} of size {got_size}"
    )]
    WrongRemoteGroup {
        /// Expected group id.
        expected_group: u64,
        /// Expected size.
        expected_size: u32,
        /// Group id received.
        got_group: u64,
        /// Size received.
        got_size: u32,
    },
    /// A message of another connection attempt.
    #[error("message of session {got}, this handshake is session {expected}")]
    WrongSession {
        /// This handshake's session.
        expected: u64,
        /// The message's session.
        got: u64,
    },
    /// A datagram from an address that is not this handshake's peer.
    #[error("datagram from an address that is not the peer")]
    UnknownPeer,
    /// A well-formed message that the protocol does not allow here.
    #[error("unexpected: {what}")]
    Unexpected {
        /// What arrived, and where.
        what: &'static str,
    },
    /// The peer root gave up.
    #[error("peer aborted: {reason:?}")]
    Aborted {
        /// Its reason.
        reason: AbortReason,
    },
    /// The runtime could not launch the children.
    #[error("launch failed: {reason}")]
    LaunchFailed {
        /// The runtime's explanation.
        reason: String,
    },
    /// The bootstrap stream closed before the handshake completed.
    #[error("bootstrap stream closed")]
    StreamClosed,
    /// All context ids of the job are in use.
    #[error("no free context id")]
    ContextIdsExhausted,
    /// Released a context id that was not live.
    #[error("context id {0} is not live")]
    ContextIdNotLive(u32),
    /// A configuration or environment the machine cannot work with.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
    /// Both ends of a join advertised the same port.
    #[error("join: both ends use the same port")]
    JoinSamePort,
    /// A bootstrap message that failed authentication (a wrong or missing tag), or a
    /// Hello of a group the spawn did not launch, or a message of another session: it
    /// was dropped and counted ([`Handshake::forged`]), never decides the handshake
    /// (SPAWN-22).
    #[error("forged bootstrap message dropped: {what}")]
    Forged {
        /// What was wrong with it.
        what: &'static str,
    },
    /// A failure the group's root reported to a member (`MemberMsg::Failed`) whose exact
    /// variant cannot travel: its fields are static strings or a wire error of the root's
    /// own build. `code` is the wire code of the root's variant (`spec/wire.md`), `text`
    /// its message.
    #[error("reported by the root (code {code}): {text}")]
    Reported {
        /// The root's error code.
        code: u8,
        /// The root's error message.
        text: String,
    },
}

/// An event of the bootstrap that the driver feeds into a root machine: all a
/// [`Handshake`] takes, and what [`SpawnParent`] ([`ParentInput`]) and [`Join`]
/// ([`JoinInput`]) take besides their own.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Input {
    /// A datagram arrived on this root's bootstrap datagram endpoint, sent from `from`
    /// (for UD: the source LID/QPN of the work completion).
    Datagram {
        /// The sender's address.
        from: Addr,
        /// The datagram.
        bytes: Vec<u8>,
    },
    /// Bytes arrived on the bootstrap stream with the peer root (any chunking).
    Stream {
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The bootstrap stream closed or broke.
    StreamClosed,
    /// The deadline last returned by `poll_timeout` has passed.
    Timeout,
}

/// An event the driver feeds into a [`SpawnParent`]: one for its handshake, or the
/// launch's failure.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ParentInput {
    /// An event of the bootstrap (`Input::Timeout` included).
    Handshake(Input),
    /// The runtime could not launch the children of the spawn.
    LaunchFailed {
        /// Why.
        reason: String,
    },
}

impl From<Input> for ParentInput {
    fn from(input: Input) -> Self {
        ParentInput::Handshake(input)
    }
}

/// An event the driver feeds into a [`Join`]: one for its handshake, or bytes of the
/// application's join stream.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum JoinInput {
    /// An event of the bootstrap (`Input::Timeout` included). Before the roles are
    /// decided, the join holds the others until its handshake exists.
    Handshake(Input),
    /// Bytes arrived on the application's byte stream of a join (`MPI_Comm_join(fd)`).
    JoinStream {
        /// The bytes.
        bytes: Vec<u8>,
    },
}

impl From<Input> for JoinInput {
    fn from(input: Input) -> Self {
        JoinInput::Handshake(input)
    }
}

/// Something the driver must do for a root machine. Drain with `poll_output` after every
/// `handle` and then re-read `poll_timeout` (the only timer is that deadline: arm one
/// timer for it, replacing any earlier one; `None` cancels it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    /// Send `bytes` as one datagram to `to` on the bootstrap datagram endpoint. Never
    /// larger than the configured MTU. Best effort: loss is handled by the machine.
    SendDatagram {
        /// Destination address.
        to: Addr,
        /// The datagram.
        bytes: Vec<u8>,
    },
    /// Open a reliable stream to the peer's stream address `to`; `SendStream`s that
    /// follow go on it (queue them until connected). A failed connect is `StreamClosed`.
    OpenStream {
        /// The peer's stream address (from its port name).
        to: Addr,
    },
    /// Write `bytes` on the bootstrap stream (the one opened, or the one accepted on this
    /// root's port).
    SendStream {
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The bootstrap stream is no longer needed: flush what was written, then close it.
    CloseStream,
    /// Write `bytes` on the join byte stream.
    SendJoin {
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// Launch `count` processes of `namespace`, ranks `0..count`, each with `env` added
    /// to its environment (it carries the parent's port, SPAWN-3).
    Launch {
        /// The children's namespace.
        namespace: Namespace,
        /// How many (`maxprocs`).
        count: u32,
        /// Variables to set in every child.
        env: Vec<(String, String)>,
    },
    /// Kill every process of `namespace` with rank below `count` that was launched: the
    /// orphans of a failed spawn (SPAWN-8).
    Kill {
        /// The children's namespace.
        namespace: Namespace,
        /// How many were asked for.
        count: u32,
    },
    /// Deliver `msg` to local group member `member` over the group's own channel, in
    /// order, reliably. Feed it to that member's [`Member::handle`].
    ToMember {
        /// Rank in the local group.
        member: Rank,
        /// The message.
        msg: MemberMsg,
    },
    /// Tell the local application (the root): inter-group ready.
    Ready(InterGroup),
    /// Tell the local application: failed, no inter-group (also after a `Ready`: the
    /// handle is revoked, SPAWN-8).
    Failed(SpawnError),
}
