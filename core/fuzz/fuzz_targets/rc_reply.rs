//! Resource-change `reply` frames: the decoder never panics, and whatever it accepts is
//! a fixed point of encode ∘ decode (names are canonical, errors already in wire form).
#![no_main]
use dynres_core::rc::wire::{decode_reply, encode_reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((req, r)) = decode_reply(data) {
        let again = encode_reply(req, &r);
        assert_eq!(decode_reply(&again), Ok((req, r)));
    }
});
