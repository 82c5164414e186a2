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

/// Environment variable that overrides the host id ([`ShmAddr::local_host_id`]): the
/// runtime sets it per node. Processes with different values never use shared memory
/// with each other, even under one kernel (network-namespace "hosts" share one boot id
/// and, unless renamed, one host name).
pub const HOST_ID_ENV: &str = "DYNRES_HOST_ID";

impl ShmAddr {
    /// This host's id. By default a hash of the kernel boot id and the host name, so two
    /// processes get the same id exactly when they run under one kernel on one host (and
    /// can thus map the same `/dev/shm`). When [`HOST_ID_ENV`] is set and not empty, a
    /// hash of its value instead.
    pub fn local_host_id() -> u64 {
        Self::host_id_from(std::env::var(HOST_ID_ENV).ok().as_deref())
    }

    /// The host id for an override value (`None` or empty: the boot id and host name).
    pub fn host_id_from(over: Option<&str>) -> u64 {
        match over {
            // A distinct prefix keeps an override from ever equalling a boot-id hash.
            Some(v) if !v.is_empty() => fnv1a(b"dynres-host-id\0".iter().copied().chain(v.bytes())),
            _ => {
                let boot =
                    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
                fnv1a(boot.trim().bytes().chain([0]).chain(host.trim().bytes()))
            }
        }
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

    #[test]
    fn host_id_override_separates_hosts_under_one_kernel() {
        let kernel = ShmAddr::host_id_from(None);
        assert_eq!(ShmAddr::host_id_from(Some("")), kernel, "empty means unset");
        let n1 = ShmAddr::host_id_from(Some("node1"));
        let n2 = ShmAddr::host_id_from(Some("node2"));
        assert_ne!(n1, n2);
        assert_ne!(n1, kernel);
        assert_eq!(n1, ShmAddr::host_id_from(Some("node1")), "stable");
    }
}
