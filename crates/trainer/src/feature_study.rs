//! `trainer feature-study`: do the extra features (`sparse::extra_features`)
//! help the trees? For several split seeds, the same deterministic fit (same
//! parameters, chosen the same way) on the shipped features and on them plus
//! the extras, each judged on the held-out matrices from stored timings.

use crate::corpus::Item;
use crate::label;
use crate::pipeline::{self, Labelled};
use crate::split::Side;
use anyhow::{Context, Result};
use selector::{Model, ParamGuard, Stage1Sample, Stage2Sample, TrainParams};
use sparse::{Binning, Plan, Precision};
use std::collections::HashMap;
use std::path::Path;
use store::{ContextId, DeviceId, Store};

/// What one matrix brings to the study besides its labels.
struct Matrix<'a> {
    l: &'a Labelled,
    name: String,
    /// A real matrix (`suitesparse` in the corpus), not a stand-in or generated one.
    real: bool,
    /// Values of the extra features asked for.
    extra: Vec<f64>,
    /// Stored whole-plan times by canonical plan JSON.
    plan_times: HashMap<String, f64>,
}

/// The held-out result of one fit.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ArmResult {
    /// `shipped` (the shipped features) or `extended`.
    pub arm: String,
    /// Geometric mean over held-out matrices of oracle / plan time (at most 1).
    pub geomean: f64,
    /// The lowest such ratio, and its matrix.
    pub worst: f64,
    /// The matrix of `worst`.
    pub worst_matrix: String,
    /// The same over the real (SuiteSparse) held-out matrices only.
    pub geomean_real: f64,
    /// Worst over the real held-out matrices.
    pub worst_real: f64,
    /// The validation score that chose the parameters, and the parameters.
    pub validation: f64,
    /// Chosen parameters, as the card records them.
    pub params: serde_json::Value,
    /// Leaves of (stage 1, stage 2).
    pub leaves: (usize, usize),
}

/// One split seed: both arms on the same matrices.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SeedResult {
    /// The split seed.
    pub seed: u64,
    /// Held-out matrices.
    pub test: usize,
    /// The arms, shipped features first.
    pub arms: Vec<ArmResult>,
}

/// The stage vectors of `m`, with its extra features appended when `extended`.
fn vectors(m: &Matrix, extended: bool) -> (Vec<Stage1Sample>, Vec<Stage2Sample>) {
    let mut s1 = m.l.samples.stage1.clone();
    let mut s2 = m.l.samples.stage2.clone();
    if extended {
        s1.features.extend_from_slice(&m.extra);
        for s in &mut s2 {
            s.x.extend_from_slice(&m.extra);
        }
    }
    (vec![s1], s2)
}

/// The plan `model` gives `m` when its trees read the vectors of [`vectors`]
/// (the same walk and collapse as `Model::predict`).
fn plan_of(model: &Model, m: &Matrix, extended: bool) -> Plan {
    let f = &m.l.labels.features;
    let with = |mut x: Vec<f64>| {
        if extended {
            x.extend_from_slice(&m.extra);
        }
        x
    };
    let scheme = model.predict_scheme(&with(selector::stage1_vector(f)));
    let binning = Binning::new(&m.l.row_ptr, scheme);
    let kernels: Vec<_> = binning
        .nonempty_bins()
        .map(|b| {
            let x2 = with(selector::stage2_vector(f, &binning, b));
            (b, model.predict_kernel(&x2))
        })
        .collect();
    match kernels.first().map(|f| f.1) {
        Some(k) if kernels.iter().all(|(_, kk)| *kk == k) => Plan::single(k),
        _ => Plan { scheme, kernels },
    }
}

/// oracle / time of `plan` on `m` (at most 1): the stored time of that plan
/// timed as a whole, else estimated from its bins; its slowest scheme when
/// neither is known.
fn ratio(m: &Matrix, plan: &Plan) -> f64 {
    let labels = &m.l.labels;
    let Some((_, oracle)) = labels.oracle() else {
        return f64::NAN;
    };
    let worst = labels
        .plans
        .values()
        .map(|p| p.total_ms)
        .fold(oracle.total_ms, f64::max);
    let t = store::canonical_plan_json(plan)
        .ok()
        .and_then(|k| m.plan_times.get(&k).copied())
        .or_else(|| pipeline::estimate_plan_ms(labels, plan))
        .unwrap_or(worst)
        .max(1e-12);
    (oracle.total_ms / t).min(1.0)
}

/// Geometric mean and minimum (with its matrix) of `model` over `ms`.
fn score(model: &Model, ms: &[&Matrix], extended: bool) -> (f64, f64, String) {
    let mut log = 0.0;
    let mut worst = (f64::INFINITY, String::new());
    for m in ms {
        let r = ratio(m, &plan_of(model, m, extended));
        log += r.ln();
        if r < worst.0 {
            worst = (r, m.name.clone());
        }
    }
    ((log / ms.len().max(1) as f64).exp(), worst.0, worst.1)
}

/// Fits on `train` with `p`.
fn fit(train: &[&Matrix], p: &selector::ValidTrainParams, extra: &[&str]) -> Result<Model> {
    let extended = !extra.is_empty();
    let (mut s1, mut s2) = (Vec::new(), Vec::new());
    for m in train {
        let (a, b) = vectors(m, extended);
        s1.extend(a);
        s2.extend(b);
    }
    Ok(selector::fit_extended(&s1, &s2, p, extra)?)
}

/// One arm of one seed: the extra features it adds (none for the shipped
/// arm), the split seed, and whether the whole parameter grid is searched.
struct Arm<'a> {
    extra: &'a [&'a str],
    seed: u64,
    full: bool,
}

impl Arm<'_> {
    fn extended(&self) -> bool {
        !self.extra.is_empty()
    }

    /// The trainer's parameter search (every tie tolerance, depth, leaf weight
    /// and weighting, judged on a validation quarter of `train`), or with `full`
    /// false only the default parameters; then the fit of all of `train` with
    /// the best.
    fn search_and_fit(&self, train: &[&Matrix]) -> Result<(Model, f64)> {
        let (seed, extra) = (self.seed, self.extra);
        let (fit_part, valid) =
            crate::split::validation_part(train, |m| m.l.labels.features.values[2] as usize, seed);
        let grid = if self.full {
            pipeline::param_grid(seed)?
        } else {
            vec![TrainParams::new().seed(seed).check()?]
        };
        let mut best: Option<(selector::ValidTrainParams, f64)> = None;
        for p in &grid {
            let model = fit(&fit_part, p, extra)?;
            let s = score(&model, &valid, self.extended()).0;
            if best.as_ref().is_none_or(|(_, b)| s > *b + 1e-12) {
                best = Some((*p, s));
            }
        }
        let (p, s) = best.expect("a parameter set");
        Ok((fit(train, &p, extra)?, s))
    }

    /// Fits on `train`, then scores on `test`.
    fn run(&self, train: &[&Matrix], test: &[&Matrix]) -> Result<(ArmResult, Model)> {
        let extended = self.extended();
        let (model, validation) = self.search_and_fit(train)?;
        let (geomean, worst, worst_matrix) = score(&model, test, extended);
        let real: Vec<&Matrix> = test.iter().filter(|m| m.real).copied().collect();
        let (geomean_real, worst_real, _) = score(&model, &real, extended);
        let r = ArmResult {
            arm: if extended { "extended" } else { "shipped" }.into(),
            geomean,
            worst,
            worst_matrix,
            geomean_real,
            worst_real,
            validation,
            params: serde_json::to_value(model.card.hyper_parameters)?,
            leaves: model.leaves(),
        };
        Ok((r, model))
    }
}

/// What the study reads from the database and corpus, per precision.
pub struct StudyInput<'a> {
    /// The results database, device and context.
    pub store: &'a Store,
    /// The device.
    pub device: DeviceId,
    /// The measurement context.
    pub context: ContextId,
    /// The corpus (for loading matrices and the split).
    pub items: &'a [Item],
    /// The precision.
    pub precision: Precision,
}

/// Runs the study over `seeds` with the extra features `extra`, writes
/// `study_<precision>.json` and the candidate models of the first seed to
/// `out`, and returns the results.
pub async fn run(
    input: &StudyInput<'_>,
    labelled: &[Labelled],
    seeds: &[u64],
    extra: &[&str],
    full: bool,
    out: &Path,
) -> Result<Vec<SeedResult>> {
    let mut ms = Vec::new();
    for l in labelled {
        let item = &input.items[l.item];
        let a = item.load()?;
        let values = sparse::extra_features::extra_features(a.row_ptr(), a.col_idx(), extra)
            .context("an unknown extra feature name")?;
        let plan_times = label::stored_plan_times(
            input.store,
            input.device,
            input.precision,
            input.context,
            l.labels.matrix,
        )
        .await?;
        ms.push(Matrix {
            l,
            name: item.name.clone(),
            real: item.source == "suitesparse",
            extra: values,
            plan_times,
        });
    }
    std::fs::create_dir_all(out)?;
    let mut results = Vec::new();
    for (i, &seed) in seeds.iter().enumerate() {
        let sides = pipeline::split_items(input.items, seed);
        let side = |m: &&Matrix| sides[m.l.item];
        let train: Vec<&Matrix> = ms.iter().filter(|m| side(m) == Side::Train).collect();
        let test: Vec<&Matrix> = ms.iter().filter(|m| side(m) == Side::Test).collect();
        let mut arms = Vec::new();
        for ex in [&[][..], extra] {
            let arm = Arm {
                extra: ex,
                seed,
                full,
            };
            let (r, model) = arm.run(&train, &test)?;
            if ex.is_empty() {
                let differ = predict_mismatches(&model, &test);
                anyhow::ensure!(
                    differ == 0,
                    "the vector walk planned {differ} held-out matrices unlike Model::predict"
                );
            }
            println!(
                "{} seed {seed}: {:<8} held-out {} matrices: geomean {:.4}, worst {:.4} ({}); real: geomean {:.4}, worst {:.4}; validation {:.4}; leaves {:?}",
                input.precision, r.arm, test.len(), r.geomean, r.worst, r.worst_matrix,
                r.geomean_real, r.worst_real, r.validation, r.leaves
            );
            if i == 0 {
                let mut model = model;
                model.card.created = "see README".into();
                model.card.precision = input.precision.as_str().into();
                let path = out.join(format!("{}-{}-seed{seed}.json", r.arm, input.precision));
                std::fs::write(&path, model.to_json_string())?;
            }
            arms.push(r);
        }
        results.push(SeedResult {
            seed,
            test: test.len(),
            arms,
        });
    }
    let path = out.join(format!("study_{}.json", input.precision));
    std::fs::write(&path, serde_json::to_string_pretty(&results)?)?;
    Ok(results)
}

/// The number of matrices of `ms` whose plan under `model` (fitted on the
/// shipped features) differs between the vector walk and `Model::predict`: 0
/// makes the study's shipped arm the trainer's own evaluation.
fn predict_mismatches(model: &Model, ms: &[&Matrix]) -> usize {
    ms.iter()
        .filter(|m| {
            plan_of(model, m, false) != model.predict(&m.l.labels.features, &m.l.row_ptr).plan
        })
        .count()
}
