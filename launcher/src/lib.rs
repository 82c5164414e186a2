//! # dynres-launcher
//!
//! The `dynres` command line (`src/bin/dynres.rs`) on top of `dynres-runtime`, the
//! example applications it can run with `--example` (written against `dynres-client`,
//! as any application is), and the `dynres-bench` benchmark.

pub mod apps;
pub mod eventlog;
pub mod plot;
pub mod tracelayer;
