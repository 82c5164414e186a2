//! Checking several configurations side by side.
//!
//! stateright's checker scales poorly past one thread on our models: its threads share
//! the visited set and the map of discoveries, whose shard locks every state touches
//! (once per property), so two threads on one configuration explored about 1.6× what one
//! does. Configurations share nothing, so the gate runs as many at once as it has
//! threads, each on one thread, and a lone configuration gets every thread.
//!
//! Jobs are started heaviest first (longest processing time first), so the tail — the
//! last job still running while the other workers are idle — is a small one. Results
//! come back in the jobs' own order, whatever order they finished in, so the gate's
//! report reads the same on every run.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::mpsc;

/// One unit of work: a weight (the expected cost; only its order matters) and the work,
/// given the number of checker threads it may use.
pub struct Job<'a, T> {
    /// Expected cost, e.g. the configuration's golden state count.
    pub weight: u64,
    /// The work.
    pub run: Box<dyn FnOnce(usize) -> T + Send + 'a>,
}

impl<'a, T> Job<'a, T> {
    /// A job of weight `weight`.
    pub fn new(weight: u64, run: impl FnOnce(usize) -> T + Send + 'a) -> Self {
        Job {
            weight,
            run: Box::new(run),
        }
    }
}

/// How the jobs were spread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Jobs running at once.
    pub workers: usize,
    /// Checker threads each job gets.
    pub threads_per_job: usize,
}

/// The plan for `jobs` jobs on `threads` threads: one job at a time with every thread
/// when there is a single job (or a single thread), otherwise one thread per job and as
/// many jobs at once as threads.
pub fn plan(jobs: usize, threads: usize) -> Plan {
    let threads = threads.max(1);
    if jobs <= 1 || threads == 1 {
        Plan {
            workers: 1,
            threads_per_job: threads,
        }
    } else {
        Plan {
            workers: threads.min(jobs),
            threads_per_job: 1,
        }
    }
}

/// Runs `jobs` on `threads` threads (see [`plan`]). `report(i, &result)` is called on the
/// calling thread for job 0, 1, 2, … in that order, each as soon as it and every job
/// before it have finished; the results are returned in the same order.
pub fn run<T: Send>(
    jobs: Vec<Job<'_, T>>,
    threads: usize,
    mut report: impl FnMut(usize, &T),
) -> Vec<T> {
    let n = jobs.len();
    let plan = plan(n, threads);
    // Heaviest first; equal weights keep their order.
    let mut order: Vec<(usize, Job<'_, T>)> = jobs.into_iter().enumerate().collect();
    order.sort_by_key(|(_, job)| std::cmp::Reverse(job.weight));
    let queue = Mutex::new(order.into_iter().collect::<VecDeque<_>>());
    let mut results: Vec<Option<T>> = (0..n).map(|_| None).collect();
    let mut next = 0;
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel::<(usize, T)>();
        for _ in 0..plan.workers {
            let tx = tx.clone();
            let queue = &queue;
            s.spawn(move || {
                loop {
                    // The guard is dropped before the job runs.
                    let job = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                    let Some((i, job)) = job else { break };
                    if tx.send((i, (job.run)(plan.threads_per_job))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        // Every worker holds a sender, so this ends when all of them have (a panicking
        // job ends its worker too; the scope then re-raises the panic).
        for (i, t) in rx {
            results[i] = Some(t);
            while let Some(Some(t)) = results.get(next) {
                report(next, t);
                next += 1;
            }
        }
    });
    results
        .into_iter()
        .map(|r| r.expect("every job ran (a worker that panicked re-raised it)"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_lone_job_gets_every_thread_and_many_get_one_each() {
        assert_eq!(
            plan(1, 2),
            Plan {
                workers: 1,
                threads_per_job: 2
            }
        );
        assert_eq!(
            plan(5, 2),
            Plan {
                workers: 2,
                threads_per_job: 1
            }
        );
        assert_eq!(
            plan(2, 8),
            Plan {
                workers: 2,
                threads_per_job: 1
            }
        );
        assert_eq!(
            plan(5, 0),
            Plan {
                workers: 1,
                threads_per_job: 1
            }
        );
    }

    #[test]
    fn results_and_reports_come_in_job_order_and_heavy_jobs_start_first() {
        let started = Mutex::new(Vec::new());
        let weights = [1u64, 50, 3, 50, 7];
        let jobs: Vec<Job<'_, (usize, usize)>> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let started = &started;
                Job::new(w, move |threads| {
                    started.lock().unwrap().push(i);
                    (i, threads)
                })
            })
            .collect();
        let mut reported = Vec::new();
        // One worker: the start order is exactly the weight order.
        let out = run(jobs, 1, |i, r| reported.push((i, r.0)));
        assert_eq!(out, vec![(0, 1), (1, 1), (2, 1), (3, 1), (4, 1)]);
        assert_eq!(reported, vec![(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]);
        assert_eq!(*started.lock().unwrap(), vec![1, 3, 4, 2, 0]);
    }

    #[test]
    fn jobs_run_side_by_side_on_one_thread_each() {
        // Each job waits for the other to have started: run one after the other, the
        // first would give up at the deadline and report that it was alone.
        let arrived = AtomicUsize::new(0);
        let jobs: Vec<Job<'_, (bool, usize)>> = (0..2)
            .map(|_| {
                let arrived = &arrived;
                Job::new(1, move |threads| {
                    arrived.fetch_add(1, Ordering::SeqCst);
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
                    while arrived.load(Ordering::SeqCst) < 2 && std::time::Instant::now() < deadline
                    {
                        std::thread::yield_now();
                    }
                    (arrived.load(Ordering::SeqCst) == 2, threads)
                })
            })
            .collect();
        assert_eq!(run(jobs, 2, |_, _| {}), vec![(true, 1), (true, 1)]);
    }
}
