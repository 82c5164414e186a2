//! How a peer is identified: by the set of its device addresses (WMPI's view), not by a
//! global rank, so processes that join late are just new address sets.

use std::net::SocketAddr;

/// Address on the shared-memory device.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShmAddr {
    /// Identifies the host (and kernel instance): equal ids can share memory.
    pub host_id: u64,
    /// The process owning the inbox segment.
    pub pid: u32,
    /// Name of the inbox segment (for `shm_open`).
    pub segment: String,
}

/// Address on the verbs device: the UD queue pair that takes bootstrap datagrams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VerbsAddr {
    /// Port LID.
    pub lid: u16,
    /// UD queue pair number.
    pub qpn: u32,
    /// Q_Key of the UD queue pair.
    pub qkey: u32,
    /// GID (for routed fabrics / RoCE), if the port has one.
    pub gid: Option<[u8; 16]>,
}

/// A peer's identity: every address it can be reached at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerAddrs {
    /// Shared-memory inbox.
    pub shm: Option<ShmAddr>,
    /// Verbs UD endpoint.
    pub verbs: Option<VerbsAddr>,
    /// TCP listening socket.
    pub tcp: Option<SocketAddr>,
}

impl ShmAddr {
    /// This host's id: a hash of the kernel boot id and the host name, so two processes
    /// get the same id exactly when they run under one kernel on one host (and can thus
    /// map the same `/dev/shm`).
    pub fn local_host_id() -> u64 {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        fnv1a(boot.trim().bytes().chain([0]).chain(host.trim().bytes()))
    }
}

fn fnv1a(bytes: impl Iterator<Item = u8>) -> u64 {
    bytes.fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn host_id_is_stable_and_nonzero() {
        let a = ShmAddr::local_host_id();
        assert_eq!(a, ShmAddr::local_host_id());
        assert_ne!(a, fnv1a(std::iter::empty()));
    }
}
