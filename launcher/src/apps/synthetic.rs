//! `synthetic`: the thesis' synthetic benchmark (§8.1.1): the Lst. 8.1 workload in the
//! Lst. 6.7 loop, parameterized as in Tab. 8.1. The root prints one CSV row per
//! iteration: `iteration,nprocs,work_ms,phase1_ms,phase2_ms,phase3_ms,comm_ms,event`.
//!
//! Times are the root's: `work_ms` the barrier-framed work step at `nprocs`;
//! `phase1_ms` `request_res_change` (when due) plus `get_res_change`; `phase2_ms` the
//! pset operation; `phase3_ms`, in the row where the change is decided, the time spent
//! in accept calls for it (with `-b`, the whole wait for the decision); `comm_ms`
//! creating the communicator from the new pset. `event` is `add3:pending`,
//! `sub2:finalized`, `add2:aborted`, …
//!
//! The job runs `-i` iterations, and on while a change it accepted is undecided. A
//! refused request is asked again once, `f` iterations later.

use std::collections::VecDeque;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use dynres_core::pset::{AttrUpdate, PsetName, PsetOp, SetOp};
use dynres_core::rc::{QueryAnswer, RcStatus, RcType, master::accept_key};

use super::plan::{Item, Planner};
use super::work::{rebalance, work_step};
use dynres_client::Session;
use dynres_client::comm::{Communicator, Transport};
use dynres_client::error::CommError;

/// Tab. 8.1's mode, plus `none` (react to external changes only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// n_delta at a time towards n_limit.
    Inc,
    /// Step k: k·n_delta away from n_start and back.
    Step,
    /// No changes of its own.
    None,
}

/// The synthetic benchmark's parameters (thesis Tab. 8.1).
#[derive(Parser, Debug, Clone)]
#[command(
    name = "synthetic",
    about = "The thesis' synthetic malleable benchmark"
)]
pub struct Args {
    /// Mode of resource changes.
    #[arg(long, value_enum, default_value = "step")]
    pub mode: Mode,
    /// The initial number of processes (default: the job's size at start).
    #[arg(long)]
    pub n_start: Option<u32>,
    /// Upper or lower limit of processes (default: n_start).
    #[arg(long)]
    pub n_limit: Option<u32>,
    /// Influences the number of processes added/removed.
    #[arg(long, default_value_t = 1)]
    pub n_delta: u32,
    /// A resource change every f iterations.
    #[arg(short = 'f', long = "freq", default_value_t = 1)]
    pub f: u32,
    /// Blocking accept.
    #[arg(short = 'b', long = "blocking")]
    pub b: bool,
    /// Iterations.
    #[arg(short = 'i', long = "iterations", default_value_t = 10)]
    pub i: u32,
    /// Sampling points per iteration (the thesis uses 10^10).
    #[arg(long, default_value_t = 100_000_000)]
    pub problem_size: u64,
    /// Explicit changes instead of a mode: comma-separated `+K`, `-K`, `rR/A`.
    #[arg(long)]
    pub plan: Option<String>,
    /// Bound on a new process' confirm (lookup and fence each), ms.
    #[arg(long, default_value_t = 20_000)]
    pub confirm_timeout_ms: u64,
    /// Bound on a blocking accept, ms.
    #[arg(long, default_value_t = 20_000)]
    pub accept_wait_ms: u64,
    /// After each work step, every process exchanges a message with every other
    /// (`alltoall.rs`): old and new processes all talk to each other after a change.
    #[arg(long)]
    pub alltoall: bool,
    /// Test hook: removed processes ignore `terminate` (the runtime kills them after
    /// its grace period).
    #[arg(long, hide = true)]
    pub ignore_terminate: bool,
    /// Test hook: the new process of this rank dies (SIGKILL) in the middle of its
    /// confirm, after the lookup and before the fence.
    #[arg(long, hide = true)]
    pub die_in_confirm: Option<u32>,
}

/// What the root broadcasts after each resource-change step.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Outcome {
    stop: bool,
    /// Finalized: the new pset and the removed ranks.
    finalized: Option<(String, Vec<u32>)>,
}

impl Outcome {
    fn encode(&self) -> Vec<u8> {
        let (new, removed) = match &self.finalized {
            Some((n, r)) => (
                n.clone(),
                r.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
            ),
            None => (String::new(), String::new()),
        };
        format!("{}\n{new}\n{removed}", u8::from(self.stop)).into_bytes()
    }

    fn decode(b: &[u8]) -> Result<Outcome, CommError> {
        let s = std::str::from_utf8(b).map_err(|_| CommError::Malformed("outcome"))?;
        let mut l = s.split('\n');
        let stop = l.next() == Some("1");
        let new = l.next().unwrap_or_default();
        let removed: Vec<u32> = l
            .next()
            .unwrap_or_default()
            .split(',')
            .filter(|x| !x.is_empty())
            .map(|x| x.parse().map_err(|_| CommError::Malformed("removed ranks")))
            .collect::<Result<_, _>>()?;
        let finalized = (!new.is_empty()).then(|| (new.to_string(), removed));
        Ok(Outcome { stop, finalized })
    }
}

/// A change the root has accepted and waits for.
struct Pending {
    delta: PsetName,
    kind: RcType,
    size: usize,
    new_pset: PsetName,
    /// Time spent in accept calls so far (the application's phase-3 overhead; with a
    /// blocking accept, the whole wait for the decision).
    spent: Duration,
}

/// The root's side of the resource-change step.
struct Root {
    planner: Planner,
    /// A refused request, asked again at the next due iteration (once): processes
    /// removed by the previous change keep their slots until they have exited.
    retry: Option<(Item, bool)>,
    pending: Option<Pending>,
    iteration: u32,
    args: Args,
}

/// One CSV row.
#[derive(Default)]
struct Row {
    work: f64,
    p1: Option<f64>,
    p2: Option<f64>,
    p3: Option<f64>,
    comm: Option<f64>,
    event: String,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn opt(x: Option<f64>) -> String {
    x.map_or(String::new(), |v| format!("{v:.3}"))
}

fn err(msg: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr(), "synthetic: {msg}");
}

fn kind_tag(k: RcType) -> &'static str {
    match k {
        RcType::Add => "add",
        RcType::Sub => "sub",
        RcType::Replace => "replace",
    }
}

impl Root {
    /// Phase 1 (request + query), phase 2 (pset op) and phase 3 (accept) of one
    /// resource-change step (Lst. 6.7).
    fn step(&mut self, s: &mut Session, n: usize, row: &mut Row) -> Outcome {
        self.iteration += 1;
        if self.pending.is_none() {
            let t1 = Instant::now();
            if self.iteration % self.args.f.max(1) == 0 {
                let next = match self.retry.take() {
                    Some(r) => Some(r),
                    None => self.planner.next(n as u32).map(|i| (i, false)),
                };
                if let Some((item, retried)) = next {
                    if let Err(e) = s.request_res_change(Planner::request(item, s.app())) {
                        if retried {
                            err(format_args!("request {item:?} refused: {e}"));
                        } else {
                            self.retry = Some((item, true));
                        }
                    }
                }
            }
            match s.get_res_change(None) {
                Ok(q) => {
                    row.p1 = Some(ms(t1.elapsed()));
                    self.phase2(s, q, row);
                }
                Err(e) => err(format_args!("get_res_change: {e}")),
            }
        }
        let mut out = Outcome::default();
        if let Some(p) = &mut self.pending {
            let t3 = Instant::now();
            let r = if self.args.b {
                let wait = Duration::from_millis(self.args.accept_wait_ms);
                s.accept_res_change_blocking(&p.delta, &p.new_pset, None, wait)
            } else {
                s.accept_res_change(&p.delta, &p.new_pset, None)
            };
            p.spent += t3.elapsed();
            let tag = format!("{}{}", kind_tag(p.kind), p.size);
            match r {
                Ok(a) if a.status == RcStatus::Finalized => {
                    row.p3 = Some(ms(p.spent));
                    row.event = format!("{tag}:finalized");
                    let removed = a.removed.iter().map(|p| p.rank).collect();
                    out.finalized = Some((a.new_pset.to_string(), removed));
                    self.pending = None;
                }
                Ok(_) => row.event = format!("{tag}:pending"),
                Err(e) => {
                    row.p3 = Some(ms(p.spent));
                    row.event = format!("{tag}:aborted");
                    err(format_args!("change {} not applied: {e}", p.delta));
                    self.pending = None;
                }
            }
        }
        out.stop = self.iteration >= self.args.i && self.pending.is_none();
        out
    }

    fn phase2(&mut self, s: &mut Session, q: QueryAnswer, row: &mut Row) {
        let (Some(kind), Some(delta), RcStatus::Announced) = (q.kind, q.delta.clone(), q.status)
        else {
            return;
        };
        let main = s.app_pset();
        let op = |op, with: &PsetName| PsetOp::Set {
            op,
            pset1: main.clone(),
            pset2: with.clone(),
            target: Some(main.clone()),
            attrs: AttrUpdate::none(),
        };
        let ops = match (kind, &q.sub_delta) {
            (RcType::Add, _) => vec![op(SetOp::Union, &delta)],
            (RcType::Sub, _) => vec![op(SetOp::Difference, &delta)],
            (RcType::Replace, Some(sub)) => {
                vec![op(SetOp::Difference, sub), op(SetOp::Union, &delta)]
            }
            (RcType::Replace, None) => return err("REPLACE without a removed delta"),
        };
        let t2 = Instant::now();
        if let Err(e) = s.pset_create_op(ops) {
            return err(format_args!("phase 2 for {delta}: {e}"));
        }
        row.p2 = Some(ms(t2.elapsed()));
        let size = s.pset_info(&delta).map(|i| i.size).unwrap_or(0);
        self.pending = Some(Pending {
            delta,
            kind,
            size,
            new_pset: main,
            spent: Duration::ZERO,
        });
    }
}

/// Checks the arguments (`args` without the program name) as [`main`] would parse
/// them, plus the `--plan` items, without running anything. `Err` is one line.
pub fn validate(args: &[String]) -> Result<(), String> {
    let Some(a) = super::parse_for_check::<Args>("synthetic", args)? else {
        return Ok(());
    };
    if let Some(p) = &a.plan {
        for item in p.split(',').filter(|x| !x.trim().is_empty()) {
            if Item::parse(item).is_none() {
                return Err(format!("bad --plan item {item:?} (want +K, -K or rR/A)"));
            }
        }
    }
    Ok(())
}

/// Entry point: `args` without the program name.
pub fn main(args: &[String]) -> ExitCode {
    let args = match super::parse_or_exit::<Args>("synthetic", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            err(e);
            ExitCode::FAILURE
        }
    }
}

fn planner(args: &Args, n_start: u32) -> Result<Planner, CommError> {
    if let Some(p) = &args.plan {
        let items = p
            .split(',')
            .filter(|x| !x.trim().is_empty())
            .map(|x| Item::parse(x).ok_or(CommError::Malformed("--plan item")))
            .collect::<Result<VecDeque<_>, _>>()?;
        return Ok(Planner::Plan(items));
    }
    let limit = args.n_limit.unwrap_or(n_start);
    Ok(match args.mode {
        Mode::None => Planner::None,
        Mode::Inc => Planner::Inc {
            limit,
            delta: args.n_delta,
        },
        Mode::Step => Planner::Step {
            start: n_start,
            limit,
            delta: args.n_delta,
            k: 1,
            back: false,
        },
    })
}

/// Runs one process of the benchmark.
pub fn run(args: Args) -> Result<(), CommError> {
    let mut s = Session::init()?;
    // Opened while this process queries and (if new) confirms.
    let opening = Transport::open_in_background();
    // Lst. 6.7: was this process added by a change? Then confirm it.
    let me = s.get_res_change(Some(&PsetName::self_set()))?;
    let joining =
        me.incl && matches!(me.kind, Some(RcType::Add | RcType::Replace)) && !me.status.is_final();
    let main = match (&me.delta, joining) {
        (Some(delta), true) => {
            let timeout = Duration::from_millis(args.confirm_timeout_ms);
            if args.die_in_confirm == Some(s.rank()) {
                // The first step of confirm (the accept lookup), then death.
                let _ = s.lookup(&accept_key(delta), Some(timeout));
                // SAFETY: raising a signal against ourselves has no preconditions.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            }
            match s.confirm_res_change(delta, timeout) {
                Ok(p) => p,
                Err(e) => {
                    err(format_args!(
                        "rank {}: confirm failed ({e}); exiting",
                        s.rank()
                    ));
                    return Ok(());
                }
            }
        }
        _ => s.app_pset(),
    };
    let transport = opening.finish()?;
    let mut comm = Communicator::create(&mut s, &transport, &main)?;
    let mut root = (comm.rank() == 0 && !joining).then(|| {
        let n_start = args.n_start.unwrap_or(comm.size() as u32);
        planner(&args, n_start).map(|planner| Root {
            planner,
            retry: None,
            pending: None,
            iteration: 0,
            args: args.clone(),
        })
    });
    let mut root = match root.take() {
        Some(r) => Some(r?),
        None => None,
    };
    let mut out = std::io::stdout();
    if root.is_some() {
        let _ = writeln!(
            out,
            "iteration,nprocs,work_ms,phase1_ms,phase2_ms,phase3_ms,comm_ms,event"
        );
    }
    // Joining processes learn from the root whether the job is already over.
    let mut stop = join(&comm, false)?;
    while !stop {
        let n = comm.size();
        let mut row = Row::default();
        let t = Instant::now();
        let part = rebalance(args.problem_size, n, comm.rank());
        comm.barrier()?;
        let hits = work_step(part);
        let total = comm.allreduce_sum(&[hits as f64])?;
        if args.alltoall {
            super::alltoall::exchange(&comm)?;
        }
        row.work = ms(t.elapsed());
        // ----- resource-change step (Lst. 6.7) -----
        let decided = match root.as_mut() {
            Some(r) => r.step(&mut s, n, &mut row),
            None => Outcome::default(),
        };
        let o = Outcome::decode(&comm.bcast(0, &decided.encode())?)?;
        let iteration = root.as_ref().map_or(0, |r| r.iteration);
        stop = o.stop;
        if let Some((new, removed)) = &o.finalized {
            if removed.contains(&s.rank()) {
                if args.ignore_terminate {
                    loop {
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
                if root.is_some() {
                    err("the root was removed; stopping its CSV");
                }
                return Ok(());
            }
            let new = PsetName::parse(new).map_err(|_| CommError::Malformed("new pset"))?;
            let tc = Instant::now();
            drop(comm);
            comm = Communicator::create(&mut s, &transport, &new)?;
            stop = join(&comm, stop)?;
            row.comm = Some(ms(tc.elapsed()));
        }
        if root.is_some() {
            let _ = writeln!(
                out,
                "{iteration},{n},{:.3},{},{},{},{},{}",
                row.work,
                opt(row.p1),
                opt(row.p2),
                opt(row.p3),
                opt(row.comm),
                row.event
            );
            let _ = out.flush();
            let _ = total;
        }
    }
    comm.leave()?;
    transport.finalize()?;
    Ok(())
}

/// Broadcasts the root's stop flag over a new communicator.
fn join(comm: &Communicator, stop: bool) -> Result<bool, CommError> {
    let b = comm.bcast(0, &[u8::from(stop)])?;
    Ok(b.first() == Some(&1))
}
