//! # dynres-verification
//!
//! The merge gate a protocol engineer runs before merging: stateright models built from
//! `dynres-core`'s own state machines (see [`adapter`]), the model configurations and
//! their properties named by spec IDs (see [`models`]), the spawn / accept-connect
//! handshakes run the same way (see [`spawn_model`], [`spawn_configs`]), liveness under
//! fairness (see [`fair`]), pset operations from several clients checked for
//! linearizability against an independent sequential store (see [`pset_model`],
//! [`pset_oracle`]), golden state counts, what each configuration pins (see [`coverage`]),
//! and the `check` command that runs them all.

pub mod adapter;
pub mod coverage;
pub mod ends_model;
pub mod fair;
pub mod giveback_model;
pub mod golden;
pub mod liveness_model;
pub mod models;
pub mod names_model;
pub mod planted;
pub mod pool;
pub mod pset_model;
pub mod pset_oracle;
pub mod record;
pub mod run;
pub mod spawn_configs;
pub mod spawn_model;
pub mod spawn_mpi_model;
pub mod trace;
