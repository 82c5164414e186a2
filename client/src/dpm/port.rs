//! `MPI_Open_port` / `MPI_Close_port`: a bootstrap endpoint (a UDP socket and a TCP
//! listener on the node's address) named by a kernel [`PortName`].

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dynres_core::spawn::{Bootstrap, PortName, Ports, Served};

use super::endpoint::encode_sockaddr;
use crate::comm::node_addr;
use crate::error::CommError;

/// An open port: where a root accepts connections, and the name connecting roots use.
/// Dropping it closes it.
#[derive(Debug)]
pub struct Port {
    name: PortName,
    text: String,
    pub(crate) udp: UdpSocket,
    pub(crate) listener: TcpListener,
    open: bool,
    /// Connections this port's accepts opened, with when (SPAWN-21).
    served: Mutex<Vec<(Instant, Served)>>,
}

/// How long a port remembers a connection one of its accepts opened (SPAWN-21). An
/// initiator sends its Hello again only until its retries run out — with the default
/// datagram parameters within 2 s (`rto·(2+4+8+16+16·(max_retries−4))`) — so a copy
/// older than this is not on its way any more; the margin covers slow links and larger
/// retry budgets.
pub const SERVED_KEPT: Duration = Duration::from_secs(60);

impl Port {
    /// The port name to hand to connecting processes (`dynres:2:...`, SPAWN-1). It holds
    /// the port's key (SPAWN-22): whoever has the name may connect, so hand it only to
    /// those who may, and log [`PortName::address`] instead.
    pub fn name(&self) -> &str {
        &self.text
    }

    /// The parsed port name.
    pub fn port_name(&self) -> &PortName {
        &self.name
    }

    /// The bootstrap the port's owner runs.
    pub fn bootstrap(&self) -> Bootstrap {
        self.name.boot
    }

    /// The connections earlier accepts on this port opened within [`SERVED_KEPT`], for
    /// the next accept's `HandshakeConfig::served` (SPAWN-21).
    pub(crate) fn served(&self) -> Vec<Served> {
        let mut g = self.served.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|(at, _)| at.elapsed() < SERVED_KEPT);
        g.iter().map(|(_, s)| s.clone()).collect()
    }

    /// Records the connection an accept on this port opened, if a datagram Hello
    /// opened one (`Handshake::served`).
    pub(crate) fn record_served(&self, served: Option<Served>) {
        if let Some(s) = served {
            let mut g = self.served.lock().unwrap_or_else(|e| e.into_inner());
            g.push((Instant::now(), s));
        }
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        if self.open {
            if let Err(e) = registry(|p| p.close_port(&self.name)) {
                tracing::debug!(error = %e, "closing a dropped port");
            }
        }
    }
}

fn registry<T>(f: impl FnOnce(&mut Ports) -> T) -> T {
    // A panic elsewhere while holding the lock leaves the registry usable: it is only
    // a map and a counter, updated in single steps.
    let mut g = PORTS_CELL.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Ports::new))
}

/// The process' open ports: tags are never reused (SPAWN-2), whichever thread opens.
static PORTS_CELL: Mutex<Option<Ports>> = Mutex::new(None);

/// Opens a port on [`node_addr`]`()`: a non-blocking UDP socket and TCP listener on
/// free ports, named with `bootstrap` ([`Bootstrap::DEFAULT_HYBRID`] is the usual
/// choice).
pub fn open_port(bootstrap: Bootstrap) -> Result<Port, CommError> {
    let ip = node_addr()?;
    let udp = UdpSocket::bind(SocketAddr::new(ip, 0))
        .map_err(|e| CommError::io(format!("bind a UDP port on {ip}"), e))?;
    let listener = TcpListener::bind(SocketAddr::new(ip, 0))
        .map_err(|e| CommError::io(format!("listen on {ip}"), e))?;
    for r in [udp.set_nonblocking(true), listener.set_nonblocking(true)] {
        r.map_err(|e| CommError::io("make a port non-blocking", e))?;
    }
    let local = |r: std::io::Result<SocketAddr>| r.map_err(|e| CommError::io("port address", e));
    let dgram = encode_sockaddr(&local(udp.local_addr())?);
    let stream = encode_sockaddr(&local(listener.local_addr())?);
    // SPAWN-22: every port its own random key, the capability its name carries.
    let key = super::random::key()?;
    let name = registry(|p| p.open_port(dgram, stream, bootstrap, key))?;
    tracing::debug!(port = %name.address(), "port opened");
    Ok(Port {
        text: name.to_string(),
        name,
        udp,
        listener,
        open: true,
        served: Mutex::new(Vec::new()),
    })
}

/// Closes a port: its sockets are closed and its name is never handed out again.
pub fn close_port(mut port: Port) -> Result<(), CommError> {
    port.open = false;
    registry(|p| p.close_port(&port.name))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_get_distinct_names_and_close_once() {
        // SPAWN-2
        let a = open_port(Bootstrap::DEFAULT_HYBRID).unwrap();
        let b = open_port(Bootstrap::Stream).unwrap();
        assert_ne!(a.name(), b.name());
        assert_eq!(PortName::parse(a.name()).unwrap(), *a.port_name());
        assert_eq!(b.bootstrap(), Bootstrap::Stream);
        let name = a.port_name().clone();
        close_port(a).unwrap();
        assert!(!registry(|p| p.is_open(&name)));
        assert!(registry(|p| p.is_open(b.port_name())));
        let bn = b.port_name().clone();
        drop(b);
        assert!(!registry(|p| p.is_open(&bn)));
    }

    #[test]
    fn a_port_hands_the_connections_it_served_to_its_next_accepts() {
        // SPAWN-21: what one accept opened, the next accepts refuse a late Hello of.
        let p = open_port(Bootstrap::Datagram).unwrap();
        assert!(
            p.served().is_empty(),
            "a port's first accept has served nobody"
        );
        p.record_served(None);
        assert!(p.served().is_empty(), "a stream Hello leaves nothing late");
        let a = Served {
            from: dynres_core::spawn::Addr(vec![1, 2, 3]),
            session: 7,
        };
        p.record_served(Some(a.clone()));
        assert_eq!(p.served(), vec![a.clone()]);
        // Entries older than SERVED_KEPT are forgotten.
        let old = Instant::now().checked_sub(SERVED_KEPT + Duration::from_secs(1));
        if let Some(old) = old {
            p.served.lock().unwrap()[0].0 = old;
            assert!(p.served().is_empty());
        }
    }
}
