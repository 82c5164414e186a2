//! `dynres plot LOG -o run.svg`: a picture of a run from its event log (`dynres run
//! --event-log LOG`): processes per host over time, one line per host, with every
//! resource change's decision marked (green FINALIZED, red ABORTED) and its request
//! (grey, at ANNOUNCED).

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

/// What a log holds, read for the plot.
#[derive(Debug, Default, PartialEq)]
pub struct Run {
    /// The job id.
    pub job: String,
    /// Host names in node order.
    pub hosts: Vec<String>,
    /// Per node: `(seconds since the first event, processes running)` at every change
    /// of the count.
    pub per_node: BTreeMap<u32, Vec<(f64, u32)>>,
    /// `(seconds, kind, +added, -removed, status)` of every change status.
    pub changes: Vec<(f64, String, u64, u64, String)>,
    /// Seconds from the first event to the last.
    pub span: f64,
}

/// Errors of [`read`] and [`draw`].
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The log could not be read.
    #[error("read {path}: {source}")]
    Read {
        /// The log.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not an event of this log format.
    #[error("{path} line {line}: {why}")]
    Malformed {
        /// The log.
        path: String,
        /// 1-based.
        line: usize,
        /// What is wrong.
        why: String,
    },
    /// The log has no event.
    #[error("{0}: no events (was it written by `dynres run --event-log`?)")]
    Empty(String),
    /// Drawing failed.
    #[error("draw {path}: {why}")]
    Draw {
        /// The picture.
        path: String,
        /// Why.
        why: String,
    },
}

/// Reads an event log into a [`Run`].
pub fn read(path: &Path) -> Result<Run, PlotError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| PlotError::Read {
        path: name.clone(),
        source,
    })?;
    parse(&name, &text)
}

/// [`read`] of the text `text` of log `name`.
pub fn parse(name: &str, text: &str) -> Result<Run, PlotError> {
    let mut run = Run::default();
    let mut t0 = None;
    let mut alive: BTreeMap<u32, u32> = BTreeMap::new();
    // rank → node, for processes that have not ended.
    let mut running: BTreeMap<u64, u32> = BTreeMap::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let bad = |why: String| PlotError::Malformed {
            path: name.to_string(),
            line: i + 1,
            why,
        };
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| bad(format!("not JSON: {e}")))?;
        let t_ms = v["t_ms"].as_u64().ok_or_else(|| bad("no t_ms".into()))?;
        let first = *t0.get_or_insert(t_ms);
        let t = t_ms.saturating_sub(first) as f64 / 1000.0;
        run.span = run.span.max(t);
        let num = |k: &str| v[k].as_u64().ok_or_else(|| bad(format!("no {k}")));
        let text = |k: &str| {
            v[k].as_str()
                .map(str::to_string)
                .ok_or_else(|| bad(format!("no {k}")))
        };
        let mut set = |node: u32, delta: i64, alive: &mut BTreeMap<u32, u32>| {
            let n = alive.entry(node).or_default();
            *n = u32::try_from(i64::from(*n) + delta).unwrap_or(0);
            run.per_node.entry(node).or_default().push((t, *n));
        };
        match v["event"].as_str() {
            Some("job") => {
                run.job = text("job")?;
                run.hosts = text("hosts")?.split(',').map(str::to_string).collect();
            }
            Some("start") => {
                let (rank, node) = (num("rank")?, num("node")? as u32);
                if running.insert(rank, node).is_none() {
                    set(node, 1, &mut alive);
                }
            }
            Some("end") => {
                if let Some(node) = running.remove(&num("rank")?) {
                    set(node, -1, &mut alive);
                }
            }
            Some("node_gone") => {
                let node = num("node")? as u32;
                let gone = running.iter().filter(|(_, n)| **n == node).count();
                running.retain(|_, n| *n != node);
                if gone > 0 {
                    set(node, -(gone as i64), &mut alive);
                }
            }
            Some("change") => run.changes.push((
                t,
                text("kind")?,
                num("added")?,
                num("removed")?,
                text("status")?,
            )),
            Some(other) => return Err(bad(format!("unknown event {other:?}"))),
            None => return Err(bad("no event".into())),
        }
    }
    if t0.is_none() {
        return Err(PlotError::Empty(name.to_string()));
    }
    Ok(run)
}

/// Draws `run` into the SVG file `out`.
pub fn draw(run: &Run, out: &Path) -> Result<(), PlotError> {
    let fail = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: out.display().to_string(),
        why: e.to_string(),
    };
    let root = SVGBackend::new(out, (1000, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let top = run
        .per_node
        .values()
        .flat_map(|v| v.iter().map(|p| p.1))
        .max()
        .unwrap_or(1)
        + 1;
    let span = run.span.max(0.001) * 1.02;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("job {}: processes per host", run.job),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..span, 0u32..top)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds since the job started")
        .y_desc("processes")
        .draw()
        .map_err(|e| fail(&e))?;
    for (t, kind, added, removed, status) in &run.changes {
        let colour = match status.as_str() {
            "FINALIZED" => GREEN.mix(0.6),
            "ABORTED" => RED.mix(0.6),
            "ANNOUNCED" => BLACK.mix(0.25),
            _ => continue,
        };
        chart
            .draw_series(LineSeries::new(
                [(*t, 0), (*t, top)],
                colour.stroke_width(1),
            ))
            .map_err(|e| fail(&e))?;
        if status != "ANNOUNCED" {
            let label = format!("{kind} +{added} -{removed}");
            chart
                .draw_series([Text::new(label, (*t, top - 1), ("sans-serif", 12))])
                .map_err(|e| fail(&e))?;
        }
    }
    for (i, (node, points)) in run.per_node.iter().enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        // A step line: each count holds until the next change, and to the end.
        let mut steps = vec![(0.0, 0)];
        for &(t, n) in points {
            let last = steps.last().map_or(0, |p: &(f64, u32)| p.1);
            steps.push((t, last));
            steps.push((t, n));
        }
        steps.push((span, steps.last().map_or(0, |p| p.1)));
        let host = run
            .hosts
            .get(*node as usize)
            .cloned()
            .unwrap_or_else(|| format!("node {node}"));
        chart
            .draw_series(LineSeries::new(steps, colour.stroke_width(2)))
            .map_err(|e| fail(&e))?
            .label(host)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = r#"{"t_ms":1000,"event":"job","job":"7","n":2,"hosts":"host-a,host-b"}
{"t_ms":1010,"event":"start","rank":0,"node":0}
{"t_ms":1020,"event":"start","rank":1,"node":0}
{"t_ms":1500,"event":"change","kind":"ADD","delta":"d","added":2,"removed":0,"status":"ANNOUNCED"}
{"t_ms":1600,"event":"start","rank":2,"node":1}
{"t_ms":1610,"event":"start","rank":3,"node":1}
{"t_ms":1700,"event":"change","kind":"ADD","delta":"d","added":2,"removed":0,"status":"FINALIZED"}
{"t_ms":2000,"event":"end","rank":1,"node":0,"code":0}
{"t_ms":2500,"event":"node_gone","node":1}
"#;

    #[test]
    fn a_log_reads_as_processes_per_node_over_time() {
        let run = parse("log", LOG).unwrap();
        assert_eq!(run.job, "7");
        assert_eq!(run.hosts, ["host-a", "host-b"]);
        assert_eq!(run.per_node[&0], [(0.01, 1), (0.02, 2), (1.0, 1)]);
        assert_eq!(run.per_node[&1], [(0.6, 1), (0.61, 2), (1.5, 0)]);
        assert_eq!(run.changes.len(), 2);
        assert_eq!(run.changes[1].4, "FINALIZED");
        assert!((run.span - 1.5).abs() < 1e-9);
    }

    #[test]
    fn bad_logs_are_named_errors() {
        assert!(matches!(parse("l", ""), Err(PlotError::Empty(_))));
        let e = parse("l", "{\"t_ms\":1,\"event\":\"job\"}\nnot json\n").unwrap_err();
        assert!(e.to_string().starts_with("l line 1"), "{e}");
        let e = parse("l", "{\"t_ms\":1,\"event\":\"party\"}\n").unwrap_err();
        assert!(e.to_string().contains("unknown event"), "{e}");
    }

    #[test]
    fn the_picture_is_an_svg_with_every_host() {
        let run = parse("log", LOG).unwrap();
        let out = std::env::temp_dir().join(format!("dynres-plot-{}.svg", std::process::id()));
        draw(&run, &out).unwrap();
        let svg = std::fs::read_to_string(&out).unwrap();
        let _ = std::fs::remove_file(&out);
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        for text in ["job 7", "host-a", "host-b", "ADD +2 -0"] {
            assert!(svg.contains(text), "no {text:?} in the picture");
        }
    }
}
