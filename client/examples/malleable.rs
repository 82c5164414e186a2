//! The smallest complete malleable program in Rust (the guide, `docs/guide.md`): it
//! works in iterations and, between two, takes whatever resource change the runtime
//! announces — requested from outside with `dynres grow JOB +K`, `dynres shrink JOB
//! -K` or `dynres replace JOB -R +A` — and goes on at the new size:
//!
//! ```sh
//! cargo build --release -p dynres-client --example malleable
//! dynres run -n 2 --max 8 -- target/release/examples/malleable STOPFILE
//! ```
//!
//! Every process stops at the same iteration once the file STOPFILE exists and no change
//! is in flight. Rank 0 (the root) prints one line per decided change: `malleable: ADD
//! finalized, size 4`. The same program in C is `capi/examples/malleable.c`.

use std::time::Duration;

use dynres_client::Session;
use dynres_client::comm::{Communicator, Transport};
use dynres_core::pset::{AttrUpdate, PsetName, PsetOp, SetOp};
use dynres_core::rc::{RcStatus, RcType};

type Error = Box<dyn std::error::Error>;

/// What the root tells everyone after each iteration: stop, or the decided change's
/// new pset and removed ranks, or nothing.
fn outcome(stop: bool, decided: Option<(PsetName, Vec<u32>)>) -> Vec<u8> {
    let (pset, removed) = decided.map_or((String::new(), String::new()), |(p, r)| {
        let r: Vec<String> = r.iter().map(u32::to_string).collect();
        (p.to_string(), r.join(","))
    });
    format!("{}\n{pset}\n{removed}", u8::from(stop)).into_bytes()
}

/// The root's part of one iteration: phase 1 (query the announced change), phase 2
/// (the application's pset minus the removed, plus the added processes), phase 3
/// (accept until decided). Returns the decided change's new pset and removed ranks.
fn root_step(
    s: &mut Session,
    pending: &mut Option<(PsetName, RcType)>,
) -> Result<Option<(PsetName, Vec<u32>)>, Error> {
    let app = s.app_pset();
    if pending.is_none() {
        let q = s.get_res_change(None)?;
        if let (Some(kind), Some(delta), RcStatus::Announced) = (q.kind, q.delta, q.status) {
            let op = |op, with: &PsetName| PsetOp::Set {
                op,
                pset1: app.clone(),
                pset2: with.clone(),
                target: Some(app.clone()),
                attrs: AttrUpdate::none(),
            };
            let ops = match (kind, &q.sub_delta) {
                (RcType::Add, _) => vec![op(SetOp::Union, &delta)],
                (RcType::Sub, _) => vec![op(SetOp::Difference, &delta)],
                (RcType::Replace, Some(gone)) => {
                    vec![op(SetOp::Difference, gone), op(SetOp::Union, &delta)]
                }
                (RcType::Replace, None) => return Err("REPLACE without its removed delta".into()),
            };
            s.pset_create_op(ops)?;
            *pending = Some((delta, kind));
        }
    }
    let Some((delta, kind)) = pending.clone() else {
        return Ok(None);
    };
    let a = s.accept_res_change_blocking(&delta, &app, None, Duration::from_secs(30))?;
    if a.status != RcStatus::Finalized {
        return Ok(None);
    }
    *pending = None;
    let size = s.pset_info(&a.new_pset)?.size;
    println!("malleable: {kind:?} finalized, size {size}");
    let removed = a.removed.iter().map(|p| p.rank).collect();
    Ok(Some((a.new_pset, removed)))
}

fn main() -> Result<(), Error> {
    let stop_file = std::env::args().nth(1).ok_or("usage: malleable STOPFILE")?;
    let mut s = Session::init()?;
    let transport = Transport::new()?;
    // Added by a change (ADD or REPLACE)? Confirm it: it answers the pset to work in.
    let me = s.get_res_change(Some(&PsetName::self_set()))?;
    let joining =
        me.incl && matches!(me.kind, Some(RcType::Add | RcType::Replace)) && !me.status.is_final();
    let pset = match (&me.delta, joining) {
        (Some(delta), true) => s.confirm_res_change(delta, Duration::from_secs(30))?,
        _ => s.app_pset(),
    };
    let mut comm = Communicator::create(&mut s, &transport, &pset)?;
    // The root stays rank 0 for the whole run: a shrink or replace without named
    // victims takes the processes on the highest slots (RC-5).
    let root = comm.rank() == 0 && !joining;
    let mut pending = None;
    // A process that joins learns from the first broadcast whether the job is over.
    let mut stop = comm.bcast(0, &[0])?.first() == Some(&1);
    while !stop {
        std::thread::sleep(Duration::from_millis(50)); // the work of one iteration
        let mine = if root {
            let decided = root_step(&mut s, &mut pending)?;
            let quiet = decided.is_none() && pending.is_none();
            outcome(quiet && std::path::Path::new(&stop_file).exists(), decided)
        } else {
            Vec::new()
        };
        let got = String::from_utf8(comm.bcast(0, &mine)?)?;
        let mut lines = got.split('\n');
        stop = lines.next() == Some("1");
        let (new, removed) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
        if new.is_empty() {
            continue;
        }
        if removed.split(',').any(|r| r == s.rank().to_string()) {
            return Ok(()); // removed by the change: this process ends here
        }
        // The change is decided: work on in the new pset, with the processes it added.
        drop(comm);
        comm = Communicator::create(&mut s, &transport, &PsetName::parse(new)?)?;
        stop = comm.bcast(0, &[u8::from(stop)])?.first() == Some(&1);
    }
    if root {
        println!("malleable: stopped");
    }
    comm.leave()?;
    transport.finalize()?;
    Ok(())
}
