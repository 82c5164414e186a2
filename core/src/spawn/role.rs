//! Which side of a handshake a process was on: a leaf, used by the wire messages, the
//! authentication, the machines and their trace encodings alike.

/// Which side of the handshake a process was on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Connected to a port: a spawned child (`get_parent`), an `MPI_Comm_connect` client,
    /// or the higher port of a join.
    Initiator,
    /// Owned the port: a spawning parent, an `MPI_Comm_accept` server, or the lower
    /// port of a join.
    Acceptor,
}

impl Role {
    /// The short form of a role in trace machine ids: `a` acceptor, `i` initiator.
    pub(crate) fn letter(self) -> char {
        match self {
            Role::Acceptor => 'a',
            Role::Initiator => 'i',
        }
    }
}
