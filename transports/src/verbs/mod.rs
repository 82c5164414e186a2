//! InfiniBand verbs device (feature `verbs`).
//!
//! * Bootstrap: one UD queue pair per process ([`ud::UdEndpoint`]) carries single
//!   datagrams of at most [`ud::DATAGRAM_MAX`] bytes (2 KiB MTU less one byte of kind).
//!   Segmentation of larger bootstrap messages is the caller's job (dynres-core's
//!   datagram layer); [`VerbsDevice::send_datagram`] refuses anything larger.
//! * Data: RC queue pairs made on demand ([`rc`]), through the `ibverbs` crate's
//!   `PreparedQueuePair` / `QueuePairEndpoint` handshake; the endpoints are exchanged
//!   over the UD queue pair (CONNECT / ACCEPT datagrams), so no other channel is needed.
//!
//! Machines without an RDMA device (or without kernel support: `ibv_get_device_list`
//! fails with `ENOSYS`) get [`TransportError::NoRdmaDevice`](crate::TransportError).

pub(crate) mod rc;
pub mod ud;
mod wire;

mod device;

pub use device::{VerbsConfig, VerbsDevice};

use crate::error::{Result, TransportError};

/// The port every queue pair uses (the `ibverbs` crate fixes port 1 as well).
pub const PORT: u8 = 1;

/// Opens the first RDMA device through the `ibverbs` crate, mapping its absence (no
/// device, or `ENOSYS` from a kernel without RDMA support) to `NoRdmaDevice`.
pub fn open_first_device() -> Result<ibverbs::Context> {
    let list = ibverbs::devices().map_err(|e| match e.raw_os_error() {
        Some(libc::ENOSYS) | Some(libc::ENODEV) | Some(libc::ENOENT) => {
            TransportError::NoRdmaDevice(format!("ibv_get_device_list: {e}"))
        }
        _ => TransportError::Verbs {
            what: "ibv_get_device_list",
            source: e,
        },
    })?;
    let dev = list
        .get(0)
        .ok_or_else(|| TransportError::NoRdmaDevice("no RDMA device present".into()))?;
    dev.open().map_err(|source| TransportError::Verbs {
        what: "ibv_open_device",
        source,
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::{MsgHeader, PeerAddrs, RecvSpec};
    use std::time::Duration;

    /// Opens a device or says why the hardware tests cannot run here.
    fn device() -> Option<VerbsDevice> {
        match VerbsDevice::new(VerbsConfig::default()) {
            Ok(d) => Some(d),
            Err(TransportError::NoRdmaDevice(why)) => {
                println!("skipped: no RDMA device ({why})");
                None
            }
            Err(e) => panic!("verbs device failed for another reason: {e}"),
        }
    }

    #[test]
    fn absence_is_a_typed_error_not_a_panic() {
        match open_first_device() {
            Ok(_) => {}
            Err(TransportError::NoRdmaDevice(why)) => {
                assert!(!why.is_empty());
                println!("skipped: no RDMA device ({why})");
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    #[test]
    fn datagram_mtu_is_enforced() {
        let Some(mut d) = device() else { return };
        let mut me = PeerAddrs::default();
        d.local_address(&mut me);
        let to = me.verbs.expect("verbs address");
        let too_big = vec![0u8; ud::DATAGRAM_MAX + 1];
        assert!(matches!(
            d.send_datagram(&to, &too_big),
            Err(TransportError::DatagramTooLarge { .. })
        ));
        d.send_datagram(&to, b"loopback").unwrap();
        let got = d.recv_datagram(Duration::from_secs(5)).unwrap();
        assert_eq!(got.map(|(b, _)| b), Some(b"loopback".to_vec()));
    }

    #[test]
    fn rc_connection_on_demand_carries_messages() {
        let (Some(mut a), Some(mut b)) = (device(), device()) else {
            return;
        };
        let mut pb = PeerAddrs::default();
        b.local_address(&mut pb);
        let t = Duration::from_secs(10);
        // Connect needs the peer to answer its CONNECT datagram: drive b meanwhile.
        let (conn, mut b) = std::thread::scope(|s| {
            let h = s.spawn(move || {
                crate::device::accept_blocking(&mut b, t).unwrap();
                b
            });
            (a.connect(&pb).unwrap(), h.join().unwrap())
        });
        let hdr = MsgHeader {
            source: 1,
            tag: 2,
            context_id: 3,
            len: 0,
        };
        let big: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        a.send(conn, hdr, &big, t).unwrap();
        let spec = RecvSpec {
            context_id: 3,
            ..RecvSpec::default()
        };
        let r = crate::device::recv_blocking(&mut b, spec, vec![0; big.len()], t).unwrap();
        assert!(r.data == big);
    }
}
