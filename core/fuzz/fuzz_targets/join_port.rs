//! Join port parser: never panics; whatever decodes re-encodes to the same bytes.
#![no_main]
use dynres_core::spawn::JoinPort;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = JoinPort::decode(data) {
        assert_eq!(m.encode(), data);
    }
});
