//! `get_res_change` semantics (thesis §6.2.2 Lst. 6.1; `RC-4`), shared by the daemons
//! (answering from their replica) and the master.

use crate::process::ProcessId;
use crate::pset::{Domain, PsetName};

use super::types::{ChangeInfo, QueryAnswer};

/// The epoch encoded in a delta pset's name (`mpi://rte/{app}/rc/{epoch}`, `PSET-4`).
pub fn delta_epoch(delta: &PsetName) -> u64 {
    delta
        .path()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Answers a query of `caller` (of application `app`, if known) about `bound` against
/// the queryable changes `changes`:
/// - no bound: changes bound to `mpi://app/{app}`;
/// - `mpi://SELF`: the change whose delta pset(s) contain the caller;
/// - a pset: changes bound to that pset.
///
/// An undecided change wins over a decided (aborted) one; among those the latest. `incl`
/// says whether the caller is in a delta pset of the change.
pub fn answer<'a>(
    changes: impl Iterator<Item = &'a ChangeInfo>,
    app: Option<&str>,
    caller: &ProcessId,
    bound: Option<&PsetName>,
) -> QueryAnswer {
    let root = app.and_then(|a| PsetName::app_root(a).ok());
    let wanted = match bound {
        None => root.as_ref(),
        Some(b) => Some(b),
    };
    let matches = |c: &&ChangeInfo| match wanted {
        Some(b) if b.domain() == Domain::SelfSet => c.includes(caller),
        Some(b) => c.bound.contains(b) && app.is_none_or(|a| a == c.app),
        None => false,
    };
    let best = changes
        .filter(matches)
        .max_by_key(|c| (!c.status.is_final(), delta_epoch(&c.delta)));
    match best {
        None => QueryAnswer::none(),
        Some(c) => QueryAnswer {
            kind: Some(c.kind),
            delta: Some(c.delta.clone()),
            sub_delta: c.sub_delta.clone(),
            incl: c.includes(caller),
            status: c.status,
        },
    }
}
