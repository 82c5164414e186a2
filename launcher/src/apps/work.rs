//! The thesis' synthetic workload (Lst. 8.1): a naive collision test of a parabolic
//! trajectory against a box at `PROBLEM_SIZE` sampling points, split evenly.

use std::hint::black_box;

/// `rebalance()`: this process' half-open partition of `0..problem_size`.
pub fn rebalance(problem_size: u64, num_procs: usize, my_rank: usize) -> (u64, u64) {
    let n = num_procs.max(1) as u64;
    let r = my_rank as u64;
    let size = problem_size / n;
    let start = size * r;
    let end = if r + 1 == n {
        problem_size
    } else {
        (r + 1) * size
    };
    (start, end)
}

/// `work_step()`: counts the sampling points inside the box (~10 flops each).
pub fn work_step((start, end): (u64, u64)) -> u64 {
    let (a, b, c, d, e) = black_box((0.5, 1.0, -1.0e-9, 0.3, 2.0));
    let (x_min, x_max, y_min, y_max) = black_box((1.0e3, 1.0e9, 0.0, 1.0e7));
    let mut res = 0u64;
    for i in start..end {
        let t = i as f64;
        let x = a * t + b;
        let y = c * t * t + d * t + e;
        if x > x_min && x < x_max && y > y_min && y < y_max {
            res += 1;
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_cover_the_problem_exactly_once() {
        for n in 1..9 {
            let parts: Vec<_> = (0..n).map(|r| rebalance(1003, n, r)).collect();
            assert_eq!(parts[0].0, 0);
            assert_eq!(parts[n - 1].1, 1003);
            assert!(parts.windows(2).all(|w| w[0].1 == w[1].0));
        }
        let whole = work_step((0, 10_000));
        let split: u64 = (0..3).map(|r| work_step(rebalance(10_000, 3, r))).sum();
        assert_eq!(whole, split);
        assert!(whole > 0);
    }
}
