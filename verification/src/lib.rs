//! # dynres-verification
//!
//! The merge gate a protocol engineer runs before merging: stateright models built from
//! `dynres-core`'s own state machines (see [`adapter`]), the model configurations and
//! their properties named by spec IDs (see [`models`]), golden state counts, and the
//! `check` command that runs them all.

pub mod adapter;
pub mod golden;
pub mod models;
pub mod planted;
pub mod pset_model;
pub mod record;
pub mod run;
pub mod trace;
