//! Stream framing: arbitrary chunks never panic, and a rejected chunk changes nothing.
#![no_main]
use dynres_core::spawn::stream::FrameReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut r = FrameReader::new();
    for chunk in data.chunks(7) {
        let before = r.clone();
        if r.push(chunk).is_err() {
            assert_eq!(r, before);
        }
    }
});
