//! The spawn machines' configurations and the members' input, apart from the machines:
//! their trace encodings ([`super::trace`]) need only these, so the machines can use
//! those encodings without an import cycle.

use alloc::vec::Vec;

use crate::process::{Namespace, Rank};
use crate::time::Duration;

use super::SpawnError;
use super::auth::BootKey;
use super::datagram::{DatagramConfig, MIN_MTU};
use super::msg::{Addr, GroupHeader, MAX_GROUP};
use super::port::PortName;

/// Where a handshake is (`spec/spawn.md`, "States").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Join only: waiting for the peer's port on the join stream.
    JoinExchange,
    /// Acceptor: waiting for a Hello on the port.
    Listening,
    /// Initiator: Hello sent, waiting for HelloAck.
    AwaitHelloAck,
    /// Triples exchanged; endpoint tables and their acks in flight.
    Endpoints,
    /// Inter-group ready (final unless revoked by a peer Abort).
    Done,
    /// Failed; no handle (final).
    Failed,
}

/// What one root needs to know to take part in a handshake.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HandshakeConfig {
    /// The local group's triple; `context_id` comes from the job's [`super::ContextIds`].
    pub local: GroupHeader,
    /// `local_endpoints[r]`: local rank `r`'s address; length must equal `local.size`.
    pub local_endpoints: Vec<Addr>,
    /// The root's rank in the local group; every other rank gets [`Output::ToMember`](super::Output::ToMember)s.
    pub root: Rank,
    /// The whole handshake must finish within this long of its start (SPAWN-8).
    pub timeout: Duration,
    /// Datagram bootstrap parameters.
    pub datagram: DatagramConfig,
    /// Acceptor only: accept only this remote (group id, size), e.g. a spawn's children.
    pub expect_remote: Option<(u64, u32)>,
    /// Initiator only: the session id of this attempt; `None` uses `local.group_id`.
    /// A group that connects more than once should give each attempt its own id so a
    /// late datagram of one attempt can never be taken for another (SPAWN-11).
    pub session: Option<u64>,
    /// Acceptor only: the connections earlier accepts on the same port opened
    /// ([`Handshake::served`](super::Handshake::served) of each). A datagram Hello with one's address and session
    /// is a late copy of that connection's Hello, not a new connection, and is refused
    /// (SPAWN-21). Empty for a port's first accept.
    pub served: Vec<Served>,
}

/// A connection an accept opened on its port: the initiator's datagram address and the
/// session of its Hello (SPAWN-21). The caller keeps these for as long as the port is
/// open (or as long as a late Hello may still arrive) and passes them to the port's
/// next accepts in [`HandshakeConfig::served`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Served {
    /// The initiator root's datagram address (the `from` of its Hello).
    pub from: Addr,
    /// The connection's session.
    pub session: u64,
}

impl HandshakeConfig {
    /// A configuration with default timers: 10 s overall, default datagram parameters.
    pub fn new(local: GroupHeader, local_endpoints: Vec<Addr>) -> Self {
        HandshakeConfig {
            local,
            local_endpoints,
            root: 0,
            timeout: Duration::from_secs(10),
            datagram: DatagramConfig::default(),
            expect_remote: None,
            session: None,
            served: Vec::new(),
        }
    }

    /// Checks the configuration (the handshake refuses to start on a bad one).
    pub(super) fn validate(&self) -> Result<(), SpawnError> {
        let n = self.local.size as usize;
        if n == 0 || n > MAX_GROUP {
            return Err(SpawnError::Config("local group size must be 1..=65536"));
        }
        if self.local_endpoints.len() != n {
            return Err(SpawnError::EndpointCount {
                expected: self.local.size,
                got: self.local_endpoints.len() as u64,
            });
        }
        if self.root >= self.local.size {
            return Err(SpawnError::Config("root is not a rank of the local group"));
        }
        if self.datagram.mtu < MIN_MTU {
            return Err(SpawnError::Config("datagram MTU below 128 bytes"));
        }
        Ok(())
    }
}

/// What the parent root needs for a spawn.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpawnConfig {
    /// The parent group and timers (its `expect_remote` is set by the spawn).
    pub handshake: HandshakeConfig,
    /// The port the children connect back to (opened by the caller).
    pub port: PortName,
    /// How many children (`maxprocs`).
    pub maxprocs: u32,
    /// The children's namespace (chosen by the runtime).
    pub child_namespace: Namespace,
    /// The children's group id (chosen by the runtime; unique in the job).
    pub child_group_id: u64,
    /// The spawn's own key (drawn at random by the driver for every spawn): the parent
    /// authenticates the children's messages with it, not with the port's key, and the
    /// children find it in their environment (SPAWN-22).
    pub key: BootKey,
}

/// What a root sends to each non-root member of its local group, over the group's
/// existing intra-group channel (SPAWN-6).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MemberMsg {
    /// The remote group's triple (the broadcast after Hello/HelloAck).
    RemoteGroup {
        /// The connection attempt.
        session: u64,
        /// The remote group's triple.
        remote: GroupHeader,
        /// The inter-group's data-plane key (SPAWN-23).
        data_key: BootKey,
    },
    /// The remote group's endpoint table (follows `RemoteGroup`).
    RemoteEndpoints {
        /// The connection attempt.
        session: u64,
        /// `endpoints[r]`: remote rank `r`'s address.
        endpoints: Vec<Addr>,
    },
    /// The handshake failed (or was revoked); drop anything received for it.
    Failed {
        /// The connection attempt.
        session: u64,
        /// Why.
        error: SpawnError,
    },
}
