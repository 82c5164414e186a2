//! Ring records: a 32-byte header, the payload, and padding to the next cache line;
//! small payloads go in as one record, large ones stream in chunks.

use super::ring::{Producer, RawStorage};
use crate::header::{MsgHeader, RECORD_HEADER_LEN};

/// Granularity of streamed payload copies (both directions).
pub(crate) fn stream_chunk(cap: usize) -> usize {
    cap / 8
}

/// Records start on cache lines: a small message then costs the reader one data line
/// (plus the head index), as in a bare flag-and-buffer exchange.
const RECORD_ALIGN: usize = 64;

/// Padding after a record of header + `payload` bytes. It is published but never
/// written (readers skip it), so it holds stale bytes of an earlier lap of the same
/// ring: only this sender's own earlier messages to the same receiver.
pub(crate) fn pad_for(payload: usize) -> usize {
    (RECORD_ALIGN - (RECORD_HEADER_LEN + payload) % RECORD_ALIGN) % RECORD_ALIGN
}

/// Pushes as much of one message as fits. Returns whether it is complete. `sent`
/// counts payload plus trailing padding.
pub(crate) fn push_message(
    out: &mut Producer<RawStorage>,
    header: &MsgHeader,
    payload: &[u8],
    eager: usize,
    header_sent: &mut bool,
    sent: &mut usize,
) -> bool {
    let pad = pad_for(payload.len());
    if !*header_sent {
        let rec = header.to_record();
        if payload.len() <= eager {
            if out.push_record(&rec, payload, pad) {
                *header_sent = true;
                *sent = payload.len() + pad;
                return true;
            }
            return false;
        }
        if !out.push_all(&[&rec]) {
            return false;
        }
        *header_sent = true;
    }
    // Stream in chunks of an eighth of the ring, published one by one, so the reader
    // copies chunk k out while we copy chunk k+1 in (a whole-ring copy would serialise
    // the two sides); never wait for less than a chunk, to avoid tiny copies.
    let chunk = stream_chunk(out.cap());
    let total = payload.len() + pad;
    while *sent < total {
        let left = total - *sent;
        if out.free() < left.min(chunk) {
            return false;
        }
        *sent += if *sent < payload.len() {
            let k = (payload.len() - *sent).min(chunk);
            out.push_some(&payload[*sent..*sent + k])
        } else {
            out.skip_some(left)
        };
    }
    true
}

/// Record flag (bytes 28..32 of a record header, zero in a plain record): a
/// single-copy request — the payload stays in the sender, and the record carries a
/// [`RTS_DESC_LEN`]-byte descriptor (buffer address, sequence number) instead.
pub(crate) const FLAG_RTS: u32 = 1;

/// Bytes of a request's descriptor; with the header it fills one cache line.
pub(crate) const RTS_DESC_LEN: usize = RECORD_ALIGN - RECORD_HEADER_LEN;

/// The flags of a record header.
pub(crate) fn record_flags(hb: &[u8; RECORD_HEADER_LEN]) -> u32 {
    u32::from_le_bytes([hb[28], hb[29], hb[30], hb[31]])
}

/// A single-copy request for `header.len` bytes at address `addr` of the sender,
/// numbered `seq` (the receiver acknowledges that number).
pub(crate) fn rts_record(header: &MsgHeader, addr: u64, seq: u64) -> [u8; RECORD_ALIGN] {
    let mut r = [0u8; RECORD_ALIGN];
    r[..RECORD_HEADER_LEN].copy_from_slice(&header.to_record());
    r[28..32].copy_from_slice(&FLAG_RTS.to_le_bytes());
    r[32..40].copy_from_slice(&addr.to_le_bytes());
    r[40..48].copy_from_slice(&seq.to_le_bytes());
    r
}

/// `(addr, seq)` of a request's descriptor.
pub(crate) fn parse_rts(desc: &[u8; RTS_DESC_LEN]) -> (u64, u64) {
    let at = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&desc[i..i + 8]);
        u64::from_le_bytes(w)
    };
    (at(0), at(8))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn rts_round_trip_and_plain_records_have_no_flags() {
        let h = MsgHeader {
            source: 1,
            tag: 2,
            context_id: 3,
            len: 1 << 20,
        };
        assert_eq!(record_flags(&h.to_record()), 0);
        let r = rts_record(&h, 0xdead_beef_0000, 42);
        let mut hb = [0u8; RECORD_HEADER_LEN];
        hb.copy_from_slice(&r[..RECORD_HEADER_LEN]);
        assert_eq!(record_flags(&hb), FLAG_RTS);
        assert_eq!(MsgHeader::from_record(&hb), h);
        let mut d = [0u8; RTS_DESC_LEN];
        d.copy_from_slice(&r[RECORD_HEADER_LEN..]);
        assert_eq!(parse_rts(&d), (0xdead_beef_0000, 42));
    }
}
