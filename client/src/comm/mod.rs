//! A communicator made from a pset over `dynres-transports`: point-to-point send/recv,
//! barrier, broadcast and allreduce. Each process opens shared memory and TCP; the
//! router picks shared memory for a peer on the same host (equal host ids) and TCP
//! otherwise. The TCP endpoint listens on the node's address (`DYNRES_NODE_ADDR`,
//! default `127.0.0.1`), any free port; `DYNRES_HOST_ID` overrides the host id (see
//! [`crate::env`]). Its connections authenticate with the job's data-plane key
//! (`DYNRES_DATA_KEY`, `spec/dataplane.md`); [`Transport::add_peer_key`] adds a key for
//! the processes of another job.
//!
//! The kernel tells a process a pset's size and version but not its member list, so a
//! communicator is wired up by a modex over the pset (`spec/resource-change.md` §8):
//! each member contributes its transport addresses, each node's daemon sends the
//! master one batch for its members, and every member gets the same table of ranks and
//! addresses at one version of the pset. Communicator ranks are positions in rank
//! order. This replaced a publish/lookup wire-up that cost O(n²) messages through the
//! master.

mod tree;

use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use dynres_core::pset::PsetName;
use dynres_core::spawn::ContextIds;
use dynres_transports::shm::{ShmConfig, ShmDevice};
use dynres_transports::tcp::{DataKey, KeyId, TcpConfig, TcpDevice, TcpKeys};
use dynres_transports::{DeviceKind, MsgHeader, PeerAddrs, PeerRef, Router, ShmAddr};

use crate::Session;
use crate::error::CommError;

/// How long a member waits for the others to join a communicator being created.
pub const CREATE_WAIT: Duration = Duration::from_secs(60);
/// How long a send or receive may block.
pub const OP_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest message a collective carries.
pub const MAX_COLLECTIVE: usize = 1 << 20;

const TAG_BARRIER: u64 = u64::MAX - 1;
const TAG_BCAST: u64 = u64::MAX - 2;
const TAG_REDUCE: u64 = u64::MAX - 3;
const TAG_LEAVE: u64 = u64::MAX - 4;
const TAG_BCAST_ROOT: u64 = u64::MAX - 5;

/// The bit set in every context id of the dynamic-process calls (inter-communicators,
/// [`crate::dpm`]) and clear in every hashed intra-communicator context, so the two
/// kinds never collide.
pub const DPM_CONTEXT_BIT: u32 = 0x8000_0000;

/// This process' transport endpoint, shared by all its communicators.
#[derive(Clone)]
pub struct Transport {
    router: Rc<RefCell<Router>>,
    /// The context ids of this endpoint's live inter-communicators (SPAWN-5). One per
    /// transport rather than one per process: matching is per endpoint, and tests run
    /// several endpoints ("processes") in one process.
    ctx_ids: Rc<RefCell<ContextIds>>,
    /// The TCP device's key ring (a shared handle).
    keys: TcpKeys,
    /// The peers of the last communicator dropped, held until the next one is made:
    /// a communicator dropped and made again over the same peers (as at every resource
    /// change) then finds their connections open. Released at once, the router would
    /// close them while those peers may still be receiving on them, failing their next
    /// receive (`PeerClosed`).
    parked: Rc<RefCell<Vec<PeerRef>>>,
}

/// The devices of a [`Transport`], opened but not yet routed.
type Devices = (ShmDevice, TcpDevice);

impl Transport {
    /// Opens the shared-memory and TCP devices (TCP listening on
    /// [`node_addr`]`()`, any free port).
    pub fn new() -> Result<Transport, CommError> {
        Ok(Transport::from_devices(open_devices()?))
    }

    /// Opens the devices on a helper thread, so that a new process can overlap it with
    /// its confirm; [`OpeningTransport::finish`] waits for them.
    pub fn open_in_background() -> OpeningTransport {
        // Before the helper thread exists: registering a multi-threaded process for
        // membarrier waits for an RCU grace period (10–20 ms here).
        dynres_transports::shm::register_early();
        OpeningTransport(std::thread::spawn(open_devices))
    }

    fn from_devices((shm, tcp): Devices) -> Transport {
        Transport {
            keys: tcp.keys().clone(),
            router: Rc::new(RefCell::new(Router::new(vec![
                Box::new(shm),
                Box::new(tcp),
            ]))),
            ctx_ids: Rc::new(RefCell::new(ContextIds::new(DPM_CONTEXT_BIT, u32::MAX))),
            parked: Rc::default(),
        }
    }

    /// This process' addresses, as published for its peers.
    pub fn address(&self) -> String {
        encode_addrs(self.router.borrow().local_addrs())
    }

    /// This process' addresses, as its peers' routers know it.
    pub fn local_addrs(&self) -> PeerAddrs {
        self.router.borrow().local_addrs().clone()
    }

    pub(crate) fn router(&self) -> &Rc<RefCell<Router>> {
        &self.router
    }

    pub(crate) fn context_ids(&self) -> &Rc<RefCell<ContextIds>> {
        &self.ctx_ids
    }

    /// Finalizes the devices (also done on drop).
    pub fn finalize(&self) -> Result<(), CommError> {
        self.parked.borrow_mut().clear();
        Ok(self.router.borrow_mut().finalize()?)
    }

    /// Uses `key` on TCP connections with the processes at `peers` (say, those of
    /// another job this one connects to) instead of the job's key: our connections to
    /// them present it, and a connection presenting it may claim only their addresses
    /// (DATA-4). Peers without a TCP address are skipped. Takes effect for connections
    /// set up afterwards.
    pub fn add_peer_key(&self, key: DataKey, peers: &[PeerAddrs]) -> Result<KeyId, CommError> {
        Ok(self.keys.add_for(key, peers.iter().filter_map(|p| p.tcp)))
    }
}

/// A [`Transport`] being opened by [`Transport::open_in_background`].
pub struct OpeningTransport(std::thread::JoinHandle<Result<Devices, CommError>>);

impl OpeningTransport {
    /// Waits for the devices and returns the transport.
    pub fn finish(self) -> Result<Transport, CommError> {
        let devices = self
            .0
            .join()
            .map_err(|_| CommError::Malformed("transport thread panicked"))??;
        Ok(Transport::from_devices(devices))
    }
}

/// The address this process' TCP endpoint listens on: `DYNRES_NODE_ADDR` (an IP
/// address, set by the runtime to the address of the node the process runs on), or
/// `127.0.0.1` when it is unset or empty.
pub fn node_addr() -> Result<IpAddr, CommError> {
    parse_node_addr(std::env::var(crate::env::NODE_ADDR).ok().as_deref())
}

fn parse_node_addr(v: Option<&str>) -> Result<IpAddr, CommError> {
    match v.map(str::trim) {
        None | Some("") => Ok(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        Some(v) => v.parse().map_err(|_| CommError::NodeAddr {
            var: crate::env::NODE_ADDR,
            value: v.to_string(),
        }),
    }
}

/// The TCP device's keys from `DYNRES_DATA_KEY` (DATA-8). A process the runtime started
/// (it has `DYNRES_SECRET`) must have the key: without it, it would accept connections
/// from anyone. Outside a job (tests, tools) no key means an open ring (DATA-5).
fn data_keys(key: Option<&str>, in_job: bool) -> Result<TcpKeys, CommError> {
    let var = crate::env::DATA_KEY;
    match key {
        Some(hex) => DataKey::from_hex(hex)
            .map(TcpKeys::with_default)
            .map_err(|e| CommError::DataKey {
                var,
                reason: e.to_string(),
            }),
        None if in_job => Err(CommError::DataKey {
            var,
            reason: format!(
                "not set, but {} is: a process of a job needs the job's data-plane key \
                 (is the runtime older than this program?)",
                crate::env::SECRET
            ),
        }),
        None => Ok(TcpKeys::default()),
    }
}

fn open_devices() -> Result<Devices, CommError> {
    let bind = SocketAddr::new(node_addr()?, 0);
    let key = std::env::var(crate::env::DATA_KEY).ok();
    let in_job = std::env::var_os(crate::env::SECRET).is_some();
    let tcp = TcpDevice::new(TcpConfig {
        bind,
        keys: data_keys(key.as_deref(), in_job)?,
        ..TcpConfig::default()
    })?;
    let shm = ShmDevice::new(ShmConfig {
        spins: oversubscribed().then_some(0),
        ..ShmConfig::default()
    })?;
    Ok((shm, tcp))
}

/// Whether this host runs more processes of the job than it has cores (as the runtime
/// counted them at our launch): then a wait blocks at once instead of spinning
/// (`DATA-12`; a job of 256 on 2 cores ran its all-to-all 2 to 3 times slower
/// spinning, issue 29).
fn oversubscribed() -> bool {
    let local = std::env::var(crate::env::LOCAL_SIZE)
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    local.is_some_and(|l| l > cores)
}

/// `shm:HOST_ID:PID:SEGMENT;tcp:IP:PORT` (either part may be missing; `none` if both are).
pub fn encode_addrs(a: &PeerAddrs) -> String {
    let mut parts = Vec::with_capacity(2);
    if let Some(s) = &a.shm {
        parts.push(format!("shm:{}:{}:{}", s.host_id, s.pid, s.segment));
    }
    if let Some(t) = &a.tcp {
        parts.push(format!("tcp:{t}"));
    }
    if parts.is_empty() {
        return String::from("none");
    }
    parts.join(";")
}

/// The addresses [`encode_addrs`] wrote; anything else is [`CommError::BadAddress`].
pub fn decode_addrs(s: &str) -> Result<PeerAddrs, CommError> {
    let bad = || CommError::BadAddress(s.to_string());
    let mut addrs = PeerAddrs::default();
    for part in s.split(';') {
        if let Some(shm) = part.strip_prefix("shm:") {
            let mut it = shm.splitn(3, ':');
            let host_id = it.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
            let pid = it.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
            let segment = it.next().filter(|x| !x.is_empty()).ok_or_else(bad)?;
            let new = ShmAddr {
                host_id,
                pid,
                segment: segment.to_string(),
            };
            if addrs.shm.replace(new).is_some() {
                return Err(bad());
            }
        } else if let Some(tcp) = part.strip_prefix("tcp:") {
            let new: SocketAddr = tcp.parse().map_err(|_| bad())?;
            if addrs.tcp.replace(new).is_some() {
                return Err(bad());
            }
        } else {
            return Err(bad());
        }
    }
    Ok(addrs)
}

/// A communicator over a table of members: the members of one version of a pset
/// ([`Communicator::create`]), a merged inter-communicator, or any explicit table.
pub struct Communicator {
    transport: Transport,
    label: String,
    origin: Option<(PsetName, u64)>,
    ranks: Vec<u32>,
    /// Every member's addresses, this member's included: the dynamic-process calls send
    /// them to a remote group as the endpoint table.
    addrs: Vec<PeerAddrs>,
    me: usize,
    peers: Vec<Option<PeerRef>>,
    context: u32,
    /// This member's place in the collectives' tree (one leader per host).
    tree: tree::Place,
}

/// Its peers go to the transport's parking place (see `Transport::parked`).
impl Drop for Communicator {
    fn drop(&mut self) {
        let mut parked = self.transport.parked.borrow_mut();
        parked.clear();
        parked.extend(self.peers.drain(..).flatten());
    }
}

impl Communicator {
    /// Creates a communicator from `pset`, collectively with all its current members:
    /// one modex over the pset (`MODEX-1..6`) gives every member the same table of
    /// ranks and addresses at the same version, gathered per node by the daemons.
    pub fn create(
        session: &mut Session,
        transport: &Transport,
        pset: &PsetName,
    ) -> Result<Communicator, CommError> {
        let table = session.modex(pset, &transport.address(), CREATE_WAIT)?;
        let version = table.version;
        // The table is ordered by process id, so by rank within the job's namespace.
        let mut members = Vec::with_capacity(table.entries.len());
        for (pid, addr) in table.entries {
            members.push((pid.rank, addr));
        }
        let me = members
            .iter()
            .position(|(r, _)| *r == session.rank())
            .ok_or_else(|| CommError::NotMember(pset.to_string()))?;
        let members = members
            .into_iter()
            .map(|(r, a)| Ok((r, decode_addrs(&a)?)))
            .collect::<Result<Vec<_>, CommError>>()?;
        let context = fnv32(format!("dynres/comm/{pset}/v{version}").as_bytes());
        let mut comm =
            Communicator::from_table(transport, &pset.to_string(), members, me, context)?;
        comm.origin = Some((pset.clone(), version));
        Ok(comm)
    }

    /// A communicator over an explicit table: `members[i]` = (job rank, addresses) of
    /// member `i`, this process is member `me`, messages carry `context`. Every member
    /// must build it from the same table and context. `label` names it in logs and
    /// errors.
    pub fn from_table(
        transport: &Transport,
        label: &str,
        members: Vec<(u32, PeerAddrs)>,
        me: usize,
        context: u32,
    ) -> Result<Communicator, CommError> {
        if me >= members.len() {
            return Err(CommError::NotMember(label.to_string()));
        }
        let size = members.len();
        let mut peers = Vec::with_capacity(size);
        // A member's host: its shared-memory host id (members that share memory share a
        // host); a member without shared memory is a host of its own.
        let mut hosts = Vec::with_capacity(size);
        {
            let mut router = transport.router.borrow_mut();
            for (i, (_, addrs)) in members.iter().enumerate() {
                hosts.push(
                    addrs
                        .shm
                        .as_ref()
                        .map_or(u64::MAX - i as u64, |s| s.host_id),
                );
                peers.push(if i == me {
                    None
                } else {
                    Some(router.add_peer(addrs.clone()))
                });
            }
            // The last dropped communicator's peers that this one does not have close
            // now.
            transport.parked.borrow_mut().clear();
            router.collect();
        }
        let tree = tree::place(&hosts, me);
        let (ranks, addrs) = members.into_iter().unzip();
        Ok(Communicator {
            transport: transport.clone(),
            label: label.to_string(),
            origin: None,
            ranks,
            addrs,
            me,
            peers,
            context,
            tree,
        })
    }

    /// A group of one: this process alone (`MPI_COMM_SELF`), e.g. each end of a join.
    pub fn solo(transport: &Transport) -> Communicator {
        let me = (0, transport.local_addrs());
        // Nobody else matches on this context: the group has no peers.
        let context = fnv32(b"dynres/comm/solo");
        Communicator::from_table(transport, "solo", vec![me], 0, context)
            .expect("member 0 of a table of one")
    }

    /// This process' position.
    pub fn rank(&self) -> usize {
        self.me
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    /// The job ranks of the members, in communicator order.
    pub fn members(&self) -> &[u32] {
        &self.ranks
    }

    /// The pset and version this communicator was made from (`None`: made from a table).
    pub fn pset(&self) -> Option<(&PsetName, u64)> {
        self.origin.as_ref().map(|(p, v)| (p, *v))
    }

    /// The communicator's name in logs and errors.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Every member's addresses, in communicator order (this member's included).
    pub fn peer_addrs(&self) -> &[PeerAddrs] {
        &self.addrs
    }

    /// The context id the members' messages carry.
    pub fn context(&self) -> u32 {
        self.context
    }

    /// The transport the communicator runs on.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The device that carries messages between this process and member `i`: shared
    /// memory on the same host, TCP across hosts (connecting on first use).
    pub fn device(&self, i: usize) -> Result<DeviceKind, CommError> {
        let peer = self.peer(i)?.clone();
        let (kind, _) = self.transport.router.borrow_mut().route(&peer)?;
        Ok(kind)
    }

    fn peer(&self, i: usize) -> Result<&PeerRef, CommError> {
        self.peers
            .get(i)
            .and_then(|p| p.as_ref())
            // Lazily: an error built and dropped on every message costs a call.
            .ok_or_else(|| CommError::Malformed("no such peer"))
    }

    /// Sends `data` to member `dest` with `tag`.
    pub fn send(&self, dest: usize, tag: u64, data: &[u8]) -> Result<(), CommError> {
        let header = MsgHeader {
            source: self.me as u64,
            tag,
            context_id: self.context,
            len: data.len() as u64,
        };
        // Borrowed, not cloned: a clone and drop of the handle are two atomic
        // read-modify-writes per message.
        let peer = self.peer(dest)?;
        self.transport
            .router
            .borrow_mut()
            .send(peer, header, data, OP_TIMEOUT)?;
        Ok(())
    }

    /// Receives a message of at most `max` bytes from member `src` with `tag`.
    pub fn recv(&self, src: usize, tag: u64, max: usize) -> Result<Vec<u8>, CommError> {
        self.recv_timeout(src, tag, max, OP_TIMEOUT)
    }

    /// [`Communicator::recv`] waiting at most `timeout`.
    pub fn recv_timeout(
        &self,
        src: usize,
        tag: u64,
        max: usize,
        timeout: Duration,
    ) -> Result<Vec<u8>, CommError> {
        self.recv_into_timeout(src, tag, vec![0; max], timeout)
    }

    /// Receives a message from member `src` with `tag` into `buf`, whose length is the
    /// most it may hold, and returns `buf` holding exactly the message. A caller that
    /// hands the buffer back (resized) for the next receive allocates nothing per
    /// message, like `MPI_Recv` into a user buffer.
    pub fn recv_into(&self, src: usize, tag: u64, buf: Vec<u8>) -> Result<Vec<u8>, CommError> {
        self.recv_into_timeout(src, tag, buf, OP_TIMEOUT)
    }

    fn recv_into_timeout(
        &self,
        src: usize,
        tag: u64,
        buf: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, CommError> {
        let peer = self.peer(src)?;
        let r = self.transport.router.borrow_mut().recv(
            Some(peer),
            Some(tag),
            self.context,
            buf,
            timeout,
        )?;
        Ok(r.data)
    }

    /// Gathers up the tree (one leader per host, see `tree.rs`): `combine` folds
    /// each child's message into this member's, which then goes to the parent. Returns
    /// what this member holds after its subtree (everything, at member 0).
    fn gather(
        &self,
        tag: u64,
        mine: Vec<u8>,
        max: usize,
        combine: impl Fn(&mut Vec<u8>, Vec<u8>) -> Result<(), CommError>,
    ) -> Result<Vec<u8>, CommError> {
        let mut acc = mine;
        for &c in &self.tree.children {
            let theirs = self.recv(c, tag, max)?;
            combine(&mut acc, theirs)?;
        }
        if let Some(p) = self.tree.parent {
            self.send(p, tag, &acc)?;
        }
        Ok(acc)
    }

    /// Sends member 0's `data` down the tree; every member returns it.
    fn down(&self, tag: u64, data: &[u8], max: usize) -> Result<Vec<u8>, CommError> {
        let data = match self.tree.parent {
            Some(p) => self.recv(p, tag, max)?,
            None => data.to_vec(),
        };
        for &c in &self.tree.children {
            self.send(c, tag, &data)?;
        }
        Ok(data)
    }

    /// Blocks until every member has entered the barrier.
    pub fn barrier(&self) -> Result<(), CommError> {
        self.gather(TAG_BARRIER, Vec::new(), 0, |_, _| Ok(()))?;
        self.down(TAG_BARRIER, &[], 0)?;
        Ok(())
    }

    /// Collective goodbye before the members finalize their transports: every member
    /// reports up the tree and waits for the answer from its parent, so a member leaves
    /// only after its parent, and no member talks to an inbox that is already gone.
    pub fn leave(self) -> Result<(), CommError> {
        self.gather(TAG_LEAVE, Vec::new(), 0, |_, _| Ok(()))?;
        self.down(TAG_LEAVE, &[], 0)?;
        Ok(())
    }

    /// Broadcasts `data` from `root`; every member returns the root's bytes.
    pub fn bcast(&self, root: usize, data: &[u8]) -> Result<Vec<u8>, CommError> {
        if root >= self.size() {
            return Err(CommError::Malformed("no such root"));
        }
        // The tree hangs from member 0: another root hands its bytes to it first.
        let mut data = data.to_vec();
        if root != 0 {
            if self.me == root {
                self.send(0, TAG_BCAST_ROOT, &data)?;
            } else if self.me == 0 {
                data = self.recv(root, TAG_BCAST_ROOT, MAX_COLLECTIVE)?;
            }
        }
        self.down(TAG_BCAST, &data, MAX_COLLECTIVE)
    }

    /// Element-wise sum of `values` over all members; every member gets the result.
    pub fn allreduce_sum(&self, values: &[f64]) -> Result<Vec<f64>, CommError> {
        let sum = self.gather(
            TAG_REDUCE,
            encode_f64s(values),
            values.len() * 8,
            |acc, theirs| {
                let (mut a, b) = (decode_f64s(acc)?, decode_f64s(&theirs)?);
                if a.len() != b.len() {
                    return Err(CommError::Malformed("allreduce length"));
                }
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                *acc = encode_f64s(&a);
                Ok(())
            },
        )?;
        decode_f64s(&self.down(TAG_BCAST, &sum, values.len() * 8)?)
    }
}

pub(crate) fn encode_f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(crate) fn decode_f64s(b: &[u8]) -> Result<Vec<f64>, CommError> {
    if b.len() % 8 != 0 {
        return Err(CommError::Malformed("f64 array"));
    }
    Ok(b.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

/// A hashed intra-communicator context: never 0 (left to raw transport users) and never
/// with [`DPM_CONTEXT_BIT`] set (those belong to inter-communicators).
pub(crate) fn fnv32(bytes: &[u8]) -> u32 {
    let h = bytes.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    });
    (h & !DPM_CONTEXT_BIT).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DATA-8: a process of a job (it has `DYNRES_SECRET`) needs `DYNRES_DATA_KEY`; a
    /// malformed key is an error that does not repeat the value; outside a job no key
    /// means an open ring.
    #[test]
    fn the_data_key_comes_from_the_environment() {
        let e = data_keys(None, true).unwrap_err().to_string();
        assert!(
            e.contains("DYNRES_DATA_KEY") && e.contains("not set"),
            "{e}"
        );
        let e = data_keys(Some("secret-ish-but-not-hex"), true)
            .unwrap_err()
            .to_string();
        assert!(!e.contains("secret-ish"), "the value is echoed: {e}");
        let key = DataKey::new([7; 32]);
        assert!(!data_keys(Some(&key.to_hex()), true).unwrap().is_open());
        assert!(data_keys(None, false).unwrap().is_open());
    }

    /// DATA-4: two transports of different jobs (different job keys) talk over TCP
    /// once each has registered a shared key for the other's addresses, and not
    /// before.
    #[test]
    fn a_peer_key_lets_two_jobs_talk() {
        use std::sync::{Arc, Barrier, mpsc};
        let t = Duration::from_secs(10);
        let shared = DataKey::new([3; 32]);
        let open = |job: u8| {
            let tcp = TcpDevice::new(TcpConfig {
                keys: TcpKeys::with_default(DataKey::new([job; 32])),
                ..TcpConfig::default()
            })
            .unwrap();
            Transport::from_devices((ShmDevice::new(ShmConfig::default()).unwrap(), tcp))
        };
        let header = MsgHeader {
            source: 0,
            tag: 5,
            context_id: 1,
            len: 0,
        };
        let (to_b, from_a) = mpsc::channel();
        let (to_a, from_b) = mpsc::channel();
        let registered = Arc::new(Barrier::new(2));
        let (key_b, reg_b) = (shared.clone(), registered.clone());
        let b = std::thread::spawn(move || {
            let tb = open(2);
            to_a.send(tb.local_addrs().tcp).unwrap();
            let a = PeerAddrs {
                tcp: from_a.recv().unwrap(),
                ..PeerAddrs::default()
            };
            // Progress (and refuse A's first connection) for a while.
            let r =
                tb.router()
                    .borrow_mut()
                    .recv(None, Some(5), 1, vec![0; 8], Duration::from_secs(1));
            assert!(r.is_err(), "heard another job");
            tb.add_peer_key(key_b, &[a]).unwrap();
            reg_b.wait();
            let r = tb
                .router()
                .borrow_mut()
                .recv(None, Some(5), 1, vec![0; 8], t);
            r.unwrap().data
        });
        let ta = open(1);
        to_b.send(ta.local_addrs().tcp).unwrap();
        let b_addr = PeerAddrs {
            tcp: from_b.recv().unwrap(),
            ..PeerAddrs::default()
        };
        // Different job keys: B refuses the connection.
        let p = ta.router().borrow_mut().add_peer(b_addr.clone());
        let refused = ta.router().borrow_mut().send(&p, header, b"no", t);
        assert!(refused.is_err(), "talked across jobs without a shared key");
        drop(p);
        ta.add_peer_key(shared, std::slice::from_ref(&b_addr))
            .unwrap();
        registered.wait();
        let p = ta.router().borrow_mut().add_peer(b_addr);
        ta.router().borrow_mut().send(&p, header, b"hi", t).unwrap();
        assert_eq!(b.join().unwrap(), b"hi");
    }

    /// `recv_into` fills the caller's buffer with each message in order and hands the
    /// same allocation back (nothing allocated per message); a message larger than the
    /// buffer is refused, not cut.
    #[test]
    fn recv_into_reuses_the_callers_buffer() {
        let (ta, tb) = (Transport::new().unwrap(), Transport::new().unwrap());
        let table = vec![(0, ta.local_addrs()), (1, tb.local_addrs())];
        let a = Communicator::from_table(&ta, "t", table.clone(), 0, 9).unwrap();
        let b = Communicator::from_table(&tb, "t", table, 1, 9).unwrap();
        let msgs: [&[u8]; 3] = [b"hello", b"hi", b""];
        for m in msgs {
            a.send(1, 3, m).unwrap();
        }
        a.send(1, 3, &[7; 40]).unwrap();
        let mut buf = vec![0u8; 16];
        let at = buf.as_ptr();
        for m in msgs {
            buf = b.recv_into(0, 3, buf).unwrap();
            assert_eq!(buf, m);
            assert_eq!(buf.as_ptr(), at, "a new allocation");
            buf.resize(16, 0);
        }
        assert!(b.recv_into(0, 3, buf).is_err(), "40 B into 16 B");
    }

    #[test]
    fn addresses_round_trip_and_garbage_is_refused() {
        let shm = Some(ShmAddr {
            host_id: 42,
            pid: 7,
            segment: "/dynres-shm-7-0".into(),
        });
        for tcp in [None, Some("10.77.0.2:4100"), Some("[fe80::1]:9")] {
            let a = PeerAddrs {
                shm: shm.clone(),
                tcp: tcp.map(|t| t.parse().unwrap()),
                ..PeerAddrs::default()
            };
            assert_eq!(decode_addrs(&encode_addrs(&a)).unwrap(), a);
        }
        let tcp_only = PeerAddrs {
            tcp: Some("127.0.0.1:80".parse().unwrap()),
            ..PeerAddrs::default()
        };
        assert_eq!(encode_addrs(&tcp_only), "tcp:127.0.0.1:80");
        assert_eq!(decode_addrs("tcp:127.0.0.1:80").unwrap(), tcp_only);
        for bad in [
            "tcp:1.2.3.4",
            "shm:x:1:s",
            "shm:1:1:",
            "none",
            "",
            "shm:1:2:s;shm:1:2:s",
            "tcp:1.2.3.4:5;tcp:1.2.3.4:5",
            "shm:1:2:s;udp:1.2.3.4:5",
        ] {
            assert!(decode_addrs(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn hashed_contexts_stay_out_of_the_dpm_range() {
        for i in 0..2000 {
            let c = fnv32(format!("dynres/comm/app{i}/v{i}").as_bytes());
            assert_eq!(c & DPM_CONTEXT_BIT, 0);
            assert_ne!(c, 0);
        }
    }

    #[test]
    fn node_address_defaults_to_loopback_and_must_be_an_ip() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert_eq!(parse_node_addr(None).unwrap(), lo);
        assert_eq!(parse_node_addr(Some("")).unwrap(), lo);
        assert_eq!(
            parse_node_addr(Some("10.77.0.3")).unwrap(),
            IpAddr::from([10, 77, 0, 3])
        );
        assert_eq!(parse_node_addr(Some("::1")).unwrap().to_string(), "::1");
        for bad in ["node1", "10.77.0.3:22", "10.77.0"] {
            let e = parse_node_addr(Some(bad)).unwrap_err();
            assert!(e.to_string().contains("DYNRES_NODE_ADDR"), "{e}");
        }
    }
}
