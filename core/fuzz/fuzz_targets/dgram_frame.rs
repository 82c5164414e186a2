//! Datagram segment / ack parser (checksum first): never panics; round-trips.
#![no_main]
use dynres_core::spawn::datagram::DgramFrame;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = DgramFrame::decode(data) {
        assert_eq!(f.encode(), data);
    }
});
