//! `include/dynres.h` is what cbindgen makes of this crate today: CI fails here when
//! the checked-in header drifts from the Rust source.

use std::path::Path;

#[test]
fn header_matches_the_source() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen parses the crate")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");
    let path = dir.join("include/dynres.h");
    if std::env::var_os("DYNRES_BLESS_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("write include/dynres.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        let line = checked_in
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || checked_in.lines().count().min(generated.lines().count()) + 1,
                |i| i + 1,
            );
        panic!(
            "capi/include/dynres.h is out of date with capi/src (first difference at line \
             {line}). Regenerate it with `DYNRES_BLESS_HEADER=1 cargo test -p dynres-capi \
             --test header` and commit it."
        );
    }
}
