//! The bindings that bindgen generated from `pmix_server.h` (see `build.rs`).

#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs,
    unreachable_pub,
    clippy::all,
    clippy::pedantic,
    clippy::undocumented_unsafe_blocks
)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
