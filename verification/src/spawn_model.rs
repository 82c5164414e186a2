//! Runs `dynres-core`'s own spawn / accept / connect machines as stateright actors.
//!
//! Every root is the shipped [`Handshake`] (`accept` or `connect`) or [`SpawnParent`];
//! every non-root rank is the shipped [`Member`]. An actor's `on_msg` / `on_timeout`
//! feeds the machine with `handle`, then drains `poll_output` into stateright sends and
//! re-arms one timer per machine from `poll_timeout` (`spec/spawn.md` §4–5). Nothing of
//! the protocol is decided here. What *is* written here is the driver and the
//! environment of `spec/spawn.md` §5:
//!
//! - one actor is one job's process holding the job's [`ContextIds`] and one or more
//!   root machines ("slots"); it allocates each root's context id before the machine
//!   starts and gives it back when the machine reports `Failed` (the handle is dropped);
//! - the group's non-root ranks are [`Member`]s in the same actor: `ToMember` is fed to
//!   them at once (the group's channel is reliable and ordered; delivering at once is one
//!   of its interleavings);
//! - addresses are `[actor, slot, 0]` (datagram) and `[actor, slot, 1]` (stream), so a
//!   `SendDatagram { to }` is routed to the actor and slot named by `to`; streams are
//!   stateright messages on an ordered network, and `CloseStream` becomes the peer's
//!   `StreamClosed` after everything written before it;
//! - the operating system: `Launch` starts the child job's actor (it reads its
//!   environment with [`SpawnEnv::from_env`] and connects to the parent's port), `Kill`
//!   kills it (a kill that overtakes the launch cancels it);
//! - time: each machine's deadline is a nondeterministic timer that, when it fires,
//!   advances the process clock to that deadline and feeds `Input::Timeout`.
//!
//! For the datagram properties each root copies the log of messages its handshake's own
//! datagram layer delivered (`Handshake::delivered_datagrams`, kept in verification
//! builds only), and the sender's segments are recorded as sent, so a property can
//! compare. Until issue 13 a shadow `Reliable` fed with the same datagrams stood in for
//! the handshake's layer: a bug in how the handshake drives its layer was invisible.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;

use dynres_core::Machine as _;
use dynres_core::bugs::Bugs;
use dynres_core::spawn::datagram::{DgramFrame, Segment};
use dynres_core::spawn::{
    AbortReason, Addr, BootKey, Bootstrap, ContextIds, DatagramConfig, GroupHeader, Handshake,
    HandshakeConfig, HsMsg, Input, InterGroup, Join, JoinInput, JoinPort, Member, Output,
    ParentInput, Phase, PortName, Role, SpawnConfig, SpawnEnv, SpawnError, SpawnParent,
};
use dynres_core::{Duration, Instant, Namespace};
use stateright::actor::{Actor, Id, Out, model_timeout};

/// Index of a root machine inside its actor.
pub type Slot = u8;

/// The datagram address of `slot` in actor `actor`.
pub fn dgram_addr(actor: usize, slot: Slot) -> Addr {
    Addr(vec![actor as u8, slot, 0])
}

/// The stream address of `slot` in actor `actor`.
pub fn stream_addr(actor: usize, slot: Slot) -> Addr {
    Addr(vec![actor as u8, slot, 1])
}

/// The port a root of `actor` / `slot` listens on (`tag` = slot; its key, the driver's
/// random draw, fixed per actor and slot).
pub fn port_of(actor: usize, slot: Slot, boot: Bootstrap) -> PortName {
    PortName {
        boot,
        dgram: dgram_addr(actor, slot),
        stream: stream_addr(actor, slot),
        tag: u32::from(slot),
        key: BootKey([0x80 | (actor as u8) << 3 | slot; 32]),
    }
}

/// The key of the spawn of actor `actor`'s slot `slot` (SPAWN-22: not its port's).
pub fn spawn_key(actor: usize, slot: Slot) -> BootKey {
    BootKey([0x40 | (actor as u8) << 3 | slot; 32])
}

/// The key a stranger guesses: none of the model's.
pub const GUESSED_KEY: BootKey = BootKey([0x11; 32]);

/// Endpoint table of a group: `len`-byte addresses, long enough that tables of two ranks
/// need two datagram segments at the model's MTU. `actor` is part of every address, so
/// two jobs' groups with equal ids and sizes still have different tables and a table
/// names the group it came from (the "no root mixes two peers" property reads it).
pub fn endpoints(group_id: u64, size: u32, len: usize, actor: usize) -> Vec<Addr> {
    (0..size)
        .map(|r| {
            let mut a = vec![group_id as u8, r as u8, actor as u8];
            a.resize(len.max(3), 0xe0);
            Addr(a)
        })
        .collect()
}

/// Faults of the environment a configuration turns on (none by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// The link of this actor's roots corrupts at most one datagram segment each root
    /// sends, any one: a timer of the root, armed while its handshake runs, makes the
    /// next segment arrive corrupted instead of intact (an even-numbered message's with
    /// its last payload byte flipped, an odd-numbered one's cut short by a byte).
    pub corrupt: Option<usize>,
    /// The launcher may report that a spawn's launch failed (`ParentInput::LaunchFailed`), at
    /// any point before the spawn is decided: before the children's Hello, or after it
    /// (one child of several failed to start). The `Launch` may still have started
    /// children (a partial launch), which the parent's `Kill` must end.
    pub launch_may_fail: bool,
    /// The link of this actor's roots delivers the Hello each root sends twice: the link
    /// holds a copy and sends it again at any later point (a timer of the root), also
    /// after the connection the Hello opened is decided: a retransmission or a duplicate
    /// of the fabric still on its way (`spec/spawn.md` SPAWN-21). On FIFO links this is
    /// the one reordering, which keeps the model small.
    pub duplicate_hello: Option<usize>,
}

/// The corrupted twin of segment `bytes` of message `msg_seq` (see [`Faults::corrupt`]).
pub fn corrupted(bytes: &[u8], msg_seq: u32) -> Vec<u8> {
    let mut c = bytes.to_vec();
    if msg_seq % 2 == 0 {
        // The last payload byte sits just before the 16-byte tag and the 4-byte CRC.
        let at = dynres_core::spawn::TAG_LEN + 5;
        if let Some(b) = c.len().checked_sub(at).and_then(|i| c.get_mut(i)) {
            *b ^= 0x01;
        }
    } else {
        c.pop();
    }
    c
}

/// What one root machine of an actor is.
#[derive(Clone, Debug)]
pub enum RootSpec {
    /// `Handshake::accept` on this slot's port.
    Accept {
        /// Local group id.
        group_id: u64,
        /// Local group size (rank 0 is the root).
        size: u32,
    },
    /// `SpawnParent` on this slot's port, launching the child job `child`.
    Spawn {
        /// Local (parent) group id.
        group_id: u64,
        /// Local group size.
        size: u32,
        /// Children to launch.
        maxprocs: u32,
        /// The children's actor.
        child: usize,
        /// The children's group id.
        child_group_id: u64,
    },
    /// `Handshake::connect` to the port of (actor, slot), given as its text form.
    Connect {
        /// Local group id.
        group_id: u64,
        /// Local group size.
        size: u32,
        /// The acceptor's actor and slot.
        to: (usize, Slot),
    },
    /// A spawned child root: starts at `Launch`, reads its environment, connects.
    Child,
    /// `Join` (a group of one) on this slot's port with the join at `partner`, over a
    /// byte stream between the two.
    Join {
        /// Local group id.
        group_id: u64,
        /// The other end's actor and slot.
        partner: (usize, Slot),
    },
    /// A second `Handshake::accept` of the group of slot `after` (an `Accept`) on that
    /// slot's port, posted by the application once the first accept is `Done`
    /// (`MPI_Comm_accept` called again). From then on the port's datagrams go to this
    /// accept: the launcher's driver returns with the first accept's outcome and keeps
    /// no machine for it (`spec/spawn.md` §10). Posting it tells actor `client` the port
    /// name (out of band, as a name service would), whose `ConnectPosted` root connects.
    AcceptAgain {
        /// The slot of the first accept, whose port and group this one takes.
        after: Slot,
        /// The actor told that the accept is posted.
        client: usize,
    },
    /// `Handshake::connect` to the port a [`SpawnMsg::Posted`] names, started when it
    /// arrives: the client of an `AcceptAgain` root.
    ConnectPosted {
        /// Local group id.
        group_id: u64,
        /// Local group size.
        size: u32,
        /// The `AcceptAgain` root (actor, slot) that tells it.
        to: (usize, Slot),
    },
    /// A stranger (SPAWN-22): a process of another user that knows the port's address,
    /// the children's group id and size (the old ids were predictable) and the child
    /// root's address, but not the key. At its start it sends the root at `target` a
    /// Hello of group `group_id` of `size` from its own address and then an `Abort` of
    /// that group's session from `spoof`'s address, both sealed with [`GUESSED_KEY`]; it
    /// runs no machine.
    Stranger {
        /// The root it attacks (its port's datagram address).
        target: (usize, Slot),
        /// The group its Hello claims to be.
        group_id: u64,
        /// That group's size.
        size: u32,
        /// The root whose address its `Abort` claims.
        spoof: (usize, Slot),
    },
}

/// Parameters every root of a model shares.
#[derive(Clone, Copy, Debug)]
pub struct HsParams {
    /// The bootstrap of every port.
    pub boot: Bootstrap,
    /// Handshake deadline.
    pub timeout: Duration,
    /// Datagram layer (MTU, rto, retries).
    pub datagram: DatagramConfig,
    /// Bytes per endpoint address.
    pub endpoint_len: usize,
}

/// One actor: one job's process.
#[derive(Clone, Debug)]
pub struct SpawnNode {
    /// Label in traces.
    pub label: &'static str,
    /// Its root machines, one per slot.
    pub roots: Vec<RootSpec>,
    /// Shared parameters.
    pub params: HsParams,
    /// Planted bugs (none for the clean gate).
    pub bugs: Bugs,
    /// Faults of the environment.
    pub faults: Faults,
}

/// Messages between actors.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SpawnMsg {
    /// One datagram on the bootstrap datagram endpoints.
    Datagram {
        /// Destination address (names actor and slot).
        to: Addr,
        /// Source address.
        from: Addr,
        /// The datagram.
        bytes: Vec<u8>,
        /// `Some((message, index))`: a corrupted copy of that segment (see
        /// [`Faults::corrupt`]); the driver feeds it like any datagram.
        corrupted: Option<(u32, u16)>,
        /// The slot whose machine sent it (the model's bookkeeping: two accepts of one
        /// port send from the same address; the machines never see it).
        sender: Slot,
        /// A stranger forged it (the model's bookkeeping, like `corrupted`).
        forged: bool,
    },
    /// Bytes on the bootstrap stream between two slots.
    Stream {
        /// Receiving slot.
        to: Slot,
        /// Sending slot.
        from: Slot,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The sender closed the bootstrap stream (EOF after everything written before).
    StreamClosed {
        /// Receiving slot.
        to: Slot,
        /// Sending slot (which of the port's streams closed).
        from: Slot,
    },
    /// The OS starts the child job with this environment.
    Launch {
        /// Variables added by the spawn.
        env: Vec<(String, String)>,
    },
    /// The OS kills the child job.
    Kill,
    /// Bytes on a join's byte stream (`MPI_Comm_join(fd)`), to the join in slot `to`.
    JoinBytes {
        /// Receiving slot.
        to: Slot,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// An accept was posted on this port (its name as text, SPAWN-1): the receiving
    /// actor's `ConnectPosted` roots connect to it.
    Posted {
        /// The port name.
        port: String,
    },
}

fn describe_hs(bytes: &[u8]) -> String {
    match HsMsg::decode(bytes) {
        Ok(m) => describe_msg(&m),
        Err(e) => format!("undecodable ({e})"),
    }
}

fn describe_msg(m: &HsMsg) -> String {
    match m {
        HsMsg::Hello { session, header } => format!("Hello s{session} {header:?}"),
        HsMsg::HelloAck {
            session, header, ..
        } => format!("HelloAck s{session} {header:?}"),
        HsMsg::Endpoints { session, endpoints } => {
            format!("Endpoints s{session} ({} ranks)", endpoints.len())
        }
        HsMsg::EndpointsAck { session } => format!("EndpointsAck s{session}"),
        HsMsg::Abort { session, reason } => format!("Abort s{session} {reason:?}"),
    }
}

// Readable traces: datagrams and stream bytes are shown decoded.
impl fmt::Debug for SpawnMsg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpawnMsg::Datagram {
                to,
                bytes,
                corrupted: Some((seq, index)),
                ..
            } => write!(
                f,
                "Datagram(to slot {}: corrupted copy of msg{seq} segment {}, {} bytes)",
                to.0.get(1).unwrap_or(&0),
                index + 1,
                bytes.len()
            ),
            SpawnMsg::Datagram {
                to,
                bytes,
                forged: true,
                ..
            } => {
                let what = match DgramFrame::decode(bytes) {
                    Ok(DgramFrame::Segment(s)) => describe_hs(&s.payload),
                    _ => "undecodable".into(),
                };
                write!(
                    f,
                    "Datagram(to slot {}: forged {what})",
                    to.0.get(1).unwrap_or(&0)
                )
            }
            SpawnMsg::Datagram { to, bytes, .. } => {
                let what = match DgramFrame::decode(bytes) {
                    Ok(DgramFrame::Segment(s)) if s.count == 1 => {
                        format!("msg{} {}", s.msg_seq, describe_hs(&s.payload))
                    }
                    Ok(DgramFrame::Segment(s)) => {
                        format!("msg{} segment {}/{}", s.msg_seq, s.index + 1, s.count)
                    }
                    Ok(DgramFrame::Ack { msg_seq, index, .. }) => {
                        format!("ack msg{msg_seq} segment {}", index + 1)
                    }
                    Err(e) => format!("corrupt datagram ({e})"),
                };
                write!(f, "Datagram(to slot {}: {what})", to.0.get(1).unwrap_or(&0))
            }
            SpawnMsg::Stream { to, bytes, .. } => {
                let what = match HsMsg::decode_sealed(bytes) {
                    Ok(m) => describe_msg(&m),
                    Err(e) => format!("undecodable ({e})"),
                };
                write!(f, "Stream(to slot {to}: {what})")
            }
            SpawnMsg::StreamClosed { to, .. } => write!(f, "StreamClosed(to slot {to})"),
            SpawnMsg::Launch { .. } => write!(f, "Launch"),
            SpawnMsg::Posted { .. } => write!(f, "Posted"),
            SpawnMsg::Kill => write!(f, "Kill"),
            SpawnMsg::JoinBytes { to, bytes } => {
                let what = match JoinPort::decode(bytes) {
                    Ok(p) => p.port,
                    Err(e) => format!("undecodable ({e})"),
                };
                write!(f, "JoinBytes(to slot {to}: {what})")
            }
        }
    }
}

/// A timer of a root machine: its deadline, or a fault of its environment.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotTimer(pub Slot, pub TimerKind);

/// What a [`SlotTimer`] stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TimerKind {
    /// The machine's `poll_timeout` (its one timer, `spec/spawn.md` §4).
    Deadline,
    /// The launcher reports that the spawn's launch failed ([`Faults::launch_may_fail`]).
    LaunchFails,
    /// The root's link corrupts the next segment the root sends ([`Faults::corrupt`]).
    Corrupt,
    /// The root's link sends its held copy of the Hello ([`Faults::duplicate_hello`]).
    Duplicate,
}

/// A root machine: a handshake, a spawn parent around one, or a join that starts one
/// once the roles are decided.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Machine {
    /// `Handshake::accept` / `Handshake::connect`.
    Hs(Box<Handshake>),
    /// `SpawnParent`.
    Spawn(Box<SpawnParent>),
    /// `Join`.
    Join(Box<Join>),
}

/// What the model feeds a root: an event of the bootstrap, which every root takes, or
/// one that only a spawn's parent or a join takes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RootInput {
    /// An event of the bootstrap.
    Boot(Input),
    /// Bytes of a join's byte stream (`JoinInput::JoinStream`).
    JoinStream(Vec<u8>),
    /// The launcher could not start the children (`ParentInput::LaunchFailed`).
    LaunchFailed(String),
}

impl From<Input> for RootInput {
    fn from(input: Input) -> Self {
        RootInput::Boot(input)
    }
}

// The gate drives every root machine through the kernel's one machine shape.
impl dynres_core::Machine for Machine {
    type Input = RootInput;
    type Output = Output;
    type Error = SpawnError;

    fn handle(&mut self, now: Instant, input: RootInput) -> Result<(), SpawnError> {
        match (self, input) {
            (Machine::Hs(h), RootInput::Boot(i)) => h.handle(now, i),
            (Machine::Spawn(p), RootInput::Boot(i)) => p.handle(now, i.into()),
            (Machine::Spawn(p), RootInput::LaunchFailed(reason)) => {
                p.handle(now, ParentInput::LaunchFailed { reason })
            }
            (Machine::Join(j), RootInput::Boot(i)) => j.handle(now, i.into()),
            (Machine::Join(j), RootInput::JoinStream(bytes)) => {
                j.handle(now, JoinInput::JoinStream { bytes })
            }
            // A launch failure may be drawn for any root, and a root that does not take
            // it is left as it was (the machines once refused it themselves, SPAWN-10).
            (_, RootInput::JoinStream(_) | RootInput::LaunchFailed(_)) => {
                Err(SpawnError::Unexpected {
                    what: "input not taken by this root",
                })
            }
        }
    }

    fn poll_output(&mut self) -> Option<Output> {
        match self {
            Machine::Hs(h) => h.poll_output(),
            Machine::Spawn(p) => p.poll_output(),
            Machine::Join(j) => j.poll_output(),
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Machine::Hs(h) => h.poll_timeout(),
            Machine::Spawn(p) => p.poll_timeout(),
            Machine::Join(j) => j.poll_timeout(),
        }
    }

    fn fingerprint(&mut self) -> u64 {
        match self {
            Machine::Hs(h) => h.fingerprint(),
            Machine::Spawn(p) => p.fingerprint(),
            Machine::Join(j) => j.fingerprint(),
        }
    }
}

impl Machine {
    fn plant(&mut self, bugs: Bugs) {
        match self {
            Machine::Hs(h) => h.plant(bugs),
            Machine::Spawn(p) => p.plant(bugs),
            Machine::Join(j) => j.plant(bugs),
        }
    }

    /// The handshake inside (a join's only once its roles are decided).
    pub fn hs(&self) -> Option<&Handshake> {
        match self {
            Machine::Hs(h) => Some(h),
            Machine::Spawn(p) => Some(p.handshake()),
            Machine::Join(j) => j.handshake(),
        }
    }

    /// Where the machine is: a join that has not decided its roles is in
    /// `JoinExchange`, or `Failed` if it failed there.
    pub fn phase(&self) -> Phase {
        match (self.hs(), self) {
            (Some(h), _) => h.phase(),
            (None, Machine::Join(j)) if j.error().is_some() => Phase::Failed,
            (None, _) => Phase::JoinExchange,
        }
    }

    /// The inter-group, once `Done`.
    pub fn intergroup(&self) -> Option<&InterGroup> {
        self.hs().and_then(Handshake::intergroup)
    }

    /// The remote group's triple, once known.
    pub fn remote(&self) -> Option<GroupHeader> {
        self.hs().and_then(Handshake::remote)
    }

    /// What the handshake's datagram layer delivered (see the module doc).
    pub fn delivered_datagrams(&self) -> &[Vec<u8>] {
        self.hs().map_or(&[], Handshake::delivered_datagrams)
    }

    /// Forged messages the machine dropped (SPAWN-22).
    pub fn forged(&self) -> u32 {
        match self {
            Machine::Hs(h) => h.forged(),
            Machine::Spawn(p) => p.forged(),
            Machine::Join(j) => j.forged(),
        }
    }

    /// Whether `self` and `other` differ at most in their count of forged messages.
    fn eq_except_forged(&self, other: &Machine) -> bool {
        match (self, other) {
            (Machine::Hs(a), Machine::Hs(b)) => a.eq_except_forged(b),
            (Machine::Spawn(a), Machine::Spawn(b)) => a.eq_except_forged(b),
            (Machine::Join(a), Machine::Join(b)) => a.eq_except_forged(b),
            _ => false,
        }
    }
}

/// One root's state: its machine, its members and what the driver observed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RootState {
    /// The machine (`None`: a child not launched yet, or killed).
    pub machine: Option<Machine>,
    /// Local group header (set when the machine starts).
    pub local: Option<GroupHeader>,
    /// Non-root ranks `1..size`.
    pub members: Vec<Member>,
    /// The inter-group the application holds: set by `Ready`, dropped by `Failed`.
    pub handle: Option<InterGroup>,
    /// `Launch` outputs seen.
    pub launches: u8,
    /// `Kill` outputs seen.
    pub kills: u8,
    /// Child only: the OS killed this job.
    pub killed: bool,
    /// The bootstrap stream's other end (actor, slot), once known.
    pub stream_peer: Option<(Id, Slot)>,
    /// This side closed the bootstrap stream.
    pub stream_closed: bool,
    /// Messages the handshake's datagram layer delivered, in order (see the module doc).
    pub delivered: Vec<Vec<u8>>,
    /// Segments this root put on the wire: (message, index, count, payload).
    pub sent: BTreeSet<(u32, u16, u16, Vec<u8>)>,
    /// The machine accepted an input carrying the peer's `Endpoints` (SPAWN-16).
    pub heard_endpoints: bool,
    /// The root this one talks to: an initiator's acceptor from the start, an acceptor's
    /// initiator once a Hello opened its session (the driver knows the socket each input
    /// came from).
    pub peer: Option<(usize, Slot)>,
    /// Segments (message, index) whose corrupted copy this root's machine rejected with
    /// a typed error, unchanged (only with [`Faults::corrupt`]).
    pub corrupt_rejected: BTreeSet<(u32, u16)>,
    /// A corrupted copy was accepted, or rejected with the machine changed or with an
    /// error that is not the parser's (SPAWN-10, SPAWN-12): what must never be.
    pub corrupt_accepted: bool,
    /// Segments (message, index) this root sent more than once (only with
    /// [`Faults::corrupt`]).
    pub retransmitted: BTreeSet<(u32, u16)>,
    /// The link corrupts the next segment this root sends ([`Faults::corrupt`]).
    pub corrupt_next: bool,
    /// The launcher reported this spawn's launch as failed (and the machine took it).
    pub launch_failed: bool,
    /// Kinds of the messages this root wrote on the bootstrap stream (hybrid bootstrap
    /// only, SPAWN-9).
    pub stream_kinds: BTreeSet<&'static str>,
    /// Initiator: the accept root whose HelloAck its machine took (the driver knows
    /// which machine sent each input; `peer` follows it).
    pub served_by: Option<(usize, Slot)>,
    /// `AcceptAgain`: its machine refused a Hello from the initiator the earlier accept
    /// of its port served (SPAWN-21).
    pub stale_refused: bool,
    /// The copy of the Hello its link sends again later, with the destination actor
    /// ([`Faults::duplicate_hello`]).
    pub held_hello: Option<(usize, SpawnMsg)>,
    /// Forged datagrams its machine refused as forged, counted, changing nothing else
    /// (SPAWN-22).
    pub forged_dropped: u8,
    /// A forged datagram was taken, or refused otherwise than as forged, or changed the
    /// machine beyond its count (SPAWN-22): what must never be.
    pub forged_accepted: bool,
}

impl RootState {
    fn new() -> Self {
        RootState {
            machine: None,
            local: None,
            members: Vec::new(),
            handle: None,
            launches: 0,
            kills: 0,
            killed: false,
            stream_peer: None,
            stream_closed: false,
            delivered: Vec::new(),
            sent: BTreeSet::new(),
            heard_endpoints: false,
            peer: None,
            corrupt_rejected: BTreeSet::new(),
            corrupt_accepted: false,
            retransmitted: BTreeSet::new(),
            corrupt_next: false,
            launch_failed: false,
            stream_kinds: BTreeSet::new(),
            served_by: None,
            stale_refused: false,
            held_hello: None,
            forged_dropped: 0,
            forged_accepted: false,
        }
    }

    /// The message `msg_seq` as this root sent it, if all its segments went out.
    pub fn sent_message(&self, msg_seq: u32) -> Option<Vec<u8>> {
        let segs: Vec<&(u32, u16, u16, Vec<u8>)> =
            self.sent.iter().filter(|s| s.0 == msg_seq).collect();
        let count = segs.first()?.2;
        if segs.len() != usize::from(count) {
            return None;
        }
        Some(segs.iter().flat_map(|s| s.3.iter().copied()).collect())
    }

    /// Sequence numbers of the messages this root sent.
    pub fn sent_seqs(&self) -> BTreeSet<u32> {
        self.sent.iter().map(|s| s.0).collect()
    }
}

/// One job's process: clock, context-id allocator, root machines.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JobState {
    /// The process clock, advanced only by deadline timers.
    pub now: Instant,
    /// The job's context ids (SPAWN-5).
    pub ctx: ContextIds,
    /// One per slot.
    pub roots: Vec<RootState>,
}

/// First context id for inter-groups (below: the job's own communicators).
pub const FIRST_CONTEXT_ID: u32 = 1;
/// Context ids `FIRST_CONTEXT_ID..CONTEXT_ID_LIMIT` are available.
pub const CONTEXT_ID_LIMIT: u32 = 16;

impl SpawnNode {
    fn hs_config(&self, me: usize, local: GroupHeader) -> HandshakeConfig {
        let mut cfg = HandshakeConfig::new(
            local,
            endpoints(local.group_id, local.size, self.params.endpoint_len, me),
        );
        cfg.timeout = self.params.timeout;
        cfg.datagram = self.params.datagram;
        cfg
    }

    fn start_members(root: &mut RootState, role: Role, local: GroupHeader, len: usize, me: usize) {
        let eps = endpoints(local.group_id, local.size, len, me);
        root.members = (1..local.size)
            .map(|r| Member::new(role, r, local, eps.clone()))
            .collect();
        root.local = Some(local);
    }

    /// Starts the machine of `slot` (not for children, which wait for `Launch`).
    fn start(&self, me: usize, job: &mut JobState, slot: Slot) {
        let now = job.now;
        let boot = self.params.boot;
        let len = self.params.endpoint_len;
        let spec = &self.roots[usize::from(slot)];
        let (group_id, size) = match spec {
            RootSpec::Accept { group_id, size }
            | RootSpec::Spawn { group_id, size, .. }
            | RootSpec::Connect { group_id, size, .. } => (*group_id, *size),
            RootSpec::Join { group_id, .. } => (*group_id, 1),
            RootSpec::AcceptAgain { after, .. } => match &self.roots[usize::from(*after)] {
                RootSpec::Accept { group_id, size } => (*group_id, *size),
                _ => return,
            },
            // Started by `start_posted` once told the port; a stranger runs no machine.
            RootSpec::Child | RootSpec::ConnectPosted { .. } | RootSpec::Stranger { .. } => {
                return;
            }
        };
        let Ok(context_id) = job.ctx.allocate() else {
            tracing::warn!("model: context ids exhausted");
            return;
        };
        let local = GroupHeader {
            group_id,
            size,
            context_id,
        };
        let mut cfg = self.hs_config(me, local);
        if let RootSpec::AcceptAgain { after, .. } = spec {
            // The driver hands the port's earlier connection to its next accept
            // (SPAWN-21), as the launcher's does.
            let first = job.roots[usize::from(*after)].machine.as_ref();
            cfg.served = first
                .and_then(|m| m.hs())
                .and_then(Handshake::served)
                .into_iter()
                .collect();
        }
        let machine = match spec {
            RootSpec::Accept { .. } => {
                Handshake::accept(now, port_of(me, slot, boot), cfg).map(|h| Machine::Hs(h.into()))
            }
            RootSpec::Connect { to, .. } => {
                // The client learns the port as text (SPAWN-1).
                let text = port_of(to.0, to.1, boot).to_string();
                PortName::parse(&text)
                    .and_then(|p| Handshake::connect(now, p, cfg))
                    .map(|h| Machine::Hs(h.into()))
            }
            RootSpec::Spawn {
                maxprocs,
                child_group_id,
                ..
            } => SpawnParent::new(
                now,
                SpawnConfig {
                    handshake: cfg,
                    port: port_of(me, slot, boot),
                    maxprocs: *maxprocs,
                    child_namespace: Namespace::new(format!("child{child_group_id}")),
                    child_group_id: *child_group_id,
                    key: spawn_key(me, slot),
                },
            )
            .map(|p| Machine::Spawn(p.into())),
            RootSpec::Join { .. } => {
                Join::new(now, port_of(me, slot, boot), cfg).map(|j| Machine::Join(j.into()))
            }
            RootSpec::AcceptAgain { after, .. } => {
                Handshake::accept(now, port_of(me, *after, boot), cfg)
                    .map(|h| Machine::Hs(h.into()))
            }
            RootSpec::Child | RootSpec::ConnectPosted { .. } | RootSpec::Stranger { .. } => return,
        };
        let mut machine = machine.expect("model configurations are valid");
        machine.plant(self.bugs);
        // A join's group is its root alone: no member needs the role it decides later.
        let role = machine.hs().map_or(Role::Initiator, Handshake::role);
        let root = &mut job.roots[usize::from(slot)];
        Self::start_members(root, role, local, len, me);
        match spec {
            RootSpec::Connect { to, .. } => root.peer = Some(*to),
            RootSpec::Join { partner, .. } => root.peer = Some(*partner),
            _ => {}
        }
        root.machine = Some(machine);
    }

    /// The client of an `AcceptAgain`: told the port, allocate a context id, connect.
    fn start_posted(&self, me: usize, job: &mut JobState, slot: Slot, port: &str) {
        let RootSpec::ConnectPosted { group_id, size, to } = &self.roots[usize::from(slot)] else {
            return;
        };
        let Ok(context_id) = job.ctx.allocate() else {
            return;
        };
        let local = GroupHeader {
            group_id: *group_id,
            size: *size,
            context_id,
        };
        let cfg = self.hs_config(me, local);
        let Ok(mut h) = PortName::parse(port).and_then(|p| Handshake::connect(job.now, p, cfg))
        else {
            return;
        };
        h.plant(self.bugs);
        let root = &mut job.roots[usize::from(slot)];
        Self::start_members(root, Role::Initiator, local, self.params.endpoint_len, me);
        root.peer = Some(*to);
        root.machine = Some(Machine::Hs(h.into()));
    }

    /// The slot whose port `slot` listens on (an `AcceptAgain` takes its first accept's).
    fn port_slot(&self, slot: Slot) -> Slot {
        match self.roots.get(usize::from(slot)) {
            Some(RootSpec::AcceptAgain { after, .. }) => *after,
            _ => slot,
        }
    }

    /// The slot whose machine takes what arrives on `slot`'s port: a posted
    /// `AcceptAgain` once it runs, else `slot`.
    fn serving(&self, job: &JobState, slot: Slot) -> Slot {
        (0..self.roots.len() as Slot)
            .find(|&s| {
                matches!(self.roots[usize::from(s)], RootSpec::AcceptAgain { after, .. } if after == slot)
                    && job.roots[usize::from(s)].machine.is_some()
            })
            .unwrap_or(slot)
    }

    /// Posts the `AcceptAgain`s that wait for `slot`'s accept, once it is `Done` (after a
    /// failed first accept the scenario is the one-accept configurations' again, and the
    /// model stays small).
    fn post_again(&self, me: usize, job: &mut JobState, slot: Slot, o: &mut Out<Self>) {
        let done = job.roots[usize::from(slot)]
            .machine
            .as_ref()
            .is_some_and(|m| m.phase() == Phase::Done);
        if !done {
            return;
        }
        for again in 0..self.roots.len() as Slot {
            let RootSpec::AcceptAgain { after, client } = self.roots[usize::from(again)] else {
                continue;
            };
            if after != slot || job.roots[usize::from(again)].machine.is_some() {
                continue;
            }
            self.start(me, job, again);
            let port = port_of(me, after, self.params.boot).to_string();
            o.send(Id::from(client), SpawnMsg::Posted { port });
            self.drain(me, job, again, o);
        }
    }

    /// A launched child: read the environment, allocate a context id, connect.
    fn start_child(&self, me: usize, job: &mut JobState, slot: Slot, env: &[(String, String)]) {
        let vars = env.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let Ok(Some(env)) = SpawnEnv::from_env(vars) else {
            tracing::warn!("model: child launched without a usable spawn environment");
            return;
        };
        let Ok(context_id) = job.ctx.allocate() else {
            return;
        };
        let local = GroupHeader {
            group_id: env.group_id,
            size: env.size,
            context_id,
        };
        let cfg = self.hs_config(me, local);
        // The parent's port names its actor and slot (see `dgram_addr`).
        let parent = match env.parent_port.dgram.0.as_slice() {
            [actor, slot, ..] => Some((usize::from(*actor), *slot)),
            _ => None,
        };
        let Ok(mut h) = Handshake::connect(job.now, env.parent_port, cfg) else {
            return;
        };
        h.plant(self.bugs);
        let root = &mut job.roots[usize::from(slot)];
        Self::start_members(root, Role::Initiator, local, self.params.endpoint_len, me);
        root.peer = parent;
        root.machine = Some(Machine::Hs(h.into()));
    }

    /// Carries out everything the machine of `slot` asks for, then re-arms its timer.
    fn drain(&self, me: usize, job: &mut JobState, slot: Slot, o: &mut Out<Self>) {
        let now = job.now;
        let root = &mut job.roots[usize::from(slot)];
        let Some(machine) = root.machine.as_mut() else {
            o.cancel_timer(SlotTimer(slot, TimerKind::Deadline));
            o.cancel_timer(SlotTimer(slot, TimerKind::LaunchFails));
            o.cancel_timer(SlotTimer(slot, TimerKind::Corrupt));
            return;
        };
        while let Some(out) = machine.poll_output() {
            match out {
                Output::SendDatagram { to, bytes } => {
                    let dst = Id::from(usize::from(to.0[0]));
                    let from = dgram_addr(me, self.port_slot(slot));
                    let mut corrupt = None;
                    let mut hold = false;
                    if let Ok(DgramFrame::Segment(s)) = DgramFrame::decode(&bytes) {
                        let id = (s.msg_seq, s.index);
                        let hello = matches!(HsMsg::decode(&s.payload), Ok(HsMsg::Hello { .. }));
                        let fresh = root.sent.insert((s.msg_seq, s.index, s.count, s.payload));
                        hold = self.faults.duplicate_hello == Some(me) && hello && fresh;
                        if self.faults.corrupt.is_some() && !fresh {
                            root.retransmitted.insert(id);
                        }
                        if std::mem::take(&mut root.corrupt_next) {
                            corrupt = Some(id);
                        }
                    }
                    let bytes = match corrupt {
                        Some((seq, _)) => corrupted(&bytes, seq),
                        None => bytes,
                    };
                    let msg = SpawnMsg::Datagram {
                        to,
                        from,
                        bytes,
                        corrupted: corrupt,
                        sender: slot,
                        forged: false,
                    };
                    if hold {
                        root.held_hello = Some((usize::from(dst), msg.clone()));
                        o.set_timer(SlotTimer(slot, TimerKind::Duplicate), model_timeout());
                    }
                    o.send(dst, msg);
                }
                Output::OpenStream { to } => {
                    root.stream_peer = Some((Id::from(usize::from(to.0[0])), to.0[1]));
                }
                Output::SendStream { bytes } => {
                    if matches!(self.params.boot, Bootstrap::Hybrid { .. }) {
                        let kind = HsMsg::decode_sealed(&bytes).map_or("undecodable", |m| m.name());
                        root.stream_kinds.insert(kind);
                    }
                    match root.stream_peer {
                        Some((peer, to)) if !root.stream_closed => o.send(
                            peer,
                            SpawnMsg::Stream {
                                to,
                                from: slot,
                                bytes,
                            },
                        ),
                        _ => tracing::warn!("model: stream bytes without an open stream dropped"),
                    }
                }
                Output::CloseStream => {
                    if let (Some((peer, to)), false) = (root.stream_peer, root.stream_closed) {
                        o.send(peer, SpawnMsg::StreamClosed { to, from: slot });
                    }
                    root.stream_closed = true;
                }
                Output::SendJoin { bytes } => {
                    if let RootSpec::Join { partner, .. } = &self.roots[usize::from(slot)] {
                        let to = partner.1;
                        o.send(Id::from(partner.0), SpawnMsg::JoinBytes { to, bytes });
                    }
                }
                Output::Launch { env, .. } => {
                    root.launches += 1;
                    if let RootSpec::Spawn { child, .. } = &self.roots[usize::from(slot)] {
                        o.send(Id::from(*child), SpawnMsg::Launch { env });
                    }
                    if self.faults.launch_may_fail {
                        o.set_timer(SlotTimer(slot, TimerKind::LaunchFails), model_timeout());
                    }
                }
                Output::Kill { .. } => {
                    root.kills += 1;
                    if let RootSpec::Spawn { child, .. } = &self.roots[usize::from(slot)] {
                        o.send(Id::from(*child), SpawnMsg::Kill);
                    }
                }
                Output::ToMember { member, msg } => {
                    // Members are ranks 1..size (the root is rank 0).
                    let ix = (member as usize).checked_sub(1);
                    if let Some(m) = ix.and_then(|i| root.members.get_mut(i)) {
                        let _ = m.handle(now, msg);
                        // What members tell their application is read back through
                        // `Member::intergroup` / `Member::error`.
                        while m.poll_output().is_some() {}
                    }
                }
                Output::Ready(ig) => root.handle = Some(ig),
                Output::Failed(_) => {
                    // The application drops the attempt's handle, and with it the
                    // context id the driver allocated for it (SPAWN-5).
                    root.handle = None;
                    if let Some(local) = root.local {
                        let _ = job.ctx.release(local.context_id);
                    }
                }
            }
        }
        match machine.poll_timeout() {
            Some(_) => o.set_timer(SlotTimer(slot, TimerKind::Deadline), model_timeout()),
            None => o.cancel_timer(SlotTimer(slot, TimerKind::Deadline)),
        }
        if matches!(machine.phase(), Phase::Done | Phase::Failed) {
            // A decided handshake sends no more segments worth corrupting, and the
            // launcher's verdict no longer matters to a decided spawn.
            o.cancel_timer(SlotTimer(slot, TimerKind::Corrupt));
            o.cancel_timer(SlotTimer(slot, TimerKind::LaunchFails));
        }
        self.post_again(me, job, slot, o);
    }

    /// Feeds a datagram to `slot` and mirrors what its layer delivers.
    #[allow(clippy::too_many_arguments)]
    fn on_datagram(
        &self,
        job: &mut JobState,
        slot: Slot,
        from: Addr,
        bytes: Vec<u8>,
        corrupt: Option<(u32, u16)>,
        sender: (usize, Slot),
        forged: bool,
    ) {
        let now = job.now;
        // The initiator the earlier accept of this port served (an `AcceptAgain` only).
        let served_earlier = match self.roots.get(usize::from(slot)) {
            Some(RootSpec::AcceptAgain { after, .. }) => job.roots[usize::from(*after)].peer,
            _ => None,
        };
        let root = &mut job.roots[usize::from(slot)];
        let Some(machine) = root.machine.as_mut() else {
            return;
        };
        let listening = machine.phase() == Phase::Listening;
        let awaiting = machine.phase() == Phase::AwaitHelloAck;
        let source = match from.0.as_slice() {
            [actor, slot, ..] => Some((usize::from(*actor), *slot)),
            _ => None,
        };
        let hello = match DgramFrame::decode(&bytes) {
            Ok(DgramFrame::Segment(s)) => {
                matches!(HsMsg::decode(&s.payload), Ok(HsMsg::Hello { .. }))
            }
            _ => false,
        };
        let input = RootInput::from(Input::Datagram { from, bytes });
        if forged {
            // SPAWN-22: refused as forged, counted once, nothing else changed.
            let before = machine.clone();
            let r = machine.handle(now, input);
            let dropped = matches!(r, Err(SpawnError::Forged { .. }))
                && machine.forged() == before.forged() + 1
                && machine.eq_except_forged(&before);
            if dropped {
                root.forged_dropped = root.forged_dropped.saturating_add(1);
            } else {
                root.forged_accepted = true;
            }
            if listening && machine.phase() != Phase::Listening {
                root.peer = source;
            }
            self.mirror_delivered(root);
            return;
        }
        if let Some(id) = corrupt {
            // SPAWN-10, SPAWN-12: rejected with a typed error (the parser's, or one
            // before parsing: a failed listener takes no datagram) and nothing changes.
            let before = machine.clone();
            match machine.handle(now, input) {
                Err(_) if *machine == before => {
                    root.corrupt_rejected.insert(id);
                }
                _ => root.corrupt_accepted = true,
            }
            if root.corrupt_accepted {
                self.mirror_delivered(root);
            }
            return;
        }
        if machine.handle(now, input).is_err() {
            // Rejected: the machine is unchanged (SPAWN-10).
            if listening && hello && source.is_some() && source == served_earlier {
                root.stale_refused = true;
            }
            return;
        }
        if listening && machine.phase() != Phase::Listening {
            root.peer = source;
        }
        if awaiting && matches!(machine.phase(), Phase::Endpoints | Phase::Done) {
            root.served_by = Some(sender);
            root.peer = Some(sender);
        }
        self.mirror_delivered(root);
    }

    /// Copies the log of what the handshake's datagram layer delivered.
    fn mirror_delivered(&self, root: &mut RootState) {
        let Some(machine) = root.machine.as_ref() else {
            return;
        };
        let log = machine.delivered_datagrams();
        for m in log.get(root.delivered.len()..).unwrap_or_default() {
            if matches!(HsMsg::decode(m), Ok(HsMsg::Endpoints { .. })) {
                root.heard_endpoints = true;
            }
        }
        root.delivered = log.to_vec();
    }
}

impl SpawnNode {
    /// A stranger's whole part (see [`RootSpec::Stranger`]): two forged datagrams, sent
    /// at its start; the network delivers them at any point of the handshake.
    fn forge(&self, me: usize, slot: Slot, o: &mut Out<Self>) {
        let RootSpec::Stranger {
            target,
            group_id,
            size,
            spoof,
        } = self.roots[usize::from(slot)]
        else {
            return;
        };
        // Message numbers of a child's first messages: the Abort's is fresh, so a machine
        // that took it would deliver it, not re-acknowledge a duplicate.
        let segment = |msg_seq: u32, msg: HsMsg| {
            DgramFrame::Segment(Segment {
                session: group_id,
                msg_seq,
                index: 0,
                count: 1,
                payload: msg.encode(),
            })
            .encode(&GUESSED_KEY, Role::Initiator)
        };
        let hello = HsMsg::Hello {
            session: group_id,
            header: GroupHeader {
                group_id,
                size,
                context_id: 1,
            },
        };
        let abort = HsMsg::Abort {
            session: group_id,
            reason: AbortReason::Cancelled,
        };
        let to = dgram_addr(target.0, target.1);
        for (from, bytes) in [
            (dgram_addr(me, slot), segment(0, hello)),
            (dgram_addr(spoof.0, spoof.1), segment(7, abort)),
        ] {
            o.send(
                Id::from(target.0),
                SpawnMsg::Datagram {
                    to: to.clone(),
                    from,
                    bytes,
                    corrupted: None,
                    sender: slot,
                    forged: true,
                },
            );
        }
    }
}

impl Actor for SpawnNode {
    type Msg = SpawnMsg;
    type Timer = SlotTimer;
    type State = JobState;
    type Storage = ();
    type Random = ();

    fn on_start(&self, id: Id, _storage: &Option<()>, o: &mut Out<Self>) -> JobState {
        let mut ctx = ContextIds::new(FIRST_CONTEXT_ID, CONTEXT_ID_LIMIT);
        ctx.plant(self.bugs);
        let mut job = JobState {
            now: Instant::ZERO,
            ctx,
            roots: self.roots.iter().map(|_| RootState::new()).collect(),
        };
        let me = usize::from(id);
        for slot in 0..self.roots.len() as Slot {
            if self.faults.corrupt == Some(me) {
                o.set_timer(SlotTimer(slot, TimerKind::Corrupt), model_timeout());
            }
            // A second accept is posted once the first is decided (`post_again`).
            if !matches!(self.roots[usize::from(slot)], RootSpec::AcceptAgain { .. }) {
                self.start(me, &mut job, slot);
            }
            self.drain(me, &mut job, slot, o);
            self.forge(me, slot, o);
        }
        job
    }

    fn on_msg(&self, id: Id, state: &mut Cow<JobState>, src: Id, msg: SpawnMsg, o: &mut Out<Self>) {
        let me = usize::from(id);
        let job = state.to_mut();
        match msg {
            SpawnMsg::Datagram {
                to,
                from,
                bytes,
                corrupted,
                sender,
                forged,
            } => {
                let port = to.0[1];
                if usize::from(port) < job.roots.len() {
                    let slot = self.serving(job, port);
                    let sender = (usize::from(src), sender);
                    self.on_datagram(job, slot, from, bytes, corrupted, sender, forged);
                    self.drain(me, job, slot, o);
                }
            }
            SpawnMsg::Posted { port } => {
                for slot in 0..self.roots.len() as Slot {
                    let waiting = matches!(
                        self.roots[usize::from(slot)],
                        RootSpec::ConnectPosted { .. }
                    );
                    // A duplicated notice starts nothing more.
                    if waiting && job.roots[usize::from(slot)].machine.is_none() {
                        self.start_posted(me, job, slot, &port);
                        self.drain(me, job, slot, o);
                    }
                }
            }
            SpawnMsg::Stream { to, from, bytes } => {
                let Some(root) = job.roots.get_mut(usize::from(to)) else {
                    return;
                };
                // The acceptor learns the stream's other end from its first bytes. It
                // takes no second stream while it holds one (spec/spawn.md §10, as the
                // launcher's driver): a second initiator's stream waits in the listen
                // backlog, unread, and that initiator times out.
                if *root.stream_peer.get_or_insert((src, from)) != (src, from) {
                    return;
                }
                if let Some(m) = root.machine.as_mut() {
                    // Each stream message is one sealed frame (one `SendStream`).
                    let endpoints =
                        matches!(HsMsg::decode_sealed(&bytes), Ok(HsMsg::Endpoints { .. }));
                    let listening = m.phase() == Phase::Listening;
                    let awaiting = m.phase() == Phase::AwaitHelloAck;
                    if m.handle(job.now, Input::Stream { bytes }.into()).is_ok() && endpoints {
                        root.heard_endpoints = true;
                    }
                    if listening && m.phase() != Phase::Listening {
                        root.peer = Some((usize::from(src), from));
                    }
                    if awaiting && matches!(m.phase(), Phase::Endpoints | Phase::Done) {
                        root.served_by = Some((usize::from(src), from));
                        root.peer = root.served_by;
                    }
                }
                self.drain(me, job, to, o);
            }
            SpawnMsg::StreamClosed { to, from } => {
                let Some(root) = job.roots.get_mut(usize::from(to)) else {
                    return;
                };
                // The end of a backlogged stream is not this machine's.
                if root.stream_peer != Some((src, from)) {
                    return;
                }
                if let Some(m) = root.machine.as_mut() {
                    let _ = m.handle(job.now, Input::StreamClosed.into());
                }
                self.drain(me, job, to, o);
            }
            SpawnMsg::Launch { env } => {
                for slot in 0..self.roots.len() as Slot {
                    let root = &job.roots[usize::from(slot)];
                    let child = matches!(self.roots[usize::from(slot)], RootSpec::Child);
                    // A duplicate launch (duplicating network) or one after the kill
                    // starts nothing.
                    if child && root.machine.is_none() && !root.killed {
                        self.start_child(me, job, slot, &env);
                        self.drain(me, job, slot, o);
                    }
                }
            }
            SpawnMsg::JoinBytes { to, bytes } => {
                let Some(root) = job.roots.get_mut(usize::from(to)) else {
                    return;
                };
                if let Some(m) = root.machine.as_mut() {
                    let _ = m.handle(job.now, RootInput::JoinStream(bytes));
                }
                self.drain(me, job, to, o);
            }
            SpawnMsg::Kill => {
                for slot in 0..self.roots.len() as Slot {
                    if matches!(self.roots[usize::from(slot)], RootSpec::Child) {
                        let root = &mut job.roots[usize::from(slot)];
                        root.killed = true;
                        root.machine = None;
                        root.members.clear();
                        root.handle = None;
                        o.cancel_timer(SlotTimer(slot, TimerKind::Deadline));
                    }
                }
            }
        }
    }

    fn on_timeout(&self, id: Id, state: &mut Cow<JobState>, timer: &SlotTimer, o: &mut Out<Self>) {
        let me = usize::from(id);
        let job = state.to_mut();
        let slot = timer.0;
        let Some(root) = job.roots.get_mut(usize::from(slot)) else {
            return;
        };
        if timer.1 == TimerKind::Duplicate {
            // The held copy goes out whatever the machine does now.
            if let Some((dst, msg)) = root.held_hello.take() {
                o.send(Id::from(dst), msg);
            }
            return;
        }
        match (timer.1, root.machine.as_mut()) {
            (TimerKind::Deadline, Some(m)) => {
                if let Some(t) = m.poll_timeout() {
                    job.now = job.now.max(t);
                    let _ = m.handle(job.now, Input::Timeout.into());
                }
            }
            (TimerKind::Corrupt, Some(_)) => root.corrupt_next = true,
            (TimerKind::LaunchFails, Some(m))
                if !matches!(m.phase(), Phase::Done | Phase::Failed) =>
            {
                let failed = RootInput::LaunchFailed(
                    "model: the launcher could not start the children".into(),
                );
                root.launch_failed = m.handle(job.now, failed).is_ok();
            }
            _ => {}
        }
        self.drain(me, job, slot, o);
    }
}
