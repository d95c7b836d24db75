//! The timing policy and the statistics of repeated measurements: warm-up and a
//! first batch sized from an estimate of one call, then more repetitions until
//! a distribution-free 95% confidence interval of the median is narrow enough.

/// Version of the timing semantics. Bump it when what a stored time means
/// changes (repetition rule, statistic, warm-up), so that timings taken under
/// the old rule are kept apart from new ones (see [`engine_version`]).
/// 2: adaptive repetitions until the median's 95% CI is within `ci_target`.
pub const TIMING_VERSION: u32 = 2;

/// The engine's version as recorded with every measurement: crate version and
/// [`TIMING_VERSION`], e.g. `0.1.0+timing2`.
pub fn engine_version() -> String {
    format!("{}+timing{}", env!("CARGO_PKG_VERSION"), TIMING_VERSION)
}

/// Fewest samples for which the order-statistic 95% CI of the median is finite
/// (with 5, even the extremes cover the median with only 1 - 2 * 0.5^5 = 94%).
pub const MIN_CI_SAMPLES: usize = 6;

/// How a prepared plan is timed ([`crate::Engine::measure`]): the one policy
/// `spmv bench`, the trainer's labelling and the service's upload tuning share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimingPolicy {
    /// Untimed calls before the timed ones (skipped when they alone would take
    /// longer than `target_ms`: the caller's estimate run has warmed up already).
    pub warmup: usize,
    /// Fewest timed repetitions.
    pub min_reps: usize,
    /// Most timed repetitions of the first batch (sized from `target_ms`).
    pub max_reps: usize,
    /// Aim for about this much kernel time in the first batch (ms), within the bounds.
    pub target_ms: f64,
    /// Stop once the 95% CI half-width of the median is within this fraction of
    /// the median (0.02 = 2%). 0 or less: the first batch only (no adaptation).
    pub ci_target: f64,
    /// Most repetitions in all, adaptive batches included.
    pub ci_max_reps: usize,
    /// Most wall time (ms) the adaptive batches after the first may take.
    pub ci_budget_ms: f64,
}

impl Default for TimingPolicy {
    /// The labelling defaults: 1 warm-up, 3..=25 reps for 4 ms, then up to 400
    /// reps or 20 ms more until the CI is within 2%.
    fn default() -> Self {
        TimingPolicy {
            warmup: 1,
            min_reps: 3,
            max_reps: 25,
            target_ms: 4.0,
            ci_target: 0.02,
            ci_max_reps: 400,
            ci_budget_ms: 20.0,
        }
    }
}

impl TimingPolicy {
    /// A fixed number of repetitions: `warmup` untimed calls, then the first
    /// batch only (no adaptive batches), as [`crate::Engine::time`] runs.
    pub fn fixed(warmup: usize) -> TimingPolicy {
        TimingPolicy {
            warmup,
            ci_target: 0.0,
            ..TimingPolicy::default()
        }
    }

    /// Timed repetitions of the first batch for a call estimated at `estimate_ms`.
    pub fn reps_for(&self, estimate_ms: f64) -> usize {
        let (lo, hi) = (
            self.min_reps.max(1),
            self.max_reps.max(self.min_reps).max(1),
        );
        if !estimate_ms.is_finite() || estimate_ms <= 0.0 {
            return hi;
        }
        ((self.target_ms / estimate_ms).ceil() as usize).clamp(lo, hi)
    }

    /// Warm-up calls for a call estimated at `estimate_ms`.
    pub fn warmup_for(&self, estimate_ms: f64) -> usize {
        if estimate_ms * self.warmup as f64 > self.target_ms {
            0
        } else {
            self.warmup
        }
    }

    /// The size of the next adaptive batch, or `None` to stop: after `done`
    /// samples whose median is `median_ms`, `relative half-width` `ci`, having
    /// spent `spent_ms` of the adaptive budget.
    pub fn next_batch(&self, done: usize, median_ms: f64, ci: f64, spent_ms: f64) -> Option<usize> {
        if self.ci_target <= 0.0 || ci <= self.ci_target {
            return None;
        }
        let cap = self.ci_max_reps.saturating_sub(done);
        let left_ms = self.ci_budget_ms - spent_ms;
        if cap == 0 || left_ms <= 0.0 {
            return None;
        }
        // Double the sample (the CI narrows like 1/sqrt(n)), at least to the
        // fewest samples with a finite CI, within the reps and time left.
        let want = done.max(MIN_CI_SAMPLES.saturating_sub(done)).max(1);
        let afford = if median_ms > 0.0 && median_ms.is_finite() {
            ((left_ms / median_ms).floor() as usize).max(1)
        } else {
            want
        };
        Some(want.min(cap).min(afford))
    }
}

/// Ranks (1-based) of the order statistics bounding a distribution-free 95%
/// confidence interval of the median of `n` samples: the largest `l` with
/// `P(B <= l - 1) <= 0.025` for `B ~ Binomial(n, 1/2)`, and `n + 1 - l`.
/// `None` below [`MIN_CI_SAMPLES`].
pub fn median_ci_ranks(n: usize) -> Option<(usize, usize)> {
    if n < MIN_CI_SAMPLES {
        return None;
    }
    // Binomial(n, 1/2) probabilities in log space (0.5^n underflows past n = 1074).
    let mut log_pmf = n as f64 * 0.5f64.ln();
    let mut cdf = 0.0;
    let mut l = 0;
    for k in 0..n {
        cdf += log_pmf.exp();
        if cdf > 0.025 {
            break;
        }
        // cdf = P(B <= k) <= 0.025, so rank k + 1 bounds the interval.
        l = k + 1;
        log_pmf += ((n - k) as f64 / (k + 1) as f64).ln();
    }
    (l >= 1).then_some((l, n + 1 - l))
}

/// The 95% CI of the median of `sorted` samples (ascending) as a relative
/// half-width: the larger distance from the median to either bound, divided by
/// the median. Infinite with fewer than [`MIN_CI_SAMPLES`] samples or a zero median.
pub fn median_ci_rel(sorted: &[f64], median: f64) -> f64 {
    match median_ci_ranks(sorted.len()) {
        Some((l, u)) if median > 0.0 => {
            (median - sorted[l - 1]).max(sorted[u - 1] - median) / median
        }
        _ => f64::INFINITY,
    }
}

/// Repeated measurements of a prepared plan (kernel time from profiling events).
#[derive(Debug, Clone, PartialEq)]
pub struct TimeStats {
    /// Repetitions measured (after the warm-up).
    pub reps: usize,
    /// Median kernel time per SpMV, ms.
    pub median_ms: f64,
    /// Fastest repetition, ms.
    pub min_ms: f64,
    /// Slowest repetition, ms.
    pub max_ms: f64,
    /// Interquartile range divided by the median (0.05 = 5% spread).
    pub spread: f64,
    /// Median wall-clock time of the kernels (enqueue to finish, x already on the device), ms.
    pub wall_median_ms: f64,
    /// Half-width of the median's distribution-free 95% confidence interval,
    /// divided by the median (infinite below [`MIN_CI_SAMPLES`] repetitions).
    pub ci_rel: f64,
    /// Whether `ci_rel` reached the policy's `ci_target` (false when the
    /// repetitions or the time budget ran out first, or no target was set).
    pub converged: bool,
    /// Wall time (ms) spent on adaptive batches after the first.
    pub extra_ms: f64,
}

impl TimeStats {
    /// Statistics of samples (ms); `wall` are the matching wall-clock samples.
    pub fn from_samples(mut kernel: Vec<f64>, mut wall: Vec<f64>) -> TimeStats {
        kernel.sort_by(f64::total_cmp);
        wall.sort_by(f64::total_cmp);
        let median = quantile(&kernel, 0.5);
        TimeStats {
            reps: kernel.len(),
            median_ms: median,
            min_ms: kernel.first().copied().unwrap_or(0.0),
            max_ms: kernel.last().copied().unwrap_or(0.0),
            spread: if median > 0.0 {
                (quantile(&kernel, 0.75) - quantile(&kernel, 0.25)) / median
            } else {
                0.0
            },
            wall_median_ms: quantile(&wall, 0.5),
            ci_rel: median_ci_rel(&kernel, median),
            converged: false,
            extra_ms: 0.0,
        }
    }
}

/// [`crate::Engine::back_to_back`]'s figures: rounds of `calls` executions
/// enqueued back to back with one `finish`, as wall time per call.
#[derive(Debug, Clone, PartialEq)]
pub struct BackToBack {
    /// Calls enqueued per round.
    pub calls: usize,
    /// Rounds timed.
    pub rounds: usize,
    /// Median over the rounds of wall time / calls, ms.
    pub median_ms: f64,
    /// Fastest round's wall time / calls, ms.
    pub min_ms: f64,
}

impl BackToBack {
    /// The figures of per-call times `per_call` (ms, one per round).
    pub fn of(calls: usize, mut per_call: Vec<f64>) -> BackToBack {
        per_call.sort_by(f64::total_cmp);
        BackToBack {
            calls,
            rounds: per_call.len(),
            median_ms: quantile(&per_call, 0.5),
            min_ms: per_call.first().copied().unwrap_or(f64::NAN),
        }
    }
}

/// Runs the adaptive loop: `sample(n, kernel, wall)` appends `n` timed
/// repetitions (ms); the first batch is `first` repetitions, then batches of
/// [`TimingPolicy::next_batch`] until the CI target, the repetitions or the
/// budget. The one loop [`crate::Engine::measure`] runs on the device.
pub fn adaptive<E>(
    policy: &TimingPolicy,
    first: usize,
    mut sample: impl FnMut(usize, &mut Vec<f64>, &mut Vec<f64>) -> Result<(), E>,
) -> Result<TimeStats, E> {
    let (mut kern, mut wall) = (Vec::new(), Vec::new());
    sample(first.max(1), &mut kern, &mut wall)?;
    let mut spent = 0.0;
    loop {
        let st = TimeStats::from_samples(kern.clone(), wall.clone());
        match policy.next_batch(st.reps, st.median_ms, st.ci_rel, spent) {
            Some(n) => {
                let t0 = std::time::Instant::now();
                sample(n, &mut kern, &mut wall)?;
                spent += t0.elapsed().as_secs_f64() * 1e3;
            }
            None => {
                return Ok(TimeStats {
                    converged: policy.ci_target > 0.0 && st.ci_rel <= policy.ci_target,
                    extra_ms: spent,
                    ..st
                })
            }
        }
    }
}

/// Linear-interpolated quantile `f` of sorted samples (0 when empty).
fn quantile(v: &[f64], f: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let pos = f * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timing_policy_sizes_repetitions_and_warm_up_from_the_estimate() {
        let p = TimingPolicy {
            warmup: 2,
            min_reps: 3,
            max_reps: 25,
            target_ms: 4.0,
            ..TimingPolicy::default()
        };
        assert_eq!(p.reps_for(1.0), 4);
        assert_eq!(p.reps_for(0.001), 25, "cheap calls: the most repetitions");
        assert_eq!(p.reps_for(100.0), 3, "costly calls: the fewest");
        assert_eq!(p.reps_for(0.0), 25, "no estimate: the most");
        assert_eq!(p.reps_for(f64::NAN), 25);
        assert_eq!(p.warmup_for(1.0), 2);
        assert_eq!(
            p.warmup_for(3.0),
            0,
            "a warm-up longer than the target is skipped"
        );
        let lax = TimingPolicy {
            min_reps: 0,
            max_reps: 0,
            ..p
        };
        assert_eq!(lax.reps_for(1.0), 1, "at least one repetition");
    }

    #[test]
    fn order_statistic_ranks_match_the_binomial_tables() {
        // Known ranks of the 95% CI of the median (e.g. Conover's tables):
        // n = 6: (1, 6) with coverage 1 - 2/64 = 96.9%; n = 10: (2, 9);
        // n = 20: (6, 15); n = 25: (8, 18); n = 100: (40, 61).
        assert_eq!(median_ci_ranks(5), None);
        assert_eq!(median_ci_ranks(6), Some((1, 6)));
        assert_eq!(median_ci_ranks(8), Some((1, 8)));
        assert_eq!(median_ci_ranks(9), Some((2, 8)));
        assert_eq!(median_ci_ranks(10), Some((2, 9)));
        assert_eq!(median_ci_ranks(20), Some((6, 15)));
        assert_eq!(median_ci_ranks(25), Some((8, 18)));
        assert_eq!(median_ci_ranks(100), Some((40, 61)));
        // No underflow for long runs: the bounds close in on the middle.
        let (l, u) = median_ci_ranks(5000).unwrap();
        assert!(l > 2400 && u < 2600 && l + u == 5001, "{l} {u}");
    }

    #[test]
    fn the_ci_of_known_samples_is_the_wider_side_over_the_median() {
        // 10 samples 1..=10: median 5.5, bounds the 2nd and 9th: 2 and 9.
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        let st = TimeStats::from_samples(v.clone(), v);
        assert_eq!(st.median_ms, 5.5);
        assert!((st.ci_rel - 3.5 / 5.5).abs() < 1e-12, "{}", st.ci_rel);
        // Skewed: bounds 2 and 20 around a median of 5.5: the upper side wins.
        let mut w: Vec<f64> = (1..=8).map(f64::from).collect();
        w.extend([20.0, 30.0]);
        let st = TimeStats::from_samples(w, vec![]);
        assert!((st.ci_rel - (20.0 - 5.5) / 5.5).abs() < 1e-12);
        assert!(TimeStats::from_samples(vec![1.0; 5], vec![])
            .ci_rel
            .is_infinite());
        assert_eq!(TimeStats::from_samples(vec![2.0; 6], vec![]).ci_rel, 0.0);
    }

    #[test]
    fn adaptive_batches_double_until_the_target_the_reps_or_the_budget() {
        let p = TimingPolicy::default();
        assert_eq!(p.next_batch(25, 0.01, 0.01, 0.0), None, "within target");
        assert_eq!(p.next_batch(25, 0.01, 0.05, 0.0), Some(25), "doubles");
        assert_eq!(p.next_batch(3, 1.0, f64::INFINITY, 0.0), Some(3), "to 6");
        assert_eq!(p.next_batch(1, 1.0, f64::INFINITY, 0.0), Some(5));
        assert_eq!(p.next_batch(300, 0.001, 0.05, 0.0), Some(100), "rep cap");
        assert_eq!(p.next_batch(400, 0.001, 0.05, 0.0), None);
        assert_eq!(p.next_batch(25, 1.0, 0.05, 15.0), Some(5), "time left");
        assert_eq!(p.next_batch(25, 1.0, 0.05, 20.0), None, "budget spent");
        let off = TimingPolicy {
            ci_target: 0.0,
            ..p
        };
        assert_eq!(off.next_batch(3, 1.0, f64::INFINITY, 0.0), None);
    }

    fn feed(
        values: impl Fn(usize) -> f64,
    ) -> impl FnMut(usize, &mut Vec<f64>, &mut Vec<f64>) -> Result<(), ()> {
        move |n, k, w| {
            for _ in 0..n {
                let v = values(k.len());
                k.push(v);
                w.push(v);
            }
            Ok(())
        }
    }

    #[test]
    fn constant_samples_stop_as_soon_as_the_ci_is_finite() {
        let p = TimingPolicy::default();
        let st = adaptive(&p, 25, feed(|_| 0.5)).unwrap();
        assert_eq!(st.reps, 25, "the first batch already converged");
        assert!(st.converged && st.ci_rel == 0.0);
        let st = adaptive(&p, 3, feed(|_| 0.5)).unwrap();
        assert_eq!(st.reps, 6, "3 samples have no CI: one batch up to 6");
        assert!(st.converged);
    }

    #[test]
    fn wild_samples_stop_at_the_most_repetitions_unconverged() {
        // Alternating 1 and 100: the CI never narrows.
        let p = TimingPolicy {
            ci_budget_ms: 1e9,
            ..TimingPolicy::default()
        };
        let st = adaptive(&p, 25, feed(|i| if i % 2 == 0 { 1e-6 } else { 1e-4 })).unwrap();
        assert_eq!(st.reps, p.ci_max_reps);
        assert!(!st.converged && st.ci_rel > 0.5, "{st:?}");
        // A 2% noise converges between the first batch and the cap.
        let st = adaptive(
            &p,
            6,
            feed(|i| 1.0 + 0.05 * ((i * 7919) % 101) as f64 / 100.0),
        )
        .unwrap();
        assert!(
            st.converged && st.reps > 6 && st.reps < p.ci_max_reps,
            "{st:?}"
        );
    }
}
