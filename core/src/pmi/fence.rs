//! A PMIx fence across nodes as the kernel's modex (`spec/pmi.md` PMIS-14).
//!
//! libpmix hands each node's server one opaque blob per fence — what the node's
//! processes posted — and wants back every participating node's blob, concatenated.
//! The kernel already gathers one value per member process across nodes (the modex,
//! MODEX-1..6), so a node's blob travels as the modex values of its local participants:
//! [`split`] cuts it into one part per local participant, each tagged with the node and
//! the part's place, and [`join`] puts every node's blob back together from the table
//! the modex returns. A part fits a modex value ([`MAX_VALUE_LEN`]), so a node's blob
//! may be at most [`capacity`] bytes; a larger one is refused, never cut short.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::process::ProcessId;
use crate::rc::wire::MAX_VALUE_LEN;
use crate::trace::{hex, unhex};

/// The prefix of every part: a modex value without it is not a fence part.
const TAG: &str = "pmixf:";

/// The longest tag of a part: `pmixf:` and two decimal `u32`s with their colons.
const HEADER: usize = TAG.len() + 2 * (10 + 1);

/// Why a fence's data cannot travel or be put back together.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FenceError {
    /// The node's blob is larger than its participants' modex values can carry.
    #[error("{bytes} bytes of fence data from {parts} process(es) exceed their {capacity}")]
    TooLarge {
        /// The blob's size.
        bytes: usize,
        /// The node's participants.
        parts: usize,
        /// What they can carry ([`capacity`]).
        capacity: usize,
    },
    /// A node has no participant to carry its blob.
    #[error("no local process takes part in the fence")]
    NoParticipant,
    /// A modex value is not a well-formed part.
    #[error("not a fence part: {0}")]
    Malformed(String),
    /// A node's parts are not numbered `0..n` without a gap or a repeat.
    #[error("the fence parts of node {0} are missing or repeated")]
    Incomplete(u32),
}

/// The most bytes of fence data `parts` local participants can carry.
pub fn capacity(parts: usize) -> usize {
    parts.saturating_mul((MAX_VALUE_LEN - HEADER) / 2)
}

/// Node `node`'s blob as `parts` modex values, in the order of the participants that
/// carry them (the first part goes with the first participant).
pub fn split(node: u32, data: &[u8], parts: usize) -> Result<Vec<String>, FenceError> {
    if parts == 0 {
        return Err(FenceError::NoParticipant);
    }
    if data.len() > capacity(parts) {
        return Err(FenceError::TooLarge {
            bytes: data.len(),
            parts,
            capacity: capacity(parts),
        });
    }
    // Evenly, so that no part is larger than it must be; empty parts for an empty blob.
    let each = data.len().div_ceil(parts).max(1);
    let mut chunks = data.chunks(each);
    Ok((0..parts)
        .map(|i| {
            let chunk = chunks.next().unwrap_or(&[]);
            format!("{TAG}{node}:{i}:{}", hex(chunk))
        })
        .collect())
}

/// Every node's blob put back together from the modex table `entries`, concatenated in
/// node order: the fence's answer.
pub fn join(entries: &[(ProcessId, String)]) -> Result<Vec<u8>, FenceError> {
    let mut nodes: BTreeMap<u32, BTreeMap<u32, Vec<u8>>> = BTreeMap::new();
    for (pid, value) in entries {
        let bad = || FenceError::Malformed(format!("{pid}: {value:.40}"));
        let rest = value.strip_prefix(TAG).ok_or_else(bad)?;
        let mut fields = rest.splitn(3, ':');
        let (Some(node), Some(i), Some(bytes)) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(bad());
        };
        let node: u32 = node.parse().map_err(|_| bad())?;
        let i: u32 = i.parse().map_err(|_| bad())?;
        let bytes = unhex(bytes).ok_or_else(bad)?;
        if nodes.entry(node).or_default().insert(i, bytes).is_some() {
            return Err(FenceError::Incomplete(node));
        }
    }
    let mut out = Vec::new();
    for (node, parts) in nodes {
        // BTreeMap keys are sorted: numbered 0..n exactly when the last is n - 1.
        if parts.keys().next_back().map(|&k| k as usize + 1) != Some(parts.len()) {
            return Err(FenceError::Incomplete(node));
        }
        for bytes in parts.into_values() {
            out.extend(bytes);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::Namespace;

    fn table(values: Vec<String>) -> Vec<(ProcessId, String)> {
        (0u32..)
            .zip(values)
            .map(|(r, v)| (ProcessId::new(Namespace::new("j"), r), v))
            .collect()
    }

    /// PMIS-14: every node's blob comes back whole, in node order, whatever the order
    /// of the table (it is ordered by process, not by node).
    #[test]
    fn blobs_of_several_nodes_come_back_whole_in_node_order() {
        let a: Vec<u8> = (0..=255).collect();
        let b = b"node one".to_vec();
        let mut values = split(1, &b, 3).unwrap();
        values.extend(split(0, &a, 2).unwrap());
        values.extend(split(2, &[], 1).unwrap());
        let joined = join(&table(values)).unwrap();
        let mut want = a.clone();
        want.extend(&b);
        assert_eq!(joined, want);
    }

    #[test]
    fn every_part_fits_a_modex_value_up_to_the_capacity_and_no_further() {
        for parts in [1, 2, 7] {
            let full = alloc::vec![0xab; capacity(parts)];
            let values = split(3, &full, parts).unwrap();
            assert_eq!(values.len(), parts);
            assert!(values.iter().all(|v| v.len() <= MAX_VALUE_LEN));
            assert_eq!(join(&table(values)).unwrap(), full);
            let over = alloc::vec![0; capacity(parts) + 1];
            assert!(matches!(
                split(3, &over, parts),
                Err(FenceError::TooLarge { .. })
            ));
        }
        assert_eq!(split(0, b"x", 0), Err(FenceError::NoParticipant));
    }

    /// A part that is missing, repeated or not a part is an error, never a shorter blob.
    #[test]
    fn missing_repeated_or_foreign_parts_are_refused() {
        let values = split(0, b"abcdef", 3).unwrap();
        let missing = alloc::vec![values[0].clone(), values[2].clone()];
        assert_eq!(join(&table(missing)), Err(FenceError::Incomplete(0)));
        let repeated = alloc::vec![values[0].clone(), values[0].clone()];
        assert_eq!(join(&table(repeated)), Err(FenceError::Incomplete(0)));
        for foreign in ["host=a", "pmixf:0", "pmixf:x:0:", "pmixf:0:0:zz"] {
            let t = table(alloc::vec![foreign.into()]);
            assert!(
                matches!(join(&t), Err(FenceError::Malformed(_))),
                "{foreign}"
            );
        }
    }
}
