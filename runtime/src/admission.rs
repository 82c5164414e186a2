//! Which daemon connections the master keeps while they authenticate, and what it logs
//! about those it drops (`spec/runtime.md`, AUTH-4..AUTH-8). No I/O: the acceptor
//! (`acceptor.rs`) reports arrivals, checked hellos and tags with the current time and
//! does what the answers say, so every rule here is tested in memory.
//!
//! The threat is a stranger on the network, or on the master's own host (same source
//! address as a local daemon), who opens connections faster than daemons can finish
//! their exchange, or keeps them open by sending nothing (or a byte now and then). So:
//! - one deadline per connection for the whole exchange, however its bytes trickle in
//!   (AUTH-6);
//! - a full table drops its oldest connection of the address that holds the most,
//!   never the newcomer: a flood only ever pushes out its own connections, and every
//!   connection, a daemon's included, gets its turn (AUTH-7);
//! - a hello whose tag verifies (the peer holds the key) for a node the master awaits
//!   takes that node's reserved place, outside the table: no stranger can take or
//!   evict it (AUTH-7);
//! - the node is decided before the verdict byte (AUTH-5).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long one authentication exchange may take, from the connection's arrival to
/// the verdict (AUTH-6).
pub const AUTH_BOUND: Duration = Duration::from_secs(10);

/// Most connections waiting without a reserved place (AUTH-7): bounds the master's
/// descriptors and work, not who gets in.
pub const MAX_WAITING: usize = 64;

/// How often refusals are summed up in one log line (AUTH-8).
pub const LOG_WINDOW: Duration = Duration::from_secs(10);

/// A connection the acceptor holds, numbered in arrival order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(u64);

/// Why a connection was closed without becoming a node's link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// Dropped unauthenticated to make room for a newer connection (AUTH-7).
    Evicted,
    /// Did not finish the exchange within [`AUTH_BOUND`] (AUTH-6).
    Expired,
    /// The peer closed it, or it failed, before the verdict.
    Closed,
    /// Not a dynres daemon's hello (AUTH-4).
    Malformed,
    /// A tag that does not verify: the peer does not hold the key (AUTH-4).
    WrongKey,
    /// A hello whose nonce the master has seen before: recorded, not fresh (AUTH-2).
    Replayed,
    /// A key holder for a node that has its daemon already, or lost it (AUTH-5).
    Taken,
    /// A key holder for a node the master started no daemon for (AUTH-5).
    Unknown,
    /// The master could not accept the connection (out of descriptors or memory).
    NotAccepted,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::Evicted => "dropped to make room (too many connections waiting)",
            Refusal::Expired => "did not authenticate in time",
            Refusal::Closed => "closed before authenticating",
            Refusal::Malformed => "not a dynres daemon hello",
            Refusal::WrongKey => "wrong key",
            Refusal::Replayed => "replayed a hello seen before",
            Refusal::Taken => "the node has one already (or is gone)",
            Refusal::Unknown => "no daemon was started for that node",
            Refusal::NotAccepted => "could not be accepted",
        })
    }
}

/// The bounds an [`Admission`] enforces.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most connections waiting without a reserved place.
    pub waiting: usize,
    /// How long an exchange may take (AUTH-6).
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            waiting: MAX_WAITING,
            deadline: AUTH_BOUND,
        }
    }
}

struct Waiting {
    source: IpAddr,
    since: Instant,
    /// The node its checked hello claims.
    node: Option<u32>,
    /// Whether it holds its node's reserved place (AUTH-7).
    reserved: bool,
}

/// The master's table of connections that have not authenticated yet, and of the
/// nodes whose daemons it awaits.
pub struct Admission {
    limits: Limits,
    conns: BTreeMap<ConnId, Waiting>,
    /// Nodes whose daemon was started and has not been accepted (nor given up on).
    awaited: BTreeSet<u32>,
    /// Every node a daemon was started for: tells a taken node from an unknown one.
    started: BTreeSet<u32>,
    /// Nonces of checked hellos: a replayed hello gets no place (AUTH-2). Only key
    /// holders add to it, so it grows with the daemons' tries, not with a flood.
    nonces: HashSet<[u8; 32]>,
    next: u64,
}

impl Admission {
    /// An empty table with `limits`.
    pub fn new(limits: Limits) -> Admission {
        Admission {
            limits,
            conns: BTreeMap::new(),
            awaited: BTreeSet::new(),
            started: BTreeSet::new(),
            nonces: HashSet::new(),
            next: 0,
        }
    }

    /// A daemon is being started for `node`: it may connect (AUTH-5).
    pub fn expect(&mut self, node: u32) {
        self.awaited.insert(node);
        self.started.insert(node);
    }

    /// `node` no longer takes a daemon (lost, given back, or the job ends).
    pub fn forget(&mut self, node: u32) {
        self.awaited.remove(&node);
    }

    /// Connections held, reserved places included.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether no connection is held.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// A connection from `source` arrived at `now`. It is always taken in (AUTH-7); when
    /// the table is full, the oldest connection of the source that holds the most is
    /// dropped to make room and returned, for the caller to close.
    pub fn connected(&mut self, now: Instant, source: IpAddr) -> (ConnId, Option<ConnId>) {
        let evicted = if self.unreserved() >= self.limits.waiting {
            self.victim()
        } else {
            None
        };
        if let Some(v) = evicted {
            self.conns.remove(&v);
        }
        let id = ConnId(self.next);
        self.next += 1;
        self.conns.insert(
            id,
            Waiting {
                source,
                since: now,
                node: None,
                reserved: false,
            },
        );
        (id, evicted)
    }

    fn unreserved(&self) -> usize {
        self.conns.values().filter(|w| !w.reserved).count()
    }

    /// The oldest unreserved connection of the source holding the most unreserved ones
    /// (of those, the source whose oldest is oldest).
    fn victim(&self) -> Option<ConnId> {
        // Ids grow with arrival: the first seen per source is its oldest.
        let mut per_source: BTreeMap<IpAddr, (usize, ConnId)> = BTreeMap::new();
        for (id, w) in self.conns.iter().filter(|(_, w)| !w.reserved) {
            per_source.entry(w.source).or_insert((0, *id)).0 += 1;
        }
        per_source
            .into_values()
            .max_by(|(n1, oldest1), (n2, oldest2)| n1.cmp(n2).then(oldest2.cmp(oldest1)))
            .map(|(_, oldest)| oldest)
    }

    /// Connection `id` sent a hello whose tag verified, claiming `node` with `nonce`.
    /// If the master awaits `node` and no other key holder holds its place, the
    /// connection takes it and can no longer be evicted (AUTH-7). A nonce seen before
    /// is refused (the connection is forgotten; the caller closes it).
    pub fn hello(&mut self, id: ConnId, node: u32, nonce: [u8; 32]) -> Result<(), Refusal> {
        if !self.nonces.insert(nonce) {
            self.conns.remove(&id);
            return Err(Refusal::Replayed);
        }
        let free = self.awaited.contains(&node)
            && !self
                .conns
                .values()
                .any(|w| w.reserved && w.node == Some(node));
        let Some(w) = self.conns.get_mut(&id) else {
            return Err(Refusal::Closed);
        };
        w.node = Some(node);
        w.reserved = free;
        Ok(())
    }

    /// Connection `id`'s answer to the challenge verified: the node it may serve, or
    /// why not (AUTH-5). Either way the connection leaves the table; a node is given
    /// once.
    pub fn verified(&mut self, id: ConnId) -> Result<u32, Refusal> {
        let node = self
            .conns
            .remove(&id)
            .and_then(|w| w.node)
            .ok_or(Refusal::Closed)?;
        if self.awaited.remove(&node) {
            Ok(node)
        } else if self.started.contains(&node) {
            Err(Refusal::Taken)
        } else {
            Err(Refusal::Unknown)
        }
    }

    /// Connection `id` is closed (or refused) by the caller.
    pub fn closed(&mut self, id: ConnId) {
        self.conns.remove(&id);
    }

    /// The connections whose exchange ran out of time at `now` (AUTH-6), forgotten;
    /// the caller closes them.
    pub fn expired(&mut self, now: Instant) -> Vec<ConnId> {
        let deadline = self.limits.deadline;
        let late: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, w)| now.saturating_duration_since(w.since) >= deadline)
            .map(|(id, _)| *id)
            .collect();
        for id in &late {
            self.conns.remove(id);
        }
        late
    }

    /// When the next connection runs out of time, if any is held.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.conns
            .values()
            .map(|w| w.since + self.limits.deadline)
            .min()
    }
}

/// Refusals as log lines, bounded (AUTH-8): the first after a quiet [`LOG_WINDOW`] is
/// logged at once with its peer; later ones are counted by reason and summed up in one
/// line per window.
pub struct RefusalLog {
    window: Duration,
    /// When the last line was logged.
    last: Option<Instant>,
    held: BTreeMap<Refusal, u64>,
}

impl RefusalLog {
    /// A log that writes at most one summary per `window`.
    pub fn new(window: Duration) -> RefusalLog {
        RefusalLog {
            window,
            last: None,
            held: BTreeMap::new(),
        }
    }

    fn quiet(&self, now: Instant) -> bool {
        self.last
            .is_none_or(|t| now.saturating_duration_since(t) >= self.window)
    }

    /// `who` (its address, and what it claimed) was refused for `why` at `now`: the
    /// line to log now, if any.
    pub fn refused(&mut self, now: Instant, why: Refusal, who: &str) -> Option<String> {
        if self.held.is_empty() && self.quiet(now) {
            self.last = Some(now);
            return Some(format!("refused a daemon connection from {who}: {why}"));
        }
        *self.held.entry(why).or_default() += 1;
        self.tick(now)
    }

    /// The summary due at `now`, if a window has passed since the last line and
    /// refusals were held back.
    pub fn tick(&mut self, now: Instant) -> Option<String> {
        if self.held.is_empty() || !self.quiet(now) {
            return None;
        }
        self.flush(now)
    }

    /// The summary of what is held back, whatever the time (when the master stops
    /// accepting).
    pub fn flush(&mut self, now: Instant) -> Option<String> {
        if self.held.is_empty() {
            return None;
        }
        let since = self
            .last
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        self.last = Some(now);
        let held = std::mem::take(&mut self.held);
        let total: u64 = held.values().sum();
        let reasons: Vec<String> = held.iter().map(|(why, n)| format!("{n} {why}")).collect();
        Some(format!(
            "refused {total} more daemon connection{} in the last {:.1} s: {}",
            if total == 1 { "" } else { "s" },
            since.as_secs_f64(),
            reasons.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// A table of `waiting` places awaiting daemons for `nodes`.
    fn table(waiting: usize, nodes: &[u32]) -> Admission {
        let mut a = Admission::new(Limits {
            waiting,
            deadline: AUTH_BOUND,
        });
        for n in nodes {
            a.expect(*n);
        }
        a
    }

    /// AUTH-6: the deadline is the exchange's, from the connection's arrival: a peer
    /// that trickles bytes (nothing here counts them) is dropped at it all the same,
    /// and so is a key holder that stalls in its reserved place.
    #[test]
    fn a_slow_loris_is_dropped_at_the_whole_exchange_deadline() {
        let t0 = Instant::now();
        let mut a = table(8, &[1]);
        let (loris, _) = a.connected(t0, ip(9));
        let (stalling, _) = a.connected(t0 + secs(1.0), ip(2));
        a.hello(stalling, 1, [1; 32]).unwrap();
        assert_eq!(a.next_deadline(), Some(t0 + AUTH_BOUND));
        // Nothing is late a moment before the deadline, however long it has been.
        assert!(a.expired(t0 + AUTH_BOUND - secs(0.001)).is_empty());
        assert_eq!(a.expired(t0 + AUTH_BOUND), vec![loris]);
        assert_eq!(a.next_deadline(), Some(t0 + secs(1.0) + AUTH_BOUND));
        assert_eq!(a.expired(t0 + secs(11.0)), vec![stalling]);
        assert!(a.is_empty());
        // Its node is still awaited: the daemon's next try can take it.
        let (retry, _) = a.connected(t0 + secs(12.0), ip(2));
        a.hello(retry, 1, [2; 32]).unwrap();
        assert_eq!(a.verified(retry), Ok(1));
    }

    /// AUTH-7: a full table drops the flooding source's oldest connection, never the
    /// newcomer and never another source's: a daemon on another host is not touched by
    /// a flood, however long.
    #[test]
    fn a_flood_from_one_address_only_evicts_its_own_connections() {
        let t0 = Instant::now();
        let mut a = table(8, &[1]);
        let (daemon, _) = a.connected(t0, ip(2));
        let mut flood = Vec::new();
        for i in 0..10_000u32 {
            let (id, evicted) = a.connected(t0 + secs(f64::from(i) * 1e-5), ip(9));
            flood.push(id);
            if let Some(e) = evicted {
                assert_ne!(e, daemon, "evicted the daemon at arrival {i}");
                assert!(flood.contains(&e));
                // Oldest first: the flood's own oldest still held.
                assert_eq!(e, flood[flood.len() - 8]);
            }
            assert!(a.len() <= 8);
        }
        a.hello(daemon, 1, [1; 32]).unwrap();
        assert_eq!(a.verified(daemon), Ok(1));
    }

    /// AUTH-7: from the daemon's own address (a stranger on its host), a flood can
    /// delay a daemon but not keep it out: a connection is never refused on arrival,
    /// it is dropped only after every older one of its address, and once its hello
    /// verified it holds the node's place, which no flood evicts.
    #[test]
    fn a_flood_cannot_keep_the_expected_daemon_out() {
        let t0 = Instant::now();
        let mut a = table(8, &[1]);
        let local = ip(1);
        // The table is full of the stranger's connections when the daemon arrives.
        for _ in 0..8 {
            a.connected(t0, local);
        }
        let (daemon, evicted) = a.connected(t0, local);
        assert!(evicted.is_some_and(|e| e != daemon), "the newcomer stays");
        // Seven more arrivals do not reach it: older ones go first.
        for _ in 0..7 {
            assert_ne!(a.connected(t0, local).1, Some(daemon));
        }
        // Its hello arrives: it holds node 1's place from now on.
        a.hello(daemon, 1, [1; 32]).unwrap();
        for _ in 0..1000 {
            assert_ne!(a.connected(t0, local).1, Some(daemon));
        }
        // A stranger replaying the daemon's hello (same nonce) gets no place.
        let (replay, _) = a.connected(t0, local);
        assert_eq!(a.hello(replay, 1, [1; 32]), Err(Refusal::Replayed));
        assert_eq!(a.verified(daemon), Ok(1));
    }

    /// Without the reserved place the daemon's connection would have gone with the
    /// flood: the newest unreserved connection is dropped after `waiting` arrivals.
    #[test]
    fn an_unreserved_connection_goes_after_every_older_one() {
        let t0 = Instant::now();
        let mut a = table(4, &[]);
        let (first, _) = a.connected(t0, ip(1));
        let evicted: Vec<ConnId> = (0..4).filter_map(|_| a.connected(t0, ip(1)).1).collect();
        assert_eq!(evicted, vec![first]);
    }

    /// AUTH-5: a node is given once, to a key holder whose exchange finished first;
    /// a second claim, or one for a node never started or no longer awaited, is
    /// refused, with the reason.
    #[test]
    fn a_node_is_given_once_and_only_if_started() {
        let t0 = Instant::now();
        let mut a = table(8, &[1, 2]);
        let (first, _) = a.connected(t0, ip(2));
        let (second, _) = a.connected(t0, ip(2));
        let (unknown, _) = a.connected(t0, ip(2));
        let (gone, _) = a.connected(t0, ip(3));
        a.hello(first, 1, [1; 32]).unwrap();
        a.hello(second, 1, [2; 32]).unwrap();
        a.hello(unknown, 7, [3; 32]).unwrap();
        a.hello(gone, 2, [4; 32]).unwrap();
        // The second claim verifies first: the node is its, the place-holder's refused.
        assert_eq!(a.verified(second), Ok(1));
        assert_eq!(a.verified(first), Err(Refusal::Taken));
        assert_eq!(a.verified(unknown), Err(Refusal::Unknown));
        a.forget(2);
        assert_eq!(a.verified(gone), Err(Refusal::Taken));
        assert!(a.is_empty());
    }

    /// AUTH-8: the first refusal is logged with its peer, the rest of the window only
    /// counted; one summary per window names the counts by reason, and what is held
    /// when the master stops is logged then.
    #[test]
    fn refusals_are_logged_once_per_window_with_counts() {
        let t0 = Instant::now();
        let mut log = RefusalLog::new(LOG_WINDOW);
        assert_eq!(
            log.refused(t0, Refusal::WrongKey, "10.0.0.9:4000")
                .as_deref(),
            Some("refused a daemon connection from 10.0.0.9:4000: wrong key")
        );
        let mut lines = 0;
        for i in 0..3674u32 {
            let why = if i % 2 == 0 {
                Refusal::Evicted
            } else {
                Refusal::Expired
            };
            let at = t0 + secs(f64::from(i) * 0.001);
            lines += usize::from(log.refused(at, why, "10.0.0.9:4001").is_some());
        }
        assert_eq!(lines, 0, "held back within the window");
        assert_eq!(log.tick(t0 + secs(9.9)), None);
        assert_eq!(
            log.tick(t0 + LOG_WINDOW).as_deref(),
            Some(
                "refused 3674 more daemon connections in the last 10.0 s: \
                 1837 dropped to make room (too many connections waiting), \
                 1837 did not authenticate in time"
            )
        );
        assert_eq!(log.tick(t0 + secs(30.0)), None, "nothing held");
        // Within a window of the summary, one more is held, then flushed at the end.
        assert_eq!(log.refused(t0 + secs(12.0), Refusal::Taken, "x"), None);
        assert_eq!(
            log.flush(t0 + secs(13.0)).as_deref(),
            Some(
                "refused 1 more daemon connection in the last 3.0 s: \
                 1 the node has one already (or is gone)"
            )
        );
        assert_eq!(log.flush(t0 + secs(14.0)), None);
        // After a quiet window, a refusal is logged at once again.
        assert!(log.refused(t0 + secs(40.0), Refusal::Closed, "y").is_some());
    }
}
