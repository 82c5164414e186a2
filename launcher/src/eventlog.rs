//! `dynres run --event-log FILE`: the run's events (`dynres_runtime::events`) as JSON
//! lines, each `{"t_ms": <unix time in ms>, "event": "...", <fields>}`, written as they
//! happen (one unbuffered write per line, so a killed run leaves whole lines).

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use dynres_runtime::events::TARGET;
use dynres_runtime::json_str;
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{Filtered, Targets};
use tracing_subscriber::layer::Context;

/// The layer that writes run events to a file.
pub struct EventLog {
    file: Mutex<File>,
}

impl EventLog {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> std::io::Result<EventLog> {
        Ok(EventLog {
            file: Mutex::new(File::create(path)?),
        })
    }

    /// As a layer seeing only run events.
    pub fn layer<S>(self) -> Filtered<EventLog, Targets, S>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        self.with_filter(Targets::new().with_target(TARGET, tracing::Level::INFO))
    }
}

/// The event's fields as `,"name":value` pairs.
struct Fields(String);

impl Visit for Fields {
    fn record_str(&mut self, f: &Field, v: &str) {
        let _ = write!(self.0, ",{}:{}", json_str(f.name()), json_str(v));
    }
    fn record_u64(&mut self, f: &Field, v: u64) {
        let _ = write!(self.0, ",{}:{v}", json_str(f.name()));
    }
    fn record_i64(&mut self, f: &Field, v: i64) {
        let _ = write!(self.0, ",{}:{v}", json_str(f.name()));
    }
    fn record_bool(&mut self, f: &Field, v: bool) {
        let _ = write!(self.0, ",{}:{v}", json_str(f.name()));
    }
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        self.record_str(f, &format!("{v:?}"));
    }
}

impl<S: tracing::Subscriber> Layer<S> for EventLog {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let t_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let mut f = Fields(String::new());
        event.record(&mut f);
        let line = format!("{{\"t_ms\":{t_ms}{}}}\n", f.0);
        if let Ok(mut file) = self.file.lock() {
            // A full disk must not stop the job: the log is lost, the run goes on.
            let _ = file.write_all(line.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn events_are_json_lines_and_nothing_else_is_written() {
        let dir = std::env::temp_dir().join(format!("dynres-eventlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("events.jsonl");
        let sub = tracing_subscriber::registry().with(EventLog::create(&path).unwrap().layer());
        tracing::subscriber::with_default(sub, || {
            tracing::info!("not an event");
            dynres_runtime::events::job("j\"1", 2, &["h1".into(), "h2".into()]);
            dynres_runtime::events::end(3, 1, -1);
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["event"], "job");
        assert_eq!(lines[0]["job"], "j\"1");
        assert_eq!(lines[0]["hosts"], "h1,h2");
        assert_eq!(lines[1]["code"], -1);
        assert!(lines[1]["t_ms"].as_u64().unwrap() > 1_600_000_000_000);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
