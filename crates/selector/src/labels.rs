//! Training samples (what the trainer hands over) and how they become labels
//! and weights: plain argmin, canonical relabelling among near-ties, and
//! time-lost weights.

use crate::{SelectorError, ValidTrainParams, STAGE1_FEATURES, STAGE2_LEN};
use serde::{Deserialize, Serialize};
use sparse::{Binning, Features, KernelId, Scheme};

/// One matrix for stage 1: its features and the time of each scheme's best plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stage1Sample {
    /// The matrix's name (for reports and for evaluation's worst case).
    pub matrix: String,
    /// The stage-1 vector, order [`STAGE1_FEATURES`] (see [`crate::stage1_vector`]).
    pub features: Vec<f64>,
    /// `(scheme, milliseconds)` of each timed scheme's best plan. The label is the
    /// argmin. A time of `+inf` marks a scheme that failed; NaN, 0 and negative
    /// times are refused.
    pub scheme_times: Vec<(Scheme, f64)>,
}

impl Stage1Sample {
    /// A sample from a matrix's features.
    pub fn new(matrix: impl Into<String>, f: &Features, scheme_times: Vec<(Scheme, f64)>) -> Self {
        Stage1Sample {
            matrix: matrix.into(),
            features: crate::stage1_vector(f),
            scheme_times,
        }
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
        }
    }
}

/// Samples of either stage reduced to class indices: what fitting and evaluation work on.
#[derive(Debug, Clone)]
pub(crate) struct ClassSamples {
    pub matrices: Vec<String>,
    pub x: Vec<Vec<f64>>,
    /// Per sample, per class index: the time, or `None` when not measured.
    pub times: Vec<Vec<Option<f64>>>,
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

/// Validates stage-1 samples and collects their schemes (sorted by code).
pub(crate) fn stage1_classes(samples: &[Stage1Sample]) -> Result<Vec<Scheme>, SelectorError> {
    let mut classes = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        check_sample(
            1,
            i,
            &s.matrix,
            &s.features,
            STAGE1_FEATURES.len(),
            &s.scheme_times,
        )?;
        classes.extend(s.scheme_times.iter().map(|(c, _)| *c));
    }
    classes.sort_by_key(|s: &Scheme| s.code());
    classes.dedup();
    Ok(classes)
}

/// Validates stage-2 samples and collects their kernels (in [`KernelId::all`] order).
pub(crate) fn stage2_classes(samples: &[Stage2Sample]) -> Result<Vec<KernelId>, SelectorError> {
    let mut classes = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        check_sample(2, i, &s.matrix, &s.x, STAGE2_LEN, &s.kernel_times)?;
        classes.extend(s.kernel_times.iter().map(|(c, _)| *c));
    }
    classes.sort();
    classes.dedup();
    Ok(classes)
}

pub(crate) fn stage1_samples(samples: &[Stage1Sample], classes: &[Scheme]) -> ClassSamples {
    ClassSamples {
        matrices: samples.iter().map(|s| s.matrix.clone()).collect(),
        x: samples.iter().map(|s| s.features.clone()).collect(),
        times: samples
            .iter()
            .map(|s| to_classes(&s.scheme_times, classes))
            .collect(),
    }
}

pub(crate) fn stage2_samples(samples: &[Stage2Sample], classes: &[KernelId]) -> ClassSamples {
    ClassSamples {
        matrices: samples.iter().map(|s| s.matrix.clone()).collect(),
        x: samples.iter().map(|s| s.x.clone()).collect(),
        times: samples
            .iter()
            .map(|s| to_classes(&s.kernel_times, classes))
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

/// Classes within `best * (1 + tol)`.
pub(crate) fn near_best(times: &[Option<f64>], tol: f64) -> Vec<usize> {
    let Some((_, best)) = argmin(times) else {
        return Vec::new();
    };
    times
        .iter()
        .enumerate()
        .filter(|(_, t)| t.is_some_and(|t| t.is_finite() && t <= best * (1.0 + tol)))
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
        .map(|t| near_best(t, p.tie_tolerance()))
        .collect();
    let near_ties = near.iter().filter(|v| v.len() > 1).count();
    let labels = if p.weighting().relabels() {
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
            .zip(&plain)
            .map(|(l, p)| l.unwrap_or(*p))
            .collect()
    } else {
        plain.clone()
    };
    let relabelled = labels.iter().zip(&plain).filter(|(a, b)| a != b).count();
    let weights = if p.weighting().weights_by_time() {
        let raw: Vec<f64> = s
            .times
            .iter()
            .map(|t| {
                let Some((bi, best)) = argmin(t) else {
                    return LOSS_FLOOR;
                };
                let losses: Vec<f64> = t
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != bi)
                    .filter_map(|(_, t)| *t)
                    .map(|t| ((t - best) / best).min(p.loss_cap()))
                    .collect();
                if losses.is_empty() {
                    return LOSS_FLOOR;
                }
                losses
                    .into_iter()
                    .fold(f64::INFINITY, f64::min)
                    .clamp(LOSS_FLOOR, p.loss_cap())
            })
            .collect();
        let mean = raw.iter().sum::<f64>() / raw.len().max(1) as f64;
        raw.iter().map(|w| (w / mean) as f32).collect()
    } else {
        vec![1.0; n]
    };
    LabelSet {
        labels,
        weights,
        near_ties,
        relabelled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TrainParams;
    use linfa::ParamGuard;

    fn samples(times: Vec<Vec<Option<f64>>>) -> ClassSamples {
        ClassSamples {
            matrices: (0..times.len()).map(|i| format!("m{i}")).collect(),
            x: vec![vec![0.0]; times.len()],
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
        assert_eq!(near_best(&t, 0.02), vec![0, 2, 4]);
        assert_eq!(near_best(&t, 0.0), vec![4]);
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
    fn time_weights() {
        let s = samples(vec![
            vec![Some(1.0), Some(1.01), Some(9.0)], // runner-up loses 0.01
            vec![Some(1.0), Some(3.0), Some(5.0)],  // loses 2
            vec![Some(1.0), Some(f64::INFINITY), None], // capped at 10
            vec![Some(1.0), None, None],            // nothing to lose: floor
        ]);
        let p = TrainParams::new()
            .weighting(Weighting::TimeWeighted)
            .check()
            .unwrap();
        let l = make_labels(&s, 3, &p);
        let raw = [0.01f64, 2.0, 10.0, 0.001];
        let mean = raw.iter().sum::<f64>() / 4.0;
        for (w, r) in l.weights.iter().zip(raw) {
            assert!((*w as f64 - r / mean).abs() < 1e-4, "{:?}", l.weights);
        }
        let total: f32 = l.weights.iter().sum();
        assert!((total - 4.0).abs() < 1e-4);
    }

    use crate::Weighting;

    #[test]
    fn bad_samples_are_refused() {
        let f = vec![0.0; STAGE1_FEATURES.len()];
        let ok = Stage1Sample {
            matrix: "a".into(),
            features: f.clone(),
            scheme_times: vec![(Scheme::Single, 1.0)],
        };
        assert!(stage1_classes(std::slice::from_ref(&ok)).is_ok());
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
            let e = stage1_classes(&[ok.clone(), c.clone()]).unwrap_err();
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
