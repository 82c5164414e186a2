//! The adapter stores each actor's fingerprint after its step instead of hashing every
//! state the checker generates (`adapter::RcState::seal`). That is only sound if every
//! step that changes an actor's state also reseals it: a stale fingerprint would make
//! two different states one, and the checker would skip the second unexplored. These
//! tests walk a configuration breadth first and recompute every actor's fingerprint,
//! and every message's in flight (`adapter::Msg`, hashed once when sent).

use std::collections::{HashSet, VecDeque};

use dynres_verification::adapter::Msg;
use dynres_verification::fair::FairRc;
use dynres_verification::models::{RcModelState, pr_configs};
use stateright::Model;
use stateright::actor::Network;

/// Every actor state of every state reached in up to `limit` states has its current
/// fingerprint; returns how many states were checked.
fn walk<M: Model<State = RcModelState>>(model: &M, limit: usize) -> usize {
    let mut seen: HashSet<RcModelState> = HashSet::new();
    let mut queue: VecDeque<RcModelState> = model.init_states().into();
    while let Some(state) = queue.pop_front() {
        if seen.len() >= limit || !seen.insert(state.clone()) {
            continue;
        }
        for (i, actor) in state.actor_states.iter().enumerate() {
            assert!(
                actor.fingerprint_is_current(),
                "actor {i} holds a stale fingerprint after {} states",
                seen.len()
            );
        }
        // Messages carry the fingerprint computed when they were sent. (Every message of
        // an ordered channel, not only its head; stateright 0.31's `iter_all` repeats an
        // ordered channel's head forever, so the channels are read directly.)
        let in_flight: Vec<&Msg> = match &state.network {
            Network::Ordered(channels) => channels.values().flatten().collect(),
            other => other.iter_deliverable().map(|env| env.msg).collect(),
        };
        for msg in in_flight {
            assert!(
                msg.fingerprint_is_current(),
                "message {msg:?} holds a stale fingerprint"
            );
        }
        queue.extend(model.next_states(&state));
    }
    seen.len()
}

#[test]
fn every_reached_actor_state_holds_its_current_fingerprint() {
    // One of each kind of actor step: changes with a crash, a node loss, growth, the
    // modex, a spawn, two applications' changes at once, and the fair models' Begin
    // timer.
    for name in [
        "rc-add-crash-1n-2e-1new",
        "rc-add-nodeloss-2n-2e-1new",
        "rc-grow-1n-2e-1new",
        "rc-modex-loss-2n-3e",
        "rc-spawn-add-1n-2e-2new",
        "rc-sub-2leaders-1n-3e",
        "rc-2apps-sub-add-1n-3e-1new",
    ] {
        let cfg = pr_configs()
            .into_iter()
            .find(|c| c.name == name)
            .expect("configuration exists");
        let checked = walk(&cfg.model(), 3_000);
        assert!(checked >= 3_000, "{name}: only {checked} states");
        let fair = walk(&FairRc::new(&cfg), 3_000);
        assert!(fair > 100, "fair-{name}: only {fair} states");
    }
}
