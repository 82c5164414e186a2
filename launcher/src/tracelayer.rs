//! The `dynres` binary's half of trace recording (`spec/verification.md` §6): the
//! client library's [`TraceFile`] as a `tracing-subscriber` layer, beside the log
//! layer, for the master (`PATH`) and the node daemons (`PATH.<pid>`). Kept here so
//! applications linking `dynres-client` need no subscriber framework.

use dynres_client::tracefile::{TraceFile, path_from_env};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{Filtered, Targets};
use tracing_subscriber::layer::Context;

/// [`TraceFile`] as a layer (a newtype: both the trait and the type are foreign here).
pub struct TraceLayer(pub TraceFile);

impl<S: tracing::Subscriber> Layer<S> for TraceLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        self.0.record_event(event);
    }
}

/// The layer to install when `DYNRES_TRACE_FILE` is set: a [`TraceLayer`] that sees
/// only transition events (at TRACE), whatever the log filter of the other layers.
pub fn layer_from_env<S>(master: bool) -> Option<Filtered<TraceLayer, Targets, S>>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let path = path_from_env(master)?;
    let only_transitions =
        Targets::new().with_target(dynres_core::rc::trace::TARGET, tracing::Level::TRACE);
    Some(TraceLayer(TraceFile::new(path)).with_filter(only_transitions))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn the_layer_writes_transition_events_only() {
        let dir = std::env::temp_dir().join(format!("dynres-tracelayer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t");
        let only =
            Targets::new().with_target(dynres_core::rc::trace::TARGET, tracing::Level::TRACE);
        let subscriber = tracing_subscriber::registry()
            .with(TraceLayer(TraceFile::new(&path)).with_filter(only));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("not a transition");
            tracing::trace!(
                target: dynres_core::rc::trace::TARGET,
                role = "master",
                node = 0u32,
                now = 1u64,
                input = "ff",
                outputs = 2u64,
                state = 3u64,
            );
        });
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "master 0 1 ff 2 3\n"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
