//! Held-out check of the performance model: predicted against measured time of
//! the model's chosen plan and of every single kernel, and whether it orders the
//! two fastest distinct timed plans of each matrix right.

use crate::evaluate::EvalRow;
use crate::pipeline::Labelled;
use selector::{Model, PerfModel};
use serde::Serialize;
use sparse::{Binning, KernelId, Plan, Scheme};
use std::collections::HashMap;

/// Two plans closer than this (relative) are a near-tie: timer noise can order them.
pub const CLEAR_GAP: f64 = 0.05;

/// How well the performance model predicted held-out matrices.
#[derive(Debug, Clone, Serialize)]
pub struct PerfSummary {
    /// Matrices whose chosen plan has a time.
    pub plan_matrices: usize,
    /// Median absolute percentage error of the model's chosen plan, %.
    pub plan_mdape: f64,
    /// Share of chosen plans predicted within 15%.
    pub plan_within_15pct: f64,
    /// Single-kernel timings compared (every kernel over the whole matrix).
    pub single_samples: usize,
    /// Median absolute percentage error of the single kernels, %.
    pub single_mdape: f64,
    /// Share of single-kernel times predicted within 15%.
    pub single_within_15pct: f64,
    /// Matrices with at least two timed plans.
    pub top2_matrices: usize,
    /// Share of them whose two fastest timed plans the model orders right.
    pub top2_right: f64,
    /// Matrices whose two fastest timed plans differ by more than [`CLEAR_GAP`].
    pub top2_clear_matrices: usize,
    /// Share of those the model orders right.
    pub top2_clear_right: f64,
    /// Share of matrices whose two fastest timed plans are ordered right or are
    /// within [`CLEAR_GAP`] of each other (a near-tie, where either order costs
    /// less than that).
    pub top2_right_or_tie: f64,
    /// Pairs of timed plans of one matrix that differ by more than [`CLEAR_GAP`].
    pub pairs_clear: usize,
    /// Share of those pairs the model orders right.
    pub pairs_clear_right: f64,
    /// 10th percentile of measured / predicted (chosen plans and single kernels).
    pub ratio_p10: f64,
    /// 90th percentile of measured / predicted.
    pub ratio_p90: f64,
    /// Median absolute percentage error over chosen plans and single kernels, %.
    pub all_mdape: f64,
    /// Timed plans behind the percentiles.
    pub samples: usize,
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

/// The timed plans of a matrix that the service can run: each scheme's best plan
/// (timed as a whole) and each kernel alone over the whole matrix, without
/// repeats. A scheme's plan whose bins all chose one kernel is left out: the
/// planner runs that kernel over the whole matrix instead, which is in the set.
fn timed_plans(l: &Labelled) -> Vec<(Plan, f64)> {
    let mut out: Vec<(Plan, f64)> = l
        .labels
        .plans
        .values()
        .filter(|p| {
            let first = p.plan.kernels.first().map(|b| b.1);
            p.plan.scheme == Scheme::Single || p.plan.kernels.iter().any(|b| Some(b.1) != first)
        })
        .map(|p| (p.plan.clone(), p.total_ms))
        .collect();
    for k in KernelId::all() {
        let plan = Plan::single(k);
        if let Some(t) = l.labels.single_kernel_ms(k) {
            if !out.iter().any(|(p, _)| *p == plan) {
                out.push((plan, t));
            }
        }
    }
    out.retain(|(_, t)| t.is_finite() && *t > 0.0);
    out
}

fn predict(
    perf: &PerfModel,
    l: &Labelled,
    plan: &Plan,
    cache: &mut HashMap<Scheme, Binning>,
) -> f64 {
    let b = cache
        .entry(plan.scheme)
        .or_insert_with(|| Binning::new(&l.row_ptr, plan.scheme));
    selector::plan_vector(&l.labels.features, plan, b).map_or(f64::NAN, |x| perf.predict_ms(&x))
}

/// Ranking checks of one matrix's timed plans.
#[derive(Default)]
struct Ranking {
    /// The two fastest: (ordered right, clearly apart); `None` with fewer than two.
    top2: Option<(bool, bool)>,
    /// Pairs clearly apart, and how many of them are ordered right.
    pairs: (usize, usize),
}

fn ranking(perf: &PerfModel, l: &Labelled, cache: &mut HashMap<Scheme, Binning>) -> Ranking {
    // (measured, predicted) of the plans the model can predict: a model fitted
    // before a kernel joined the pool predicts nothing (NaN) for plans using it.
    let mut plans: Vec<(f64, f64)> = timed_plans(l)
        .iter()
        .map(|(p, t)| (*t, predict(perf, l, p, cache)))
        .filter(|(_, q)| !q.is_nan())
        .collect();
    plans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let pred: Vec<f64> = plans.iter().map(|(_, q)| *q).collect();
    let clear = |i: usize, j: usize| plans[j].0 > plans[i].0 * (1.0 + CLEAR_GAP);
    let mut r = Ranking::default();
    if plans.len() >= 2 {
        r.top2 = Some((pred[0] < pred[1], clear(0, 1)));
    }
    for i in 0..plans.len() {
        for j in i + 1..plans.len() {
            if clear(i, j) {
                r.pairs.0 += 1;
                r.pairs.1 += usize::from(pred[i] < pred[j]);
            }
        }
    }
    r
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
    let (mut plan_r, mut single_r) = (Vec::new(), Vec::new());
    let (mut t2, mut t2_right, mut clear, mut clear_right, mut tie_ok) = (0, 0, 0, 0, 0);
    let (mut pairs, mut pairs_right) = (0, 0);
    for l in labelled {
        let f = &l.labels.features;
        let mut cache = HashMap::new();
        if let Some(&t) = measured.get(l.labels.name.as_str()) {
            let pred = model.predict(f, &l.row_ptr);
            let p =
                selector::plan_vector(f, &pred.plan, &pred.binning).map(|x| perf.predict_ms(&x));
            if let Some(p) = p.filter(|_| t.is_finite() && t > 0.0) {
                plan_r.push(t / p);
            }
        }
        for k in perf.kernels() {
            if let Some(t) = l.labels.single_kernel_ms(k).filter(|t| *t > 0.0) {
                single_r.push(t / perf.predict_ms(&selector::single_vector(f, k)));
            }
        }
        let r = ranking(perf, l, &mut cache);
        if let Some((right, is_clear)) = r.top2 {
            t2 += 1;
            t2_right += usize::from(right);
            tie_ok += usize::from(right || !is_clear);
            if is_clear {
                clear += 1;
                clear_right += usize::from(right);
            }
        }
        pairs += r.pairs.0;
        pairs_right += r.pairs.1;
    }
    let (plan_mdape, plan_within) = errors(&plan_r);
    let (single_mdape, single_within) = errors(&single_r);
    let all: Vec<f64> = plan_r.iter().chain(&single_r).copied().collect();
    let (all_mdape, _) = errors(&all);
    let all_sorted = sorted(all);
    let share = |a: usize, n: usize| {
        if n == 0 {
            f64::NAN
        } else {
            a as f64 / n as f64
        }
    };
    Some(PerfSummary {
        plan_matrices: plan_r.len(),
        plan_mdape,
        plan_within_15pct: plan_within,
        single_samples: single_r.len(),
        single_mdape,
        single_within_15pct: single_within,
        top2_matrices: t2,
        top2_right: share(t2_right, t2),
        top2_clear_matrices: clear,
        top2_clear_right: share(clear_right, clear),
        top2_right_or_tie: share(tie_ok, t2),
        pairs_clear: pairs,
        pairs_clear_right: share(pairs_right, pairs),
        ratio_p10: quantile(&all_sorted, 0.1),
        ratio_p90: quantile(&all_sorted, 0.9),
        all_mdape,
        samples: all_sorted.len(),
    })
}

impl PerfSummary {
    /// The summary in one sentence, for the printed summary and the report.
    pub fn line(&self) -> String {
        format!(
            "performance model: chosen plan's time median abs. error {:.1}% ({} matrices, {:.0}% within 15%), single kernels {:.1}% ({} timings, {:.0}% within 15%); top-2 timed plans ordered right {:.1}% of {} matrices ({:.1}% of the {} whose two differ by > {gap:.0}%; right or within {gap:.0}% of each other {:.1}%), pairs of plans {gap:.0}% apart ordered right {:.1}% of {}; measured/predicted 10th-90th percentile {:.2}-{:.2}",
            self.plan_mdape,
            self.plan_matrices,
            100.0 * self.plan_within_15pct,
            self.single_mdape,
            self.single_samples,
            100.0 * self.single_within_15pct,
            100.0 * self.top2_right,
            self.top2_matrices,
            100.0 * self.top2_clear_right,
            self.top2_clear_matrices,
            100.0 * self.top2_right_or_tie,
            100.0 * self.pairs_clear_right,
            self.pairs_clear,
            self.ratio_p10,
            self.ratio_p90,
            gap = 100.0 * CLEAR_GAP,
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
}
