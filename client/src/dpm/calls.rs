//! The MPI-2 dynamic-process calls. Each is collective over a local communicator with a
//! root (arguments matter at the root only, as in MPI): the root runs the kernel's root
//! machine through [`super::bootstrap::drive`], every other rank runs a [`Member`] fed by
//! the root's messages on the communicator (tag `TAG_MEMBER`, SPAWN-6).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use dynres_core::process::Namespace;
use dynres_core::spawn::{
    Addr, Bootstrap, GroupHeader, Handshake, HandshakeConfig, InterGroup, Join, Member, MemberMsg,
    MemberOutput, PortName, Role, SpawnConfig, SpawnEnv, SpawnError, SpawnParent,
};
use dynres_core::time::Duration as KDuration;
use tracing::{debug, warn};

use super::bootstrap::{Clock, Failure, Hooks, Root, Sockets, drive};
use super::endpoint::encode_endpoint;
use super::intercomm::{InterComm, TAG_MEMBER};
use super::launch::{ChildLauncher, LaunchedGroup, SpawnCommand};
use super::port::{Port, close_port, open_port};
use crate::comm::{Communicator, Transport, node_addr};
use crate::error::CommError;

/// How much longer than the call's timeout a member waits for its root: the root decides
/// within the timeout and then tells the members.
pub const MEMBER_GRACE: Duration = Duration::from_secs(2);
/// Context ids examined when a group agrees on one (the lowest free at every member).
const CONTEXT_WINDOW: u32 = 256;
/// Room for a member message besides its endpoint table.
const MEMBER_MSG_BASE: usize = 4096;
/// Room per remote endpoint in a member message (length prefix + address).
const MEMBER_MSG_PER_RANK: usize = 4 + 64;

fn ktime(d: Duration) -> KDuration {
    KDuration::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn check_root(comm: &Communicator, root: usize) -> Result<(), CommError> {
    if root >= comm.size() {
        return Err(CommError::InvalidArgument(format!(
            "root {root} is not a rank of {} ({} members)",
            comm.label(),
            comm.size()
        )));
    }
    Ok(())
}

/// Collective: the lowest context id free at every member, made live at each (SPAWN-5).
fn agree_context(comm: &Communicator) -> Result<u32, CommError> {
    let ids = comm.transport().context_ids().clone();
    let first = ids.borrow().range().start;
    let busy: Vec<f64> = (0..CONTEXT_WINDOW)
        .map(|i| f64::from(u8::from(ids.borrow().is_live(first + i))))
        .collect();
    let busy = comm.allreduce_sum(&busy)?;
    let i = busy
        .iter()
        .position(|b| *b == 0.0)
        .ok_or(SpawnError::ContextIdsExhausted)?;
    let id = first + i as u32;
    ids.borrow_mut().reserve(id)?;
    Ok(id)
}

/// Collective: the local triple (group id from the root, or given) and endpoint table.
fn local_group(
    comm: &Communicator,
    root: usize,
    group_id: Option<u64>,
) -> Result<(GroupHeader, Vec<Addr>), CommError> {
    let group_id = match group_id {
        Some(g) => g,
        None => {
            // Drawn at the root only (the others' draws would be wasted): random, see
            // `random::group_id`.
            let mine = if comm.rank() == root {
                super::random::group_id()?
            } else {
                0
            }
            .to_be_bytes();
            let got = comm.bcast(root, &mine)?;
            let got: [u8; 8] = got
                .try_into()
                .map_err(|_| CommError::Malformed("group id"))?;
            u64::from_be_bytes(got)
        }
    };
    let endpoints = comm
        .peer_addrs()
        .iter()
        .map(encode_endpoint)
        .collect::<Result<Vec<_>, _>>()?;
    let context_id = agree_context(comm)?;
    let size = u32::try_from(comm.size()).map_err(|_| CommError::Malformed("group size"))?;
    Ok((
        GroupHeader {
            group_id,
            size,
            context_id,
        },
        endpoints,
    ))
}

/// Delivers the root's member messages over the local communicator.
struct MemberHooks<'a> {
    comm: &'a Communicator,
}

impl Hooks for MemberHooks<'_> {
    fn to_member(&mut self, member: u32, msg: &MemberMsg) -> Result<(), CommError> {
        self.comm.send(member as usize, TAG_MEMBER, &msg.encode())
    }
}

/// A non-root rank: waits for the root's messages and assembles the inter-group.
fn member_wait(
    comm: &Communicator,
    root: usize,
    role: Role,
    local: GroupHeader,
    endpoints: Vec<Addr>,
    timeout: Duration,
) -> Result<InterGroup, CommError> {
    let clock = Clock::new();
    let mut m = Member::new(role, comm.rank() as u32, local, endpoints);
    let deadline = Instant::now() + timeout + MEMBER_GRACE;
    let mut max = MEMBER_MSG_BASE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let bytes = comm.recv_timeout(root, TAG_MEMBER, max, left)?;
        let msg = match MemberMsg::decode(&bytes) {
            Ok(msg) => msg,
            Err(e) => {
                warn!(error = %e, "member: malformed message from the root dropped");
                continue;
            }
        };
        let room = match &msg {
            MemberMsg::RemoteGroup { remote, .. } => {
                Some(MEMBER_MSG_BASE + MEMBER_MSG_PER_RANK * remote.size as usize)
            }
            _ => None,
        };
        if let Err(e) = m.handle(clock.now(), msg) {
            warn!(error = %e, "member: message from the root rejected");
            continue;
        }
        max = room.unwrap_or(max);
        if let Some(o) = m.poll_output() {
            return match o {
                MemberOutput::Ready(ig) => Ok(ig),
                MemberOutput::Failed(e) => Err(e.into()),
            };
        }
    }
}

/// The shape of every call: the root runs `at_root`, the others wait as members; then
/// everybody builds the inter-communicator, or gives its context id back.
/// `group_id`: the local group's id when it is given (a spawn's children), else one of
/// its own.
fn collective(
    comm: &Communicator,
    root: usize,
    role: Role,
    group_id: Option<u64>,
    timeout: Duration,
    at_root: impl FnOnce(HandshakeConfig, &Communicator) -> Result<InterGroup, Failure>,
) -> Result<InterComm, CommError> {
    check_root(comm, root)?;
    let (local, endpoints) = local_group(comm, root, group_id)?;
    let result = if comm.rank() == root {
        let mut cfg = HandshakeConfig::new(local, endpoints);
        cfg.root = root as u32;
        cfg.timeout = ktime(timeout);
        at_root(cfg, comm).map_err(|f| {
            if !f.members_told {
                // Failed before the machine could tell them (SPAWN-8 for the driver).
                let error = match &f.error {
                    CommError::Spawn(e) => e.clone(),
                    other => SpawnError::Reported {
                        code: 0,
                        text: other.to_string(),
                    },
                };
                let msg = MemberMsg::Failed { session: 0, error }.encode();
                for r in (0..comm.size()).filter(|r| *r != root) {
                    if let Err(e) = comm.send(r, TAG_MEMBER, &msg) {
                        warn!(error = %e, member = r, "member not told of the failure");
                    }
                }
            }
            f.error
        })
    } else {
        member_wait(comm, root, role, local, endpoints, timeout)
    };
    match result {
        Ok(ig) => InterComm::new(comm, ig),
        Err(e) => {
            let _ = comm
                .transport()
                .context_ids()
                .borrow_mut()
                .release(local.context_id);
            Err(e)
        }
    }
}

fn before(error: impl Into<CommError>) -> Failure {
    Failure {
        error: error.into(),
        members_told: false,
    }
}

/// An ephemeral bootstrap datagram socket for an initiator root.
fn initiator_socket() -> Result<UdpSocket, CommError> {
    let ip = node_addr()?;
    let udp = UdpSocket::bind(SocketAddr::new(ip, 0))
        .map_err(|e| CommError::io(format!("bind a UDP socket on {ip}"), e))?;
    udp.set_nonblocking(true)
        .map_err(|e| CommError::io("make a UDP socket non-blocking", e))?;
    Ok(udp)
}

/// Runs an initiator root (connect, spawned child root) to `port`.
fn run_initiator(
    port: PortName,
    cfg: HandshakeConfig,
    comm: &Communicator,
) -> Result<InterGroup, Failure> {
    let udp = initiator_socket().map_err(before)?;
    let clock = Clock::new();
    let hs = Handshake::connect(clock.now(), port, cfg).map_err(before)?;
    let io = Sockets {
        udp: &udp,
        listener: None,
        join: None,
    };
    drive(
        &mut Root::Handshake(Box::new(hs)),
        io,
        &mut MemberHooks { comm },
        clock,
    )
}

/// `MPI_Comm_accept`: collective over `comm`; the root accepts one connection on `port`
/// (which only the root passes: `Some` there, ignored elsewhere) within `timeout`.
pub fn accept(
    comm: &Communicator,
    root: usize,
    port: Option<&Port>,
    timeout: Duration,
) -> Result<InterComm, CommError> {
    collective(
        comm,
        root,
        Role::Acceptor,
        None,
        timeout,
        |mut cfg, comm| {
            let port = port.ok_or_else(|| {
                before(CommError::InvalidArgument(
                    "accept's root needs the port".into(),
                ))
            })?;
            // SPAWN-21: late Hellos of the port's earlier connections are not new ones.
            cfg.served = port.served();
            let clock = Clock::new();
            let hs =
                Handshake::accept(clock.now(), port.port_name().clone(), cfg).map_err(before)?;
            let io = Sockets::of_port(port, None);
            let mut root = Root::Handshake(Box::new(hs));
            let r = drive(&mut root, io, &mut MemberHooks { comm }, clock);
            if let Root::Handshake(hs) = &root {
                port.record_served(hs.served());
            }
            r
        },
    )
}

/// `MPI_Comm_connect`: collective over `comm`; the root connects to `port_name` (only
/// the root's matters) within `timeout`. Nothing but the name is shared with the
/// acceptor, which may be another job.
pub fn connect(
    comm: &Communicator,
    root: usize,
    port_name: &str,
    timeout: Duration,
) -> Result<InterComm, CommError> {
    collective(comm, root, Role::Initiator, None, timeout, |cfg, comm| {
        let port = PortName::parse(port_name).map_err(before)?;
        run_initiator(port, cfg, comm)
    })
}

/// `MPI_Comm_join`: `fd` is a connected stream socket to another process calling
/// `join`; both swap a port over it and connect (SPAWN-14). Each side is a group of one.
/// The socket is consumed and closed when the call returns.
pub fn join(transport: &Transport, fd: OwnedFd, timeout: Duration) -> Result<InterComm, CommError> {
    let comm = Communicator::solo(transport);
    collective(&comm, 0, Role::Acceptor, None, timeout, |cfg, _| {
        let port = open_port(Bootstrap::DEFAULT_HYBRID).map_err(before)?;
        let clock = Clock::new();
        let j = Join::new(clock.now(), port.port_name().clone(), cfg).map_err(before)?;
        let io = Sockets::of_port(&port, Some(std::fs::File::from(fd)));
        let r = drive(&mut Root::Join(Box::new(j)), io, &mut NoMembers, clock);
        if let Err(e) = close_port(port) {
            debug!(error = %e, "join: closing its port");
        }
        r
    })
    .inspect(|ic| debug!(role = ?ic.intergroup().role, "join: connected"))
}

/// A group of one has nobody to tell.
struct NoMembers;

impl Hooks for NoMembers {
    fn to_member(&mut self, member: u32, _: &MemberMsg) -> Result<(), CommError> {
        Err(CommError::InvalidArgument(format!(
            "a group of one has no member {member}"
        )))
    }
}

/// A spawn's root: members, and the launcher with what it started.
struct SpawnHooks<'a> {
    members: MemberHooks<'a>,
    launcher: &'a mut dyn ChildLauncher,
    cmds: &'a [SpawnCommand],
    launched: Option<LaunchedGroup>,
}

impl Hooks for SpawnHooks<'_> {
    fn to_member(&mut self, member: u32, msg: &MemberMsg) -> Result<(), CommError> {
        self.members.to_member(member, msg)
    }

    fn launch(&mut self, count: u32, env: &[(String, String)]) -> Result<(), String> {
        debug!(count, "spawn: launching");
        let g = self.launcher.launch(self.cmds, env)?;
        self.launched = Some(g);
        Ok(())
    }

    fn kill(&mut self) {
        // SPAWN-8: the machine asks once; nothing to kill if the launch itself failed.
        if let Some(g) = self.launched.as_ref() {
            self.launcher.kill(g);
        }
    }

    fn lost(&mut self) -> Option<String> {
        let g = self.launched.as_ref()?;
        self.launcher.lost(g)
    }

    fn watching(&self) -> bool {
        self.launched.is_some()
    }
}

/// `MPI_Comm_spawn` / `MPI_Comm_spawn_multiple`: collective over `comm`; the root
/// launches the processes of `cmds` through `launcher` (root's arguments only; other
/// ranks may pass [`super::NoLauncher`] and no commands) with the root's private port in
/// their environment, and returns the inter-communicator to them once their root
/// connected back (SPAWN-3). On failure within `timeout` the children are killed once.
pub fn spawn(
    comm: &Communicator,
    root: usize,
    launcher: &mut dyn ChildLauncher,
    cmds: &[SpawnCommand],
    timeout: Duration,
) -> Result<InterComm, CommError> {
    collective(comm, root, Role::Acceptor, None, timeout, |cfg, comm| {
        let total = cmds.iter().try_fold(0u32, |n, c| n.checked_add(c.count));
        let maxprocs = match total {
            Some(n) if n > 0 => n,
            _ => {
                return Err(before(CommError::InvalidArgument(
                    "a spawn needs 1..=u32::MAX processes".into(),
                )));
            }
        };
        let port = open_port(Bootstrap::DEFAULT_HYBRID).map_err(before)?;
        let child_group_id = super::random::group_id().map_err(before)?;
        // SPAWN-22: the spawn's own key, handed to the children in their environment
        // (never on a command line: argv is world-readable).
        let key = super::random::key().map_err(before)?;
        let clock = Clock::new();
        let parent = SpawnParent::new(
            clock.now(),
            SpawnConfig {
                handshake: cfg,
                port: port.port_name().clone(),
                maxprocs,
                child_namespace: Namespace::new(format!("spawn-{child_group_id:x}")),
                child_group_id,
                key,
            },
        )
        .map_err(before)?;
        let io = Sockets::of_port(&port, None);
        let mut hooks = SpawnHooks {
            members: MemberHooks { comm },
            launcher,
            cmds,
            launched: None,
        };
        let r = drive(&mut Root::Parent(Box::new(parent)), io, &mut hooks, clock);
        if let Err(e) = close_port(port) {
            debug!(error = %e, "spawn: closing its port");
        }
        r
    })
}

/// `MPI_Comm_get_parent` with the spawn environment given: collective over `comm`, the
/// spawned children's own group (its size must be the spawn's). `env` `None`: not
/// spawned, `Ok(None)`. Rank 0 connects to the parent's port, the others wait for it.
pub fn get_parent_with(
    comm: &Communicator,
    env: Option<SpawnEnv>,
    timeout: Duration,
) -> Result<Option<InterComm>, CommError> {
    let Some(env) = env else { return Ok(None) };
    if env.size as usize != comm.size() {
        return Err(CommError::InvalidArgument(format!(
            "spawned as a group of {}, but {} has {} members",
            env.size,
            comm.label(),
            comm.size()
        )));
    }
    let port = env.parent_port;
    collective(
        comm,
        0,
        Role::Initiator,
        Some(env.group_id),
        timeout,
        |cfg, comm| run_initiator(port, cfg, comm),
    )
    .map(Some)
}

/// `MPI_Comm_get_parent`: [`get_parent_with`] the spawn environment of this process
/// (`DYNRES_PARENT_PORT`, `DYNRES_SPAWN_KEY`, `DYNRES_SPAWN_GROUP`, `DYNRES_SPAWN_SIZE`).
pub fn get_parent(comm: &Communicator, timeout: Duration) -> Result<Option<InterComm>, CommError> {
    let vars: Vec<(String, String)> = std::env::vars().collect();
    let env = SpawnEnv::from_env(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    get_parent_with(comm, env, timeout)
}

/// The collective set-up of a call, for tests of the context-id agreement.
#[cfg(test)]
pub(crate) fn local_group_for_test(
    comm: &Communicator,
) -> Result<(GroupHeader, Vec<Addr>), CommError> {
    local_group(comm, 0, None)
}
