//! `MPI_Intercomm_merge`: one intra-group out of an inter-group.

use alloc::vec::Vec;

use crate::process::Rank;

use super::group::InterGroup;
use super::msg::Addr;
use super::role::Role;

/// The merged intra-group as one process sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MergedGroup {
    /// `members[r]` = (group id, rank in that group) of merged rank `r`.
    pub members: Vec<(u64, Rank)>,
    /// `endpoints[r]`: merged rank `r`'s address.
    pub endpoints: Vec<Addr>,
    /// This process's merged rank.
    pub rank: Rank,
}

/// Merges `ig`. `local_high` is this group's `high` argument (the same on all its
/// members), `remote_high` the other group's, learned over the inter-group.
///
/// SPAWN-15: the group that passed `high = false` comes first; if both passed the same
/// value, the group with the smaller group id comes first (the acceptor's if equal), so
/// both sides compute the same order without talking again.
pub fn merge(ig: &InterGroup, local_high: bool, remote_high: bool) -> MergedGroup {
    merge_with(ig, local_high, remote_high, crate::bugs::Bugs::NONE)
}

/// Verification builds only: [`merge`] with planted bugs, so the models check the merge
/// order the shipped code computes and a planted variant of it.
#[cfg(feature = "planted-bugs")]
pub fn merge_planted(
    ig: &InterGroup,
    local_high: bool,
    remote_high: bool,
    bugs: crate::bugs::Bugs,
) -> MergedGroup {
    merge_with(ig, local_high, remote_high, bugs)
}

/// Planted `MergeTieLocalFirst`: on equal group ids each side puts itself first, so
/// the two sides disagree on the order.
fn planted_tie_local_first(ig: &InterGroup) -> bool {
    ig.local.group_id <= ig.remote.group_id
}

fn merge_with(
    ig: &InterGroup,
    local_high: bool,
    remote_high: bool,
    bugs: crate::bugs::Bugs,
) -> MergedGroup {
    let local_first = if local_high != remote_high {
        !local_high
    } else if bugs.has(crate::bugs::Bug::MergeTieLocalFirst) {
        planted_tie_local_first(ig)
    } else {
        (ig.local.group_id, ig.role != Role::Acceptor)
            < (ig.remote.group_id, ig.role == Role::Acceptor)
    };
    let local = (ig.local.group_id, &ig.local_endpoints);
    let remote = (ig.remote.group_id, &ig.remote_endpoints);
    let (first, second) = if local_first {
        (local, remote)
    } else {
        (remote, local)
    };
    let mut members = Vec::with_capacity(first.1.len() + second.1.len());
    let mut endpoints = Vec::with_capacity(members.capacity());
    for (gid, eps) in [first, second] {
        for (r, a) in eps.iter().enumerate() {
            members.push((gid, r as Rank));
            endpoints.push(a.clone());
        }
    }
    let offset = if local_first {
        0
    } else {
        ig.remote_endpoints.len() as Rank
    };
    MergedGroup {
        members,
        endpoints,
        rank: offset + ig.local_rank,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spawn::GroupHeader;
    use alloc::vec;

    fn pair() -> (InterGroup, InterGroup) {
        let a = GroupHeader {
            group_id: 5,
            size: 2,
            context_id: 1,
        };
        let b = GroupHeader {
            group_id: 9,
            size: 1,
            context_id: 3,
        };
        let ea = vec![Addr(vec![0xa0]), Addr(vec![0xa1])];
        let eb = vec![Addr(vec![0xb0])];
        let mk = |role, local, remote, le: &Vec<Addr>, re: &Vec<Addr>, rank| InterGroup {
            session: 9,
            role,
            local_rank: rank,
            local,
            remote,
            local_endpoints: le.clone(),
            remote_endpoints: re.clone(),
            data_key: crate::spawn::BootKey::default(),
        };
        (
            mk(Role::Acceptor, a, b, &ea, &eb, 1),
            mk(Role::Initiator, b, a, &eb, &ea, 0),
        )
    }

    #[test]
    fn both_sides_agree_on_the_order() {
        // SPAWN-15
        let (a, b) = pair();
        for (ha, hb) in [(false, false), (false, true), (true, false), (true, true)] {
            let ma = merge(&a, ha, hb);
            let mb = merge(&b, hb, ha);
            assert_eq!(ma.members, mb.members);
            assert_eq!(ma.endpoints, mb.endpoints);
            assert_ne!(ma.rank, mb.rank);
            assert_eq!(ma.members[ma.rank as usize], (5, 1));
            assert_eq!(mb.members[mb.rank as usize], (9, 0));
        }
        // A low group goes first.
        assert_eq!(merge(&a, true, false).members[0], (9, 0));
        assert_eq!(merge(&a, false, true).members[0], (5, 0));
        // Tie: the smaller group id goes first.
        assert_eq!(merge(&b, true, true).members[0], (5, 0));
    }
}
