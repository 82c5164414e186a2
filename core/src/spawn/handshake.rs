//! One root's side of a connection: the Hello / HelloAck exchange, the broadcast to the
//! local group, the endpoint tables, over datagram, stream or hybrid bootstrap.

use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use tracing::{debug, warn};

use crate::time::Instant;

use super::auth::BootKey;
use super::datagram::{DgramFrame, Reliable};
use super::group::InterGroup;
use super::msg::{AbortReason, Addr, GroupHeader, HsMsg, MAX_GROUP};
use super::port::{PortName, Transport};
use super::role::Role;
use super::stream::FrameReader;
use super::trace::{self, HandshakeInput};
use super::types::{HandshakeConfig, MemberMsg, Phase, Served};
use super::{Input, Output, SpawnError};
use crate::trace::InstanceTag;

/// One root's handshake state machine (initiator or acceptor).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Handshake {
    cfg: HandshakeConfig,
    role: Role,
    port: PortName,
    phase: Phase,
    session: Option<u64>,
    peer_dgram: Option<Addr>,
    dgram: Option<Reliable>,
    stream_up: bool,
    stream_closed: bool,
    reader: FrameReader,
    backlog: Vec<Vec<u8>>,
    remote: Option<GroupHeader>,
    endpoints_via: Option<Transport>,
    early_endpoints: Option<Vec<Addr>>,
    remote_endpoints: Option<Vec<Addr>>,
    peer_has_ours: bool,
    deadline: Instant,
    result: Option<Result<InterGroup, SpawnError>>,
    out: VecDeque<Output>,
    /// Forged messages dropped (SPAWN-22): state, so a model sees every one.
    forged: u32,
    bugs: crate::bugs::Bugs,
    tag: InstanceTag,
    /// Verification builds only: every message the datagram layer delivered, in order,
    /// so the models check exactly-once delivery on this layer itself (`SPAWN-11`).
    #[cfg(feature = "planted-bugs")]
    delivered: DeliveredLog,
}

/// What a handshake's datagram layer delivered (verification builds only). Not state:
/// all logs compare equal and hash to nothing, so a verification build's fingerprints
/// are a shipped build's and its `replay` accepts launcher traces.
#[cfg(feature = "planted-bugs")]
#[derive(Clone, Debug, Default)]
struct DeliveredLog(Vec<Vec<u8>>);

#[cfg(feature = "planted-bugs")]
impl PartialEq for DeliveredLog {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[cfg(feature = "planted-bugs")]
impl Eq for DeliveredLog {}

#[cfg(feature = "planted-bugs")]
impl core::hash::Hash for DeliveredLog {
    fn hash<H: core::hash::Hasher>(&self, _: &mut H) {}
}

impl Handshake {
    /// `MPI_Comm_accept` at the root (and the parent side of a spawn): listen on `port`,
    /// which the caller opened (see [`super::Ports`]).
    pub fn accept(now: Instant, port: PortName, cfg: HandshakeConfig) -> Result<Self, SpawnError> {
        Self::new(now, Role::Acceptor, port, cfg)
    }

    /// `MPI_Comm_connect` at the root (and a spawned child root, with the port from
    /// [`super::SpawnEnv`]): sends the Hello at once.
    pub fn connect(now: Instant, port: PortName, cfg: HandshakeConfig) -> Result<Self, SpawnError> {
        Self::new(now, Role::Initiator, port, cfg)
    }

    /// Starts a handshake in either role.
    pub fn new(
        now: Instant,
        role: Role,
        port: PortName,
        cfg: HandshakeConfig,
    ) -> Result<Self, SpawnError> {
        let start =
            crate::trace::enabled().then(|| trace::encode_handshake_start(now, role, &port, &cfg));
        let mut hs = Self::start(now, role, port, cfg)?;
        crate::trace::record_start(&mut hs, start);
        Ok(hs)
    }

    /// The machine id of its transition events: local group, root rank, role, instance.
    fn trace_id(&self) -> String {
        format!(
            "g{}.r{}.{}.{}",
            self.cfg.local.group_id,
            self.cfg.root,
            self.role.letter(),
            self.tag.0
        )
    }

    /// A fingerprint of the state without the outputs not yet drained (so it does not
    /// depend on when the driver drains them).
    pub fn fingerprint(&mut self) -> u64 {
        crate::machine::fingerprint_without_queue(self, |m| &mut m.out)
    }

    /// [`Handshake::new`] without transition events, for the machines that wrap a
    /// handshake and record their own.
    pub(super) fn start(
        now: Instant,
        role: Role,
        port: PortName,
        cfg: HandshakeConfig,
    ) -> Result<Self, SpawnError> {
        cfg.validate()?;
        let mut hs = Handshake {
            deadline: now + cfg.timeout,
            phase: match role {
                Role::Acceptor => Phase::Listening,
                Role::Initiator => Phase::AwaitHelloAck,
            },
            cfg,
            role,
            port,
            session: None,
            peer_dgram: None,
            dgram: None,
            stream_up: false,
            stream_closed: false,
            reader: FrameReader::new(),
            backlog: Vec::new(),
            remote: None,
            endpoints_via: None,
            early_endpoints: None,
            remote_endpoints: None,
            peer_has_ours: false,
            result: None,
            out: VecDeque::new(),
            forged: 0,
            bugs: crate::bugs::Bugs::NONE,
            tag: InstanceTag::default(),
            #[cfg(feature = "planted-bugs")]
            delivered: DeliveredLog::default(),
        };
        if role == Role::Initiator {
            // SPAWN-11: the session is the initiator's group id (unique in its job) unless
            // the caller numbers its attempts itself.
            let session = hs.cfg.session.unwrap_or(hs.cfg.local.group_id);
            hs.session = Some(session);
            let via = hs.port.boot.hello_transport();
            match via {
                Transport::Datagram => {
                    hs.dgram = Some(Reliable::new(
                        session,
                        hs.cfg.datagram,
                        hs.port.key,
                        Role::Initiator,
                    ));
                    hs.peer_dgram = Some(hs.port.dgram.clone());
                }
                Transport::Stream => hs.open_stream(),
            }
            let hello = HsMsg::Hello {
                session,
                header: hs.cfg.local,
            };
            hs.send(now, &hello, via)?;
            hs.flush_dgram();
            debug!(session, "handshake: Hello sent");
        }
        Ok(hs)
    }

    /// Feeds one input. `Err` means the input was rejected and nothing changed
    /// (SPAWN-10); the handshake's own outcome is reported through [`Output`]s.
    pub fn handle(&mut self, now: Instant, input: Input) -> Result<(), SpawnError> {
        crate::trace::record(self, now, input, Self::step)
    }

    /// [`Handshake::handle`] without its transition event.
    pub(super) fn step(&mut self, now: Instant, input: Input) -> Result<(), SpawnError> {
        let r = self.dispatch(now, input);
        if let Err(SpawnError::Forged { what }) = &r {
            // SPAWN-22: dropped (nothing else changed, SPAWN-10) and counted.
            self.count_forged(what);
        }
        r
    }

    /// Counts one forged message (SPAWN-22).
    fn count_forged(&mut self, what: &'static str) {
        self.forged = self.forged.saturating_add(1);
        debug!(
            what,
            count = self.forged,
            "handshake: forged message dropped"
        );
    }

    fn dispatch(&mut self, now: Instant, input: Input) -> Result<(), SpawnError> {
        let r = match input {
            Input::Datagram { from, bytes } => self.on_datagram(now, from, &bytes),
            Input::Stream { bytes } => self.on_stream(now, &bytes),
            Input::StreamClosed => self.on_stream_closed(),
            Input::Timeout => {
                self.on_timeout(now);
                Ok(())
            }
        };
        self.flush_dgram();
        r
    }

    /// Plants bugs for the verification crate's corpus (also into the datagram layer,
    /// now and whenever one is created later).
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&mut self, bugs: crate::bugs::Bugs) {
        self.bugs = bugs;
        if let Some(r) = self.dgram.as_mut() {
            r.plant(bugs);
        }
    }

    /// The next thing the driver must do.
    #[must_use = "an output is an action the driver must carry out"]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// When to feed [`Input::Timeout`] next: the overall deadline or the next datagram
    /// retransmission, whichever is first; after `Done` only retransmissions of the last
    /// acknowledgement; `None` once failed.
    #[must_use = "a deadline the driver must arm a timer for"]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let rtx = self.dgram.as_ref().and_then(Reliable::next_deadline);
        match self.phase {
            Phase::Failed => None,
            Phase::Done => rtx,
            _ if self.bugs.has(crate::bugs::Bug::NoHandshakeDeadline) => rtx,
            _ => Some(rtx.map_or(self.deadline, |r| r.min(self.deadline))),
        }
    }

    /// The application gives up (or the runtime could not launch): fails the handshake
    /// and tells the peer root, if known.
    pub fn cancel(&mut self, error: SpawnError) {
        let recorded = crate::trace::enabled()
            .then(|| trace::encode_handshake_input(&HandshakeInput::Cancel(error.clone())));
        // `cancel` takes no time; its event is stamped 0 (replay does not use it).
        let always_ok = crate::trace::record_encoded(self, Instant(0), recorded, |hs| {
            hs.abandon(error);
            Ok(())
        });
        debug_assert!(always_ok.is_ok());
    }

    /// [`Handshake::cancel`] without its transition event.
    pub(super) fn abandon(&mut self, error: SpawnError) {
        self.fail(error, Some(AbortReason::Cancelled));
        self.flush_dgram();
    }

    /// Verification builds only: every message this handshake's datagram layer
    /// delivered, in order (`SPAWN-11`, `SPAWN-12`).
    #[cfg(feature = "planted-bugs")]
    pub fn delivered_datagrams(&self) -> &[Vec<u8>] {
        &self.delivered.0
    }

    /// Its configuration.
    pub fn config(&self) -> &HandshakeConfig {
        &self.cfg
    }

    /// Where the handshake is.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// How many bootstrap messages were dropped as forged (SPAWN-22): a wrong or missing
    /// tag, a Hello of a group a spawn did not launch, a message of another session.
    /// None of them changed anything else; the driver may log the count.
    pub fn forged(&self) -> u32 {
        self.forged
    }

    /// Whether `self` and `other` differ at most in their forged-message count: what a
    /// forged input may change (SPAWN-10, SPAWN-22), for tests and models.
    pub fn eq_except_forged(&self, other: &Handshake) -> bool {
        let mut c = self.clone();
        c.forged = other.forged;
        c == *other
    }

    /// The key this handshake's messages are authenticated with (SPAWN-22).
    fn key(&self) -> &BootKey {
        &self.port.key
    }

    /// The peer's role, whose messages this side opens.
    fn peer_role(&self) -> Role {
        match self.role {
            Role::Acceptor => Role::Initiator,
            Role::Initiator => Role::Acceptor,
        }
    }

    /// SPAWN-22 (and SPAWN-3): a spawn takes a Hello only from the group it launched;
    /// another group's Hello is dropped as forged before it opens anything, so the
    /// children can still connect.
    fn admit_hello(&self, header: &GroupHeader) -> Result<(), SpawnError> {
        match self.cfg.expect_remote {
            Some(expected) if expected != (header.group_id, header.size) => {
                Err(SpawnError::Forged {
                    what: "Hello of a group this spawn did not launch",
                })
            }
            _ => Ok(()),
        }
    }

    /// Which side this root is.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The inter-group once `Done` (on a spawned child root this is `MPI_Comm_get_parent`).
    pub fn intergroup(&self) -> Option<&InterGroup> {
        match &self.result {
            Some(Ok(ig)) => Some(ig),
            _ => None,
        }
    }

    /// The error once `Failed`.
    pub fn error(&self) -> Option<&SpawnError> {
        match &self.result {
            Some(Err(e)) => Some(e),
            _ => None,
        }
    }

    /// The remote group's triple, once known.
    pub fn remote(&self) -> Option<GroupHeader> {
        self.remote
    }

    /// The transport chosen for the endpoint tables, once known (SPAWN-9).
    pub fn endpoints_via(&self) -> Option<Transport> {
        self.endpoints_via
    }

    /// The connection attempt's session id, once known.
    pub fn session(&self) -> Option<u64> {
        self.session
    }

    /// Acceptor on a datagram Hello: the connection it opened, once a Hello opened it,
    /// whatever the outcome (`None` before, for an initiator, and when the Hello came on
    /// a stream, which carries nothing late into another connection). The driver hands
    /// it to the port's later accepts ([`HandshakeConfig::served`], SPAWN-21).
    pub fn served(&self) -> Option<Served> {
        match (self.role, &self.peer_dgram, self.session) {
            (Role::Acceptor, Some(from), Some(session)) => Some(Served {
                from: from.clone(),
                session,
            }),
            _ => None,
        }
    }

    fn open_stream(&mut self) {
        if !self.stream_up && self.role == Role::Initiator {
            self.out.push_back(Output::OpenStream {
                to: self.port.stream.clone(),
            });
            self.stream_up = true;
        }
    }

    fn close_stream(&mut self) {
        if self.stream_up && !self.stream_closed {
            self.stream_closed = true;
            self.out.push_back(Output::CloseStream);
        }
    }

    fn send(&mut self, now: Instant, msg: &HsMsg, via: Transport) -> Result<(), SpawnError> {
        let bytes = msg.encode();
        match via {
            Transport::Datagram => match self.dgram.as_mut() {
                Some(r) => r.send(now, &bytes),
                None => Err(SpawnError::Unexpected {
                    what: "datagram send without a datagram session",
                }),
            },
            Transport::Stream => {
                // SPAWN-22: every stream frame is sealed.
                let bytes = msg.seal(self.key(), self.role);
                if self.stream_up {
                    self.out.push_back(Output::SendStream { bytes });
                } else {
                    // Acceptor in hybrid mode: the initiator opens the stream; answer on
                    // it once its first bytes arrive.
                    self.backlog.push(bytes);
                }
                Ok(())
            }
        }
    }

    fn flush_dgram(&mut self) {
        if let (Some(r), Some(to)) = (self.dgram.as_mut(), self.peer_dgram.as_ref()) {
            while let Some(bytes) = r.poll_send() {
                self.out.push_back(Output::SendDatagram {
                    to: to.clone(),
                    bytes,
                });
            }
        }
    }

    fn on_datagram(&mut self, now: Instant, from: Addr, bytes: &[u8]) -> Result<(), SpawnError> {
        if self.bugs.has(crate::bugs::Bug::NewestHelloWins) {
            self.planted_newest_hello_wins(&from, bytes);
        }
        // SPAWN-12 then SPAWN-22: the checksum, then the tag, before anything else; a
        // forged datagram is refused here (and counted by `step`), whatever the phase.
        let frame = DgramFrame::open_with(bytes, self.key(), self.peer_role(), self.bugs)?;
        // SPAWN-10: work on a copy of the reliability layer and commit only if the
        // datagram and every message it completes are well-formed.
        let mut next = match self.dgram.as_ref() {
            Some(r) => {
                if self.peer_dgram.as_ref() != Some(&from) {
                    // SPAWN-10: the session id is the initiator's group id, unique only
                    // in its job; the address tells two initiators apart.
                    return Err(SpawnError::UnknownPeer);
                }
                if frame.session() != self.session.unwrap_or_default() {
                    // SPAWN-22: an authentic frame of another attempt never reaches the
                    // layer of this one.
                    return Err(SpawnError::Forged {
                        what: "datagram of another session",
                    });
                }
                let mut next = r.clone();
                next.on_frame(frame)?;
                next
            }
            None => {
                if self.phase != Phase::Listening
                    || self.port.boot.hello_transport() != Transport::Datagram
                {
                    return Err(SpawnError::Unexpected {
                        what: "datagram outside a datagram session",
                    });
                }
                // Only a Hello opens a session, and a Hello is always one segment, so the
                // listener keeps no state for strangers.
                let (session, header) = match &frame {
                    DgramFrame::Segment(s) if s.count == 1 => match HsMsg::decode(&s.payload)? {
                        HsMsg::Hello { session, header } if session == s.session => {
                            (session, header)
                        }
                        _ => {
                            return Err(SpawnError::Unexpected {
                                what: "first datagram is not a Hello",
                            });
                        }
                    },
                    _ => {
                        return Err(SpawnError::Unexpected {
                            what: "first datagram is not a one-segment Hello",
                        });
                    }
                };
                // SPAWN-21: a late copy of the Hello of a connection an earlier accept on
                // this port opened (a retransmission, a duplicate) is no new connection;
                // taken, it would pair this accept with an initiator already answered.
                // Address and session: two jobs' groups may share a session.
                let stale = self
                    .cfg
                    .served
                    .iter()
                    .any(|c| c.from == from && c.session == session);
                if stale && !self.bugs.has(crate::bugs::Bug::ForgetServedConnections) {
                    return Err(SpawnError::Unexpected {
                        what: "Hello of a connection the port already served",
                    });
                }
                self.admit_hello(&header)?;
                let mut r = Reliable::new(session, self.cfg.datagram, *self.key(), self.role);
                #[cfg(feature = "planted-bugs")]
                r.plant(self.bugs);
                r.on_frame(frame)?;
                r
            }
        };
        let mut msgs = Vec::new();
        #[cfg(feature = "planted-bugs")]
        let mut payloads = Vec::new();
        while let Some(payload) = next.poll_recv() {
            msgs.push(HsMsg::decode(&payload)?);
            #[cfg(feature = "planted-bugs")]
            payloads.push(payload);
        }
        // Committed with the layer: only once the whole input decoded (SPAWN-10).
        #[cfg(feature = "planted-bugs")]
        self.delivered.0.extend(payloads);
        self.dgram = Some(next);
        self.peer_dgram = Some(from);
        for m in msgs {
            self.on_msg(now, m);
        }
        Ok(())
    }

    /// Planted bug `NewestHelloWins`: an acceptor swapping tables takes a Hello from
    /// another address as its initiator restarting, forgets the session and listens
    /// again. (Planted-bug code lives in `planted_*` functions, which the mutation run
    /// leaves out: it never runs in a tested build.)
    fn planted_newest_hello_wins(&mut self, from: &Addr, bytes: &[u8]) {
        if self.role == Role::Acceptor
            && self.phase == Phase::Endpoints
            && self.peer_dgram.as_ref() != Some(from)
            && Self::planted_is_hello(bytes)
        {
            self.phase = Phase::Listening;
            self.session = None;
            self.peer_dgram = None;
            self.dgram = None;
            self.remote = None;
            self.endpoints_via = None;
            self.remote_endpoints = None;
            self.peer_has_ours = false;
        }
    }

    /// Whether `bytes` is a datagram carrying a whole Hello (planted bug only).
    fn planted_is_hello(bytes: &[u8]) -> bool {
        match DgramFrame::decode(bytes) {
            Ok(DgramFrame::Segment(s)) if s.count == 1 => {
                matches!(HsMsg::decode(&s.payload), Ok(HsMsg::Hello { .. }))
            }
            _ => false,
        }
    }

    fn on_stream(&mut self, now: Instant, bytes: &[u8]) -> Result<(), SpawnError> {
        if self.port.boot == super::Bootstrap::Datagram {
            return Err(SpawnError::Unexpected {
                what: "stream bytes in a datagram-only handshake",
            });
        }
        let mut reader = self.reader.clone();
        let frames = reader.push(bytes)?;
        // SPAWN-22: every frame must carry the peer's tag; one that does not rejects the
        // whole input (counted by `step`), the reader unchanged.
        let (key, peer) = (self.key(), self.peer_role());
        let msgs = frames
            .into_iter()
            .map(|(h, body)| HsMsg::open_with(h.msg_type, &body, key, peer, self.bugs))
            .collect::<Result<Vec<_>, _>>()?;
        if self.phase == Phase::Listening {
            if let Some(HsMsg::Hello { header, .. }) = msgs.first() {
                self.admit_hello(header)?;
            }
        }
        self.reader = reader;
        // (A closed stream was up: `close_stream` needs `stream_up`, which never drops.)
        if !self.stream_up {
            self.stream_up = true;
            for bytes in core::mem::take(&mut self.backlog) {
                self.out.push_back(Output::SendStream { bytes });
            }
        }
        for m in msgs {
            self.on_msg(now, m);
        }
        Ok(())
    }

    fn on_stream_closed(&mut self) -> Result<(), SpawnError> {
        match self.phase {
            Phase::Done | Phase::Failed => Ok(()),
            _ if self.stream_up => {
                self.fail(SpawnError::StreamClosed, None);
                Ok(())
            }
            _ => Err(SpawnError::Unexpected {
                what: "StreamClosed without a bootstrap stream",
            }),
        }
    }

    fn on_timeout(&mut self, now: Instant) {
        if self.phase == Phase::Failed {
            return;
        }
        if let Some(r) = self.dgram.as_mut() {
            if let Err(e) = r.on_timeout(now) {
                if self.phase == Phase::Done {
                    // Our last ack went unacknowledged; the peer completes on its own
                    // copy or reports its failure with an Abort (SPAWN-8).
                    r.stop();
                } else {
                    self.fail(e, Some(AbortReason::Timeout));
                    return;
                }
            }
        }
        if self.phase != Phase::Done && now >= self.deadline {
            // SPAWN-8
            self.fail(
                SpawnError::Timeout { phase: self.phase },
                Some(AbortReason::Timeout),
            );
        }
    }

    fn on_msg(&mut self, now: Instant, msg: HsMsg) {
        if let Some(s) = self.session {
            if msg.session() != s {
                // SPAWN-22: authentic bytes, but not of this attempt: dropped, counted.
                self.count_forged("message of another session");
                return;
            }
        }
        debug!(msg = msg.name(), phase = ?self.phase, "handshake: message");
        match (self.phase, msg) {
            (Phase::Listening, HsMsg::Hello { session, header }) => {
                self.on_hello(now, session, header)
            }
            (
                Phase::AwaitHelloAck,
                HsMsg::HelloAck {
                    header,
                    endpoints_via,
                    ..
                },
            ) => self.on_hello_ack(now, header, endpoints_via),
            // Datagrams are unordered: the acceptor's table may overtake its HelloAck.
            (Phase::AwaitHelloAck, HsMsg::Endpoints { endpoints, .. }) => {
                self.early_endpoints.get_or_insert(endpoints);
            }
            (Phase::Endpoints, HsMsg::Endpoints { endpoints, .. }) => {
                self.on_endpoints(now, endpoints)
            }
            (Phase::Endpoints, HsMsg::EndpointsAck { .. }) => {
                self.peer_has_ours = true;
                self.check_done();
            }
            (
                Phase::AwaitHelloAck | Phase::Endpoints | Phase::Done,
                HsMsg::Abort { reason, .. },
            ) => {
                self.fail(SpawnError::Aborted { reason }, None);
            }
            // SPAWN-11: everything else is late or duplicated and changes nothing.
            (phase, m) => debug!(
                msg = m.name(),
                ?phase,
                "handshake: late or duplicate message ignored"
            ),
        }
    }

    fn check_header(h: &GroupHeader) -> bool {
        h.size >= 1 && h.size as usize <= MAX_GROUP
    }

    /// SPAWN-23: the inter-group's data-plane key, the same at both roots: the
    /// bootstrap key, the session and both triples, the acceptor's first.
    fn data_key(&self, remote: &GroupHeader) -> BootKey {
        let (acceptor, initiator) = match self.role {
            Role::Acceptor => (&self.cfg.local, remote),
            Role::Initiator => (remote, &self.cfg.local),
        };
        let triple = |h: &GroupHeader| {
            let mut b = Vec::with_capacity(16);
            super::msg::put_header(&mut b, h);
            b
        };
        let session = self.session.unwrap_or_default();
        self.key()
            .data_plane(session, &triple(acceptor), &triple(initiator))
    }

    fn announce_remote(&mut self, remote: GroupHeader) {
        let session = self.session.unwrap_or_default();
        let data_key = self.data_key(&remote);
        for member in (0..self.cfg.local.size).filter(|r| *r != self.cfg.root) {
            // SPAWN-6
            self.out.push_back(Output::ToMember {
                member,
                msg: MemberMsg::RemoteGroup {
                    session,
                    remote,
                    data_key,
                },
            });
        }
    }

    fn on_hello(&mut self, now: Instant, session: u64, header: GroupHeader) {
        self.session = Some(session);
        self.remote = Some(header);
        if !Self::check_header(&header) {
            self.fail(
                SpawnError::Unexpected {
                    what: "Hello with group size 0 or over 65536",
                },
                Some(AbortReason::ProtocolViolation),
            );
            return;
        }
        // SPAWN-9: the acceptor applies the rule and tells the initiator the result.
        let remote_size = if self.bugs.has(crate::bugs::Bug::HybridRuleLocalSizeOnly) {
            self.cfg.local.size
        } else {
            header.size
        };
        let via = self
            .port
            .boot
            .endpoint_transport(self.cfg.local.size, remote_size);
        self.endpoints_via = Some(via);
        let ack = HsMsg::HelloAck {
            session,
            header: if self.bugs.has(crate::bugs::Bug::HelloAckEchoesPeerTriple) {
                header
            } else {
                self.cfg.local
            },
            endpoints_via: via,
        };
        if let Err(e) = self.send(now, &ack, self.port.boot.hello_transport()) {
            self.fail(e, None);
            return;
        }
        // (A spawn checked the group before the Hello opened anything: `admit_hello`.)
        self.announce_remote(header);
        self.phase = Phase::Endpoints;
        self.send_endpoints(now, via);
    }

    fn send_endpoints(&mut self, now: Instant, via: Transport) {
        let msg = HsMsg::Endpoints {
            session: self.session.unwrap_or_default(),
            endpoints: self.cfg.local_endpoints.clone(),
        };
        if let Err(e) = self.send(now, &msg, via) {
            self.fail(e, Some(AbortReason::ProtocolViolation));
        }
    }

    fn on_hello_ack(&mut self, now: Instant, header: GroupHeader, via: Transport) {
        self.remote = Some(header);
        if !Self::check_header(&header) {
            self.fail(
                SpawnError::Unexpected {
                    what: "HelloAck with group size 0 or over 65536",
                },
                Some(AbortReason::ProtocolViolation),
            );
            return;
        }
        if via
            != self
                .port
                .boot
                .endpoint_transport(self.cfg.local.size, header.size)
        {
            self.fail(
                SpawnError::Unexpected {
                    what: "HelloAck's endpoint transport breaks SPAWN-9",
                },
                Some(AbortReason::ProtocolViolation),
            );
            return;
        }
        self.endpoints_via = Some(via);
        self.announce_remote(header);
        self.phase = Phase::Endpoints;
        if via == Transport::Stream {
            // The hybrid switch: the initiator opens the stream (SPAWN-9).
            self.open_stream();
        }
        self.send_endpoints(now, via);
        if let Some(e) = self.early_endpoints.take() {
            self.on_endpoints(now, e);
        }
    }

    fn on_endpoints(&mut self, now: Instant, endpoints: Vec<Addr>) {
        if self.remote_endpoints.is_some() || self.phase != Phase::Endpoints {
            return;
        }
        let Some(remote) = self.remote else { return };
        if endpoints.len() != remote.size as usize {
            // SPAWN-7
            self.fail(
                SpawnError::EndpointCount {
                    expected: remote.size,
                    got: endpoints.len() as u64,
                },
                Some(AbortReason::ProtocolViolation),
            );
            return;
        }
        self.remote_endpoints = Some(endpoints);
        let ack = HsMsg::EndpointsAck {
            session: self.session.unwrap_or_default(),
        };
        let via = self.endpoints_via.unwrap_or(Transport::Stream);
        if let Err(e) = self.send(now, &ack, via) {
            self.fail(e, None);
            return;
        }
        self.check_done();
    }

    fn check_done(&mut self) {
        // SPAWN-16: Done needs the peer's table and the peer's ack of ours.
        let acked = self.peer_has_ours || self.bugs.has(crate::bugs::Bug::ReadyWithoutPeerAck);
        if self.phase != Phase::Endpoints || !acked {
            return;
        }
        let (Some(remote), Some(remote_endpoints)) = (self.remote, self.remote_endpoints.clone())
        else {
            return;
        };
        let session = self.session.unwrap_or_default();
        let ig = InterGroup {
            session,
            role: self.role,
            local_rank: self.cfg.root,
            local: self.cfg.local,
            remote,
            local_endpoints: self.cfg.local_endpoints.clone(),
            remote_endpoints,
            data_key: self.data_key(&remote),
        };
        for member in (0..self.cfg.local.size).filter(|r| *r != self.cfg.root) {
            self.out.push_back(Output::ToMember {
                member,
                msg: MemberMsg::RemoteEndpoints {
                    session,
                    endpoints: if self.bugs.has(crate::bugs::Bug::MembersGetReversedTable) {
                        ig.remote_endpoints.iter().rev().cloned().collect()
                    } else {
                        ig.remote_endpoints.clone()
                    },
                },
            });
        }
        // Everything this side sends was written before Done; the stream was only for
        // bootstrapping.
        self.close_stream();
        debug!(session, "handshake: done");
        self.phase = Phase::Done;
        self.out.push_back(Output::Ready(ig.clone()));
        self.result = Some(Ok(ig));
    }

    fn fail(&mut self, error: SpawnError, notify: Option<AbortReason>) {
        if self.phase == Phase::Failed {
            return;
        }
        warn!(%error, phase = ?self.phase, "handshake failed");
        let session = self.session;
        if let (Some(reason), Some(session)) = (notify, session) {
            let msg = HsMsg::Abort { session, reason };
            let abort = msg.encode();
            if self.stream_up {
                self.out.push_back(Output::SendStream {
                    bytes: msg.seal(self.key(), self.role),
                });
            }
            if let Some(r) = self.dgram.as_mut() {
                // Best effort, never retransmitted: the peer also has a deadline.
                let _ = r.send_once(&abort);
            }
        }
        if let Some(r) = self.dgram.as_mut() {
            r.stop();
        }
        let tell = !self.bugs.has(crate::bugs::Bug::FailWithoutTellingMembers);
        for member in (0..self.cfg.local.size).filter(|r| tell && *r != self.cfg.root) {
            self.out.push_back(Output::ToMember {
                member,
                msg: MemberMsg::Failed {
                    session: session.unwrap_or_default(),
                    error: error.clone(),
                },
            });
        }
        self.close_stream();
        self.phase = Phase::Failed;
        self.out.push_back(Output::Failed(error.clone()));
        if self.bugs.has(crate::bugs::Bug::FailKeepsIntergroup) {
            // Planted: "keep the first result"; a revocation after Done keeps its handle.
            self.result.get_or_insert(Err(error));
        } else {
            self.result = Some(Err(error));
        }
    }
}

crate::machine::by_inherent_methods!(Handshake, Input, Output, SpawnError);

crate::spawn::trace::recorded_by_id!(Handshake, Input, ROLE_HANDSHAKE, encode_input);
