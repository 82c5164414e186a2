//! `synthetic --alltoall`: after each work step every member sends one message to
//! every other member and checks the one it gets from each, so that after a resource
//! change old and new processes have all talked to each other (issue 29: a host with
//! hundreds of processes needs a connection, and a shared-memory slot, per pair).

use dynres_client::comm::Communicator;
use dynres_client::error::CommError;

/// The exchange's tag: no collective uses it (theirs count down from `u64::MAX`).
const TAG_ALLTOALL: u64 = 0x616c_6c32_616c_6c00; // "all2all\0"

/// One all-to-all round over `comm`: member `me` sends its job rank to every other
/// member, in the order `me + 1, me + 2, …` (so that not everyone sends to member 0
/// first), then receives from every member and checks the job rank each one sent.
/// The messages are a few bytes: every send completes at once (eagerly), so sending
/// all before receiving any cannot deadlock.
pub fn exchange(comm: &Communicator) -> Result<(), CommError> {
    let (n, me) = (comm.size(), comm.rank());
    let ranks = comm.members();
    for k in 1..n {
        comm.send((me + k) % n, TAG_ALLTOALL, &ranks[me].to_le_bytes())?;
    }
    for k in 1..n {
        let src = (me + n - k) % n;
        let got = comm.recv(src, TAG_ALLTOALL, 4)?;
        if got[..] != ranks[src].to_le_bytes() {
            return Err(CommError::Malformed("all-to-all: wrong sender's rank"));
        }
    }
    Ok(())
}
