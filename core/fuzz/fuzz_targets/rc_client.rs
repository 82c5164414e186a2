//! Resource-change `client` frames: the decoder never panics, and whatever it accepts is
//! a fixed point of encode ∘ decode (names are canonical, errors already in wire form).
#![no_main]
use dynres_core::rc::wire::{decode_client, encode_client};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((req, r)) = decode_client(data) {
        let again = encode_client(req, &r);
        assert_eq!(decode_client(&again), Ok((req, r)));
    }
});
