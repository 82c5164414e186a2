//! When emptied nodes go back to the resource manager (`spec/runtime.md` GROW-4,
//! RC-20, GROW-2), as a sans-I/O machine in the kernel's shape: the driver reports the
//! nodes core released and whether another node that would be given back is still
//! being emptied (core's `SlotMap::is_emptying`), with the time; the machine says when
//! the held nodes go, in one batch, so that nodes one change empties reach the resource
//! manager in one update — but never later than its bound after the first was held.
//!
//! Its transitions are recorded for trace conformance (`spec/verification.md` §6; role
//! `giveback`, encodings in [`super::trace`]).

use alloc::collections::{BTreeSet, VecDeque};
use alloc::string::ToString;
use alloc::vec::Vec;

use super::trace;
use crate::bugs::{Bug, Bugs};
use crate::time::{Duration, Instant};
use crate::trace::InstanceTag;

/// GROW-4: the longest an emptied node waits for the nodes emptied alongside it.
pub const HOLD_BOUND: Duration = Duration::from_secs(30);

/// What happened, for [`GiveBack::handle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GiveBackInput {
    /// Core released `node`: it holds no process and is to be given back.
    Released {
        /// The node.
        node: u32,
    },
    /// Whether some other node that would be given back is still being emptied
    /// (its processes are all leaving), as core's slot map says now.
    Emptying(bool),
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GiveBackOutput {
    /// Offer these nodes back (core's `NodeReturned` for each, then one resource
    /// manager update for those it accepts, GROW-4).
    Offer {
        /// The batch, in node order.
        nodes: Vec<u32>,
        /// They went without the nodes still emptying: the bound passed.
        overdue: bool,
    },
}

/// The nodes held for a batch (GROW-4).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GiveBack {
    bound: Duration,
    bugs: Bugs,
    held: BTreeSet<u32>,
    /// When the first of `held` was held while others were emptying.
    since: Option<Instant>,
    out: VecDeque<GiveBackOutput>,
    /// Which machine of a trace this is: the engine replaces its machine (not state).
    tag: InstanceTag,
}

impl Default for GiveBack {
    fn default() -> Self {
        Self::new(HOLD_BOUND)
    }
}

impl GiveBack {
    /// A machine that holds nodes at most `bound`.
    pub fn new(bound: Duration) -> Self {
        Self::with_bugs(bound, Bugs::NONE)
    }

    /// [`GiveBack::new`] with planted bugs (the verification crate's models).
    pub fn with_bugs(bound: Duration, bugs: Bugs) -> Self {
        let mut m = GiveBack {
            bound,
            bugs,
            held: BTreeSet::new(),
            since: None,
            out: VecDeque::new(),
            tag: InstanceTag::default(),
        };
        let start = crate::trace::enabled().then(|| trace::encode_giveback_start(bound));
        crate::trace::record_start(&mut m, start);
        m
    }

    /// The nodes held now.
    pub fn held(&self) -> &BTreeSet<u32> {
        &self.held
    }

    /// Takes what happened at `now`. A release alone decides nothing: the driver
    /// follows it with [`GiveBackInput::Emptying`], which decides whether the held
    /// nodes go.
    pub fn handle(&mut self, now: Instant, input: GiveBackInput) {
        crate::trace::record_infallible(self, now, input, Self::step);
    }

    /// A fingerprint of the state without the outputs not yet drained.
    pub fn fingerprint(&mut self) -> u64 {
        crate::machine::fingerprint_without_queue(self, |m| &mut m.out)
    }

    /// [`GiveBack::handle`] without its transition event.
    fn step(&mut self, now: Instant, input: GiveBackInput) {
        match input {
            GiveBackInput::Released { node } => {
                self.held.insert(node);
                if self.since.is_some() && self.bugs.has(Bug::HoldRestartsOnRelease) {
                    self.since = Some(now);
                }
            }
            GiveBackInput::Emptying(others) => {
                let others = others && !self.bugs.has(Bug::OfferWithoutHold);
                if self.held.is_empty() {
                    return;
                }
                let overdue = match (others, self.since) {
                    (false, _) => false,
                    (true, None) => {
                        self.since = Some(now);
                        return;
                    }
                    (true, Some(t)) if now - t < self.bound => return,
                    (true, Some(_)) => true,
                };
                self.since = None;
                let nodes = core::mem::take(&mut self.held).into_iter().collect();
                self.out.push_back(GiveBackOutput::Offer { nodes, overdue });
            }
        }
    }

    /// The next thing the driver must do.
    pub fn poll_output(&mut self) -> Option<GiveBackOutput> {
        self.out.pop_front()
    }

    /// When the held nodes go at the latest: the driver then asks again
    /// ([`GiveBackInput::Emptying`]).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.since.map(|t| t + self.bound)
    }
}

crate::machine::infallible_by_inherent_methods!(GiveBack, GiveBackInput, GiveBackOutput);

impl crate::trace::Recorded for GiveBack {
    const ROLE: &'static str = trace::ROLE_GIVEBACK;
    // Nothing is ever refused.
    const RESULT: crate::trace::ResultRecord = crate::trace::ResultRecord::Omitted;
    fn key(&self) -> crate::trace::TraceKey {
        crate::trace::TraceKey::Id(self.tag.0.to_string())
    }
    fn queue(&mut self) -> &mut VecDeque<GiveBackOutput> {
        &mut self.out
    }
    fn tag(&mut self) -> Option<&mut InstanceTag> {
        Some(&mut self.tag)
    }
    fn encode_input(input: &GiveBackInput) -> Vec<u8> {
        trace::encode_giveback_input(input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> Instant {
        Instant::ZERO + Duration::from_secs(s)
    }

    fn offer(nodes: &[u32], overdue: bool) -> Option<GiveBackOutput> {
        Some(GiveBackOutput::Offer {
            nodes: nodes.to_vec(),
            overdue,
        })
    }

    /// GROW-4: with nothing else emptying a released node goes at once, alone.
    #[test]
    fn a_node_goes_at_once_when_nothing_else_empties() {
        let mut g = GiveBack::default();
        g.handle(at(1), GiveBackInput::Emptying(false));
        assert_eq!(g.poll_output(), None, "nothing held, nothing offered");
        g.handle(at(1), GiveBackInput::Released { node: 3 });
        assert_eq!(g.poll_output(), None, "a release alone decides nothing");
        g.handle(at(1), GiveBackInput::Emptying(false));
        assert_eq!(g.poll_output(), offer(&[3], false));
        assert!(g.held().is_empty() && g.poll_timeout().is_none());
    }

    /// GROW-4: nodes one change empties go back together, once the last is released.
    #[test]
    fn nodes_emptied_together_go_together() {
        let mut g = GiveBack::default();
        g.handle(at(1), GiveBackInput::Released { node: 2 });
        g.handle(at(1), GiveBackInput::Emptying(true));
        assert_eq!(g.poll_output(), None);
        assert_eq!(g.poll_timeout(), Some(at(31)));
        g.handle(at(5), GiveBackInput::Released { node: 1 });
        g.handle(at(5), GiveBackInput::Emptying(true));
        assert_eq!(
            g.poll_output(),
            None,
            "the hold runs from the first, not the last"
        );
        assert_eq!(g.poll_timeout(), Some(at(31)));
        g.handle(at(6), GiveBackInput::Released { node: 4 });
        g.handle(at(6), GiveBackInput::Emptying(false));
        assert_eq!(g.poll_output(), offer(&[1, 2, 4], false));
        assert_eq!(g.poll_timeout(), None);
    }

    /// GROW-4: a node that cannot be emptied keeps the others at most the bound.
    #[test]
    fn the_hold_is_bounded() {
        let mut g = GiveBack::new(Duration::from_secs(30));
        g.handle(at(10), GiveBackInput::Released { node: 7 });
        g.handle(at(10), GiveBackInput::Emptying(true));
        g.handle(at(39), GiveBackInput::Emptying(true));
        assert_eq!(g.poll_output(), None, "29 s: still held");
        g.handle(at(40), GiveBackInput::Emptying(true));
        assert_eq!(g.poll_output(), offer(&[7], true));
        // The next release starts a hold of its own.
        g.handle(at(41), GiveBackInput::Released { node: 8 });
        g.handle(at(41), GiveBackInput::Emptying(true));
        assert_eq!(g.poll_output(), None);
        assert_eq!(g.poll_timeout(), Some(at(71)));
    }
}
