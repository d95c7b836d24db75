//! Training samples (what the trainer hands over) and how they become labels
//! and weights: plain argmin, canonical relabelling among near-ties, and
//! time-lost weights.

use crate::{SelectorError, ValidTrainParams};
use serde::{Deserialize, Serialize};
use sparse::{Binning, Features, KernelId, Scheme};

/// One matrix for stage 1: its features and the time of each scheme's best plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stage1Sample {
    /// The matrix's name (for reports and for evaluation's worst case).
    pub matrix: String,
    /// The stage-1 vector, order [`crate::STAGE1_FEATURES`] (see [`crate::stage1_vector`]).
    pub features: Vec<f64>,
    /// `(scheme, milliseconds)` of each timed scheme's best plan. The label is the
    /// argmin. A time of `+inf` marks a scheme that failed; NaN, 0 and negative
    /// times are refused.
    pub scheme_times: Vec<(Scheme, f64)>,
    /// `(scheme, relative 95% CI half-width)` of those times, where measured
    /// (absent or 0: unknown, the tie tolerance alone decides near-ties).
    #[serde(default)]
    pub scheme_ci: Vec<(Scheme, f64)>,
}

impl Stage1Sample {
    /// A sample from a matrix's features.
    pub fn new(matrix: impl Into<String>, f: &Features, scheme_times: Vec<(Scheme, f64)>) -> Self {
        Stage1Sample {
            matrix: matrix.into(),
            features: crate::stage1_vector(f),
            scheme_times,
            scheme_ci: Vec::new(),
        }
    }

    /// The same sample with the measured CIs of its times.
    pub fn with_ci(mut self, ci: Vec<(Scheme, f64)>) -> Self {
        self.scheme_ci = ci;
        self
    }
}

/// One bin of one matrix under one scheme, for stage 2: its stage-2 vector and
/// the time of every kernel on that bin alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stage2Sample {
    /// The matrix's name.
    pub matrix: String,
    /// The stage-2 vector, order [`crate::STAGE2_FEATURES`] (see [`crate::stage2_vector`]).
    pub x: Vec<f64>,
    /// `(kernel, milliseconds)` on this bin. The label is the argmin. `+inf` marks a
    /// kernel that failed; NaN, 0 and negative times are refused.
    pub kernel_times: Vec<(KernelId, f64)>,
    /// `(kernel, relative 95% CI half-width)` of those times, where measured.
    #[serde(default)]
    pub kernel_ci: Vec<(KernelId, f64)>,
}

impl Stage2Sample {
    /// A sample for bin `bin` of `binning`.
    pub fn new(
        matrix: impl Into<String>,
        f: &Features,
        binning: &Binning,
        bin: usize,
        kernel_times: Vec<(KernelId, f64)>,
    ) -> Self {
        Stage2Sample {
            matrix: matrix.into(),
            x: crate::stage2_vector(f, binning, bin),
            kernel_times,
            kernel_ci: Vec::new(),
        }
    }

    /// The same sample with the measured CIs of its times.
    pub fn with_ci(mut self, ci: Vec<(KernelId, f64)>) -> Self {
        self.kernel_ci = ci;
        self
    }
}

/// What the samples of both stages share, for the code that fits and judges
/// the two stages alike: a matrix, a feature vector, and times (with their CIs)
/// by class.
pub(crate) trait StageSample {
    /// A scheme (stage 1) or a kernel (stage 2).
    type Class: Copy + PartialEq;
    /// The matrix's name.
    fn matrix(&self) -> &str;
    /// The stage's feature vector.
    fn x(&self) -> &[f64];
    /// `(class, milliseconds)` of each timed class.
    fn times(&self) -> &[(Self::Class, f64)];
    /// `(class, relative 95% CI half-width)` where measured.
    fn ci(&self) -> &[(Self::Class, f64)];
}

impl StageSample for Stage1Sample {
    type Class = Scheme;
    fn matrix(&self) -> &str {
        &self.matrix
    }
    fn x(&self) -> &[f64] {
        &self.features
    }
    fn times(&self) -> &[(Scheme, f64)] {
        &self.scheme_times
    }
    fn ci(&self) -> &[(Scheme, f64)] {
        &self.scheme_ci
    }
}

impl StageSample for Stage2Sample {
    type Class = KernelId;
    fn matrix(&self) -> &str {
        &self.matrix
    }
    fn x(&self) -> &[f64] {
        &self.x
    }
    fn times(&self) -> &[(KernelId, f64)] {
        &self.kernel_times
    }
    fn ci(&self) -> &[(KernelId, f64)] {
        &self.kernel_ci
    }
}

/// Samples of either stage reduced to class indices: what fitting and evaluation work on.
#[derive(Debug, Clone)]
pub(crate) struct ClassSamples {
    pub matrices: Vec<String>,
    pub x: Vec<Vec<f64>>,
    /// Per sample, per class index: the time, or `None` when not measured.
    pub times: Vec<Vec<Option<f64>>>,
    /// Per sample, per class index: the relative 95% CI half-width of the
    /// time (0 when unknown).
    pub ci: Vec<Vec<f64>>,
}

/// Checks one sample's vector and times. Returns the times as (candidate, time) with
/// duplicates reduced to their minimum.
fn check_sample<C: Copy + PartialEq>(
    stage: u8,
    index: usize,
    matrix: &str,
    x: &[f64],
    expected_len: usize,
    times: &[(C, f64)],
) -> Result<(), SelectorError> {
    let err = |reason: String| SelectorError::InvalidSample {
        stage,
        index,
        matrix: matrix.to_string(),
        reason,
    };
    if x.len() != expected_len {
        return Err(err(format!(
            "feature vector has {} values, the stage-{stage} layout has {expected_len}",
            x.len()
        )));
    }
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return Err(err(format!("feature {i} is {}", x[i])));
    }
    if let Some((_, t)) = times.iter().find(|(_, t)| t.is_nan() || *t <= 0.0) {
        return Err(err(format!("time {t} ms is not a positive number")));
    }
    if !times.iter().any(|(_, t)| t.is_finite()) {
        return Err(err("no candidate has a finite time".into()));
    }
    Ok(())
}

fn to_classes<C: Copy + PartialEq>(times: &[(C, f64)], classes: &[C]) -> Vec<Option<f64>> {
    let mut out = vec![None; classes.len()];
    for (c, t) in times {
        if let Some(i) = classes.iter().position(|k| k == c) {
            out[i] = Some(out[i].map_or(*t, |o: f64| o.min(*t)));
        }
    }
    out
}

/// Relative CIs by class index (0 where unknown, NaN or negative).
fn ci_classes<C: Copy + PartialEq>(ci: &[(C, f64)], classes: &[C]) -> Vec<f64> {
    let mut out = vec![0.0; classes.len()];
    for (c, v) in ci {
        if let Some(i) = classes.iter().position(|k| k == c) {
            out[i] = if *v >= 0.0 { *v } else { 0.0 };
        }
    }
    out
}

/// Validates stage-1 samples of `len` values each (the layout plus any extra
/// features) and collects their schemes (sorted by code).
pub(crate) fn stage1_classes(
    samples: &[Stage1Sample],
    len: usize,
) -> Result<Vec<Scheme>, SelectorError> {
    let mut classes = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        check_sample(1, i, &s.matrix, &s.features, len, &s.scheme_times)?;
        classes.extend(s.scheme_times.iter().map(|(c, _)| *c));
    }
    classes.sort_by_key(|s: &Scheme| s.code());
    classes.dedup();
    Ok(classes)
}

/// Validates stage-2 samples of `len` values each (the layout, [`crate::STAGE2_LEN`], plus
/// any extra features) and collects their kernels (in [`KernelId::all`] order).
pub(crate) fn stage2_classes(
    samples: &[Stage2Sample],
    len: usize,
) -> Result<Vec<KernelId>, SelectorError> {
    let mut classes = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        check_sample(2, i, &s.matrix, &s.x, len, &s.kernel_times)?;
        classes.extend(s.kernel_times.iter().map(|(c, _)| *c));
    }
    classes.sort();
    classes.dedup();
    Ok(classes)
}

/// The samples of either stage by class index.
pub(crate) fn class_samples<S: StageSample>(samples: &[S], classes: &[S::Class]) -> ClassSamples {
    ClassSamples {
        matrices: samples.iter().map(|s| s.matrix().to_string()).collect(),
        x: samples.iter().map(|s| s.x().to_vec()).collect(),
        times: samples
            .iter()
            .map(|s| to_classes(s.times(), classes))
            .collect(),
        ci: samples
            .iter()
            .map(|s| ci_classes(s.ci(), classes))
            .collect(),
    }
}

/// The fastest class of a sample (lowest index on exact ties) and its time.
pub(crate) fn argmin(times: &[Option<f64>]) -> Option<(usize, f64)> {
    let mut best: Option<(usize, f64)> = None;
    for (i, t) in times.iter().enumerate() {
        if let Some(t) = *t {
            let better = match best {
                None => true,
                Some((_, b)) => t < b,
            };
            if t.is_finite() && better {
                best = Some((i, t));
            }
        }
    }
    best
}

/// Largest relative CI half-width one time contributes to a near-tie: a
/// measurement that did not converge (a hopeless kernel's single run, a noisy
/// device) must not tie everything with the best.
pub(crate) const CI_CAP: f64 = 0.1;

/// The equal set of a sample: the classes within noise of the best, i.e. within
/// `best * (1 + tol)`, or whose confidence interval overlaps the best's
/// (`t * (1 - ci) <= best * (1 + ci_best)`, each CI capped at [`CI_CAP`]).
/// `ci` is per class (0 = unknown); an empty slice means no CIs.
pub(crate) fn near_best(times: &[Option<f64>], ci: &[f64], tol: f64) -> Vec<usize> {
    let Some((bi, best)) = argmin(times) else {
        return Vec::new();
    };
    let ci_of = |i: usize| ci.get(i).copied().unwrap_or(0.0).clamp(0.0, CI_CAP);
    let best_hi = best * (1.0 + ci_of(bi));
    times
        .iter()
        .enumerate()
        .filter(|(i, t)| {
            t.is_some_and(|t| {
                t.is_finite() && (t <= best * (1.0 + tol) || t * (1.0 - ci_of(*i)) <= best_hi)
            })
        })
        .map(|(i, _)| i)
        .collect()
}

/// Labels and sample weights for fitting.
#[derive(Debug, Clone)]
pub(crate) struct LabelSet {
    pub labels: Vec<usize>,
    pub weights: Vec<f32>,
    /// Samples whose near-best set has more than one class.
    pub near_ties: usize,
    /// Samples whose label differs from the plain argmin.
    pub relabelled: usize,
    /// Per sample, the size of its equal set (classes within noise of the best).
    pub equal_set_sizes: Vec<usize>,
    /// Samples whose equal set is larger than the tie tolerance alone makes it
    /// (their measured CIs overlap the best's).
    pub widened_by_ci: usize,
}

/// Smallest relative loss a time-weighted sample gets, so that no weight is zero.
const LOSS_FLOOR: f64 = 1e-3;

/// Makes labels and weights as `params.weighting()` says.
///
/// * Plain: argmin.
/// * Relabelling: a greedy cover of the near-best sets. The class that is near-best
///   for the most not-yet-labelled samples labels all of them; repeat with the rest.
///   Every sample's label is thus within the tolerance of its best, and the labels
///   are as few and as consistent across the training set as the greedy cover makes them.
/// * Time weights: the relative time lost by the runner-up, `(t2 - best) / best`
///   (the cheapest mistake), capped at `loss_cap` (a failed, `+inf` runner-up counts
///   as the cap), floored at 1e-3, then normalized to a mean of 1. A bin where the
///   second-best kernel is as good as the best weighs almost nothing; a bin where
///   any mistake is costly weighs a lot. (The mean loss over all alternatives was
///   tried first: one hopeless candidate then dominates every sample's weight and
///   hides the near-ties, so it weighted near-tied and decisive samples alike.)
pub(crate) fn make_labels(s: &ClassSamples, n_classes: usize, p: &ValidTrainParams) -> LabelSet {
    let n = s.times.len();
    let plain: Vec<usize> = s
        .times
        .iter()
        .map(|t| argmin(t).map_or(0, |(c, _)| c))
        .collect();
    let near: Vec<Vec<usize>> = s
        .times
        .iter()
        .zip(&s.ci)
        .map(|(t, ci)| near_best(t, ci, p.tie_tolerance()))
        .collect();
    let widened_by_ci = s
        .times
        .iter()
        .zip(&near)
        .filter(|(t, set)| near_best(t, &[], p.tie_tolerance()).len() < set.len())
        .count();
    let near_ties = near.iter().filter(|v| v.len() > 1).count();
    let labels = if p.weighting().relabels() {
        greedy_cover(&near, &plain, n_classes)
    } else {
        plain.clone()
    };
    let relabelled = labels.iter().zip(&plain).filter(|(a, b)| a != b).count();
    let weights = if p.weighting().weights_by_time() {
        // What counts as a wrong pick: leaving the equal set when labels are
        // drawn from it; any class but the argmin label otherwise (the tie
        // partner of a plain label is a mislabel the tree must not be pushed
        // to avoid at any price).
        let right: Vec<Vec<usize>> = if p.weighting().relabels() {
            near.clone()
        } else {
            plain.iter().map(|&c| vec![c]).collect()
        };
        slowdown_weights(s, &right, p.loss_cap())
    } else {
        vec![1.0; n]
    };
    let equal_set_sizes = near.iter().map(Vec::len).collect();
    LabelSet {
        labels,
        weights,
        near_ties,
        relabelled,
        equal_set_sizes,
        widened_by_ci,
    }
}

/// The greedy set cover of the labels: the class in the most equal sets
/// (`near`) labels every sample whose set holds it, then the next among the
/// samples left, and so on; a sample no class covers keeps its `plain` label.
fn greedy_cover(near: &[Vec<usize>], plain: &[usize], n_classes: usize) -> Vec<usize> {
    let n = near.len();
    let mut labels: Vec<Option<usize>> = vec![None; n];
    let mut left = n;
    while left > 0 {
        let mut count = vec![0usize; n_classes];
        for (i, set) in near.iter().enumerate() {
            if labels[i].is_none() {
                for &c in set {
                    count[c] += 1;
                }
            }
        }
        // Highest count, lowest class index on ties.
        let (best, &best_count) = count
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))
            .expect("at least one class");
        if best_count == 0 {
            break;
        }
        for (i, set) in near.iter().enumerate() {
            if labels[i].is_none() && set.contains(&best) {
                labels[i] = Some(best);
                left -= 1;
            }
        }
    }
    labels
        .iter()
        .zip(plain)
        .map(|(l, p)| l.unwrap_or(*p))
        .collect()
}

/// Sample weights that make the fit minimise expected slowdown rather than
/// misclassification: a sample weighs what a wrong pick costs it, the relative
/// time lost by the cheapest class outside `right` (its equal set when labels
/// are drawn from it), `(t - best) / best`, capped at `cap` (a failed, `+inf`
/// class counts as the cap) and floored at 1e-3 (no wrong pick), normalized to
/// a mean of 1. With relabelling, a pick inside the equal set costs nothing
/// measurable, so a bin whose two best kernels tie but whose third costs 3x
/// weighs 2, not the 0.01 between the tied pair.
fn slowdown_weights(s: &ClassSamples, right: &[Vec<usize>], cap: f64) -> Vec<f32> {
    let raw: Vec<f64> = s
        .times
        .iter()
        .zip(right)
        .map(|(t, equal)| {
            let Some((_, best)) = argmin(t) else {
                return LOSS_FLOOR;
            };
            t.iter()
                .enumerate()
                .filter(|(i, _)| !equal.contains(i))
                .filter_map(|(_, t)| *t)
                .map(|t| ((t - best) / best).min(cap))
                .fold(None, |m: Option<f64>, l| Some(m.map_or(l, |m| m.min(l))))
                .map_or(LOSS_FLOOR, |l| l.clamp(LOSS_FLOOR, cap))
        })
        .collect();
    let mean = raw.iter().sum::<f64>() / raw.len().max(1) as f64;
    raw.iter().map(|w| (w / mean) as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{TrainParams, STAGE1_FEATURES};
    use linfa::ParamGuard;

    fn samples(times: Vec<Vec<Option<f64>>>) -> ClassSamples {
        ClassSamples {
            matrices: (0..times.len()).map(|i| format!("m{i}")).collect(),
            x: vec![vec![0.0]; times.len()],
            ci: vec![Vec::new(); times.len()],
            times,
        }
    }

    #[test]
    fn argmin_and_near_best() {
        let t = vec![
            Some(1.0),
            None,
            Some(1.01),
            Some(f64::INFINITY),
            Some(0.995),
        ];
        assert_eq!(argmin(&t), Some((4, 0.995)));
        assert_eq!(near_best(&t, &[], 0.02), vec![0, 2, 4]);
        assert_eq!(near_best(&t, &[], 0.0), vec![4]);
        // CIs: class 0 (1.0 +- 1%) overlaps the best (0.995 +- 0.5%), class 2
        // (1.01 +- 0.1%) does not; an unconverged 50% CI counts as 10%.
        let ci = [0.01, 0.0, 0.001, 0.0, 0.005];
        assert_eq!(near_best(&t, &ci, 0.0), vec![0, 4]);
        let wide = [0.0, 0.0, 0.5, 0.0, 0.0];
        let t2 = vec![Some(1.0), Some(1.5), Some(1.105)];
        assert_eq!(near_best(&t2, &wide, 0.0), vec![0, 2]);
        let t3 = vec![Some(1.0), Some(1.5), Some(1.2)];
        assert_eq!(near_best(&t3, &wide, 0.0), vec![0], "capped at 10%");
        assert_eq!(argmin(&[None, Some(f64::INFINITY)]), None);
    }

    #[test]
    fn relabel_picks_a_consistent_near_best_class() {
        // Class 1 is near-best everywhere; the plain argmin flips between 0, 1 and 2.
        let s = samples(vec![
            vec![Some(1.00), Some(1.01), Some(3.0)],
            vec![Some(1.01), Some(1.00), Some(3.0)],
            vec![Some(3.00), Some(1.01), Some(1.0)],
            vec![Some(5.00), Some(9.00), Some(1.0)],
        ]);
        let plain = make_labels(
            &s,
            3,
            &TrainParams::new()
                .weighting(Weighting::Plain)
                .check()
                .unwrap(),
        );
        assert_eq!(plain.labels, vec![0, 1, 2, 2]);
        assert_eq!(plain.weights, vec![1.0; 4]);
        assert_eq!(plain.near_ties, 3);
        let re = make_labels(
            &s,
            3,
            &TrainParams::new()
                .weighting(Weighting::TieRelabel)
                .check()
                .unwrap(),
        );
        assert_eq!(re.labels, vec![1, 1, 1, 2]);
        assert_eq!(re.relabelled, 2);
    }

    #[test]
    fn relabelled_time_weights_are_the_cost_of_the_cheapest_pick_outside_the_equal_set() {
        let s = samples(vec![
            vec![Some(1.0), Some(1.01), Some(1.02)], // 1.01 ties: 1.02 loses 0.02
            vec![Some(1.0), Some(3.0), Some(5.0)],   // loses 2
            vec![Some(1.0), Some(f64::INFINITY), None], // capped at 10
            vec![Some(1.0), None, None],             // nothing to lose: floor
            vec![Some(1.0), Some(1.01), Some(1.01 * 1.01)], // 1% mistake
        ]);
        let p = TrainParams::new()
            .weighting(Weighting::TieRelabelTimeWeighted)
            .tie_tolerance(0.015)
            .check()
            .unwrap();
        let l = make_labels(&s, 3, &p);
        let raw = [0.02f64, 2.0, 10.0, 0.001, 0.0201];
        let mean = raw.iter().sum::<f64>() / 5.0;
        for (w, r) in l.weights.iter().zip(raw) {
            assert!((*w as f64 - r / mean).abs() < 1e-4, "{:?}", l.weights);
        }
        let total: f32 = l.weights.iter().sum();
        assert!((total - 5.0).abs() < 1e-4);
        assert_eq!(l.equal_set_sizes, vec![2, 1, 1, 1, 2]);
    }

    #[test]
    fn a_costly_mistake_weighs_more_than_a_cheap_one_even_beside_a_tie() {
        // Both bins have a tied pair; a wrong pick costs 1% in the first, 3x in
        // the second. The old runner-up rule weighed both alike (0.001 each).
        let s = samples(vec![
            vec![Some(1.0), Some(1.001), Some(1.01 * 1.01 + 0.001)],
            vec![Some(1.0), Some(1.001), Some(3.0)],
        ]);
        let p = TrainParams::new()
            .weighting(Weighting::TieRelabelTimeWeighted)
            .check()
            .unwrap();
        let l = make_labels(&s, 3, &p);
        assert!(l.weights[1] > 50.0 * l.weights[0], "{:?}", l.weights);
        // Without relabelling the argmin is the label and its tie partner the
        // cheapest mistake: both bins weigh alike, as before.
        let p = TrainParams::new()
            .weighting(Weighting::TimeWeighted)
            .check()
            .unwrap();
        let l = make_labels(&s, 3, &p);
        assert_eq!(l.weights[0], l.weights[1]);
    }

    #[test]
    fn measured_cis_widen_the_equal_set_and_the_statistics_say_so() {
        let mut s = samples(vec![
            vec![Some(1.0), Some(1.04), Some(2.0)],
            vec![Some(1.0), Some(1.04), Some(2.0)],
        ]);
        // The second sample's two best times are each known to within 3%.
        s.ci[1] = vec![0.03, 0.03, 0.01];
        let p = TrainParams::new()
            .weighting(Weighting::TieRelabelTimeWeighted)
            .check()
            .unwrap();
        let l = make_labels(&s, 3, &p);
        assert_eq!(l.equal_set_sizes, vec![1, 2]);
        assert_eq!(l.widened_by_ci, 1);
        // Outside the equal set the cheapest mistake costs 4% in the first,
        // 100% in the second: the second weighs 25 times more.
        assert!(
            (l.weights[1] / l.weights[0] - 25.0).abs() < 1e-3,
            "{:?}",
            l.weights
        );
    }

    use crate::Weighting;

    #[test]
    fn bad_samples_are_refused() {
        let f = vec![0.0; STAGE1_FEATURES.len()];
        let ok = Stage1Sample {
            matrix: "a".into(),
            features: f.clone(),
            scheme_times: vec![(Scheme::Single, 1.0)],
            scheme_ci: vec![],
        };
        assert!(stage1_classes(std::slice::from_ref(&ok), STAGE1_FEATURES.len()).is_ok());
        let cases = [
            Stage1Sample {
                features: vec![0.0; 3],
                ..ok.clone()
            },
            Stage1Sample {
                features: {
                    let mut g = f.clone();
                    g[2] = f64::NAN;
                    g
                },
                ..ok.clone()
            },
            Stage1Sample {
                scheme_times: vec![(Scheme::Single, 0.0)],
                ..ok.clone()
            },
            Stage1Sample {
                scheme_times: vec![(Scheme::Single, f64::NAN)],
                ..ok.clone()
            },
            Stage1Sample {
                scheme_times: vec![(Scheme::Single, f64::INFINITY)],
                ..ok.clone()
            },
            Stage1Sample {
                scheme_times: vec![],
                ..ok.clone()
            },
        ];
        for c in cases {
            let e = stage1_classes(&[ok.clone(), c.clone()], STAGE1_FEATURES.len()).unwrap_err();
            match &e {
                SelectorError::InvalidSample {
                    stage: 1,
                    index: 1,
                    matrix,
                    ..
                } => assert_eq!(matrix, "a"),
                other => panic!("{c:?}: {other:?}"),
            }
        }
    }
}
