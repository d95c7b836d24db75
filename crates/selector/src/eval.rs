//! Evaluating a model on labelled samples by the time its choices cost, not only
//! by label accuracy, and comparing the weighting variants that way.

use crate::labels::{argmin, class_samples, near_best, ClassSamples, StageSample};
use crate::{fit, Model, SelectorError, Stage1Sample, Stage2Sample, ValidTrainParams, Weighting};
use linfa::ParamGuard;
use serde::{Deserialize, Serialize};

/// How one stage of a model does on a set of samples.
///
/// `ratio` of a sample = best time / time of the model's choice (1.0 is perfect).
/// When the model picks a candidate the sample has no finite time for, the sample's
/// slowest finite time stands in (pessimistic), and `unknown_choices` counts it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageMetrics {
    /// Samples evaluated.
    pub samples: usize,
    /// Share of samples where the choice is the fastest candidate.
    pub accuracy: f64,
    /// Share of samples where the choice is within the model's tie tolerance of the fastest.
    pub near_tie_accuracy: f64,
    /// Geometric mean of `ratio`.
    pub geomean_ratio: f64,
    /// Smallest `ratio`.
    pub worst_ratio: f64,
    /// The matrix of the smallest `ratio`.
    pub worst_matrix: String,
    /// Sum of best times / sum of chosen times (weights big samples by their time).
    pub total_ratio: f64,
    /// Choices without a finite time in the sample.
    pub unknown_choices: usize,
}

fn evaluate(
    s: &ClassSamples,
    tol: f64,
    choose: impl Fn(&[f64]) -> usize,
) -> Result<StageMetrics, SelectorError> {
    let (mut n, mut hits, mut near_hits, mut unknown) = (0usize, 0usize, 0usize, 0usize);
    let (mut log_sum, mut worst, mut worst_matrix) = (0.0f64, f64::INFINITY, String::new());
    let (mut best_total, mut chosen_total) = (0.0f64, 0.0f64);
    for (((x, times), ci), matrix) in s.x.iter().zip(&s.times).zip(&s.ci).zip(&s.matrices) {
        let Some((best_class, best)) = argmin(times) else {
            continue;
        };
        let c = choose(x);
        let chosen = match times.get(c).copied().flatten() {
            Some(t) if t.is_finite() => t,
            _ => {
                unknown += 1;
                times
                    .iter()
                    .filter_map(|t| *t)
                    .filter(|t| t.is_finite())
                    .fold(best, f64::max)
            }
        };
        n += 1;
        hits += usize::from(c == best_class);
        near_hits += usize::from(near_best(times, ci, tol).contains(&c));
        let ratio = best / chosen;
        log_sum += ratio.ln();
        if ratio < worst {
            worst = ratio;
            worst_matrix = matrix.clone();
        }
        best_total += best;
        chosen_total += chosen;
    }
    if n == 0 {
        return Err(SelectorError::NoSamples { what: "evaluation" });
    }
    Ok(StageMetrics {
        samples: n,
        accuracy: hits as f64 / n as f64,
        near_tie_accuracy: near_hits as f64 / n as f64,
        geomean_ratio: (log_sum / n as f64).exp(),
        worst_ratio: worst,
        worst_matrix,
        total_ratio: best_total / chosen_total,
        unknown_choices: unknown,
    })
}

/// The model's tie tolerance (0.02 when its stored parameters do not validate).
fn tolerance(model: &Model) -> f64 {
    model
        .card
        .hyper_parameters
        .check_ref()
        .map_or(0.02, |p| p.tie_tolerance())
}

/// Class list of `samples`' candidates, in the model's class order where the model knows them.
fn union_with<C: Copy + PartialEq>(model_classes: &[C], extra: impl Iterator<Item = C>) -> Vec<C> {
    let mut v = model_classes.to_vec();
    for c in extra {
        if !v.contains(&c) {
            v.push(c);
        }
    }
    v
}

/// Stage 1 on `samples`: the model's scheme against each matrix's scheme times.
/// Samples without any finite time are skipped; none left is an error.
pub fn evaluate_stage1(
    model: &Model,
    samples: &[Stage1Sample],
) -> Result<StageMetrics, SelectorError> {
    evaluate_stage(model, &model.card.schemes, samples, Model::scheme_class)
}

/// Stage 2 on `samples`: the model's kernel against each bin's kernel times.
pub fn evaluate_stage2(
    model: &Model,
    samples: &[Stage2Sample],
) -> Result<StageMetrics, SelectorError> {
    evaluate_stage(model, &model.card.kernels, samples, Model::kernel_class)
}

/// One stage on `samples`: the model's class (`class_of` the model and a
/// feature vector) against each sample's times, the classes being the model's
/// (`known`, in its order) and any others the samples name.
fn evaluate_stage<S: StageSample>(
    model: &Model,
    known: &[S::Class],
    samples: &[S],
    class_of: fn(&Model, &[f64]) -> usize,
) -> Result<StageMetrics, SelectorError> {
    let seen = samples
        .iter()
        .flat_map(|s| s.times().iter().map(|(c, _)| *c));
    let classes = union_with(known, seen);
    let s = class_samples(samples, &classes);
    evaluate(&s, tolerance(model), |x| class_of(model, x))
}

/// Both stages' metrics on one sample set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// Stage 1.
    pub stage1: StageMetrics,
    /// Stage 2.
    pub stage2: StageMetrics,
}

impl EvalReport {
    /// Evaluates `model` on both sample sets.
    pub fn of(
        model: &Model,
        stage1: &[Stage1Sample],
        stage2: &[Stage2Sample],
    ) -> Result<Self, SelectorError> {
        Ok(EvalReport {
            stage1: evaluate_stage1(model, stage1)?,
            stage2: evaluate_stage2(model, stage2)?,
        })
    }

    /// A single figure of merit, a proxy of the whole plan's share of oracle
    /// performance: stage 1's geometric-mean ratio (one sample per matrix) times
    /// stage 2's total ratio (sum of best times / sum of chosen times), because a
    /// plan's time is the sum of its bins' times: a wrong kernel on a bin of a few
    /// rows costs microseconds, one on the bin holding most of the matrix costs the
    /// matrix, and the per-bin geometric mean would weigh both alike.
    pub fn score(&self) -> f64 {
        self.stage1.geomean_ratio * self.stage2.total_ratio
    }

    /// Whether `self` loses less time than `other` (higher [`EvalReport::score`];
    /// on equal scores, the better worst case of the two stages).
    pub fn better_than(&self, other: &EvalReport) -> bool {
        let (a, b) = (self.score(), other.score());
        if (a - b).abs() > 1e-12 {
            return a > b;
        }
        self.stage1.worst_ratio.min(self.stage2.worst_ratio)
            > other.stage1.worst_ratio.min(other.stage2.worst_ratio)
    }
}

/// The result of one weighting variant in [`fit_variants`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantResult {
    /// The weighting mode.
    pub weighting: Weighting,
    /// Its metrics on the validation samples.
    pub validation: EvalReport,
}

/// Fits one model per weighting mode on the training samples, evaluates each on the
/// validation samples by time lost, and returns the best model (its card's metrics
/// gain `validation` and `variants`) with every variant's result.
pub fn fit_variants(
    train1: &[Stage1Sample],
    train2: &[Stage2Sample],
    valid1: &[Stage1Sample],
    valid2: &[Stage2Sample],
    base: &ValidTrainParams,
    modes: &[Weighting],
) -> Result<(Model, Vec<VariantResult>), SelectorError> {
    let mut best: Option<(Model, EvalReport)> = None;
    let mut results = Vec::new();
    for &w in modes {
        let params = base.with_weighting(w);
        let model = fit(train1, train2, &params)?;
        let report = EvalReport::of(&model, valid1, valid2)?;
        results.push(VariantResult {
            weighting: w,
            validation: report.clone(),
        });
        let replace = match &best {
            None => true,
            Some((_, b)) => report.better_than(b),
        };
        if replace {
            best = Some((model, report));
        }
    }
    let (mut model, report) = best.ok_or(SelectorError::InvalidParam {
        name: "modes",
        reason: "no weighting mode to fit".into(),
    })?;
    if let Some(m) = model.card.metrics.as_object_mut() {
        m.insert("validation".into(), serde_json::to_value(&report)?);
        m.insert("variants".into(), serde_json::to_value(&results)?);
    }
    Ok((model, results))
}
