//! Running one model configuration and judging the result.

use std::fmt::Debug;
use std::hash::Hash;
use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, Model};

use crate::models::{BUNDLE, RcConfig, RcModel, bundle, failing_always, unreached_sometimes};
use crate::spawn_configs::SpawnModelConfig;

/// The outcome of checking one configuration.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Configuration name.
    pub name: String,
    /// Unique states explored.
    pub states: usize,
    /// Deepest path.
    pub depth: usize,
    /// Wall time.
    pub seconds: f64,
    /// Failed properties with a readable counterexample (empty: pass).
    pub failures: Vec<(String, String)>,
    /// Whether exploration stopped at the state budget instead of finishing.
    pub truncated: bool,
    /// Whether exploration stopped at [`CONFIG_TIMEOUT`] instead of finishing: a
    /// configuration that was not explored to its end proves nothing.
    pub timed_out: bool,
    /// Bounds that cut paths (printed under the row; a cut is never silent).
    pub notes: Vec<String>,
}

impl Outcome {
    /// Whether every property held.
    pub fn passed(&self) -> bool {
        self.failures.is_empty() && !self.truncated && !self.timed_out
    }
}

/// Exhaustive DFS of one configuration, stopping at `max_states` (a bound that is
/// reported, never silent).
///
/// The always-properties are checked as one ([`crate::models::bundle`]); a failure is
/// reported under the names of those that fail in the counterexample's last state.
pub fn check(cfg: &RcConfig, max_states: usize, threads: usize) -> Outcome {
    check_rc(cfg.name, cfg.model(), max_states, threads)
}

/// [`check`] for a resource-change model as built (its properties bundled here).
pub fn check_rc(name: &str, model: RcModel, max_states: usize, threads: usize) -> Outcome {
    let model = bundle(model);
    let mut o = explore_all(name, &model, max_states, threads, |path| {
        let names = failing_always(&model, path.last_state());
        format!("{}\n{}", names.join(" / "), render_trace(&model, path))
    });
    for (name, trace) in &mut o.failures {
        if name == BUNDLE {
            // The trace's first line names the always-properties that fail.
            if let Some((names, rest)) = trace.split_once('\n') {
                if !names.is_empty() {
                    *name = names.to_string();
                }
                *trace = rest.to_string();
            }
        }
    }
    // Judged like stateright's own sometimes-properties: a failure only if the whole
    // space was seen (a cut exploration fails anyway).
    for name in unreached_sometimes(&model) {
        o.failures
            .push((name.to_string(), NEVER_REACHED.to_string()));
    }
    o
}

/// [`check`] for the fair model of a configuration (`fair.rs`).
pub fn check_fair(cfg: &RcConfig, max_states: usize, threads: usize) -> Outcome {
    let model = crate::fair::FairRc::new(cfg);
    let labels = rc_labels(&model.inner);
    let name = crate::fair::fair_name(cfg);
    explore_all(&name, &model, max_states, threads, |path| {
        render_path(&model, path, &labels)
    })
}

/// [`check`] for a spawn configuration; reports how often its in-flight cap cut a path.
pub fn check_spawn(cfg: &SpawnModelConfig, max_states: usize, threads: usize) -> Outcome {
    let model = cfg.model();
    let labels = cfg.labels();
    let mut o = explore_all(cfg.name, &model, max_states, threads, |path| {
        render_path(&model, path, &labels)
    });
    let n = model.cfg.cuts.load(std::sync::atomic::Ordering::Relaxed);
    if let Some(cap) = model.cfg.max_in_flight {
        o.notes.push(format!(
            "bound: at most {cap} messages in flight cut {n} transitions"
        ));
    }
    o
}

/// [`explore_all`] of a model whose counterexample is its list of actions, one per
/// line (the small models: ends, liveness, give-back, names).
pub fn explore_actions<M>(name: &str, model: &M, max_states: usize, threads: usize) -> Outcome
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + Debug + Eq + Hash + Send + Sync,
    M::Action: Clone + Debug + PartialEq + Send + Sync,
{
    explore_all(name, model, max_states, threads, |path| {
        path.into_actions()
            .iter()
            .enumerate()
            .map(|(i, a)| format!("    {i:>3}. {a:?}\n"))
            .collect()
    })
}

/// Exhaustive DFS of any model, judging every property: an `always`/`eventually`
/// property fails with a counterexample (rendered by `render`), a `sometimes` property
/// fails if never reached.
pub fn explore_all<M>(
    name: &str,
    model: &M,
    max_states: usize,
    threads: usize,
    render: impl Fn(stateright::Path<M::State, M::Action>) -> String,
) -> Outcome
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + Debug + Eq + Hash + Send + Sync,
    M::Action: Clone + Debug + PartialEq + Send + Sync,
{
    explore_within(name, model, max_states, threads, CONFIG_TIMEOUT, render)
}

/// The trace of a sometimes-property no state satisfied.
const NEVER_REACHED: &str = "    (never reached: the model cannot reach this outcome)\n";

/// How long one configuration may be explored before the gate gives up on it (and
/// fails).
pub const CONFIG_TIMEOUT: Duration = Duration::from_secs(600);

/// [`explore_all`] with its own time bound.
pub fn explore_within<M>(
    name: &str,
    model: &M,
    max_states: usize,
    threads: usize,
    timeout: Duration,
    render: impl Fn(stateright::Path<M::State, M::Action>) -> String,
) -> Outcome
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + Debug + Eq + Hash + Send + Sync,
    M::Action: Clone + Debug + PartialEq + Send + Sync,
{
    let started = Instant::now();
    let checker = model
        .clone()
        .checker()
        .threads(threads)
        .target_state_count(max_states)
        .timeout(timeout)
        .spawn_dfs()
        .join();
    let seconds = started.elapsed().as_secs_f64();
    // The checker returns at its timeout as if it were done: only the clock tells.
    let timed_out = started.elapsed() >= timeout;
    let mut failures = Vec::new();
    for p in model.properties() {
        let found = checker.discovery(p.name);
        let failed = match p.expectation {
            Expectation::Always | Expectation::Eventually => found.is_some(),
            Expectation::Sometimes => found.is_none(),
        };
        if failed {
            let trace = match found {
                Some(path) => render(path),
                None => NEVER_REACHED.to_string(),
            };
            failures.push((p.name.to_string(), trace));
        }
    }
    let states = checker.unique_state_count();
    Outcome {
        name: name.to_string(),
        states,
        depth: checker.max_depth(),
        seconds,
        failures,
        // stateright stops at `target_state_count` *generated* states (revisits
        // included), not unique ones: comparing the unique count would let a cut
        // exploration pass as complete.
        truncated: checker.state_count() >= max_states,
        timed_out,
        notes: Vec::new(),
    }
}

/// A counterexample as one line per step: which actor did what.
pub fn render_trace(
    model: &RcModel,
    path: stateright::Path<<RcModel as Model>::State, <RcModel as Model>::Action>,
) -> String {
    render_path(model, path, &rc_labels(model))
}

/// A counterexample of any model, actors named by `labels` (index = actor id).
pub fn render_path<M: Model>(
    model: &M,
    path: stateright::Path<M::State, M::Action>,
    labels: &[String],
) -> String
where
    M::Action: std::fmt::Debug,
{
    let mut out = String::new();
    for (i, action) in path.into_actions().iter().enumerate() {
        let line = model.format_action(action).replace("Id(", "actor ");
        out.push_str(&format!("    {i:>3}. {}\n", describe(&line, labels)));
    }
    out
}

/// Actor labels of a resource-change model.
pub fn rc_labels(model: &RcModel) -> Vec<String> {
    rc_labels_of(&model.actors)
}

/// Actor labels of any model of resource-change actors.
pub fn rc_labels_of(actors: &[crate::adapter::RcNode]) -> Vec<String> {
    actors
        .iter()
        .map(|a| match &a.actor {
            crate::adapter::RcActor::Master(..) => "master".to_string(),
            crate::adapter::RcActor::Scheduler(..) => "scheduler".to_string(),
            crate::adapter::RcActor::Daemon(n, ..) => format!("daemon{}", n.0),
            crate::adapter::RcActor::Proc { pid, .. } => format!("rank{}", pid.rank),
        })
        .collect()
}

fn describe(action: &str, labels: &[String]) -> String {
    // Actions read "Deliver { src: Id(3), dst: Id(0), msg: … }"; name the actors.
    let mut s = action.to_string();
    for (ix, label) in labels.iter().enumerate().rev() {
        s = s.replace(&format!("actor {ix})"), label);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration cut off by the time bound fails the gate instead of passing on
    /// what it happened to explore.
    #[test]
    fn a_configuration_that_times_out_fails() {
        let cfg = crate::models::pr_configs()
            .into_iter()
            .find(|c| c.name == "rc-add-1n-2e-1new")
            .expect("configuration");
        let model = cfg.model();
        let o = explore_within(cfg.name, &model, usize::MAX, 1, Duration::ZERO, |_| {
            String::new()
        });
        assert!(o.timed_out, "{} states in {} s", o.states, o.seconds);
        assert!(!o.passed());
        let o = explore_within(cfg.name, &model, usize::MAX, 1, CONFIG_TIMEOUT, |_| {
            String::new()
        });
        assert!(!o.timed_out && o.passed());
    }

    fn config(name: &str) -> RcConfig {
        crate::models::pr_configs()
            .into_iter()
            .find(|c| c.name == name)
            .expect("configuration")
    }

    /// The bundled check reaches the verdicts the properties reach one by one: a planted
    /// bug fails the gate under the name of the property the corpus says catches it, and
    /// that property alone fails in the counterexample's last state.
    #[test]
    fn a_bundled_check_names_the_always_property_that_fails() {
        use dynres_core::bugs::{Bug, Bugs};
        let planted = crate::planted::corpus()
            .into_iter()
            .find(|p| p.bug == Bug::ForgetAbortAtMasterOnly)
            .expect("in the corpus");
        let cfg = RcConfig {
            bugs: Bugs::NONE.with(planted.bug),
            ..config(planted.config)
        };
        let expected = planted.property;
        let o = check(&cfg, usize::MAX, 1);
        assert!(!o.passed());
        assert!(
            o.failures
                .iter()
                .any(|(name, trace)| name.split(" / ").any(|n| n == expected)
                    && trace.lines().count() > 1),
            "{:?}",
            o.failures
        );
        assert!(o.failures.iter().all(|(name, _)| name != BUNDLE));
        // The same model without the bug passes.
        assert!(check(&config(planted.config), usize::MAX, 1).passed());
    }

    /// A bundled sometimes-property no state satisfies fails the gate, one that some state
    /// satisfies does not.
    #[test]
    fn a_bundled_sometimes_property_never_reached_fails() {
        let model = config("rc-add-1n-2e-1new")
            .model()
            .property(Expectation::Sometimes, "never", |_, _| false)
            .property(Expectation::Sometimes, "at once", |_, _| true);
        let o = check_rc("test", model, usize::MAX, 1);
        let failed: Vec<&str> = o.failures.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(failed, vec!["never"]);
    }
}
