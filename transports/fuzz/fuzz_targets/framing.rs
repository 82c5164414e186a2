//! Fuzzes the TCP framing parser: arbitrary peer bytes must never panic, and every
//! header that parses re-encodes to exactly the bytes it came from.
#![no_main]

use dynres_transports::tcp::framing::{FRAME_HEADER_LEN, decode_stream, encode, parse_header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(h)) = parse_header(data, 1 << 20) {
        assert_eq!(&encode(&h)[..], &data[..FRAME_HEADER_LEN]);
    }
    if let Ok((frames, rest)) = decode_stream(data, 1 << 20) {
        let used: usize = frames.iter().map(|(_, p)| FRAME_HEADER_LEN + p.len()).sum();
        assert_eq!(used + rest, data.len());
    }
});
