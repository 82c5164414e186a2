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
static PAD: [u8; RECORD_ALIGN] = [0; RECORD_ALIGN];

/// Padding after a record of header + `payload` bytes.
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
            if out.push_all(&[&rec, payload, &PAD[..pad]]) {
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
            out.push_some(&PAD[..left])
        };
    }
    true
}
