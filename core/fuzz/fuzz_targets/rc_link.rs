//! Runtime link control frames (`spec/runtime.md` LINK-1): the decoder never panics, and
//! whatever it accepts is a fixed point of encode ∘ decode.
#![no_main]
use dynres_core::rc::wire::link::{decode_link, encode_link};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = decode_link(data) {
        assert_eq!(decode_link(&encode_link(&m)), Ok(m));
    }
});
