//! The datagram bootstrap's reliability layer: what UD does not give.
//!
//! UD delivers single datagrams of at most one MTU, unreliably, unordered, possibly
//! duplicated. On top of it this layer segments a message into MTU-sized, checksummed
//! segments (SPAWN-12), acknowledges every segment it receives (also duplicates, so a
//! sender whose ack was lost stops retransmitting), retransmits unacknowledged segments
//! with a doubling timeout up to a bounded number of retries (SPAWN-13), reassembles
//! messages in any arrival order and delivers each message exactly once (SPAWN-11).
//!
//! It is a plain data structure, not a state machine of its own: the handshake owns one
//! per peer and moves its queued frames to its outputs.

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::vec::Vec;

use crate::time::{Duration, Instant};
use crate::wire::prim::{bytes, put_bytes, put_u16, put_u32, put_u64, u16, u32, u64};
use crate::wire::{HEADER_LEN, WireError, decode_frame, encode_frame, parse_all, types};

use super::SpawnError;
use super::crc::crc32;

/// Bytes a segment adds around its payload: frame header, session (8), message
/// sequence (4), index and count (2 each), payload length (4), CRC-32 (4). (Index and
/// count are summed as one 4: written `2 + 2`, a mutation to `2 * 2` would change
/// nothing a test could see.)
pub const SEGMENT_OVERHEAD: usize = HEADER_LEN + 8 + 4 + 4 + 4 + 4;
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
    /// Encodes the frame; the last four bytes are the CRC-32 of everything before them.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            DgramFrame::Segment(s) => encode_frame(&mut out, types::DGRAM_SEGMENT, |b| {
                put_u64(b, s.session);
                put_u32(b, s.msg_seq);
                put_u16(b, s.index);
                put_u16(b, s.count);
                put_bytes(b, &s.payload);
                put_u32(b, 0);
            }),
            DgramFrame::Ack {
                session,
                msg_seq,
                index,
            } => encode_frame(&mut out, types::DGRAM_ACK, |b| {
                put_u64(b, *session);
                put_u32(b, *msg_seq);
                put_u16(b, *index);
                put_u32(b, 0);
            }),
        }
        let n = out.len();
        let crc = crc32(&out[..n - 4]);
        out[n - 4..].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Decodes a datagram. The checksum is verified before anything else, so corruption
    /// anywhere in the frame is [`WireError::Checksum`] (SPAWN-12).
    pub fn decode(datagram: &[u8]) -> Result<DgramFrame, WireError> {
        Self::decode_with(datagram, crate::bugs::Bugs::NONE)
    }

    /// [`DgramFrame::decode`] with the planted bugs of the layer that receives it.
    pub(crate) fn decode_with(
        datagram: &[u8],
        bugs: crate::bugs::Bugs,
    ) -> Result<DgramFrame, WireError> {
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
        let (h, body) = decode_frame(datagram)?;
        let body = &body[..body.len().saturating_sub(4)];
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
    next_seq: u32,
    unacked: BTreeMap<(u32, u16), Pending>,
    partial: BTreeMap<u32, Partial>,
    delivered: BTreeSet<u32>,
    to_send: VecDeque<Vec<u8>>,
    inbox: VecDeque<Vec<u8>>,
    bugs: crate::bugs::Bugs,
}

impl Reliable {
    /// A layer for connection attempt `session`.
    pub fn new(session: u64, cfg: DatagramConfig) -> Self {
        Reliable {
            session,
            cfg,
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
                .encode()
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

    /// Handles one received datagram. Malformed or corrupted input is an error and
    /// leaves the layer unchanged (SPAWN-10).
    pub fn on_datagram(&mut self, datagram: &[u8]) -> Result<(), WireError> {
        let frame = DgramFrame::decode_with(datagram, self.bugs)?;
        self.on_frame(frame)
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
                .encode();
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
        let mut a = Reliable::new(7, cfg(100));
        let mut b = Reliable::new(7, cfg(100));
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
    /// 2048-byte MTU carries 2015 payload bytes per segment (`spec/wire.md`, datagram
    /// frames).
    #[test]
    fn full_segments_fill_the_mtu_exactly() {
        assert_eq!(
            Reliable::new(7, DatagramConfig::default()).payload_per_segment(),
            2015
        );
        for mtu in [MIN_MTU, 300, DEFAULT_MTU] {
            let mut a = Reliable::new(7, cfg(mtu));
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
        let mut a = Reliable::new(7, cfg(100));
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
        let mut a = Reliable::new(7, cfg(100));
        a.send(Instant(0), b"hello").unwrap();
        let f = a.poll_send().unwrap();
        let mut b = Reliable::new(7, cfg(100));
        let before = b.clone();
        for i in 0..f.len() {
            let mut c = f.clone();
            c[i] ^= 0x10;
            assert!(
                matches!(b.on_datagram(&c), Err(WireError::Checksum { .. })),
                "byte {i}"
            );
        }
        let mut other = Reliable::new(8, cfg(100));
        assert!(matches!(
            other.on_datagram(&f),
            Err(WireError::InvalidValue {
                what: "session",
                ..
            })
        ));
        assert_eq!(b, before);
        assert_eq!(b.on_datagram(&f[..5]), Err(WireError::Truncated));
        assert_eq!(b, before);
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
            .encode();
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
        let mut b = Reliable::new(1, cfg(100));
        for seq in 0..=MAX_PARTIAL as u32 {
            let f = DgramFrame::Segment(Segment {
                session: 1,
                msg_seq: seq,
                index: 0,
                count: 2,
                payload: vec![1],
            })
            .encode();
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
            prop_assert_eq!(DgramFrame::decode(&f.encode()), Ok(f));
        }

        #[test]
        fn any_message_survives_any_delivery_order(
            msg in proptest::collection::vec(any::<u8>(), 0..2000),
            mtu in MIN_MTU..600usize,
            order in any::<prop::sample::Index>(),
        ) {
            let mut a = Reliable::new(3, cfg(mtu));
            let mut b = Reliable::new(3, cfg(mtu));
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
