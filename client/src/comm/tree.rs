//! Where a collective's messages go: members are grouped by host (members whose shared
//! memory reaches each other), each host's lowest member is its leader, and the leaders
//! form a binomial tree rooted at member 0 (the leader of its host). A gather climbs
//! from members to their leader and up the leaders' tree; a broadcast goes down the same
//! way. Each crosses the network once per host and direction (issue 11), instead of once
//! per member.

/// One member's place in the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// Where this member's gather goes, and its broadcast comes from (none: member 0).
    pub parent: Option<usize>,
    /// Members that gather into this one (same host first, then other hosts' leaders).
    pub children: Vec<usize>,
}

/// The place of member `me` when member `i` runs on host `hosts[i]`.
pub fn place(hosts: &[u64], me: usize) -> Place {
    // Hosts in the order of their lowest member; member 0's host comes first.
    let mut leaders: Vec<usize> = Vec::new();
    for (i, h) in hosts.iter().enumerate() {
        if !leaders.iter().any(|&l| hosts[l] == *h) {
            leaders.push(i);
        }
    }
    let leader_of = |m: usize| {
        leaders
            .iter()
            .copied()
            .find(|&l| hosts[l] == hosts[m])
            .expect("every host has a leader")
    };
    let locals = |l: usize| {
        (0..hosts.len())
            .filter(move |&m| m != l && hosts[m] == hosts[l])
            .collect::<Vec<_>>()
    };
    let leader = leader_of(me);
    if leader != me {
        return Place {
            parent: Some(leader),
            children: Vec::new(),
        };
    }
    let li = leaders.iter().position(|&l| l == me).expect("a leader");
    // Binomial tree over leader indices: the parent clears the lowest set bit; the
    // children set each lower bit (every bit for the root).
    let parent = (li != 0).then(|| leaders[li & (li - 1)]);
    let low = if li == 0 {
        usize::MAX
    } else {
        li & li.wrapping_neg()
    };
    let mut children = locals(me);
    let mut bit = 1;
    while bit < low && li + bit < leaders.len() {
        children.push(leaders[li + bit]);
        bit <<= 1;
    }
    Place { parent, children }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(hosts: &[u64]) -> Vec<Place> {
        (0..hosts.len()).map(|m| place(hosts, m)).collect()
    }

    /// The tree is one tree: parents and children agree, every member reaches member 0.
    fn check_tree(hosts: &[u64]) {
        let t = tree(hosts);
        assert_eq!(t[0].parent, None);
        for (m, p) in t.iter().enumerate() {
            if let Some(parent) = p.parent {
                assert!(t[parent].children.contains(&m), "{m} → {parent}: {t:?}");
            }
            for &c in &p.children {
                assert_eq!(t[c].parent, Some(m), "{hosts:?}: {t:?}");
            }
            let mut at = m;
            for _ in 0..hosts.len() {
                match t[at].parent {
                    Some(p) => at = p,
                    None => break,
                }
            }
            assert_eq!(at, 0, "member {m} does not reach member 0: {t:?}");
        }
    }

    #[test]
    fn a_collective_crosses_the_network_once_per_host() {
        // 7 members on 3 hosts, interleaved: 2 edges between hosts, whatever the order.
        for hosts in [
            vec![1, 1, 2, 2, 3, 3, 1],
            vec![1, 2, 3, 1, 2, 3, 1],
            vec![5, 5, 5, 5, 5, 5, 5],
        ] {
            check_tree(&hosts);
            let t = tree(&hosts);
            let crossing = t
                .iter()
                .enumerate()
                .filter(|(m, p)| p.parent.is_some_and(|q| hosts[q] != hosts[*m]))
                .count();
            let mut distinct = hosts.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(crossing, distinct.len() - 1, "{hosts:?}: {t:?}");
        }
    }

    #[test]
    fn leaders_form_a_binomial_tree() {
        // 8 hosts of one member each: depth log2(8) = 3, the root has 3 children.
        let hosts: Vec<u64> = (0..8).collect();
        check_tree(&hosts);
        let t = tree(&hosts);
        assert_eq!(t[0].children, vec![1, 2, 4]);
        assert_eq!(t[4].children, vec![5, 6]);
        assert_eq!(t[7].parent, Some(6));
        // Any size, any grouping: still one tree rooted at member 0.
        for n in 1..40u64 {
            check_tree(&(0..n).map(|i| i % 5).collect::<Vec<_>>());
            check_tree(&(0..n).map(|i| i / 3).collect::<Vec<_>>());
        }
    }
}
