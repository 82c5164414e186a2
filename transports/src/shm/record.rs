//! Ring records: a 32-byte header, the payload, and padding to the next cache line;
//! small payloads go in as one record, large ones stream in chunks.

use super::ring::{HEAD_LEN, HEAD_WORDS, LINE, Producer, RawStorage};
use crate::header::{MsgHeader, RECORD_HEADER_LEN};

const _: () = assert!(
    RECORD_HEADER_LEN == HEAD_LEN,
    "a record header is a ring head"
);

/// Granularity of streamed payload copies (both directions).
pub(crate) fn stream_chunk(cap: usize) -> usize {
    cap / 8
}

/// Records start on cache lines (ring lines): a small message then costs the reader
/// one data line, which also carries the record's stamp (see `ring`).
const RECORD_ALIGN: usize = LINE;

/// Padding after a record of header + `payload` bytes. It is published but never
/// written (readers skip it), so it holds stale bytes of an earlier lap of the same
/// ring: only this sender's own earlier messages to the same receiver.
pub(crate) fn pad_for(payload: usize) -> usize {
    (RECORD_ALIGN - (RECORD_HEADER_LEN + payload) % RECORD_ALIGN) % RECORD_ALIGN
}

/// Pushes a message as one record (header, payload, padding) if it fits: an eager
/// message, which its receiver may read through the stamp alone (no flag).
#[inline]
pub(crate) fn push_whole(
    out: &mut Producer<RawStorage>,
    header: &MsgHeader,
    payload: &[u8],
) -> bool {
    let (words, mark) = head(header, 0);
    out.push_stamped(&words, mark, payload, pad_for(payload.len()))
}

/// Pushes as much of one message as fits. Returns whether it is complete. `sent`
/// counts payload plus trailing padding; `lead` is the record's bytes between header
/// and payload (a refused single-copy request's descriptor, with `header_sent`), so
/// the padding still ends the record on a line.
pub(crate) fn push_message(
    out: &mut Producer<RawStorage>,
    header: &MsgHeader,
    payload: &[u8],
    eager: usize,
    lead: usize,
    header_sent: &mut bool,
    sent: &mut usize,
) -> bool {
    let pad = pad_for(lead + payload.len());
    if !*header_sent {
        if payload.len() <= eager {
            if push_whole(out, header, payload) {
                *header_sent = true;
                *sent = payload.len() + pad;
                return true;
            }
            return false;
        }
        let (words, mark) = head(header, FLAG_STREAMED);
        if !out.push_stamped(&words, mark, &[], 0) {
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

/// Record flag (the low two bits of bytes 28..32 of a record header, whose other
/// bits are the ring's stamp; zero in a plain record): a single-copy request — the
/// payload stays in the sender, and the record carries a [`RTS_DESC_LEN`]-byte
/// descriptor (buffer address, sequence number) instead.
pub(crate) const FLAG_RTS: u32 = 1;

/// Record flag: the payload follows the header in chunks, each published through the
/// ring's `head` on its own. Without it (and without [`FLAG_RTS`]) a record was pushed
/// whole, so the stamp that publishes its header publishes all of it, whatever the
/// receiver's own eager threshold.
pub(crate) const FLAG_STREAMED: u32 = 2;

/// Bytes of a request's descriptor; with the header it fills one cache line.
pub(crate) const RTS_DESC_LEN: usize = RECORD_ALIGN - RECORD_HEADER_LEN;

/// The flags of a record header.
#[cfg(test)]
fn record_flags(hb: &[u8; RECORD_HEADER_LEN]) -> u32 {
    u32::from_le_bytes([hb[28], hb[29], hb[30], hb[31]])
}

/// A record header and its flags from the ring's head words and mark word (the
/// inverse of [`head`]).
#[inline]
pub(crate) fn parse_head(words: &[u64; HEAD_WORDS], mark: u64) -> (MsgHeader, u32) {
    let header = MsgHeader {
        source: words[0],
        tag: words[1],
        len: words[2],
        context_id: mark as u32,
    };
    (header, (mark >> 32) as u32)
}

/// A record header as the ring's head words and mark word: the same bytes as
/// [`MsgHeader::to_record`], with `flags` in bytes 28..32.
pub(crate) fn head(header: &MsgHeader, flags: u32) -> ([u64; HEAD_WORDS], u64) {
    (
        [header.source, header.tag, header.len],
        u64::from(header.context_id) | (u64::from(flags) << 32),
    )
}

/// A single-copy request for `header.len` bytes at address `addr` of the sender,
/// numbered `seq` (the receiver acknowledges that number): its head (see [`head`])
/// and descriptor.
pub(crate) fn rts_record(
    header: &MsgHeader,
    addr: u64,
    seq: u64,
) -> (([u64; HEAD_WORDS], u64), [u8; RTS_DESC_LEN]) {
    let mut d = [0u8; RTS_DESC_LEN];
    d[..8].copy_from_slice(&addr.to_le_bytes());
    d[8..16].copy_from_slice(&seq.to_le_bytes());
    (head(header, FLAG_RTS), d)
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
        let ((words, mark), d) = rts_record(&h, 0xdead_beef_0000, 42);
        let mut hb = [0u8; RECORD_HEADER_LEN];
        for (i, w) in words.iter().chain([&mark]).enumerate() {
            hb[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        assert_eq!(record_flags(&hb), FLAG_RTS);
        assert_eq!(MsgHeader::from_record(&hb), h);
        assert_eq!(parse_rts(&d), (0xdead_beef_0000, 42));
        let (words, mark) = head(&h, 0);
        hb[..8].copy_from_slice(&words[0].to_le_bytes());
        hb[8..16].copy_from_slice(&words[1].to_le_bytes());
        hb[16..24].copy_from_slice(&words[2].to_le_bytes());
        hb[24..].copy_from_slice(&mark.to_le_bytes());
        assert_eq!(hb, h.to_record(), "head words are the record bytes");
        assert_eq!(
            parse_head(&words, mark | (u64::from(FLAG_RTS) << 32)),
            (h, FLAG_RTS)
        );
    }
}
