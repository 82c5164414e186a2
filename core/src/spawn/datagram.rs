//! The datagram bootstrap's reliability layer: what UD does not give.
//!
//! UD delivers single datagrams of at most one MTU, unreliably, unordered, possibly
//! duplicated. On top of it this layer segments a message into MTU-sized, checksummed
//! segments (SPAWN-12), acknowledges every segment it receives (also duplicates, so a
//! sender whose ack was lost stops retransmitting), retransmits unacknowledged segments
//! with a doubling timeout up to a bounded number of retries (SPAWN-13), reassembles
//! messages in any arrival order and delivers each message exactly once (SPAWN-11).
//!
//! Every frame carries a tag under the connection's key (SPAWN-22): the layer seals what
//! it sends with its own role and opens what it receives with its peer's, so a frame of a
//! process without the key — a segment, an acknowledgement — is never acknowledged,
//! reassembled or taken as an acknowledgement.
//!
//! It is a plain data structure, not a state machine of its own: the handshake owns one
//! per peer and moves its queued frames to its outputs.

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::vec::Vec;

use crate::time::{Duration, Instant};
use crate::wire::prim::{bytes, put_bytes, put_u16, put_u32, put_u64, u16, u32, u64};
use crate::wire::{HEADER_LEN, WireError, decode_frame, encode_frame, parse_all, types};

use super::SpawnError;
use super::auth::{BootKey, TAG_LEN};
use super::crc::crc32;
use super::role::Role;

/// Bytes a segment adds around its payload: frame header, session (8), message
/// sequence (4), index and count (2 each), payload length (4), tag (16, SPAWN-22),
/// CRC-32 (4). (Index and count are summed as one 4: written `2 + 2`, a mutation to
/// `2 * 2` would change nothing a test could see.)
pub const SEGMENT_OVERHEAD: usize = HEADER_LEN + 8 + 4 + 4 + 4 + TAG_LEN + 4;
/// Bytes after the sealed part of a frame: its tag and CRC-32.
const TRAILER: usize = TAG_LEN + 4;
/// The default MTU: one UD datagram on most HCAs.
pub const DEFAULT_MTU: usize = 2048;
/// Smallest MTU the layer accepts (a Hello always fits one segment).
pub const MIN_MTU: usize = 128;
/// Most segments one message may have.
pub const MAX_SEGMENTS: u16 = 4096;
/// Most messages being reassembled at once; more is refused, bounding memory.
pub const MAX_PARTIAL: usize = 8;

/// Reliability parameters of the datagram bootstrap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DatagramConfig {
    /// Largest datagram, frame header and checksum included.
    pub mtu: usize,
    /// First retransmission timeout; doubles per retry, at most 16×.
    pub rto: Duration,
    /// Retransmissions of one segment before the peer counts as unreachable.
    pub max_retries: u32,
}

impl Default for DatagramConfig {
    fn default() -> Self {
        DatagramConfig {
            mtu: DEFAULT_MTU,
            rto: Duration::from_millis(20),
            max_retries: 8,
        }
    }
}

/// One segment of a message.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    /// The connection attempt (initiator's group id).
    pub session: u64,
    /// The sender's sequence number of the message.
    pub msg_seq: u32,
    /// This segment's index, `< count`.
    pub index: u16,
    /// Segments in the message.
    pub count: u16,
    /// This segment's share of the message.
    pub payload: Vec<u8>,
}

/// A datagram frame: a segment or the acknowledgement of one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DgramFrame {
    /// A segment.
    Segment(Segment),
    /// Acknowledges segment `index` of message `msg_seq`.
    Ack {
        /// The connection attempt.
        session: u64,
        /// The acknowledged message.
        msg_seq: u32,
        /// The acknowledged segment.
        index: u16,
    },
}

impl DgramFrame {
    /// Encodes the frame as `sender` of a connection keyed `key`: the body ends with the
    /// tag (SPAWN-22) and the CRC-32 of everything before it (SPAWN-12).
    pub fn encode(&self, key: &BootKey, sender: Role) -> Vec<u8> {
        let mut out = Vec::new();
        let msg_type = match self {
            DgramFrame::Segment(_) => types::DGRAM_SEGMENT,
            DgramFrame::Ack { .. } => types::DGRAM_ACK,
        };
        encode_frame(&mut out, msg_type, |b| {
            match self {
                DgramFrame::Segment(s) => {
                    put_u64(b, s.session);
                    put_u32(b, s.msg_seq);
                    put_u16(b, s.index);
                    put_u16(b, s.count);
                    put_bytes(b, &s.payload);
                }
                DgramFrame::Ack {
                    session,
                    msg_seq,
                    index,
                } => {
                    put_u64(b, *session);
                    put_u32(b, *msg_seq);
                    put_u16(b, *index);
                }
            }
            b.resize(b.len() + TRAILER, 0);
        });
        let n = out.len();
        let tag = key.tag(sender, msg_type, &out[HEADER_LEN..n - TRAILER]);
        out[n - TRAILER..n - 4].copy_from_slice(&tag);
        let crc = crc32(&out[..n - 4]);
        out[n - 4..].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Decodes a datagram's structure **without authenticating it** (for inspection:
    /// logs, models, tests; a receiver uses [`DgramFrame::open`]). The checksum is
    /// verified before anything else, so corruption anywhere in the frame is
    /// [`WireError::Checksum`] (SPAWN-12); a frame with no room for a tag is
    /// [`WireError::Truncated`].
    pub fn decode(datagram: &[u8]) -> Result<DgramFrame, WireError> {
        Self::checked(datagram, crate::bugs::Bugs::NONE)?;
        if datagram.len() < HEADER_LEN + TRAILER {
            return Err(WireError::Truncated);
        }
        Self::parse(datagram)
    }

    /// Opens a datagram that `sender` of a connection keyed `key` sent: the checksum
    /// first (corruption is [`WireError::Checksum`], SPAWN-12), then the tag (a wrong or
    /// missing one is [`SpawnError::Forged`], SPAWN-22), then the frame's structure.
    pub fn open(datagram: &[u8], key: &BootKey, sender: Role) -> Result<DgramFrame, SpawnError> {
        Self::open_with(datagram, key, sender, crate::bugs::Bugs::NONE)
    }

    /// [`DgramFrame::open`] with the planted bugs of the layer that receives it.
    pub(crate) fn open_with(
        datagram: &[u8],
        key: &BootKey,
        sender: Role,
        bugs: crate::bugs::Bugs,
    ) -> Result<DgramFrame, SpawnError> {
        Self::checked(datagram, bugs)?;
        let n = datagram.len();
        if n < HEADER_LEN + TRAILER {
            return Err(SpawnError::Forged {
                what: "datagram without a tag",
            });
        }
        let msg_type = u16::from_be_bytes([datagram[3], datagram[4]]);
        let sealed = &datagram[HEADER_LEN..n - TRAILER];
        let tag = &datagram[n - TRAILER..n - 4];
        if !key.verify(sender, msg_type, sealed, tag)
            && !bugs.has(crate::bugs::Bug::SkipBootstrapMac)
        {
            return Err(SpawnError::Forged {
                what: "datagram with a wrong tag",
            });
        }
        Ok(Self::parse(datagram)?)
    }

    /// The CRC-32 check (SPAWN-12): the first thing done with a datagram.
    fn checked(datagram: &[u8], bugs: crate::bugs::Bugs) -> Result<(), WireError> {
        if datagram.len() < HEADER_LEN + 4 {
            return Err(WireError::Truncated);
        }
        let n = datagram.len();
        let computed = crc32(&datagram[..n - 4]);
        let received = u32::from_be_bytes([
            datagram[n - 4],
            datagram[n - 3],
            datagram[n - 2],
            datagram[n - 1],
        ]);
        if computed != received && !bugs.has(crate::bugs::Bug::SkipDatagramChecksum) {
            return Err(WireError::Checksum { computed, received });
        }
        Ok(())
    }

    /// The frame's connection attempt.
    pub fn session(&self) -> u64 {
        match self {
            DgramFrame::Segment(s) => s.session,
            DgramFrame::Ack { session, .. } => *session,
        }
    }

    /// Parses a checked frame of at least `HEADER_LEN + TRAILER` bytes.
    fn parse(datagram: &[u8]) -> Result<DgramFrame, WireError> {
        let (h, body) = decode_frame(datagram)?;
        let body = &body[..body.len().saturating_sub(TRAILER)];
        match h.msg_type {
            types::DGRAM_SEGMENT => parse_all(body, |i| {
                let (i, session) = u64(i)?;
                let (i, msg_seq) = u32(i)?;
                let (i, index) = u16(i)?;
                let (i, count) = u16(i)?;
                let (i, payload) = bytes("segment payload", usize::from(u16::MAX))(i)?;
                if count == 0 || count > MAX_SEGMENTS || index >= count {
                    // Both fields, index in the high half: the halves do not overlap, so
                    // `+` it is (an `|` would equal its own mutant `^`).
                    return Err(nom::Err::Failure(WireError::InvalidValue {
                        what: "segment index/count",
                        value: (u64::from(index) << 16) + u64::from(count),
                    }));
                }
                Ok((
                    i,
                    DgramFrame::Segment(Segment {
                        session,
                        msg_seq,
                        index,
                        count,
                        payload: payload.to_vec(),
                    }),
                ))
            }),
            types::DGRAM_ACK => parse_all(body, |i| {
                let (i, session) = u64(i)?;
                let (i, msg_seq) = u32(i)?;
                let (i, index) = u16(i)?;
                Ok((
                    i,
                    DgramFrame::Ack {
                        session,
                        msg_seq,
                        index,
                    },
                ))
            }),
            other => Err(WireError::UnknownType { msg_type: other }),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Pending {
    frame: Vec<u8>,
    retries: u32,
    due: Instant,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Partial {
    count: u16,
    segments: BTreeMap<u16, Vec<u8>>,
}

/// Reliable, exactly-once message delivery with one peer over datagrams.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reliable {
    session: u64,
    cfg: DatagramConfig,
    /// The connection's key and this side's role: frames are sealed as `me` and opened
    /// as the peer (SPAWN-22).
    key: BootKey,
    me: Role,
    next_seq: u32,
    unacked: BTreeMap<(u32, u16), Pending>,
    partial: BTreeMap<u32, Partial>,
    delivered: BTreeSet<u32>,
    to_send: VecDeque<Vec<u8>>,
    inbox: VecDeque<Vec<u8>>,
    bugs: crate::bugs::Bugs,
}

impl Reliable {
    /// A layer for connection attempt `session`, keyed `key`, on the `me` side.
    pub fn new(session: u64, cfg: DatagramConfig, key: BootKey, me: Role) -> Self {
        Reliable {
            session,
            cfg,
            key,
            me,
            next_seq: 0,
            unacked: BTreeMap::new(),
            partial: BTreeMap::new(),
            delivered: BTreeSet::new(),
            to_send: VecDeque::new(),
            inbox: VecDeque::new(),
            bugs: crate::bugs::Bugs::NONE,
        }
    }

    /// Plants bugs for the verification crate's corpus.
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&mut self, bugs: crate::bugs::Bugs) {
        self.bugs = bugs;
    }

    /// Payload bytes per segment under the configured MTU.
    pub fn payload_per_segment(&self) -> usize {
        self.cfg.mtu.max(MIN_MTU) - SEGMENT_OVERHEAD
    }

    fn segments(&mut self, payload: &[u8]) -> Result<(u32, Vec<Vec<u8>>), SpawnError> {
        let per = self.payload_per_segment();
        let count = payload.len().div_ceil(per).max(1);
        let count = u16::try_from(count)
            .ok()
            .filter(|c| *c <= MAX_SEGMENTS)
            .ok_or(SpawnError::Config(
                "message exceeds the datagram segment limit",
            ))?;
        let msg_seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let frames = (0..count)
            .map(|index| {
                let lo = usize::from(index) * per;
                let hi = (lo + per).min(payload.len());
                DgramFrame::Segment(Segment {
                    session: self.session,
                    msg_seq,
                    index,
                    count,
                    payload: payload[lo.min(hi)..hi].to_vec(),
                })
                .encode(&self.key, self.me)
            })
            .collect();
        Ok((msg_seq, frames))
    }

    /// Queues `payload` for reliable delivery: every segment is sent now and
    /// retransmitted until acknowledged.
    pub fn send(&mut self, now: Instant, payload: &[u8]) -> Result<(), SpawnError> {
        let (msg_seq, frames) = self.segments(payload)?;
        for (index, frame) in frames.into_iter().enumerate() {
            self.to_send.push_back(frame.clone());
            self.unacked.insert(
                (msg_seq, index as u16),
                Pending {
                    frame,
                    retries: 0,
                    due: now + self.cfg.rto,
                },
            );
        }
        Ok(())
    }

    /// Sends `payload` once, without retransmission (best-effort notices like Abort).
    pub fn send_once(&mut self, payload: &[u8]) -> Result<(), SpawnError> {
        let (_, frames) = self.segments(payload)?;
        self.to_send.extend(frames);
        Ok(())
    }

    /// The role of the peer, whose frames this layer opens.
    pub fn peer_role(&self) -> Role {
        match self.me {
            Role::Acceptor => Role::Initiator,
            Role::Initiator => Role::Acceptor,
        }
    }

    /// Opens a datagram of the peer (checksum, then tag: [`DgramFrame::open`]).
    pub fn open(&self, datagram: &[u8]) -> Result<DgramFrame, SpawnError> {
        DgramFrame::open_with(datagram, &self.key, self.peer_role(), self.bugs)
    }

    /// Handles one received datagram. Malformed, corrupted or forged input is an error
    /// and leaves the layer unchanged (SPAWN-10, SPAWN-22).
    pub fn on_datagram(&mut self, datagram: &[u8]) -> Result<(), SpawnError> {
        let frame = self.open(datagram)?;
        Ok(self.on_frame(frame)?)
    }

    /// Handles one decoded frame (see [`Reliable::on_datagram`]).
    pub fn on_frame(&mut self, frame: DgramFrame) -> Result<(), WireError> {
        match frame {
            DgramFrame::Ack {
                session,
                msg_seq,
                index,
            } => {
                self.check_session(session)?;
                // Late or duplicate acks find nothing to remove (SPAWN-11).
                self.unacked.remove(&(msg_seq, index));
                Ok(())
            }
            DgramFrame::Segment(s) => {
                self.check_session(s.session)?;
                let ack = DgramFrame::Ack {
                    session: s.session,
                    msg_seq: s.msg_seq,
                    index: s.index,
                }
                .encode(&self.key, self.me);
                if self.delivered.contains(&s.msg_seq)
                    && !self
                        .bugs
                        .has(crate::bugs::Bug::AcceptDuplicateDatagramTwice)
                {
                    // Already delivered: re-acknowledge so the sender stops, nothing else.
                    self.to_send.push_back(ack);
                    return Ok(());
                }
                match self.partial.get(&s.msg_seq) {
                    Some(p) if p.count != s.count => {
                        return Err(WireError::InvalidValue {
                            what: "segment count changed within a message",
                            value: u64::from(s.count),
                        });
                    }
                    None if self.partial.len() >= MAX_PARTIAL => {
                        return Err(WireError::OverLimit {
                            what: "messages in reassembly",
                            value: self.partial.len() as u64 + 1,
                            max: MAX_PARTIAL as u64,
                        });
                    }
                    _ => {}
                }
                self.to_send.push_back(ack);
                let p = self.partial.entry(s.msg_seq).or_insert_with(|| Partial {
                    count: s.count,
                    segments: BTreeMap::new(),
                });
                p.segments.entry(s.index).or_insert(s.payload);
                if p.segments.len() == usize::from(p.count) {
                    let done = self.partial.remove(&s.msg_seq).map(|p| p.segments);
                    let msg: Vec<u8> = done
                        .into_iter()
                        .flat_map(|m| m.into_values())
                        .flatten()
                        .collect();
                    self.delivered.insert(s.msg_seq);
                    self.inbox.push_back(msg);
                }
                Ok(())
            }
        }
    }

    fn check_session(&self, session: u64) -> Result<(), WireError> {
        if session == self.session {
            Ok(())
        } else {
            Err(WireError::InvalidValue {
                what: "session",
                value: session,
            })
        }
    }

    /// Retransmits what is due. Fails when a segment used up its retries (SPAWN-13).
    pub fn on_timeout(&mut self, now: Instant) -> Result<(), SpawnError> {
        for p in self.unacked.values_mut() {
            if p.due > now {
                continue;
            }
            if p.retries >= self.cfg.max_retries {
                return Err(SpawnError::PeerUnreachable { retries: p.retries });
            }
            p.retries += 1;
            let backoff = self
                .cfg
                .rto
                .as_nanos()
                .saturating_mul(1 << p.retries.min(4));
            p.due = now + Duration::from_nanos(backoff);
            self.to_send.push_back(p.frame.clone());
        }
        Ok(())
    }

    /// The next retransmission deadline, if anything is unacknowledged.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.unacked.values().map(|p| p.due).min()
    }

    /// Whether everything sent has been acknowledged.
    pub fn all_acked(&self) -> bool {
        self.unacked.is_empty()
    }

    /// Stops retransmitting (the connection attempt is over).
    pub fn stop(&mut self) {
        self.unacked.clear();
    }

    /// The next datagram to put on the wire.
    pub fn poll_send(&mut self) -> Option<Vec<u8>> {
        self.to_send.pop_front()
    }

    /// The next message delivered complete.
    pub fn poll_recv(&mut self) -> Option<Vec<u8>> {
        self.inbox.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use proptest::prelude::*;

    const KEY: BootKey = BootKey([5; 32]);

    /// The two ends of one connection: `(sender, receiver)` of session `s`.
    fn pair(s: u64, mtu: usize) -> (Reliable, Reliable) {
        (
            Reliable::new(s, cfg(mtu), KEY, Role::Initiator),
            Reliable::new(s, cfg(mtu), KEY, Role::Acceptor),
        )
    }

    fn cfg(mtu: usize) -> DatagramConfig {
        DatagramConfig {
            mtu,
            rto: Duration::from_millis(1),
            max_retries: 3,
        }
    }

    fn pump(from: &mut Reliable, to: &mut Reliable) {
        let mut frames = Vec::new();
        while let Some(f) = from.poll_send() {
            frames.push(f);
        }
        // Deliver in reverse and twice: order and duplication must not matter.
        for f in frames.iter().rev().chain(frames.iter()) {
            to.on_datagram(f).unwrap();
        }
    }

    #[test]
    fn segments_reorders_and_delivers_once() {
        // SPAWN-11, SPAWN-12
        let (mut a, mut b) = pair(7, 100);
        let msg: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        a.send(Instant(0), &msg).unwrap();
        pump(&mut a, &mut b);
        assert_eq!(b.poll_recv(), Some(msg));
        assert_eq!(b.poll_recv(), None);
        pump(&mut b, &mut a);
        assert!(a.all_acked());
    }

    /// `SEGMENT_OVERHEAD` is what a segment really adds around its payload: full
    /// segments fill the MTU exactly (SPAWN-12: at most one MTU, no byte wasted), and a
    /// 2048-byte MTU carries 1999 payload bytes per segment, the tag (SPAWN-22) taking
    /// 16 (`spec/wire.md`, datagram frames).
    #[test]
    fn full_segments_fill_the_mtu_exactly() {
        assert_eq!(SEGMENT_OVERHEAD, 49);
        assert_eq!(
            Reliable::new(7, DatagramConfig::default(), KEY, Role::Acceptor).payload_per_segment(),
            1999
        );
        for mtu in [MIN_MTU, 300, DEFAULT_MTU] {
            let (mut a, _) = pair(7, mtu);
            let per = a.payload_per_segment();
            a.send(Instant(0), &vec![9u8; 2 * per + 1]).unwrap();
            let mut lens = Vec::new();
            while let Some(f) = a.poll_send() {
                lens.push(f.len());
            }
            assert_eq!(lens, [mtu, mtu, mtu - per + 1], "mtu {mtu}");
        }
    }

    #[test]
    fn retransmits_then_gives_up() {
        // SPAWN-13
        let (mut a, _) = pair(7, 100);
        a.send(Instant(0), b"hi").unwrap();
        while a.poll_send().is_some() {}
        let mut resent = 0;
        let mut last = Instant(0);
        loop {
            let now = a.next_deadline().unwrap();
            assert!(now > last);
            last = now;
            match a.on_timeout(now) {
                Ok(()) => {
                    while a.poll_send().is_some() {
                        resent += 1;
                    }
                }
                Err(e) => {
                    assert_eq!(e, SpawnError::PeerUnreachable { retries: 3 });
                    break;
                }
            }
        }
        assert_eq!(resent, 3);
    }

    #[test]
    fn corruption_and_foreign_sessions_are_rejected_without_state_change() {
        // SPAWN-10, SPAWN-12
        let (mut a, mut b) = pair(7, 100);
        a.send(Instant(0), b"hello").unwrap();
        let f = a.poll_send().unwrap();
        let before = b.clone();
        for i in 0..f.len() {
            let mut c = f.clone();
            c[i] ^= 0x10;
            assert!(
                matches!(
                    b.on_datagram(&c),
                    Err(SpawnError::Wire(WireError::Checksum { .. }))
                ),
                "byte {i}"
            );
        }
        let (_, mut other) = pair(8, 100);
        assert!(matches!(
            other.on_datagram(&f),
            Err(SpawnError::Wire(WireError::InvalidValue {
                what: "session",
                ..
            }))
        ));
        assert_eq!(b, before);
        assert_eq!(
            b.on_datagram(&f[..5]),
            Err(SpawnError::Wire(WireError::Truncated))
        );
        assert_eq!(b, before);
    }

    /// SPAWN-22: a frame sealed with another key, sealed by the receiver's own role (a
    /// reflection), or with its tag cut off (a CRC recomputed over what is left) is
    /// forged: refused before anything else, the layer unchanged. An acknowledgement is
    /// sealed as well, so a forged one releases no retransmission.
    #[test]
    fn forged_frames_are_refused_and_change_nothing() {
        let (mut a, mut b) = pair(7, 100);
        a.send(Instant(0), b"hello").unwrap();
        let f = a.poll_send().unwrap();
        let frame = DgramFrame::decode(&f).unwrap();
        let before = b.clone();
        let forged = |what| Err(SpawnError::Forged { what });
        let wrong_key = frame.encode(&BootKey([6; 32]), Role::Initiator);
        assert_eq!(
            b.on_datagram(&wrong_key),
            forged("datagram with a wrong tag")
        );
        let reflected = frame.encode(&KEY, Role::Acceptor);
        assert_eq!(
            b.on_datagram(&reflected),
            forged("datagram with a wrong tag")
        );
        let mut untagged = f[..HEADER_LEN].to_vec();
        untagged.extend_from_slice(&[0; 3]);
        let n = untagged.len();
        untagged.extend_from_slice(&crc32(&untagged[..n]).to_be_bytes());
        assert_eq!(b.on_datagram(&untagged), forged("datagram without a tag"));
        assert_eq!(b, before);
        // A forged acknowledgement of `a`'s segment leaves it unacknowledged.
        let ack = DgramFrame::Ack {
            session: 7,
            msg_seq: 0,
            index: 0,
        };
        let before = a.clone();
        assert!(
            a.on_datagram(&ack.encode(&BootKey([6; 32]), Role::Acceptor))
                .is_err()
        );
        assert_eq!(a, before);
        assert!(!a.all_acked());
        a.on_datagram(&ack.encode(&KEY, Role::Acceptor)).unwrap();
        assert!(a.all_acked());
        // The genuine segment opens.
        b.on_datagram(&f).unwrap();
        assert_eq!(b.poll_recv().as_deref(), Some(&b"hello"[..]));
    }

    /// A segment needs `1 ≤ count ≤ 4096` and `index < count` (`spec/wire.md`, datagram
    /// frames); one that breaks it is `InvalidValue`, whose value carries both fields as
    /// received, index in the high half, count in the low 16 bits.
    #[test]
    fn a_bad_segment_index_or_count_reports_both() {
        for (index, count) in [(3u16, 2u16), (0, 0), (1, MAX_SEGMENTS + 1)] {
            let f = DgramFrame::Segment(Segment {
                session: 1,
                msg_seq: 0,
                index,
                count,
                payload: vec![1],
            })
            .encode(&KEY, Role::Initiator);
            assert_eq!(
                DgramFrame::decode(&f),
                Err(WireError::InvalidValue {
                    what: "segment index/count",
                    value: u64::from(index) * 0x1_0000 + u64::from(count),
                }),
                "index {index}, count {count}"
            );
        }
    }

    #[test]
    fn reassembly_is_bounded() {
        let (_, mut b) = pair(1, 100);
        for seq in 0..=MAX_PARTIAL as u32 {
            let f = DgramFrame::Segment(Segment {
                session: 1,
                msg_seq: seq,
                index: 0,
                count: 2,
                payload: vec![1],
            })
            .encode(&KEY, Role::Initiator);
            let r = b.on_datagram(&f);
            assert_eq!(r.is_err(), seq as usize == MAX_PARTIAL);
        }
    }

    proptest! {
        #[test]
        fn frames_round_trip(session: u64, msg_seq: u32, count in 1u16..=MAX_SEGMENTS, idx: u16,
                             payload in proptest::collection::vec(any::<u8>(), 0..300), ack: bool) {
            let f = if ack {
                DgramFrame::Ack { session, msg_seq, index: idx }
            } else {
                DgramFrame::Segment(Segment { session, msg_seq, index: idx % count, count, payload })
            };
            let sealed = f.encode(&KEY, Role::Acceptor);
            prop_assert_eq!(DgramFrame::decode(&sealed), Ok(f.clone()));
            prop_assert_eq!(DgramFrame::open(&sealed, &KEY, Role::Acceptor), Ok(f));
        }

        #[test]
        fn any_message_survives_any_delivery_order(
            msg in proptest::collection::vec(any::<u8>(), 0..2000),
            mtu in MIN_MTU..600usize,
            order in any::<prop::sample::Index>(),
        ) {
            let (mut a, mut b) = pair(3, mtu);
            a.send(Instant(0), &msg).unwrap();
            let mut frames = Vec::new();
            while let Some(f) = a.poll_send() { frames.push(f); }
            prop_assert!(frames.iter().all(|f| f.len() <= mtu));
            let k = order.index(frames.len());
            frames.rotate_left(k);
            for f in &frames { b.on_datagram(f).unwrap(); }
            prop_assert_eq!(b.poll_recv(), Some(msg));
        }
    }
}
