//! The shape every kernel machine shares: inputs and the current time go in through
//! [`Machine::handle`], messages come out of [`Machine::poll_output`], the one timer
//! out of [`Machine::poll_timeout`].
//!
//! The protocol's seven machines ([`crate::rc::Master`], [`crate::rc::Daemon`],
//! [`crate::rc::Client`], [`crate::spawn::Handshake`], [`crate::spawn::SpawnParent`],
//! [`crate::spawn::Join`], [`crate::spawn::Member`]) and the runtime's four decision
//! machines ([`crate::rc::liveness::Liveness`], [`crate::rc::liveness::MasterWatch`],
//! [`crate::rc::giveback::GiveBack`], [`crate::rc::tools::ToolDesk`]) implement it, so drivers (the C ABI, the model
//! checker's adapters, the trace recorder and replay) are written once against the
//! trait instead of once per machine. Each machine keeps its inherent
//! methods too, so callers that know the concrete type need not import the trait.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::hash::Hash;

use crate::time::Instant;

/// A deterministic, sans-I/O state machine of the kernel.
///
/// A driver loop: feed one input with [`handle`](Machine::handle), then drain
/// [`poll_output`](Machine::poll_output) until `None` and do what each output says,
/// then arm a timer for [`poll_timeout`](Machine::poll_timeout) and feed the machine's
/// timeout input when it fires. Outputs left in the queue are not lost, but a driver
/// that drops one it polled (a send, a kill, a launch) breaks the protocol, hence the
/// `#[must_use]`.
pub trait Machine {
    /// What [`handle`](Machine::handle) takes.
    type Input;
    /// What [`poll_output`](Machine::poll_output) returns: something the driver must do.
    type Output;
    /// Why [`handle`](Machine::handle) rejected an input.
    type Error;

    /// Feeds one input at time `now`. `Err` means the input was rejected; what a
    /// rejection changed (usually nothing) is documented by each machine.
    fn handle(&mut self, now: Instant, input: Self::Input) -> Result<(), Self::Error>;

    /// The next thing the driver must do, if any.
    #[must_use = "an output is an action the driver must carry out (a send, a launch, a kill)"]
    fn poll_output(&mut self) -> Option<Self::Output>;

    /// When to feed the machine's timeout input next; `None` if no timer is armed.
    #[must_use = "a deadline the driver must arm a timer for"]
    fn poll_timeout(&self) -> Option<Instant>;

    /// A fingerprint of the state without the outputs not yet drained, so it does not
    /// depend on when the driver drains them (trace conformance, `spec/verification.md`
    /// §6).
    fn fingerprint(&mut self) -> u64;

    /// Every output queued now, in order.
    #[must_use = "outputs are actions the driver must carry out"]
    fn take_outputs(&mut self) -> Vec<Self::Output> {
        core::iter::from_fn(|| self.poll_output()).collect()
    }
}

/// The fingerprint of `machine` hashed without its output queue: the queue is taken
/// out, the rest hashed, the queue put back.
pub(crate) fn fingerprint_without_queue<T: Hash, O>(
    machine: &mut T,
    queue: fn(&mut T) -> &mut VecDeque<O>,
) -> u64 {
    let out = core::mem::take(queue(machine));
    let fp = crate::trace::fingerprint(machine);
    *queue(machine) = out;
    fp
}

/// Implements [`Machine`] for a kernel machine by its inherent `handle`, `poll_output`,
/// `poll_timeout` and `fingerprint`, which every machine has in the trait's shape:
/// `by_inherent_methods!(Type, Input, Output, Error)`.
macro_rules! by_inherent_methods {
    ($ty:ident, $input:ty, $output:ty, $error:ty) => {
        impl $crate::machine::Machine for $ty {
            type Input = $input;
            type Output = $output;
            type Error = $error;

            fn handle(
                &mut self,
                now: $crate::time::Instant,
                input: $input,
            ) -> ::core::result::Result<(), $error> {
                $ty::handle(self, now, input)
            }

            fn poll_output(&mut self) -> ::core::option::Option<$output> {
                $ty::poll_output(self)
            }

            fn poll_timeout(&self) -> ::core::option::Option<$crate::time::Instant> {
                $ty::poll_timeout(self)
            }

            fn fingerprint(&mut self) -> u64 {
                $ty::fingerprint(self)
            }
        }
    };
}
pub(crate) use by_inherent_methods;

/// [`by_inherent_methods!`] for a machine whose inherent `handle` cannot fail and so
/// returns `()` (its callers rely on that): the trait's `handle` is that, `Ok`, with
/// `Error = Infallible`. `infallible_by_inherent_methods!(Type, Input, Output)`.
macro_rules! infallible_by_inherent_methods {
    ($ty:ident, $input:ty, $output:ty) => {
        impl $crate::machine::Machine for $ty {
            type Input = $input;
            type Output = $output;
            type Error = ::core::convert::Infallible;

            fn handle(
                &mut self,
                now: $crate::time::Instant,
                input: $input,
            ) -> ::core::result::Result<(), ::core::convert::Infallible> {
                $ty::handle(self, now, input);
                Ok(())
            }

            fn poll_output(&mut self) -> ::core::option::Option<$output> {
                $ty::poll_output(self)
            }

            fn poll_timeout(&self) -> ::core::option::Option<$crate::time::Instant> {
                $ty::poll_timeout(self)
            }

            fn fingerprint(&mut self) -> u64 {
                $ty::fingerprint(self)
            }
        }
    };
}
pub(crate) use infallible_by_inherent_methods;
