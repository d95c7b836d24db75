//! Held-out check of the performance model: predicted against measured time of
//! the model's chosen plan and of every single kernel, and whether it orders the
//! two fastest distinct timed plans of each matrix right, strictly and allowing
//! for the measurements' own uncertainty (their stored 95% confidence intervals).

use crate::evaluate::EvalRow;
use crate::pipeline::Labelled;
use selector::{Model, PerfModel};
use serde::Serialize;
use sparse::{Binning, KernelId, Plan, Scheme};
use std::collections::{BTreeMap, HashMap};

/// How well the performance model predicted held-out matrices.
#[derive(Debug, Clone, Serialize)]
pub struct PerfSummary {
    /// Matrices whose chosen plan has a time.
    pub plan_matrices: usize,
    /// Median absolute percentage error of the model's chosen plan, %.
    pub plan_mdape: f64,
    /// Share of chosen plans predicted within 15%.
    pub plan_within_15pct: f64,
    /// The same with each matrix's prediction scaled as the service scales
    /// it ([`selector::Calibration`]) by what the matrices evaluated before
    /// it measured (their chosen plan and single kernels, as upload tuning
    /// races would give), %; the first few, with too little seen, unscaled.
    pub plan_mdape_calibrated: f64,
    /// Share of those within 15%.
    pub plan_within_15pct_calibrated: f64,
    /// Single-kernel timings compared (every kernel over the whole matrix).
    pub single_samples: usize,
    /// Median absolute percentage error of the single kernels, %.
    pub single_mdape: f64,
    /// Share of single-kernel times predicted within 15%.
    pub single_within_15pct: f64,
    /// The two fastest timed plans of each matrix, and every pair.
    #[serde(flatten)]
    pub ranking: RankCounts,
    /// 10th percentile of measured / predicted (chosen plans and single kernels).
    pub ratio_p10: f64,
    /// 90th percentile of measured / predicted.
    pub ratio_p90: f64,
    /// Median absolute percentage error over chosen plans and single kernels, %.
    pub all_mdape: f64,
    /// Timed plans behind the percentiles.
    pub samples: usize,
}

/// How often the model orders a matrix's timed plans as they were measured.
///
/// Two timings are *tied* when their 95% confidence intervals (the stored
/// relative half-widths, 0 where a measurement has none) overlap: then the
/// measurements do not say which is faster, and either predicted order is right.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RankCounts {
    /// Matrices with at least two timed plans the model can predict.
    pub top2_matrices: usize,
    /// Share whose two fastest timed plans the model orders as measured (strict).
    pub top2_right: f64,
    /// Matrices whose two fastest timed plans are tied (within their CIs).
    pub top2_ties: usize,
    /// Share ordered right or tied (noise-aware).
    pub top2_right_noise_aware: f64,
    /// Share of the untied matrices ordered right.
    pub top2_untied_right: f64,
    /// Pairs of timed plans of one matrix that are not tied.
    pub pairs_untied: usize,
    /// Share of those pairs ordered right.
    pub pairs_untied_right: f64,
    /// Right, right or tied, right and untied (top 2), right pairs.
    #[serde(skip)]
    pub(crate) counts: [usize; 4],
}

impl RankCounts {
    /// Adds one matrix's ranking.
    fn add(&mut self, r: &Ranking) {
        if let Some((right, tied)) = r.top2 {
            self.top2_matrices += 1;
            self.top2_ties += usize::from(tied);
            self.counts[0] += usize::from(right);
            self.counts[1] += usize::from(right || tied);
            self.counts[2] += usize::from(right && !tied);
        }
        self.pairs_untied += r.pairs.0;
        self.counts[3] += r.pairs.1;
        let n = self.top2_matrices;
        self.top2_right = share(self.counts[0], n);
        self.top2_right_noise_aware = share(self.counts[1], n);
        self.top2_untied_right = share(self.counts[2], n - self.top2_ties);
        self.pairs_untied_right = share(self.counts[3], self.pairs_untied);
    }
}

fn share(a: usize, n: usize) -> f64 {
    if n == 0 {
        f64::NAN
    } else {
        a as f64 / n as f64
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// Median absolute percentage error (%) and the share within 15% of ratios
/// measured / predicted.
fn errors(ratios: &[f64]) -> (f64, f64) {
    let ape = sorted(ratios.iter().map(|r| (1.0 / r - 1.0).abs()).collect());
    let within = ape.iter().filter(|e| **e <= 0.15).count() as f64 / ape.len().max(1) as f64;
    (100.0 * quantile(&ape, 0.5), within)
}

/// One timed plan: the plan, its measured time (ms) and the relative
/// half-width of that time's 95% CI (0 when the database has none).
struct TimedPlan {
    plan: Plan,
    ms: f64,
    ci: f64,
}

/// The timed plans of a matrix that the service can run: each scheme's best plan
/// (timed as a whole) and each kernel alone over the whole matrix, without
/// repeats. A scheme's plan whose bins all chose one kernel is left out: the
/// planner runs that kernel over the whole matrix instead, which is in the set.
fn timed_plans(l: &Labelled) -> Vec<TimedPlan> {
    let mut out: Vec<TimedPlan> = l
        .labels
        .plans
        .values()
        .filter(|p| {
            let first = p.plan.kernels.first().map(|b| b.1);
            p.plan.scheme == Scheme::Single || p.plan.kernels.iter().any(|b| Some(b.1) != first)
        })
        .map(|p| TimedPlan {
            plan: p.plan.clone(),
            ms: p.total_ms,
            ci: p.ci_rel,
        })
        .collect();
    let single_ci = l.labels.bin_ci.get(&(Scheme::Single, 0));
    for k in KernelId::all() {
        let plan = Plan::single(k);
        if let Some(ms) = l.labels.single_kernel_ms(k) {
            if !out.iter().any(|p| p.plan == plan) {
                let ci = single_ci
                    .and_then(|v| v.iter().find(|(kk, _)| *kk == k))
                    .map_or(0.0, |(_, c)| *c);
                out.push(TimedPlan { plan, ms, ci });
            }
        }
    }
    out.retain(|p| p.ms.is_finite() && p.ms > 0.0);
    for p in &mut out {
        p.ci = if p.ci.is_finite() { p.ci.max(0.0) } else { 0.0 };
    }
    out
}

/// Whether two timings (ms, relative CI half-width) cannot be told apart:
/// their 95% confidence intervals overlap.
fn tied(a: (f64, f64), b: (f64, f64)) -> bool {
    (b.0 - a.0).abs() <= a.0 * a.1 + b.0 * b.1
}

type Binnings = BTreeMap<Scheme, Binning>;

fn predict(perf: &PerfModel, l: &Labelled, plan: &Plan, cache: &mut Binnings) -> f64 {
    let b = cache
        .entry(plan.scheme)
        .or_insert_with(|| Binning::new(&l.row_ptr, plan.scheme));
    selector::plan_vector(&l.labels.features, plan, b).map_or(f64::NAN, |x| perf.predict_ms(&x))
}

/// Ranking checks of one matrix's timed plans.
#[derive(Default)]
struct Ranking {
    /// The two fastest: (ordered right, tied); `None` with fewer than two.
    top2: Option<(bool, bool)>,
    /// Pairs not tied, and how many of them are ordered right.
    pairs: (usize, usize),
    /// measured / predicted of every timed plan the model can predict.
    ratios: Vec<f64>,
}

fn ranking(perf: &PerfModel, l: &Labelled, cache: &mut Binnings) -> Ranking {
    // (measured, CI, predicted) of the plans the model can predict: a model
    // fitted before a kernel joined the pool predicts nothing (NaN) for them.
    let mut plans: Vec<(f64, f64, f64)> = timed_plans(l)
        .iter()
        .map(|p| (p.ms, p.ci, predict(perf, l, &p.plan, cache)))
        .filter(|(_, _, q)| !q.is_nan())
        .collect();
    // Stable: equal times keep the order of `timed_plans` (scheme, then kernel).
    plans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let tie = |i: usize, j: usize| tied((plans[i].0, plans[i].1), (plans[j].0, plans[j].1));
    let mut r = Ranking {
        ratios: plans.iter().map(|p| p.0 / p.2).collect(),
        ..Ranking::default()
    };
    if plans.len() >= 2 {
        r.top2 = Some((plans[0].2 < plans[1].2, tie(0, 1)));
    }
    for i in 0..plans.len() {
        for j in i + 1..plans.len() {
            if !tie(i, j) {
                r.pairs.0 += 1;
                r.pairs.1 += usize::from(plans[i].2 < plans[j].2);
            }
        }
    }
    r
}

/// The ranking and time errors of a performance model on labelled matrices
/// (every timed plan of each), without the chosen plans: what the trainer
/// compares fitting variants by on its validation matrices.
#[derive(Debug, Clone, Serialize)]
pub struct RankingCheck {
    /// Top-2 and pairwise ranking.
    #[serde(flatten)]
    pub ranking: RankCounts,
    /// Median absolute percentage error over every timed plan, %.
    pub timed_mdape: f64,
    /// Timed plans compared.
    pub timed_plans: usize,
}

/// Checks `perf` on `labelled` (see [`RankingCheck`]).
pub fn check_ranking(perf: &PerfModel, labelled: &[&Labelled]) -> RankingCheck {
    let mut counts = RankCounts::default();
    let mut ratios = Vec::new();
    for l in labelled {
        let r = ranking(perf, l, &mut Binnings::new());
        counts.add(&r);
        ratios.extend(r.ratios);
    }
    RankingCheck {
        ranking: counts,
        timed_mdape: errors(&ratios).0,
        timed_plans: ratios.len(),
    }
}

/// Compares the model's predictions with the measured times of held-out matrices
/// (`rows` carry the measured time of the model's plan); `None` without a
/// performance model.
pub fn evaluate(model: &Model, labelled: &[&Labelled], rows: &[EvalRow]) -> Option<PerfSummary> {
    let perf = model.perf()?;
    let measured: HashMap<&str, f64> = rows
        .iter()
        .map(|r| (r.matrix.as_str(), r.predicted_ms))
        .collect();
    let (mut plan_r, mut single_r, mut calibrated_r) = (Vec::new(), Vec::new(), Vec::new());
    let mut ranks = RankCounts::default();
    let mut calibration = selector::Calibration::default();
    for l in labelled {
        let f = &l.labels.features;
        let name = l.labels.name.as_str();
        if let Some(&t) = measured.get(name) {
            let pred = model.predict(f, &l.row_ptr);
            let p =
                selector::plan_vector(f, &pred.plan, &pred.binning).map(|x| perf.predict_ms(&x));
            if let Some(p) = p.filter(|_| t.is_finite() && t > 0.0) {
                plan_r.push(t / p);
                let factor = calibration.factor(p).map_or(1.0, |c| c.factor);
                calibrated_r.push(t / (p * factor));
                calibration.observe(&format!("{name}/plan"), p, t);
            }
        }
        for k in perf.kernels() {
            if let Some(t) = l.labels.single_kernel_ms(k).filter(|t| *t > 0.0) {
                let p = perf.predict_ms(&selector::single_vector(f, k));
                single_r.push(t / p);
                calibration.observe(&format!("{name}/{}", k.name()), p, t);
            }
        }
        ranks.add(&ranking(perf, l, &mut Binnings::new()));
    }
    let (plan_mdape, plan_within) = errors(&plan_r);
    let (plan_mdape_calibrated, plan_within_15pct_calibrated) = errors(&calibrated_r);
    let (single_mdape, single_within) = errors(&single_r);
    let all: Vec<f64> = plan_r.iter().chain(&single_r).copied().collect();
    let (all_mdape, _) = errors(&all);
    let all_sorted = sorted(all);
    Some(PerfSummary {
        plan_matrices: plan_r.len(),
        plan_mdape,
        plan_within_15pct: plan_within,
        plan_mdape_calibrated,
        plan_within_15pct_calibrated,
        single_samples: single_r.len(),
        single_mdape,
        single_within_15pct: single_within,
        ranking: ranks,
        ratio_p10: quantile(&all_sorted, 0.1),
        ratio_p90: quantile(&all_sorted, 0.9),
        all_mdape,
        samples: all_sorted.len(),
    })
}

impl RankCounts {
    /// The ranking in words.
    pub fn line(&self) -> String {
        format!(
            "top-2 timed plans ordered right {:.1}% of {} matrices strictly, {:.1}% noise-aware ({} tied within their 95% CIs count as right; untied {:.1}% of {}), untied pairs of plans ordered right {:.1}% of {}",
            100.0 * self.top2_right,
            self.top2_matrices,
            100.0 * self.top2_right_noise_aware,
            self.top2_ties,
            100.0 * self.top2_untied_right,
            self.top2_matrices - self.top2_ties,
            100.0 * self.pairs_untied_right,
            self.pairs_untied,
        )
    }
}

impl PerfSummary {
    /// The summary in one sentence, for the printed summary and the report.
    pub fn line(&self) -> String {
        format!(
            "performance model: chosen plan's time median abs. error {:.1}% ({} matrices, {:.0}% within 15%; {:.1}% and {:.0}% scaled by what the matrices before each measured, as the service does), single kernels {:.1}% ({} timings, {:.0}% within 15%); {}; measured/predicted 10th-90th percentile {:.2}-{:.2}",
            self.plan_mdape,
            self.plan_matrices,
            100.0 * self.plan_within_15pct,
            self.plan_mdape_calibrated,
            100.0 * self.plan_within_15pct_calibrated,
            self.single_mdape,
            self.single_samples,
            100.0 * self.single_within_15pct,
            self.ranking.line(),
            self.ratio_p10,
            self.ratio_p90,
        )
    }

    /// The error band a model carries, from this held-out check.
    pub fn band(&self, source: &str) -> selector::ErrorBand {
        selector::ErrorBand {
            low: self.ratio_p10,
            high: self.ratio_p90,
            mdape: self.all_mdape,
            samples: self.samples,
            source: source.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_and_quantiles() {
        // measured/predicted 1.0, 0.5 (predicted 2x: 100% error), 1.1 (9.1%).
        let (mdape, within) = errors(&[1.0, 0.5, 1.1]);
        assert!(
            (mdape - 100.0 * (1.0 / 1.1 - 1.0f64).abs()).abs() < 1e-9,
            "{mdape}"
        );
        assert!((within - 2.0 / 3.0).abs() < 1e-12);
        let s = sorted(vec![5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!(quantile(&s, 0.5), 3.0);
        assert_eq!(quantile(&s, 0.0), 1.0);
        assert_eq!(quantile(&s, 1.0), 5.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn ties_are_overlapping_confidence_intervals() {
        // 10 +- 2% reaches 10.2, 10.5 +- 2% reaches down to 10.29: apart.
        assert!(!tied((10.0, 0.02), (10.5, 0.02)));
        // 10 +- 3% reaches 10.3, 10.5 +- 2% reaches down to 10.29: tied.
        assert!(tied((10.0, 0.03), (10.5, 0.02)));
        // Symmetric, and a measurement without a CI counts as exact.
        assert!(tied((10.5, 0.02), (10.0, 0.03)));
        assert!(!tied((10.0, 0.0), (10.01, 0.0)));
        assert!(tied((10.0, 0.0), (10.0, 0.0)));
    }

    #[test]
    fn rank_counts_count_ties_as_right_only_in_the_noise_aware_share() {
        let mut c = RankCounts::default();
        let r = |right, tie, pairs| Ranking {
            top2: Some((right, tie)),
            pairs,
            ratios: vec![],
        };
        c.add(&r(true, false, (3, 3)));
        c.add(&r(false, true, (2, 1)));
        c.add(&r(false, false, (1, 0)));
        c.add(&r(true, true, (0, 0)));
        c.add(&Ranking::default());
        assert_eq!((c.top2_matrices, c.top2_ties), (4, 2));
        assert_eq!(c.top2_right, 0.5);
        assert_eq!(c.top2_right_noise_aware, 0.75);
        assert_eq!(c.top2_untied_right, 0.5);
        assert_eq!((c.pairs_untied, c.pairs_untied_right), (6, 4.0 / 6.0));
        assert!(
            c.line().contains("2 tied within their 95% CIs"),
            "{}",
            c.line()
        );
    }
}
