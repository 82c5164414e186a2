//! Resource-change `to_master` frames: the decoder never panics, and whatever it accepts is
//! a fixed point of encode ∘ decode (names are canonical, errors already in wire form).
#![no_main]
use dynres_core::rc::wire::{decode_to_master, encode_to_master};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = decode_to_master(data) {
        let again = encode_to_master(&m);
        assert_eq!(decode_to_master(&again), Ok(m));
    }
});
