//! # dynres-verification
//!
//! The merge gate a protocol engineer runs before merging: stateright models built from
//! `dynres-core`'s own state machines, loom tests of the shared-state parts, planted-bug
//! checks, golden state counts and trace conformance. Filled in by issue 5.
#![warn(missing_docs)]
