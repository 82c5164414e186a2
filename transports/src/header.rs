//! The message header every device carries: source, tag, context id and length.
//!
//! Defined here rather than in dynres-core so the data plane does not wait on the
//! kernel's wire codec; the layout is fixed little-endian so shared memory and sockets
//! can carry it byte for byte.

/// Header of one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct MsgHeader {
    /// Sender's identity as the upper layer numbers it (a rank, or a process id).
    pub source: u64,
    /// Message tag.
    pub tag: u64,
    /// Communication context (communicator) id.
    pub context_id: u32,
    /// Payload length in bytes.
    pub len: u64,
}

/// Encoded size of a [`MsgHeader`] in a shared-memory ring record.
pub const RECORD_HEADER_LEN: usize = 32;

impl MsgHeader {
    /// Encodes for a ring record: source, tag, len (u64 LE), context id (u32 LE), 4 zero bytes.
    pub fn to_record(&self) -> [u8; RECORD_HEADER_LEN] {
        let mut b = [0u8; RECORD_HEADER_LEN];
        b[0..8].copy_from_slice(&self.source.to_le_bytes());
        b[8..16].copy_from_slice(&self.tag.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b[24..28].copy_from_slice(&self.context_id.to_le_bytes());
        b
    }

    /// Decodes a ring record header (written by [`MsgHeader::to_record`]).
    pub fn from_record(b: &[u8; RECORD_HEADER_LEN]) -> Self {
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let mut c = [0u8; 4];
        c.copy_from_slice(&b[24..28]);
        Self {
            source: u64_at(0),
            tag: u64_at(8),
            len: u64_at(16),
            context_id: u32::from_le_bytes(c),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn record_round_trip(source: u64, tag: u64, context_id: u32, len: u64) {
            let h = MsgHeader { source, tag, context_id, len };
            prop_assert_eq!(MsgHeader::from_record(&h.to_record()), h);
        }
    }
}
