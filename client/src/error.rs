//! Typed errors of the client library, the communicator and the endpoint encoding.

use dynres_core::rc::RcError;
use dynres_core::spawn::SpawnError;
use dynres_core::wire::WireError;
use dynres_transports::TransportError;

/// Errors of the client library.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A variable the runtime sets is missing or malformed: not started by `dynres run`?
    #[error("environment variable {0} missing or malformed (not started by `dynres run`?)")]
    Env(&'static str),
    /// The control connection failed.
    #[error("control connection: {0}")]
    Io(#[from] std::io::Error),
    /// The runtime closed the connection at the hello: wrong secret or rank.
    #[error("the runtime refused the connection (wrong secret or rank)")]
    Refused,
    /// A frame from the runtime did not decode.
    #[error("malformed frame from the runtime: {0}")]
    Wire(#[from] WireError),
    /// The runtime answered with an error.
    #[error("{0}")]
    Rc(#[from] RcError),
    /// The runtime answered a call with a result of another call.
    #[error("unexpected answer to {0}")]
    Unexpected(&'static str),
}

/// Errors of a [`Communicator`](crate::comm::Communicator).
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    /// A runtime call made while creating the communicator failed.
    #[error("runtime: {0}")]
    Client(#[from] ClientError),
    /// The transport failed.
    #[error("transport: {0}")]
    Transport(#[from] TransportError),
    /// A peer's published address did not parse.
    #[error("bad published address {0:?}")]
    BadAddress(String),
    /// The caller is not a member of the pset.
    #[error("this process is not a member of {0}")]
    NotMember(String),
    /// A message had an unexpected size or content.
    #[error("malformed message: {0}")]
    Malformed(&'static str),
    /// A spawn / accept / connect / join failed (the kernel's handshake outcome, or a
    /// failure the group's root reported).
    #[error("dynamic process call: {0}")]
    Spawn(#[from] SpawnError),
    /// An endpoint or bootstrap address did not encode or decode.
    #[error("endpoint: {0}")]
    Endpoint(#[from] EndpointError),
    /// A socket operation of a dynamic-process call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A call was made with arguments it cannot work with.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The data-plane key the runtime gives (`DYNRES_DATA_KEY`) is missing or
    /// malformed (its value is never part of the message).
    #[error("{var}: {reason}")]
    DataKey {
        /// The variable.
        var: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The node address the runtime gave (`DYNRES_NODE_ADDR`) is not an IP address.
    #[error("{var}={value:?} is not an IP address")]
    NodeAddr {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
}

impl CommError {
    /// An I/O error with context.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        CommError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Errors of the compact endpoint encoding ([`crate::dpm::endpoint`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// The addresses do not fit the 64 bytes of a kernel address.
    #[error("encoded endpoint would take {len} bytes, more than {max}")]
    TooLong {
        /// Bytes needed.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A shared-memory segment name longer than a length byte can describe.
    #[error("shared-memory segment name of {0} bytes is too long to encode")]
    SegmentName(usize),
    /// The addresses hold neither shared memory nor TCP.
    #[error("no shared-memory or TCP address to encode")]
    NoAddress,
    /// Peer bytes did not parse.
    #[error("malformed endpoint: {0}")]
    Wire(#[from] WireError),
}
