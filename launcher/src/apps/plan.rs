//! Which change the synthetic benchmark asks for next (thesis Tab. 8.1: mode inc|step,
//! n_start, n_limit, n_delta), or an explicit plan.

use std::collections::VecDeque;

use dynres_core::rc::ChangeRequest;

/// One planned change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// Add this many.
    Add(u32),
    /// Remove this many.
    Sub(u32),
    /// Remove the first, add the second.
    Replace(u32, u32),
}

impl Item {
    /// Parses `+K`, `-K` or `rR/A`.
    pub fn parse(s: &str) -> Option<Item> {
        let s = s.trim();
        let pos = |x: &str| x.parse::<u32>().ok().filter(|k| *k > 0);
        if let Some(k) = s.strip_prefix('+') {
            pos(k).map(Item::Add)
        } else if let Some(k) = s.strip_prefix('-') {
            pos(k).map(Item::Sub)
        } else if let Some(ra) = s.strip_prefix('r') {
            let (r, a) = ra.split_once('/')?;
            Some(Item::Replace(pos(r)?, pos(a)?))
        } else {
            None
        }
    }

    fn request(self, app: &str) -> ChangeRequest {
        match self {
            Item::Add(k) => ChangeRequest::add(app, k),
            Item::Sub(k) => ChangeRequest::sub(app, k),
            Item::Replace(r, a) => ChangeRequest::replace(app, r, a),
        }
    }
}

/// The thesis' modes, plus an explicit plan and none (changes come from outside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Planner {
    /// Only react to changes requested from outside (`dynres grow/shrink`).
    None,
    /// `inc`: `n_delta` at a time towards `n_limit`.
    Inc {
        /// `n_limit`.
        limit: u32,
        /// `n_delta`.
        delta: u32,
    },
    /// `step`: step k goes `k * n_delta` away from `n_start` (towards `n_limit`, capped
    /// there) and back.
    Step {
        /// `n_start`.
        start: u32,
        /// `n_limit`.
        limit: u32,
        /// `n_delta`.
        delta: u32,
        /// The current step, from 1.
        k: u32,
        /// Whether the next change goes back to `n_start`.
        back: bool,
    },
    /// These changes in order, then none.
    Plan(VecDeque<Item>),
}

impl Planner {
    /// The next change for an application of `n` processes, if any.
    pub fn next(&mut self, n: u32) -> Option<Item> {
        match self {
            Planner::None => None,
            Planner::Inc { limit, delta } => {
                let (limit, delta) = (*limit, *delta);
                if n < limit {
                    Some(Item::Add(delta.min(limit - n)))
                } else if n > limit {
                    Some(Item::Sub(delta.min(n - limit)))
                } else {
                    None
                }
            }
            Planner::Step {
                start,
                limit,
                delta,
                k,
                back,
            } => {
                let item = if *back {
                    *back = false;
                    *k += 1;
                    match n.cmp(start) {
                        std::cmp::Ordering::Less => Some(Item::Add(*start - n)),
                        std::cmp::Ordering::Greater => Some(Item::Sub(n - *start)),
                        std::cmp::Ordering::Equal => None,
                    }
                } else {
                    *back = true;
                    let amount = (*k * *delta).min(start.abs_diff(*limit));
                    match (amount, *limit > *start) {
                        (0, _) => None,
                        (a, true) => Some(Item::Add(a)),
                        (a, false) => Some(Item::Sub(a.min(n.saturating_sub(1)))),
                    }
                };
                item.filter(|i| !matches!(i, Item::Sub(0)))
            }
            Planner::Plan(items) => items.pop_front(),
        }
    }

    /// The request for `item` in `app`.
    pub fn request(item: Item, app: &str) -> ChangeRequest {
        item.request(app)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_mode_grows_by_k_delta_and_returns_capped_at_the_limit() {
        let mut p = Planner::Step {
            start: 2,
            limit: 8,
            delta: 2,
            k: 1,
            back: false,
        };
        assert_eq!(p.next(2), Some(Item::Add(2)));
        assert_eq!(p.next(4), Some(Item::Sub(2)));
        assert_eq!(p.next(2), Some(Item::Add(4)));
        assert_eq!(p.next(6), Some(Item::Sub(4)));
        assert_eq!(p.next(2), Some(Item::Add(6)));
        assert_eq!(p.next(8), Some(Item::Sub(6)));
        assert_eq!(p.next(2), Some(Item::Add(6)));
    }

    #[test]
    fn inc_mode_walks_to_the_limit_and_stops() {
        let mut p = Planner::Inc { limit: 5, delta: 2 };
        assert_eq!(p.next(2), Some(Item::Add(2)));
        assert_eq!(p.next(4), Some(Item::Add(1)));
        assert_eq!(p.next(5), None);
        let mut down = Planner::Inc { limit: 2, delta: 4 };
        assert_eq!(down.next(5), Some(Item::Sub(3)));
    }

    #[test]
    fn plan_items_parse() {
        assert_eq!(Item::parse("+4"), Some(Item::Add(4)));
        assert_eq!(Item::parse("-2"), Some(Item::Sub(2)));
        assert_eq!(Item::parse("r1/2"), Some(Item::Replace(1, 2)));
        assert_eq!(Item::parse("+0"), None);
        assert_eq!(Item::parse("x"), None);
    }
}
