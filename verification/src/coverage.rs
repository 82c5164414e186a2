//! What each configuration pins (issue 33): its properties and the planted bugs the gate
//! runs against it. A golden count only says that the state space changed; this is what
//! a reviewer reads before accepting a new count (`check --bless`, `check --explain`).

use std::collections::BTreeSet;

use dynres_core::bugs::Bug;
use stateright::{Expectation, Model};

use crate::planted::{corpus, unplanted};

/// One configuration's properties and planted bugs.
#[derive(Clone, Debug)]
pub struct Coverage {
    /// The configuration's name, as in the table and the golden file.
    pub config: String,
    /// Its properties, in the model's order.
    pub properties: Vec<(&'static str, Expectation)>,
    /// The planted bugs planted in this configuration, with the property each must fail.
    pub planted: Vec<(Bug, &'static str)>,
}

impl Coverage {
    /// The `always` / `eventually` properties (`sometimes` ones only say an outcome is
    /// reachable).
    pub fn checks(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.properties
            .iter()
            .filter(|(_, e)| *e != Expectation::Sometimes)
            .map(|(n, _)| *n)
    }

    /// One line: how many properties of each kind and which planted bugs.
    pub fn summary(&self) -> String {
        let sometimes = self
            .properties
            .iter()
            .filter(|(_, e)| *e == Expectation::Sometimes)
            .count();
        let mut bugs: Vec<String> = self.planted.iter().map(|(b, _)| format!("{b:?}")).collect();
        bugs.dedup();
        format!(
            "{}: {} checked properties, {} reachability properties; planted bugs run here: {}",
            self.config,
            self.properties.len() - sometimes,
            sometimes,
            if bugs.is_empty() {
                "none".to_string()
            } else {
                bugs.join(", ")
            }
        )
    }

    /// Every property on its own line, each checked one followed by the planted bugs
    /// that must break it here; `unplanted` names the checked properties no planted bug
    /// breaks anywhere (they have never been seen to fail).
    pub fn render(&self, unplanted: &BTreeSet<&str>) -> Vec<String> {
        let mut lines = vec![self.summary()];
        for (name, e) in &self.properties {
            let kind = match e {
                Expectation::Always => "always",
                Expectation::Eventually => "eventually",
                Expectation::Sometimes => "sometimes",
            };
            let here: Vec<String> = self
                .planted
                .iter()
                .filter(|(_, p)| p == name)
                .map(|(b, _)| format!("{b:?}"))
                .collect();
            let note = if !here.is_empty() {
                format!("  <- caught here: {}", here.join(", "))
            } else if *e != Expectation::Sometimes && unplanted.contains(name) {
                "  <- no planted bug breaks it anywhere".to_string()
            } else {
                String::new()
            };
            lines.push(format!("  {kind:<10} {name}{note}"));
        }
        lines
    }
}

fn names<M: Model>(m: &M) -> Vec<(&'static str, Expectation)> {
    m.properties()
        .into_iter()
        .map(|p| (p.name, p.expectation))
        .collect()
}

/// Every configuration of the PR tier (and the nightly one with `nightly`), in the
/// gate's order: resource change, fair, psets, spawn, ends.
pub fn all(nightly: bool) -> Vec<Coverage> {
    let mut out: Vec<(String, Vec<(&'static str, Expectation)>)> = Vec::new();
    let rc = crate::models::pr_configs().into_iter().chain(if nightly {
        crate::models::nightly_configs()
    } else {
        Vec::new()
    });
    for cfg in rc {
        out.push((cfg.name.to_string(), names(&cfg.model())));
    }
    for cfg in crate::fair::fair_configs() {
        out.push((
            crate::fair::fair_name(&cfg),
            names(&crate::fair::FairRc::new(&cfg)),
        ));
    }
    for cfg in crate::pset_model::pr_configs() {
        out.push((cfg.name.to_string(), names(&cfg.model())));
    }
    for cfg in crate::spawn_configs::pr_configs() {
        out.push((cfg.name.to_string(), names(&cfg.model())));
    }
    for cfg in crate::ends_model::pr_configs() {
        out.push((cfg.name.to_string(), names(&cfg)));
    }
    for cfg in crate::liveness_model::pr_configs() {
        out.push((cfg.name.to_string(), names(&cfg)));
    }
    for cfg in crate::giveback_model::pr_configs() {
        out.push((cfg.name.to_string(), names(&cfg)));
    }
    for cfg in crate::names_model::pr_configs() {
        out.push((cfg.name.to_string(), names(&cfg)));
    }
    for cfg in crate::spawn_mpi_model::pr_configs() {
        out.push((cfg.name.to_string(), names(&cfg)));
    }
    let corpus = corpus();
    out.into_iter()
        .map(|(config, properties)| Coverage {
            planted: corpus
                .iter()
                .filter(|p| p.config == config)
                .map(|p| (p.bug, p.property))
                .collect(),
            config,
            properties,
        })
        .collect()
}

/// The report `check --explain` prints for the configurations whose name contains
/// `only` (all without it).
pub fn explain(only: Option<&str>, nightly: bool) -> Vec<String> {
    let unplanted: BTreeSet<&str> = unplanted().into_iter().collect();
    all(nightly)
        .iter()
        .filter(|c| only.is_none_or(|o| c.config.contains(o)))
        .flat_map(|c| c.render(&unplanted))
        .collect()
}

/// The report `check --bless` prints: one summary line per configuration, and every
/// property with its planted bugs for each configuration whose count `changed` names.
pub fn bless_report(changed: &[String], nightly: bool) -> Vec<String> {
    let unplanted: BTreeSet<&str> = unplanted().into_iter().collect();
    let mut lines = vec![
        "what each blessed count still guarantees (properties checked, planted bugs run):"
            .to_string(),
    ];
    for c in all(nightly) {
        if changed.contains(&c.config) {
            lines.push(format!("changed count: {}", c.config));
            lines.extend(c.render(&unplanted));
        } else {
            lines.push(c.summary());
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every planted bug's configuration is listed with it, and the property it must
    /// fail is one that configuration checks: an entry whose property is misspelt, or
    /// checked elsewhere, could never be caught.
    #[test]
    fn every_planted_bug_is_listed_under_a_property_its_configuration_checks() {
        let all = all(false);
        for p in corpus() {
            let c = all
                .iter()
                .find(|c| c.config == p.config)
                .unwrap_or_else(|| panic!("{:?}: no configuration {}", p.bug, p.config));
            assert!(c.planted.contains(&(p.bug, p.property)));
            assert!(
                c.checks().any(|n| n == p.property),
                "{:?}: {} does not check {:?}",
                p.bug,
                p.config,
                p.property
            );
        }
    }

    /// The issue-33 classes are pinned where their paths run: the growth
    /// configurations check RC-22, the modex-loss configuration the MODEX-4 fan-out, and
    /// the explanation names the planted bug under its property.
    #[test]
    fn the_issue_33_properties_are_explained_with_their_planted_bugs() {
        let lines = explain(Some("rc-grow-1n-2e-1new"), false);
        assert!(
            lines
                .iter()
                .any(|l| l.contains("RC-22") && l.contains("GrowStartsBeforeReplica")),
            "{lines:#?}"
        );
        let lines = explain(Some("rc-modex-loss-2n-3e"), false);
        assert!(
            lines
                .iter()
                .any(|l| l.contains("MODEX-4 a failed modex")
                    && l.contains("ModexFailBatchNodesOnly")),
            "{lines:#?}"
        );
        let report = bless_report(&["rc-grow-1n-2e-1new".to_string()], false);
        assert!(
            report
                .iter()
                .any(|l| l == "changed count: rc-grow-1n-2e-1new")
        );
        assert!(report.iter().any(
            |l| l.starts_with("rc-modex-loss-2n-3e: ") && l.contains("ModexFailBatchNodesOnly")
        ));
    }
}
