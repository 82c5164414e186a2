//! Resource-change `to_daemon` frames: the decoder never panics, and whatever it accepts is
//! a fixed point of encode ∘ decode (names are canonical, errors already in wire form).
#![no_main]
use dynres_core::rc::wire::{decode_to_daemon, encode_to_daemon};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = decode_to_daemon(data) {
        let again = encode_to_daemon(&m);
        assert_eq!(decode_to_daemon(&again), Ok(m));
    }
});
