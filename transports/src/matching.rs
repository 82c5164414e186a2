//! Receive matching shared by all devices: posted receives in post order, unexpected
//! messages in arrival order (MPI's two queues), and the "sink" an incoming message is
//! streamed into — the posted user buffer when one matches (the fast path), otherwise
//! an unexpected-message buffer.
//!
//! The unexpected queue is kept in arrival order with increasing ids, so a message is
//! found by id with a binary search (each chunk of an arriving message looks it up: a
//! linear scan made a flood of unexpected messages quadratic), and what each connection
//! has queued is counted as it changes, so a device can bound it per peer (DATA-6) and
//! ask whether a connection is quiet without a scan. A new receive still scans the
//! queue for its first match (MPI order across sources and tags); a device's per-peer
//! bound keeps that scan bounded.

use std::collections::VecDeque;

use crate::device::{ConnId, Received, RecvHandle, RecvSpec};
use crate::error::{Result, TransportError};
use crate::header::MsgHeader;
use crate::idmap::IdMap;

struct Posted {
    handle: RecvHandle,
    spec: RecvSpec,
    buf: Vec<u8>,
}

struct Unexpected {
    conn: ConnId,
    header: MsgHeader,
    data: Vec<u8>,
    complete: bool,
    /// A receive posted while the message was still arriving.
    claimed_by: Option<(RecvHandle, Vec<u8>)>,
    id: u64,
}

/// Where the payload of an incoming message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sink {
    /// Straight into the posted receive's buffer.
    Posted(RecvHandle),
    /// Into an unexpected-message buffer (id).
    Unexpected(u64),
    /// Dropped (the posted buffer was too small; the receive already failed).
    Discard,
}

/// What one connection has in the unexpected queue.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Messages queued (complete, arriving, or claimed by a receive while arriving).
    pub(crate) messages: usize,
    /// Payload bytes buffered for messages no receive has claimed.
    pub(crate) bytes: u64,
}

/// The matching engine of one device.
#[derive(Default)]
pub(crate) struct Matcher {
    next_handle: u64,
    next_unexpected: u64,
    posted: Vec<Posted>,
    /// Incoming messages whose posted buffer is being filled.
    active: IdMap<RecvHandle, (ConnId, MsgHeader, Vec<u8>)>,
    /// In arrival order, so ids increase (binary search by id).
    unexpected: VecDeque<Unexpected>,
    /// Per connection with anything in `unexpected`; no entry: nothing.
    usage: IdMap<ConnId, Usage>,
    done: IdMap<RecvHandle, Result<Received>>,
}

impl Matcher {
    /// Posts a receive; it may complete at once from the unexpected queue.
    pub(crate) fn post(&mut self, spec: RecvSpec, buf: Vec<u8>) -> RecvHandle {
        self.next_handle += 1;
        let handle = RecvHandle(self.next_handle);
        let hit = self
            .unexpected
            .iter()
            .position(|u| u.claimed_by.is_none() && spec.matches(u.conn, &u.header));
        match hit {
            Some(i) if self.unexpected[i].complete => {
                let u = self.remove_unexpected(i);
                let r = deliver(u.conn, u.header, &u.data, buf);
                self.done.insert(handle, r);
            }
            Some(i) => {
                // Still arriving: the rest goes straight into the user's buffer.
                let u = &mut self.unexpected[i];
                let len = u.header.len as usize;
                if len > buf.len() {
                    self.done.insert(
                        handle,
                        Err(TransportError::Truncated {
                            len: u.header.len,
                            capacity: buf.len(),
                        }),
                    );
                } else {
                    let mut buf = buf;
                    buf.truncate(len);
                    buf[..u.data.len()].copy_from_slice(&u.data);
                    let (conn, moved) = (u.conn, std::mem::take(&mut u.data).len() as u64);
                    u.claimed_by = Some((handle, buf));
                    if let Some(n) = self.usage.get_mut(&conn) {
                        n.bytes -= moved;
                    }
                }
            }
            None => self.posted.push(Posted { handle, spec, buf }),
        }
        handle
    }

    /// A message header arrived on `conn`: decides where its payload goes.
    pub(crate) fn incoming(&mut self, conn: ConnId, header: MsgHeader) -> Sink {
        if let Some(i) = self
            .posted
            .iter()
            .position(|p| p.spec.matches(conn, &header))
        {
            let p = self.posted.remove(i);
            if header.len > p.buf.len() as u64 {
                self.done.insert(
                    p.handle,
                    Err(TransportError::Truncated {
                        len: header.len,
                        capacity: p.buf.len(),
                    }),
                );
                return Sink::Discard;
            }
            let mut buf = p.buf;
            buf.truncate(header.len as usize);
            if header.len == 0 {
                self.done.insert(
                    p.handle,
                    Ok(Received {
                        header,
                        conn,
                        data: buf,
                    }),
                );
            } else {
                self.active.insert(p.handle, (conn, header, buf));
            }
            return Sink::Posted(p.handle);
        }
        self.next_unexpected += 1;
        let id = self.next_unexpected;
        self.usage.entry(conn).or_default().messages += 1;
        self.unexpected.push_back(Unexpected {
            conn,
            header,
            // Grown on demand: a large message may stay in the fabric until matched.
            data: Vec::new(),
            complete: header.len == 0,
            claimed_by: None,
            id,
        });
        Sink::Unexpected(id)
    }

    /// Appends payload bytes to the sink; `done` says the message is now complete.
    /// Returns the writable region for `Posted` sinks via [`Matcher::posted_window`]
    /// instead when the caller can copy straight into it.
    pub(crate) fn append(&mut self, sink: Sink, offset: usize, bytes: &[u8]) {
        match sink {
            Sink::Posted(h) => {
                if let Some((_, _, buf)) = self.active.get_mut(&h) {
                    buf[offset..offset + bytes.len()].copy_from_slice(bytes);
                }
            }
            Sink::Unexpected(id) => {
                if let Some(i) = self.find(id) {
                    let u = &mut self.unexpected[i];
                    match &mut u.claimed_by {
                        Some((_, buf)) => buf[offset..offset + bytes.len()].copy_from_slice(bytes),
                        None => {
                            u.data.extend_from_slice(bytes);
                            if let Some(n) = self.usage.get_mut(&u.conn) {
                                n.bytes += bytes.len() as u64;
                            }
                        }
                    }
                }
            }
            Sink::Discard => {}
        }
    }

    /// Whether nothing is queued that a new message on `conn` would have to be ordered
    /// against: no posted receive and no unexpected message from `conn`.
    pub(crate) fn quiet_for(&self, conn: ConnId) -> bool {
        // The empty queue first: this is every receive's fast path, and an empty check
        // is cheaper than the per-connection lookup.
        self.posted.is_empty() && (self.unexpected.is_empty() || !self.usage.contains_key(&conn))
    }

    /// What `conn` has in the unexpected queue (DATA-6).
    pub(crate) fn usage(&self, conn: ConnId) -> Usage {
        self.usage.get(&conn).copied().unwrap_or_default()
    }

    /// Index of unexpected message `id` (ids increase along the queue).
    fn find(&self, id: u64) -> Option<usize> {
        self.unexpected.binary_search_by_key(&id, |u| u.id).ok()
    }

    /// Takes message `i` out of the unexpected queue, and out of its connection's count.
    fn remove_unexpected(&mut self, i: usize) -> Unexpected {
        let u = self.unexpected.remove(i).expect("index in range");
        if let Some(n) = self.usage.get_mut(&u.conn) {
            n.messages -= 1;
            n.bytes -= u.data.len() as u64;
            if n.messages == 0 {
                self.usage.remove(&u.conn);
            }
        }
        u
    }

    /// Whether some posted receive could take a message arriving on `conn` (used to
    /// decide whether a large unmatched message may wait in the fabric).
    pub(crate) fn has_posted_for(&self, conn: ConnId) -> bool {
        self.posted
            .iter()
            .any(|p| p.spec.conn.is_none_or(|c| c == conn))
    }

    /// The posted buffer being filled for `sink` (the zero-copy fast path).
    pub(crate) fn posted_window(&mut self, sink: Sink) -> Option<&mut [u8]> {
        match sink {
            Sink::Posted(h) => self.active.get_mut(&h).map(|(_, _, b)| b.as_mut_slice()),
            Sink::Unexpected(id) => {
                let i = self.find(id)?;
                self.unexpected[i]
                    .claimed_by
                    .as_mut()
                    .map(|(_, b)| b.as_mut_slice())
            }
            Sink::Discard => None,
        }
    }

    /// The message streamed into `sink` is complete.
    pub(crate) fn finish(&mut self, sink: Sink) {
        match sink {
            Sink::Posted(h) => {
                if let Some((conn, header, data)) = self.active.remove(&h) {
                    self.done.insert(h, Ok(Received { header, conn, data }));
                }
            }
            Sink::Unexpected(id) => {
                let Some(i) = self.find(id) else {
                    return;
                };
                if self.unexpected[i].claimed_by.is_some() {
                    let u = self.remove_unexpected(i);
                    let (h, data) = u.claimed_by.expect("checked");
                    let (conn, header) = (u.conn, u.header);
                    self.done.insert(h, Ok(Received { header, conn, data }));
                } else {
                    self.unexpected[i].complete = true;
                }
            }
            Sink::Discard => {}
        }
    }

    /// The message streamed into `sink` will never complete (its peer is gone).
    pub(crate) fn abort(&mut self, sink: Sink, err: &TransportError) {
        match sink {
            Sink::Posted(h) => {
                if self.active.remove(&h).is_some() {
                    self.done.insert(h, Err(err.duplicate()));
                }
            }
            Sink::Unexpected(id) => {
                if let Some(i) = self.find(id) {
                    let u = self.remove_unexpected(i);
                    if let Some((h, _)) = u.claimed_by {
                        self.done.insert(h, Err(err.duplicate()));
                    }
                }
            }
            Sink::Discard => {}
        }
    }

    /// The connection is gone: receives that can only be satisfied by it fail.
    pub(crate) fn fail_conn(&mut self, conn: ConnId, err: &TransportError) {
        let (dead, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.posted)
            .into_iter()
            .partition(|p| p.spec.conn == Some(conn));
        self.posted = keep;
        for p in dead {
            self.done.insert(p.handle, Err(err.duplicate()));
        }
    }

    /// We closed the connection: receives that only it could satisfy fail, and its
    /// messages that nobody has received are dropped, as are any still being filled.
    /// Nothing can name the connection any more, and keeping them would grow the queues
    /// with every connection a long-lived process ever had.
    pub(crate) fn forget_conn(&mut self, conn: ConnId, err: &TransportError) {
        self.fail_conn(conn, err);
        self.usage.remove(&conn);
        let done = &mut self.done;
        self.unexpected.retain_mut(|u| {
            if u.conn != conn {
                return true;
            }
            if let Some((h, _)) = u.claimed_by.take() {
                done.insert(h, Err(err.duplicate()));
            }
            false
        });
        let filling: Vec<RecvHandle> = self
            .active
            .iter()
            .filter(|(_, (c, _, _))| *c == conn)
            .map(|(h, _)| *h)
            .collect();
        for h in filling {
            self.active.remove(&h);
            self.done.insert(h, Err(err.duplicate()));
        }
    }

    /// Withdraws a receive that no message has matched yet. Returns false if it is
    /// already matched (being filled, or done).
    pub(crate) fn cancel(&mut self, h: RecvHandle) -> bool {
        match self.posted.iter().position(|p| p.handle == h) {
            Some(i) => {
                self.posted.remove(i);
                true
            }
            None => false,
        }
    }

    /// Takes the result of a finished receive.
    pub(crate) fn take(&mut self, h: RecvHandle) -> Result<Option<Received>> {
        match self.done.remove(&h) {
            Some(r) => r.map(Some),
            None if self.active.contains_key(&h)
                || self.posted.iter().any(|p| p.handle == h)
                || self
                    .unexpected
                    .iter()
                    .any(|u| u.claimed_by.as_ref().is_some_and(|(c, _)| *c == h)) =>
            {
                Ok(None)
            }
            None => Err(TransportError::UnknownHandle(h.0)),
        }
    }

    /// First unexpected message matching `spec`.
    /// (Its header is known even while its payload is still arriving or, for a large
    /// message, still waiting in the fabric — as with MPI's probe.)
    pub(crate) fn probe(&self, spec: &RecvSpec) -> Option<MsgHeader> {
        self.unexpected
            .iter()
            .find(|u| u.claimed_by.is_none() && spec.matches(u.conn, &u.header))
            .map(|u| u.header)
    }
}

fn deliver(conn: ConnId, header: MsgHeader, data: &[u8], mut buf: Vec<u8>) -> Result<Received> {
    if data.len() > buf.len() {
        return Err(TransportError::Truncated {
            len: header.len,
            capacity: buf.len(),
        });
    }
    buf.truncate(data.len());
    buf.copy_from_slice(data);
    Ok(Received {
        header,
        conn,
        data: buf,
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn hdr(tag: u64, len: u64) -> MsgHeader {
        MsgHeader {
            source: 7,
            tag,
            context_id: 1,
            len,
        }
    }

    fn spec(tag: Option<u64>) -> RecvSpec {
        RecvSpec {
            tag,
            context_id: 1,
            ..RecvSpec::default()
        }
    }

    #[test]
    fn posted_receive_gets_payload_directly() {
        let mut m = Matcher::default();
        let h = m.post(spec(Some(5)), vec![0; 8]);
        let s = m.incoming(ConnId(1), hdr(5, 3));
        assert_eq!(s, Sink::Posted(h));
        m.posted_window(s).unwrap().copy_from_slice(b"abc");
        assert!(m.take(h).unwrap().is_none());
        m.finish(s);
        let r = m.take(h).unwrap().unwrap();
        assert_eq!(r.data, b"abc");
        assert_eq!(r.conn, ConnId(1));
    }

    #[test]
    fn unexpected_messages_match_in_arrival_order_by_tag() {
        let mut m = Matcher::default();
        for (tag, body) in [(1, b"one"), (2, b"two"), (1, b"uno")] {
            let s = m.incoming(ConnId(1), hdr(tag, 3));
            m.append(s, 0, body);
            m.finish(s);
        }
        let h2 = m.post(spec(Some(2)), vec![0; 3]);
        assert_eq!(m.take(h2).unwrap().unwrap().data, b"two");
        let a = m.post(spec(None), vec![0; 3]);
        let b = m.post(spec(None), vec![0; 3]);
        assert_eq!(m.take(a).unwrap().unwrap().data, b"one");
        assert_eq!(m.take(b).unwrap().unwrap().data, b"uno");
    }

    #[test]
    fn receive_posted_during_arrival_claims_the_message() {
        let mut m = Matcher::default();
        let s = m.incoming(ConnId(2), hdr(9, 4));
        m.append(s, 0, b"ab");
        let h = m.post(spec(Some(9)), vec![0; 4]);
        assert!(m.take(h).unwrap().is_none());
        m.append(s, 2, b"cd");
        m.finish(s);
        assert_eq!(m.take(h).unwrap().unwrap().data, b"abcd");
    }

    #[test]
    fn too_small_buffer_is_a_typed_truncation() {
        let mut m = Matcher::default();
        let h = m.post(spec(None), vec![0; 2]);
        assert_eq!(m.incoming(ConnId(1), hdr(0, 5)), Sink::Discard);
        assert!(matches!(
            m.take(h),
            Err(TransportError::Truncated {
                len: 5,
                capacity: 2
            })
        ));
    }

    #[test]
    fn context_must_match_exactly_and_dead_conn_fails_its_receives() {
        let mut m = Matcher::default();
        let mut other_ctx = spec(None);
        other_ctx.context_id = 2;
        let h = m.post(other_ctx, vec![0; 4]);
        assert!(matches!(
            m.incoming(ConnId(1), hdr(0, 1)),
            Sink::Unexpected(_)
        ));
        assert!(m.take(h).unwrap().is_none());
        let mut on_conn = spec(None);
        on_conn.conn = Some(ConnId(3));
        let h3 = m.post(on_conn, vec![0; 4]);
        m.fail_conn(
            ConnId(3),
            &TransportError::PeerClosed {
                conn: 3,
                mid_message: false,
            },
        );
        assert!(matches!(m.take(h3), Err(TransportError::PeerClosed { .. })));
        assert!(m.take(h).unwrap().is_none());
    }

    /// DATA-6: what each connection has queued is counted as its messages arrive, are
    /// claimed while arriving, received, aborted or forgotten.
    #[test]
    fn unexpected_usage_is_counted_per_connection() {
        let mut m = Matcher::default();
        for _ in 0..3 {
            let s = m.incoming(ConnId(1), hdr(1, 4));
            m.append(s, 0, b"abcd");
            m.finish(s);
        }
        let arriving = m.incoming(ConnId(1), hdr(2, 4));
        m.append(arriving, 0, b"ab");
        let s = m.incoming(ConnId(2), hdr(1, 1));
        m.append(s, 0, b"z");
        m.finish(s);
        let usage = |messages, bytes| Usage { messages, bytes };
        assert_eq!(m.usage(ConnId(1)), usage(4, 14));
        assert!(!m.quiet_for(ConnId(1)));
        let h = m.post(spec(Some(1)), vec![0; 4]);
        assert_eq!(m.take(h).unwrap().unwrap().data, b"abcd");
        assert_eq!(m.usage(ConnId(1)), usage(3, 10));
        let c = m.post(spec(Some(2)), vec![0; 4]);
        assert_eq!(
            m.usage(ConnId(1)),
            usage(3, 8),
            "claimed bytes are the receive's"
        );
        m.append(arriving, 2, b"cd");
        m.finish(arriving);
        assert_eq!(m.take(c).unwrap().unwrap().data, b"abcd");
        assert_eq!(m.usage(ConnId(1)), usage(2, 8));
        let dropped = m.incoming(ConnId(1), hdr(3, 4));
        m.append(dropped, 0, b"x");
        let err = TransportError::PeerClosed {
            conn: 1,
            mid_message: true,
        };
        m.abort(dropped, &err);
        assert_eq!(m.usage(ConnId(1)), usage(2, 8));
        m.forget_conn(ConnId(1), &err);
        assert_eq!(m.usage(ConnId(1)), Usage::default());
        assert!(m.quiet_for(ConnId(1)));
        assert_eq!(m.usage(ConnId(2)), usage(1, 1));
    }

    #[test]
    fn forgetting_a_conn_drops_its_unreceived_messages_only() {
        let mut m = Matcher::default();
        for conn in [1, 2, 1] {
            let s = m.incoming(ConnId(conn), hdr(4, 1));
            m.append(s, 0, &[conn as u8]);
            m.finish(s);
        }
        // One of conn 1's messages is still arriving into a receive posted meanwhile.
        let s = m.incoming(ConnId(1), hdr(5, 2));
        m.append(s, 0, b"a");
        let filling = m.post(spec(Some(5)), vec![0; 2]);
        let err = TransportError::PeerClosed {
            conn: 1,
            mid_message: true,
        };
        m.forget_conn(ConnId(1), &err);
        assert!(matches!(
            m.take(filling),
            Err(TransportError::PeerClosed { .. })
        ));
        assert_eq!(m.unexpected.len(), 1, "only conn 2's message is left");
        let h = m.post(spec(Some(4)), vec![0; 1]);
        assert_eq!(m.take(h).unwrap().unwrap().conn, ConnId(2));
    }
}
