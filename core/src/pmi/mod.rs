//! PMI-1 for unmodified MPI programs (`spec/pmi.md`, rules `PMIS-n`): the wire protocol
//! MPICH and every Hydra-based MPI speak on the socket their launcher hands them as
//! `PMI_FD`, and the per-process server that maps it onto the kernel — the barrier onto
//! the modex, publish/lookup onto the data server.

pub mod fence;
mod session;
pub mod wire;
pub mod wire2;

pub use session::{
    FIRST_REQUEST, MAX_PUT_BYTES, PREPUT_ENV, PmiInput, PmiJob, PmiOutput, PmiSession,
    decode_preput, encode_preput,
};

#[cfg(test)]
mod tests;
