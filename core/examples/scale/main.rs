//! The kernel alone at scale (issue 29, goal 4): master, D daemons and every client in
//! memory ([`cluster`]), at D = 1, 16, 256 and 1,024 nodes × 64 and 128 processes per
//! node. Per operation (job start, ADD and SUB of one node's worth, a pset operation on
//! the world, a fence and a modex over the application) it reports process CPU time
//! (`getrusage`) and the master's share of it, messages and encoded bytes (real wire
//! frames), and memory (a counting
//! global allocator: the peak of live heap above the operation's start, and the live
//! heap after it), as a markdown table on stdout and a plot in
//! `target/scale/scale.svg`.
//!
//! Run: `cargo run --release -p dynres-core --example scale -- [--min-nodes N]
//! [--max-nodes N] [--ppn 64|128] [--max-world W] [--modex-max-world M]`. Every daemon
//! holds a replica of every pset, as runs of ranks (RC-23), so the simulation holds
//! about 100 MB at 1,024 × 128; sizes over `W` processes (131,072 by default: the
//! whole grid) are skipped. The modex hands every member every member's value, so its bytes grow with
//! the square of the job: it is skipped above `M` processes (4,096 by default).
//! `--plot-from TABLE…` only draws the plot from tables it printed before (runs of one
//! size each, concatenated).

#[path = "cluster.rs"]
mod cluster;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use cluster::{Cluster, Counts, Link, config};
use dynres_core::rc::ChangeRequest;

/// Counts live heap bytes and their peak, so memory is measured, not estimated.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's pointer, layout and size.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// This process' user + system CPU time, in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: `getrusage` only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// This thread's CPU time in nanoseconds (the simulation runs on one thread).
fn thread_cpu_ns() -> u64 {
    // SAFETY: `clock_gettime` only writes the struct it is given.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the thread CPU clock always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One operation's costs.
#[derive(Clone, Debug)]
struct Row {
    nodes: u32,
    ppn: u32,
    op: &'static str,
    cpu_ms: f64,
    counts: Counts,
    /// Peak live heap above the operation's start, bytes.
    peak: usize,
    /// Live heap after the operation, bytes.
    live: usize,
}

/// Runs `f` and measures its CPU time and memory; the caller fills in the counts.
fn measure<T>(nodes: u32, ppn: u32, op: &'static str, f: impl FnOnce() -> T) -> (T, Row) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let t0 = cpu_seconds();
    let out = f();
    let cpu_ms = (cpu_seconds() - t0) * 1e3;
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    let live = LIVE.load(Ordering::Relaxed);
    let row = Row {
        nodes,
        ppn,
        op,
        cpu_ms,
        counts: Counts::default(),
        peak,
        live,
    };
    (out, row)
}

fn run(nodes: u32, ppn: u32, modex_max: u32, rows: &mut Vec<Row>) {
    let world = nodes * ppn;
    let (mut c, mut row) = measure(nodes, ppn, "start", || {
        Cluster::start_clocked(config(nodes, ppn), thread_cpu_ns)
    });
    row.counts = c.take_counts();
    assert_eq!(c.processes() as u32, world, "every first process launched");
    print_row(&row);
    rows.push(row);
    for (name, f) in ops(ppn) {
        if name == "modex" && world > modex_max {
            continue;
        }
        let ((), mut row) = measure(nodes, ppn, name, || f(&mut c));
        row.counts = c.take_counts();
        print_row(&row);
        rows.push(row);
    }
    assert_eq!(c.processes() as u32, world, "the SUB undid the ADD");
}

type Op = (&'static str, Box<dyn Fn(&mut Cluster)>);

fn ops(ppn: u32) -> Vec<Op> {
    vec![
        (
            "add",
            Box::new(move |c: &mut Cluster| c.change(ChangeRequest::add(cluster::APP, ppn))),
        ),
        (
            "sub",
            Box::new(move |c: &mut Cluster| c.change(ChangeRequest::sub(cluster::APP, ppn))),
        ),
        (
            "pset_op",
            Box::new(|c: &mut Cluster| c.pset_op_on_world("mpi://app/app/w")),
        ),
        (
            "fence",
            Box::new(|c: &mut Cluster| {
                let world = c.processes() as u64;
                assert_eq!(c.fence(), world, "every member was released");
            }),
        ),
        (
            "modex",
            Box::new(|c: &mut Cluster| {
                let world = c.processes() as u64;
                assert_eq!(c.modex(), world, "every member completed the modex");
            }),
        ),
    ]
}

fn mib(b: usize) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

const HEADER: &str = "| nodes | ppn | procs | op | CPU ms | master ms | busiest daemon ms | msgs | master↔daemon msgs | bytes | master↔daemon bytes | peak MiB | live MiB |\n|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|";

fn print_row(r: &Row) {
    let rt = |l| r.counts.link(l);
    let (md, mdb) = (rt(Link::ToDaemon), rt(Link::ToMaster));
    println!(
        "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {:.1} | {:.1} |",
        r.nodes,
        r.ppn,
        r.nodes * r.ppn,
        r.op,
        r.cpu_ms,
        r.counts.master_ns as f64 * 1e-6,
        r.counts.daemon_ns.values().max().copied().unwrap_or(0) as f64 * 1e-6,
        r.counts.messages(),
        md.0 + mdb.0,
        r.counts.bytes(),
        md.1 + mdb.1,
        mib(r.peak),
        mib(r.live),
    );
}

/// What the plot shows of one row.
struct Point {
    world: f64,
    ppn: u32,
    op: String,
    cpu_ms: f64,
    master_ms: f64,
    bytes: f64,
}

impl Point {
    fn of(r: &Row) -> Point {
        Point {
            world: f64::from(r.nodes * r.ppn),
            ppn: r.ppn,
            op: r.op.to_string(),
            cpu_ms: r.cpu_ms,
            master_ms: r.counts.master_ns as f64 * 1e-6,
            bytes: r.counts.bytes() as f64,
        }
    }

    /// A row of the table this example prints, read back (`--plot-from`), so that runs
    /// of one size each can be drawn together.
    fn parse(line: &str) -> Option<Point> {
        let c: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if c.len() != 13 {
            return None;
        }
        Some(Point {
            world: c[2].parse().ok()?,
            ppn: c[1].parse().ok()?,
            op: c[3].to_string(),
            cpu_ms: c[4].parse().ok()?,
            master_ms: c[5].parse().ok()?,
            bytes: c[9].parse().ok()?,
        })
    }
}

fn plot(rows: &[Point], path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (1500, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, 3));
    let world = |r: &Point| r.world;
    let max_x = rows.iter().map(world).fold(64.0, f64::max) * 2.0;
    let ops = ["start", "add", "sub", "pset_op", "fence", "modex"];
    let colours = [&RED, &BLUE, &GREEN, &MAGENTA, &CYAN, &BLACK];
    type Metric = fn(&Point) -> f64;
    let metrics: [(&str, Metric); 3] = [
        ("CPU ms per operation (all machines)", |r| {
            r.cpu_ms.max(1e-3)
        }),
        ("master CPU ms per operation", |r| r.master_ms.max(1e-3)),
        ("bytes per operation", |r| r.bytes.max(1.0)),
    ];
    for (panel, (title, metric)) in panels.iter().zip(metrics) {
        let max_y = rows.iter().map(metric).fold(1.0, f64::max) * 2.0;
        let min_y = rows.iter().map(metric).fold(f64::MAX, f64::min).max(1e-3) / 2.0;
        let mut chart = ChartBuilder::on(panel)
            .caption(title, ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((32.0..max_x).log_scale(), (min_y..max_y).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("processes (nodes × per node)")
            .draw()?;
        for (op, colour) in ops.iter().zip(colours) {
            for (ppn, dashed) in [(64, false), (128, true)] {
                let pts: Vec<(f64, f64)> = rows
                    .iter()
                    .filter(|r| r.op == *op && r.ppn == ppn)
                    .map(|r| (world(r), metric(r)))
                    .collect();
                if pts.is_empty() {
                    continue;
                }
                let style = colour.stroke_width(if dashed { 1 } else { 2 });
                chart
                    .draw_series(LineSeries::new(pts.clone(), style))?
                    .label(format!("{op} ×{ppn}"))
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
                chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, colour.filled())))?;
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str, default: u32| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let min_nodes = arg("--min-nodes", 1);
    let max_nodes = arg("--max-nodes", 1024);
    let only_ppn = arg("--ppn", 0);
    let max_world = arg("--max-world", 131072);
    let modex_max = arg("--modex-max-world", 4096);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/scale");
    std::fs::create_dir_all(&dir).expect("target/scale");
    let path = dir.join("scale.svg");
    if let Some(i) = args.iter().position(|a| a == "--plot-from") {
        let tables: String = (args[i + 1..].iter())
            .map(|f| std::fs::read_to_string(f).expect("a table printed by this example"))
            .collect();
        let points: Vec<Point> = tables.lines().filter_map(Point::parse).collect();
        plot(&points, &path).expect("plot");
        eprintln!("plot: {}", path.display());
        return;
    }
    println!("{HEADER}");
    let mut rows = Vec::new();
    for nodes in [1, 16, 256, 1024]
        .into_iter()
        .filter(|&d| (min_nodes..=max_nodes).contains(&d))
    {
        for ppn in [64, 128]
            .into_iter()
            .filter(|&p| only_ppn == 0 || p == only_ppn)
        {
            if nodes * ppn > max_world {
                eprintln!("skipped {nodes} × {ppn}: over --max-world {max_world}");
                continue;
            }
            run(nodes, ppn, modex_max, &mut rows);
        }
    }
    let points: Vec<Point> = rows.iter().map(Point::of).collect();
    plot(&points, &path).expect("plot");
    eprintln!("plot: {}", path.display());
}
