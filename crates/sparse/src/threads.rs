//! When a pass over a matrix is worth the thread pool: one rule for the
//! constructor's scan (which also gathers the row facts the features read)
//! and the feature pass over bare arrays, scaled by the pool's size.
//!
//! A pass started from outside the pool (a request's thread) hands its work to
//! the pool and sleeps until the pool is done, so threads cost a fixed `L` (the
//! pool's workers woken, then the caller; 20-60 us measured on a 2-core
//! machine, the more the busier it is) and save `(1 - 1/p)` of the pass's
//! work `W` on `p` threads. They pay when `W (1 - 1/p) > L`, that is from
//! `W = L p / (p - 1)`: twice `L` on two threads, falling towards `L` as
//! threads are added, never lower. So a pass that needs `T2` units of work to
//! pay on two threads pays on `p` from `T2 p / (2 (p - 1))`, at least half of
//! `T2`: more cores lower the threshold by at most half, not in proportion.
//! `L` does not shrink with more cores (waking more workers, if anything, takes
//! longer), which is why the thresholds are not divided by `p`. Below half of
//! `T2` the pool is not consulted at all: asking its size would start it, which
//! a small matrix's first call would pay in full.

/// Whether a pass of `work` units is worth the thread pool, given `at_two`, the
/// work from which it is on a pool of two threads (measured there). Never on
/// a pool of one thread.
pub(crate) fn worth_threads(work: usize, at_two: usize) -> bool {
    if work < at_two / 2 {
        return false;
    }
    worth_threads_on(work, at_two, rayon::current_num_threads())
}

/// [`worth_threads`] on a pool of `threads` threads.
fn worth_threads_on(work: usize, at_two: usize, threads: usize) -> bool {
    // work >= at_two * p / (2 (p - 1)), in integers.
    threads >= 2 && work.saturating_mul(2 * (threads - 1)) >= at_two.saturating_mul(threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_falls_with_threads_to_half_and_no_further() {
        let t2 = 1 << 20;
        // One thread: never.
        assert!(!worth_threads_on(usize::MAX, t2, 1));
        // Two threads: exactly from the measured threshold.
        assert!(!worth_threads_on(t2 - 1, t2, 2));
        assert!(worth_threads_on(t2, t2, 2));
        // Four threads: from 2/3 of it.
        assert!(!worth_threads_on(t2 * 2 / 3 - 1, t2, 4));
        assert!(worth_threads_on(t2 * 2 / 3 + 1, t2, 4));
        // Many threads: above half, never below.
        assert!(worth_threads_on(t2 / 2 + t2 / 1000, t2, 1024));
        for p in [2, 3, 8, 64, 1 << 16] {
            assert!(!worth_threads_on(t2 / 2 - 1, t2, p), "{p} threads");
        }
        assert!(!worth_threads(t2 / 2 - 1, t2));
        // No overflow on huge inputs.
        assert!(worth_threads_on(usize::MAX, usize::MAX, 3));
    }
}
