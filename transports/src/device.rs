//! The device interface: everything a fabric has to provide, and nothing more.
//!
//! Kept object-safe so the router can hold `Box<dyn Device>`. A new fabric implements
//! address export, on-demand connect/accept, eager or streamed sends, receive matching
//! (shared code in the crate's `matching` module) and a progress function.

use std::time::{Duration, Instant};

use crate::addr::PeerAddrs;
use crate::error::{Result, TransportError};
use crate::header::MsgHeader;

/// Which fabric a device drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// Shared memory between processes on one host.
    Shm,
    /// TCP sockets.
    Tcp,
    /// InfiniBand verbs.
    Verbs,
}

/// A connection on one device, numbered by that device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// A non-blocking send in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SendHandle(pub u64);

/// A posted receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvHandle(pub u64);

/// What a posted receive accepts. `None` fields are wildcards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RecvSpec {
    /// Only messages arriving on this connection.
    pub conn: Option<ConnId>,
    /// Only messages with this source.
    pub source: Option<u64>,
    /// Only messages with this tag.
    pub tag: Option<u64>,
    /// Only messages in this context (always exact, as in MPI).
    pub context_id: u32,
}

impl RecvSpec {
    /// Whether a message with `header` arriving on `conn` matches.
    pub fn matches(&self, conn: ConnId, header: &MsgHeader) -> bool {
        self.conn.is_none_or(|c| c == conn)
            && self.source.is_none_or(|s| s == header.source)
            && self.tag.is_none_or(|t| t == header.tag)
            && self.context_id == header.context_id
    }
}

/// A completed receive: the header, the connection it came on, and the posted buffer
/// truncated to the message length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The message header.
    pub header: MsgHeader,
    /// Connection it arrived on.
    pub conn: ConnId,
    /// The posted buffer, now holding exactly the payload.
    pub data: Vec<u8>,
}

/// What [`Device::recv_fast_path`] did with a receive.
#[derive(Debug)]
pub enum FastRecv {
    /// Completed on the fast path.
    Done(Received),
    /// Not taken: the buffer comes back untouched; nothing was posted or consumed, so
    /// the caller posts it as an ordinary receive.
    Declined(Vec<u8>),
    /// A matching message was partly taken: the rest arrives into this posted receive.
    Posted(RecvHandle),
}

/// A fabric. All calls are non-blocking except the `*_blocking` helpers and
/// [`Device::wait_activity`], which block at most for the given timeout.
pub trait Device: Send {
    /// Which fabric this is.
    fn kind(&self) -> DeviceKind;

    /// This process' address(es) on this device, merged into its [`PeerAddrs`].
    fn local_address(&self, into: &mut PeerAddrs);

    /// Whether this device can reach a peer with these addresses (for the router).
    fn reaches(&self, peer: &PeerAddrs) -> bool;

    /// Connects to the peer (or returns the existing connection to it).
    fn connect(&mut self, peer: &PeerAddrs) -> Result<ConnId>;

    /// Returns a connection a peer opened to us since the last call, if any.
    fn accept(&mut self) -> Result<Option<ConnId>>;

    /// Starts sending `payload`; the handle completes once the data is handed to the
    /// fabric (the buffer is the device's until then). Small messages complete at once.
    fn isend(&mut self, conn: ConnId, header: MsgHeader, payload: Vec<u8>) -> Result<SendHandle>;

    /// Whether the send is complete (`Ok(true)` is returned once, then the handle is gone).
    fn test_send(&mut self, handle: SendHandle) -> Result<bool>;

    /// Sends `payload`, blocking until it is handed to the fabric, with no intermediate
    /// copy of the caller's buffer.
    fn send(
        &mut self,
        conn: ConnId,
        header: MsgHeader,
        payload: &[u8],
        timeout: Duration,
    ) -> Result<()>;

    /// Posts a receive into `buf` (its length is the capacity). Incoming data that matches
    /// goes straight into it; an earlier unexpected message is delivered at once.
    fn post_recv(&mut self, spec: RecvSpec, buf: Vec<u8>) -> Result<RecvHandle>;

    /// Blocking receive into `buf`, for at most about `timeout`. The default posts the
    /// buffer and drives [`Device::progress`]; a device may override it with a fast
    /// path that keeps the same matching rules.
    fn recv(&mut self, spec: RecvSpec, buf: Vec<u8>, timeout: Duration) -> Result<Received> {
        recv_blocking(self, spec, buf, timeout)
    }

    /// The first step of a blocking receive on one connection (`spec.conn` set), for a
    /// caller that drives the device itself (the router, which also has other devices
    /// to progress). A device with a receive fast path tries it, spinning for at most
    /// its spin budget, under the same matching rules as [`Device::post_recv`]; the
    /// default declines at once. [`Device::recv`] is this plus a blocking wait.
    fn recv_fast_path(&mut self, spec: &RecvSpec, buf: Vec<u8>) -> Result<FastRecv> {
        let _ = spec;
        Ok(FastRecv::Declined(buf))
    }

    /// The completed receive, if done (returned once).
    fn test_recv(&mut self, handle: RecvHandle) -> Result<Option<Received>>;

    /// Withdraws a posted receive that no message has matched yet (true), so a timed-out
    /// receive does not swallow a later message. False once a message is matched to it.
    fn cancel_recv(&mut self, handle: RecvHandle) -> Result<bool>;

    /// Header of the first unexpected message matching `spec`, if any (its payload may
    /// still be arriving: a receive posted for it then completes later).
    fn probe(&mut self, spec: &RecvSpec) -> Option<MsgHeader>;

    /// Moves data: drains incoming bytes, pushes queued sends, notices dead peers.
    /// Returns how many events (messages, chunks, connections) happened.
    fn progress(&mut self) -> Result<usize>;

    /// Blocks until something may have happened or `timeout` passed (spin-then-block on
    /// shared memory, `poll(2)` on sockets).
    fn wait_activity(&mut self, timeout: Duration) -> Result<()>;

    /// Closes one connection.
    fn disconnect(&mut self, conn: ConnId) -> Result<()>;

    /// Releases every resource (segments, sockets, queue pairs). Idempotent.
    fn finalize(&mut self) -> Result<()>;
}

impl dyn Device + '_ {
    /// Blocking receive: posts `buf` and drives progress until the message is there.
    pub fn recv_blocking(
        &mut self,
        spec: RecvSpec,
        buf: Vec<u8>,
        timeout: Duration,
    ) -> Result<Received> {
        recv_blocking(self, spec, buf, timeout)
    }
}

/// Blocking receive on any device: post, then progress/wait until done or `timeout`.
pub fn recv_blocking<D: Device + ?Sized>(
    dev: &mut D,
    spec: RecvSpec,
    buf: Vec<u8>,
    timeout: Duration,
) -> Result<Received> {
    let h = dev.post_recv(spec, buf)?;
    wait_recv(dev, h, timeout)
}

/// Drives progress until the posted receive `h` completes, or `timeout` (then it is
/// withdrawn, unless a message matched it meanwhile).
pub(crate) fn wait_recv<D: Device + ?Sized>(
    dev: &mut D,
    h: RecvHandle,
    timeout: Duration,
) -> Result<Received> {
    // The clock is read only once a first bounded wait has passed without the message:
    // on the fast path (message arrives during the first spin) it is never read.
    let first_wait = timeout.min(Duration::from_millis(50));
    let mut deadline: Option<Instant> = None;
    let mut waited = false;
    loop {
        if let Some(r) = dev.test_recv(h)? {
            return Ok(r);
        }
        if dev.progress()? > 0 {
            continue;
        }
        if !waited {
            waited = true;
            dev.wait_activity(first_wait)?;
            continue;
        }
        let now = Instant::now();
        let end = *deadline.get_or_insert(now + timeout.saturating_sub(first_wait));
        if now >= end {
            if !dev.cancel_recv(h)? {
                // Matched meanwhile: it may be complete already.
                if let Some(r) = dev.test_recv(h)? {
                    return Ok(r);
                }
            }
            return Err(TransportError::Timeout(timeout, "a receive"));
        }
        dev.wait_activity((end - now).min(Duration::from_millis(50)))?;
    }
}

/// Waits for a non-blocking send to complete, or `timeout`.
pub fn wait_send<D: Device + ?Sized>(
    dev: &mut D,
    handle: SendHandle,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if dev.test_send(handle)? {
            return Ok(());
        }
        if dev.progress()? > 0 {
            continue;
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(TransportError::Timeout(timeout, "a send"));
        }
        dev.wait_activity((deadline - now).min(Duration::from_millis(50)))?;
    }
}

/// Waits for an incoming connection, or `timeout`.
pub fn accept_blocking<D: Device + ?Sized>(dev: &mut D, timeout: Duration) -> Result<ConnId> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(c) = dev.accept()? {
            return Ok(c);
        }
        dev.progress()?;
        let now = Instant::now();
        if now >= deadline {
            return Err(TransportError::Timeout(timeout, "an incoming connection"));
        }
        dev.wait_activity((deadline - now).min(Duration::from_millis(20)))?;
    }
}

/// Sends a message of each of `sizes` twice from `a` on `ab` to `b`: the first is
/// received through the queues (`slow`, a spec the fast path does not take), the
/// second with `fast`, which must complete on the device's receive fast path
/// (`fast_receives` of `b` goes up by one). Both must arrive whole. For the devices'
/// tests: no message size may leave a connection where the fast path declines it.
#[cfg(test)]
pub(crate) fn assert_every_size_returns_to_the_fast_path<D: Device>(
    (a, ab): (&mut D, ConnId),
    b: &mut D,
    (slow, fast): (RecvSpec, RecvSpec),
    header: MsgHeader,
    sizes: impl Iterator<Item = usize>,
    fast_receives: impl Fn(&D) -> u64,
) {
    let t = Duration::from_secs(10);
    for len in sizes {
        let m = vec![len as u8; len];
        let cap = len.max(1) * 2;
        a.send(ab, MsgHeader { tag: 1, ..header }, &m, t).unwrap();
        let r = recv_blocking(b, slow, vec![0; cap], t).unwrap();
        assert_eq!(r.data, m, "{len} B through the queues");
        a.send(ab, MsgHeader { tag: 2, ..header }, &m, t).unwrap();
        let before = fast_receives(b);
        let r = b.recv(fast, vec![0; cap], t).unwrap();
        assert_eq!((r.header.tag, &r.data), (2, &m), "{len} B");
        assert_eq!(fast_receives(b), before + 1, "{len} B: not the fast path");
    }
}
