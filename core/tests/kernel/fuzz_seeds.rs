//! The resource-change fuzz targets' seed corpora (`core/fuzz/seeds/rc_*`) stay valid
//! frames: each seed decodes, and what it decodes to is a fixed point of encode ∘ decode
//! (the property the fuzz targets assert; an error seed may carry a non-canonical message,
//! so bytes need not round-trip). A seed that no longer decodes (the wire format moved on)
//! would leave `verification/nightly.sh` fuzzing from the header checks only.

use std::path::PathBuf;

use dynres_core::rc::wire::link::{decode_link, encode_link};
use dynres_core::rc::wire::{
    decode_client, decode_reply, decode_to_daemon, decode_to_master, encode_client, encode_reply,
    encode_to_daemon, encode_to_master,
};

/// Every seed of one target, as (file name, bytes); at least one.
fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.expect("dir entry").path();
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("seed readable"))
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no seeds in {}", dir.display());
    out
}

fn check<T: PartialEq + std::fmt::Debug, E: std::fmt::Display>(
    target: &str,
    decode: impl Fn(&[u8]) -> Result<T, E>,
    encode: impl Fn(&T) -> Vec<u8>,
) {
    for (name, bytes) in seeds(target) {
        let v = decode(&bytes).unwrap_or_else(|e| panic!("{target}/{name}: does not decode: {e}"));
        let again = decode(&encode(&v))
            .unwrap_or_else(|e| panic!("{target}/{name}: re-encoded frame does not decode: {e}"));
        assert_eq!(
            again, v,
            "{target}/{name}: not a fixed point of encode ∘ decode"
        );
    }
}

#[test]
fn rc_client_seeds_decode() {
    check("rc_client", decode_client, |(req, r)| {
        encode_client(*req, r)
    });
}

#[test]
fn rc_reply_seeds_decode() {
    check("rc_reply", decode_reply, |(req, r)| encode_reply(*req, r));
}

#[test]
fn rc_to_master_seeds_decode() {
    check("rc_to_master", decode_to_master, encode_to_master);
}

#[test]
fn rc_to_daemon_seeds_decode() {
    check("rc_to_daemon", decode_to_daemon, encode_to_daemon);
}

#[test]
fn rc_link_seeds_decode() {
    check("rc_link", decode_link, encode_link);
}

/// The PMI framer's seeds (`core/fuzz/seeds/pmi_framer`) are whole, valid command
/// streams: every command in them parses (PMIS-1), so the fuzzer starts from real ones.
#[test]
fn pmi_framer_seeds_parse() {
    use dynres_core::pmi::wire::Framer;
    for (name, bytes) in seeds("pmi_framer") {
        let mut f = Framer::new();
        f.push(&bytes);
        let mut n = 0;
        while let Some(c) = f.next_command() {
            c.unwrap_or_else(|e| panic!("pmi_framer/{name}: {e}"));
            n += 1;
        }
        assert!(
            n > 0 && f.held() == 0,
            "pmi_framer/{name}: {n} commands, {} bytes left",
            f.held()
        );
    }
}

/// The PMI-2 framer's seeds (`core/fuzz/seeds/pmi2_framer`) are whole, valid message
/// streams: every message in them parses (PMIS-1, PMIS-17).
#[test]
fn pmi2_framer_seeds_parse() {
    use dynres_core::pmi::wire2::Framer2;
    for (name, bytes) in seeds("pmi2_framer") {
        let mut f = Framer2::new();
        f.push(&bytes);
        let mut n = 0;
        while let Some(c) = f.next_command() {
            c.unwrap_or_else(|e| panic!("pmi2_framer/{name}: {e}"));
            n += 1;
        }
        assert!(
            n > 0 && f.held() == 0,
            "pmi2_framer/{name}: {n} messages, {} bytes left",
            f.held()
        );
    }
}
