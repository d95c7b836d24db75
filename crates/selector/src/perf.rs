//! The performance model: predicted time (ms) of a whole plan, or of one kernel
//! over the whole matrix, from the matrix features and what the plan gives each
//! kernel; gradient-boosted regression trees on log(time), fitted on the whole-plan
//! and single-kernel timings of the results database, either directly or as a
//! matrix level plus each plan's log time relative to it.

use crate::regtree::{Boosted, GrowParams};
use crate::vector::{feature, stage1_vector};
use crate::{SelectorError, STAGE1_FEATURES};
use serde::{Deserialize, Serialize};
use sparse::{Binning, Features, KernelId, Plan, Scheme};

/// Features the performance model adds to the stage-1 features (then, per kernel
/// of [`KernelId::all`], the share of nonzeros and the share of rows the plan
/// gives it: `nnz_share_<kernel>`, `row_share_<kernel>`).
///
/// | name | meaning |
/// |---|---|
/// | `log2_nnz` | log2(1 + nonzeros) |
/// | `log2_rows` | log2(1 + rows) |
/// | `plan_u` | [`Scheme::code`]: U, or 0 for the single-bin scheme |
/// | `plan_bins` | non-empty bins the plan runs (one launch each, launched per bin) |
/// | `plan_kernels` | distinct kernels of the plan (one launch each, grouped) |
pub const PERF_EXTRA: [&str; 5] = [
    "log2_nnz",
    "log2_rows",
    "plan_u",
    "plan_bins",
    "plan_kernels",
];

/// The performance model's feature names, in order.
pub fn perf_features() -> Vec<String> {
    let mut v: Vec<String> = STAGE1_FEATURES.iter().map(|s| s.to_string()).collect();
    v.extend(PERF_EXTRA.iter().map(|s| s.to_string()));
    for k in KernelId::all() {
        v.push(format!("nnz_share_{}", k.name()));
        v.push(format!("row_share_{}", k.name()));
    }
    v
}

fn base_vector(f: &Features, scheme: Scheme, bins: usize, kernels: usize) -> Vec<f64> {
    let mut v = stage1_vector(f);
    v.extend([
        (1.0 + feature(f, "nnz")).log2(),
        (1.0 + feature(f, "rows")).log2(),
        scheme.code() as f64,
        bins as f64,
        kernels as f64,
    ]);
    v.resize(v.len() + 2 * KernelId::all().len(), 0.0);
    v
}

fn kernel_slot(k: KernelId) -> usize {
    let at = KernelId::all().iter().position(|kk| *kk == k);
    STAGE1_FEATURES.len() + PERF_EXTRA.len() + 2 * at.expect("every kernel is in the pool")
}

/// The vector of one kernel run over the whole matrix (the single-bin scheme).
pub fn single_vector(f: &Features, k: KernelId) -> Vec<f64> {
    let mut v = base_vector(f, Scheme::Single, 1, 1);
    let s = kernel_slot(k);
    v[s] = 1.0;
    v[s + 1] = 1.0;
    v
}

/// The vector of `plan` over `binning` (the binning of the plan's scheme). A plan
/// of the single-bin scheme is its kernel over the whole matrix. `None` for a plan
/// with no bins (an empty matrix: nothing to time).
pub fn plan_vector(f: &Features, plan: &Plan, binning: &Binning) -> Option<Vec<f64>> {
    if plan.scheme == Scheme::Single || binning.scheme == Scheme::Single {
        return plan.kernels.first().map(|(_, k)| single_vector(f, *k));
    }
    if plan.kernels.is_empty() {
        return None;
    }
    let mut kernels: Vec<KernelId> = plan.kernels.iter().map(|(_, k)| *k).collect();
    kernels.sort();
    kernels.dedup();
    let mut v = base_vector(f, plan.scheme, plan.kernels.len(), kernels.len());
    let (rows, nnz) = (binning.nrows.max(1) as f64, feature(f, "nnz").max(1.0));
    for &(b, k) in &plan.kernels {
        if b >= binning.num_bins() {
            continue;
        }
        let s = kernel_slot(k);
        v[s] += binning.bin_nnz[b] as f64 / nnz;
        v[s + 1] += binning.row_count(b) as f64 / rows;
    }
    Some(v)
}

/// One timed plan for fitting: its vector and measured time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerfSample {
    /// The matrix's name.
    pub matrix: String,
    /// [`plan_vector`] or [`single_vector`].
    pub x: Vec<f64>,
    /// Measured time, ms (finite, > 0).
    pub ms: f64,
}

/// How the performance model is fitted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PerfParams {
    /// Boosting rounds.
    pub rounds: usize,
    /// Shrinkage of each tree.
    pub rate: f64,
    /// Depth of each tree.
    pub max_depth: usize,
    /// Fewest samples in a leaf.
    pub min_leaf: usize,
}

impl Default for PerfParams {
    fn default() -> Self {
        PerfParams {
            rounds: 400,
            rate: 0.1,
            max_depth: 5,
            min_leaf: 3,
        }
    }
}

impl PerfParams {
    fn check(&self) -> Result<(), SelectorError> {
        let bad = |name, reason: &str| {
            Err(SelectorError::InvalidParam {
                name,
                reason: reason.into(),
            })
        };
        if self.rounds == 0 || self.rounds > 10_000 {
            return bad("rounds", "must be in 1..=10000");
        }
        if !(self.rate > 0.0 && self.rate <= 1.0) {
            return bad("rate", "must be in (0, 1]");
        }
        if self.max_depth > crate::MAX_DEPTH_LIMIT {
            return bad("max_depth", "too deep");
        }
        if self.min_leaf == 0 {
            return bad("min_leaf", "must be at least 1");
        }
        Ok(())
    }
}

/// How far measured times fell from predicted ones on matrices the model did
/// not see: quantiles of measured / predicted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBand {
    /// 10th percentile of measured / predicted.
    pub low: f64,
    /// 90th percentile of measured / predicted.
    pub high: f64,
    /// Median absolute percentage error, %.
    pub mdape: f64,
    /// Timed plans the band comes from.
    pub samples: usize,
    /// Where it comes from (e.g. `held-out split, 81 matrices`).
    pub source: String,
}

/// The fitted performance model, stored in the model JSON beside the trees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerfModel {
    /// The feature layout it reads: [`perf_features`], less the share columns of
    /// kernels added to the pool after it was fitted.
    pub features: Vec<String>,
    /// How it was fitted.
    pub params: PerfParams,
    /// Samples it was fitted on.
    pub samples: usize,
    /// The error band measured on held-out matrices (set by the trainer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band: Option<ErrorBand>,
    pub(crate) model: Boosted,
    /// The matrix level ([`PerfForm::Relative`]): log time of a typical plan of
    /// the matrix (the median over its timed plans) from the matrix columns
    /// alone (those before `plan_u`); `model` then predicts a plan's log time
    /// relative to it, so its splits go to what tells one plan of a matrix from
    /// another rather than to matrix size. `None` ([`PerfForm::Absolute`], and
    /// files written before it existed): `model` predicts log time directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) level: Option<Boosted>,
    /// A size law under the trees ([`SizeBase`]): log time's least-squares
    /// line in the logs of the matrix's nonzeros, rows and columns, which the
    /// trees then correct. Trees alone predict a staircase in matrix size, so
    /// a matrix between two training sizes gets the nearer one's time;
    /// the line interpolates. `None` in files written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) base: Option<SizeBase>,
    /// Its times are reported (`/predict`, the upload's calibration) but the
    /// planner does not choose plans by them ([`crate::Model::planning_perf`]):
    /// set by the trainer (`--perf-predict-only`) where planning by it was
    /// measured worse than without it. Absent (false) in older files.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub predict_only: bool,
}

/// What the performance model's trees predict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PerfForm {
    /// Log time of each plan.
    Absolute,
    /// A matrix level plus each plan's log time relative to it (see
    /// [`PerfModel`]'s `level`).
    Relative,
}

/// A predicted time with its uncertainty.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// Predicted time, ms.
    pub ms: f64,
    /// Lower end of the band (ms), when the model has one.
    pub low_ms: Option<f64>,
    /// Upper end of the band (ms), when the model has one.
    pub high_ms: Option<f64>,
}

/// The predicted time of a plan and of the best single kernel.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimePrediction {
    /// The plan.
    pub plan: Estimate,
    /// The kernel predicted fastest over the whole matrix.
    pub best_single_kernel: String,
    /// Its time.
    pub best_single: Estimate,
    /// What the band means, or why there is none.
    pub band: String,
    /// The factor learned from this device's own measurements, when the
    /// times were scaled by one ([`crate::Calibration`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration: Option<crate::CalibrationNote>,
    /// Whether the planner chose plans by these times (false: the model's
    /// performance part predicts only, see [`PerfModel::predict_only`]).
    pub used_by_planner: bool,
}

impl Estimate {
    /// Scales the time and its band by `factor`.
    pub fn scale(&mut self, factor: f64) {
        self.ms *= factor;
        self.low_ms = self.low_ms.map(|t| t * factor);
        self.high_ms = self.high_ms.map(|t| t * factor);
    }
}

/// Fits the performance model on timed plans in the [`PerfForm::Relative`]
/// form (see [`fit_perf_form`]).
pub fn fit_perf(samples: &[PerfSample], params: PerfParams) -> Result<PerfModel, SelectorError> {
    fit_perf_form(samples, params, PerfForm::Relative)
}

/// Fits the performance model on timed plans. Deterministic: the same samples
/// in the same order give the same model, bit for bit (matrices are grouped in
/// order of first appearance, never by hash order). Share columns of kernels
/// that no sample gives work to are left out of the layout: the model cannot
/// say what they cost, and predicts NaN for them.
pub fn fit_perf_form(
    samples: &[PerfSample],
    params: PerfParams,
    form: PerfForm,
) -> Result<PerfModel, SelectorError> {
    fit_perf_with(samples, params, form, false)
}

/// As [`fit_perf_form`], with trees over a size law ([`SizeBase`]) when
/// `size_base` is set.
pub fn fit_perf_with(
    samples: &[PerfSample],
    params: PerfParams,
    form: PerfForm,
    size_base: bool,
) -> Result<PerfModel, SelectorError> {
    params.check()?;
    if samples.is_empty() {
        return Err(SelectorError::NoSamples {
            what: "performance",
        });
    }
    check_samples(samples)?;
    let (features, keep) = seen_layout(samples);
    let x: Vec<Vec<f64>> = samples
        .iter()
        .map(|s| keep.iter().map(|&i| s.x[i]).collect())
        .collect();
    let grow = GrowParams {
        max_depth: params.max_depth,
        min_leaf: params.min_leaf,
    };
    let log: Vec<f64> = samples.iter().map(|s| s.ms.ln()).collect();
    let (y, level, base) = match form {
        PerfForm::Absolute => {
            let base = size_base.then(|| SizeBase::fit(&features, &x, &log));
            let y = SizeBase::left(base.as_ref(), &x, log);
            (y, None, base)
        }
        PerfForm::Relative => {
            let (groups, levels) = matrix_levels(samples);
            let n = matrix_columns(&features);
            let lx: Vec<Vec<f64>> = groups.iter().map(|g| x[g[0]][..n].to_vec()).collect();
            let base = size_base.then(|| SizeBase::fit(&features, &lx, &levels));
            let rest = SizeBase::left(base.as_ref(), &lx, levels.clone());
            let level = Boosted::fit(&lx, &rest, params.rounds, params.rate, grow);
            // The relative target: log time less the matrix's own measured
            // level, so that these trees learn only differences between plans.
            let mut y = log;
            for (g, l) in groups.iter().zip(&levels) {
                for &i in g {
                    y[i] -= l;
                }
            }
            (y, Some(level), base)
        }
    };
    Ok(PerfModel {
        features,
        params,
        samples: samples.len(),
        band: None,
        model: Boosted::fit(&x, &y, params.rounds, params.rate, grow),
        level,
        base,
        predict_only: false,
    })
}

fn check_samples(samples: &[PerfSample]) -> Result<(), SelectorError> {
    let len = perf_features().len();
    for (i, s) in samples.iter().enumerate() {
        let reason = if s.x.len() != len {
            Some(format!("vector has {} values, expected {len}", s.x.len()))
        } else if s.x.iter().any(|v| !v.is_finite()) {
            Some("a feature is not finite".into())
        } else if !(s.ms.is_finite() && s.ms > 0.0) {
            Some(format!("time {} ms is not a positive number", s.ms))
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(SelectorError::InvalidSample {
                stage: 3,
                index: i,
                matrix: s.matrix.clone(),
                reason,
            });
        }
    }
    Ok(())
}

/// This build's layout less the share columns of kernels no sample gives
/// work to, and the indices of the columns kept.
fn seen_layout(samples: &[PerfSample]) -> (Vec<String>, Vec<usize>) {
    let all = perf_features();
    let keep: Vec<usize> = (0..all.len())
        .filter(|&i| {
            let k = KernelId::all().into_iter().find(|k| {
                all[i] == format!("nnz_share_{}", k.name())
                    || all[i] == format!("row_share_{}", k.name())
            });
            k.is_none_or(|k| {
                let s = kernel_slot(k);
                samples.iter().any(|p| p.x[s] != 0.0 || p.x[s + 1] != 0.0)
            })
        })
        .collect();
    (keep.iter().map(|&i| all[i].clone()).collect(), keep)
}

/// Columns of a performance layout that describe the matrix alone (those
/// before `plan_u`).
fn matrix_columns(features: &[String]) -> usize {
    features
        .iter()
        .position(|f| f == "plan_u")
        .unwrap_or(features.len())
}

/// The samples of each matrix (indices, matrices in order of first
/// appearance) and each matrix's level: the median log time of its samples.
fn matrix_levels(samples: &[PerfSample]) -> (Vec<Vec<usize>>, Vec<f64>) {
    let mut at: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        let g = *at.entry(s.matrix.as_str()).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(i);
    }
    let levels = groups
        .iter()
        .map(|g| {
            let mut v: Vec<f64> = g.iter().map(|&i| samples[i].ms.ln()).collect();
            v.sort_by(f64::total_cmp);
            let k = v.len();
            (v[(k - 1) / 2] + v[k / 2]) / 2.0
        })
        .collect();
    (groups, levels)
}

/// Log time as a line in the logs of a matrix's size: `coef[0]` plus
/// `coef[i]` times the column `columns[i - 1]` of the layout (`log2_nnz`,
/// `log2_rows`, and ln(1 + `cols`) for `cols`), fitted by least squares
/// (with a little ridge, so that collinear sizes stay finite).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeBase {
    /// The layout columns it reads.
    pub columns: Vec<String>,
    /// The intercept, then one coefficient per column.
    pub coef: Vec<f64>,
    /// Their positions in the layout (checked against `columns` at load).
    #[serde(rename = "positions")]
    at: Vec<usize>,
}

/// The terms of [`SizeBase`]: layout columns, `cols` taken as ln(1 + cols).
/// (A square of `log2_nnz`, for the bend a launch floor puts in the line,
/// was tried on the PoCL labels and predicted worse on the held-out split.)
const SIZE_COLUMNS: [&str; 3] = ["log2_nnz", "log2_rows", "cols"];

impl SizeBase {
    fn value(name: &str, v: f64) -> f64 {
        if name == "cols" {
            v.max(0.0).ln_1p()
        } else {
            v
        }
    }

    fn positions(features: &[String], columns: &[String]) -> Option<Vec<usize>> {
        columns
            .iter()
            .map(|c| features.iter().position(|f| f == c))
            .collect()
    }

    /// The least-squares line of `y` over the size columns of the rows `x`
    /// (in the layout `features`).
    fn fit(features: &[String], x: &[Vec<f64>], y: &[f64]) -> SizeBase {
        let columns: Vec<String> = SIZE_COLUMNS.iter().map(|c| c.to_string()).collect();
        let at = Self::positions(features, &columns).expect("the layout has the size columns");
        let k = at.len() + 1;
        let row = |v: &Vec<f64>| {
            let mut r = vec![1.0];
            r.extend(at.iter().zip(&columns).map(|(&i, c)| Self::value(c, v[i])));
            r
        };
        // Normal equations (A'A + ridge) c = A'y.
        let mut a = vec![vec![0.0; k + 1]; k];
        for (v, &t) in x.iter().zip(y) {
            let r = row(v);
            for i in 0..k {
                for j in 0..k {
                    a[i][j] += r[i] * r[j];
                }
                a[i][k] += r[i] * t;
            }
        }
        for (i, ai) in a.iter_mut().enumerate().skip(1) {
            ai[i] += 1e-6 * x.len().max(1) as f64;
        }
        let coef = solve(a).unwrap_or_else(|| {
            let mean = y.iter().sum::<f64>() / y.len().max(1) as f64;
            let mut c = vec![0.0; k];
            c[0] = if mean.is_finite() { mean } else { 0.0 };
            c
        });
        SizeBase { columns, coef, at }
    }

    /// The line's log time at `v` (the model's own layout).
    fn at(&self, v: &[f64]) -> f64 {
        let mut t = self.coef[0];
        for ((&i, c), w) in self.at.iter().zip(&self.columns).zip(&self.coef[1..]) {
            t += w * Self::value(c, v[i]);
        }
        t
    }

    /// What `base` leaves of the log times `y` of the rows `x`: `y` itself
    /// without one.
    fn left(base: Option<&SizeBase>, x: &[Vec<f64>], mut y: Vec<f64>) -> Vec<f64> {
        if let Some(b) = base {
            for (t, v) in y.iter_mut().zip(x) {
                *t -= b.at(v);
            }
        }
        y
    }

    /// Checks the coefficients, and the stored positions against where the
    /// columns stand among `features`' matrix columns.
    fn validate(&self, features: &[String]) -> Result<(), String> {
        if self.coef.len() != self.columns.len() + 1 || self.coef.iter().any(|c| !c.is_finite()) {
            return Err(format!(
                "{} finite coefficients expected for {} columns",
                self.columns.len() + 1,
                self.columns.len()
            ));
        }
        let n = matrix_columns(features);
        match Self::positions(&features[..n], &self.columns) {
            Some(at) if at == self.at => Ok(()),
            Some(at) => Err(format!("columns resolved at {at:?}, not {:?}", self.at)),
            None => Err(format!(
                "a column of {:?} is not a matrix column",
                self.columns
            )),
        }
    }
}

/// Solves the augmented system `a` (k rows of k + 1) by Gaussian elimination
/// with partial pivoting; `None` when it is singular or not finite.
fn solve(mut a: Vec<Vec<f64>>) -> Option<Vec<f64>> {
    let k = a.len();
    for c in 0..k {
        let p = (c..k).max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))?;
        if a[p][c].abs().is_nan() || a[p][c].abs() <= 1e-12 {
            return None;
        }
        a.swap(c, p);
        let pivot = a[c].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != c {
                let f = row[c] / pivot[c];
                for (x, pv) in row.iter_mut().zip(&pivot).skip(c) {
                    *x -= f * pv;
                }
            }
        }
    }
    let c: Vec<f64> = (0..k).map(|i| a[i][k] / a[i][i]).collect();
    c.iter().all(|v| v.is_finite()).then_some(c)
}

impl PerfModel {
    /// Predicted time (ms) of a vector of [`perf_features`] (this build's
    /// layout). A model fitted before a kernel joined the pool reads only the
    /// columns it was fitted with; a vector that gives work to a kernel it does
    /// not know gets NaN (it cannot say anything about that kernel).
    pub fn predict_ms(&self, x: &[f64]) -> f64 {
        self.project(x).map_or(f64::NAN, |v| {
            let level = self.level.as_ref().map_or(0.0, |l| {
                l.predict(&v[..matrix_columns(&self.features).min(v.len())])
            });
            let base = self.base.as_ref().map_or(0.0, |b| b.at(&v));
            (base + level + self.model.predict(&v)).exp()
        })
    }

    /// What its trees predict.
    pub fn form(&self) -> PerfForm {
        if self.level.is_some() {
            PerfForm::Relative
        } else {
            PerfForm::Absolute
        }
    }

    /// The kernels this model knows: those with share columns in its layout.
    pub fn kernels(&self) -> Vec<KernelId> {
        KernelId::all()
            .into_iter()
            .filter(|k| {
                let col = format!("nnz_share_{}", k.name());
                self.features.contains(&col)
            })
            .collect()
    }

    /// `x` (this build's layout) in the model's own layout, or `None` when `x`
    /// puts a share on a column the model lacks.
    fn project(&self, x: &[f64]) -> Option<Vec<f64>> {
        let current = perf_features();
        if self.features == current {
            return Some(x.to_vec());
        }
        let mut used = vec![false; current.len()];
        let mut v = Vec::with_capacity(self.features.len());
        for name in &self.features {
            let at = current.iter().position(|c| c == name)?;
            used[at] = true;
            v.push(x[at]);
        }
        let dropped_nonzero = x.iter().zip(&used).any(|(xi, u)| !u && *xi != 0.0);
        (!dropped_nonzero).then_some(v)
    }

    /// Checks the layout against this build and every tree: the stage-1 and
    /// extra features in this build's order, then share columns of kernels this
    /// build knows, in [`KernelId::all`] order (a kernel added to the pool after
    /// the model was fitted is simply absent: the model predicts nothing for it).
    pub(crate) fn validate(&self) -> Result<(), SelectorError> {
        let mut expected: Vec<String> = STAGE1_FEATURES.iter().map(|s| s.to_string()).collect();
        expected.extend(PERF_EXTRA.iter().map(|s| s.to_string()));
        for k in self.kernels() {
            expected.push(format!("nnz_share_{}", k.name()));
            expected.push(format!("row_share_{}", k.name()));
        }
        let exp: Vec<&str> = expected.iter().map(String::as_str).collect();
        crate::model::first_difference(3, &self.features, &exp)?;
        if let Some(b) = &self.base {
            b.validate(&self.features)
                .map_err(|e| SelectorError::InvalidModel(format!("performance size law: {e}")))?;
        }
        if let Some(l) = &self.level {
            l.validate(matrix_columns(&self.features))
                .map_err(|e| SelectorError::InvalidModel(format!("performance level: {e}")))?;
        }
        self.model
            .validate(self.features.len())
            .map_err(|e| SelectorError::InvalidModel(format!("performance model: {e}")))
    }

    fn estimate(&self, ms: f64) -> Estimate {
        Estimate {
            ms,
            low_ms: self.band.as_ref().map(|b| ms * b.low),
            high_ms: self.band.as_ref().map(|b| ms * b.high),
        }
    }

    /// The kernel predicted fastest over the whole matrix, and its time.
    pub fn best_single(&self, f: &Features) -> (KernelId, f64) {
        self.kernels()
            .into_iter()
            .map(|k| (k, self.predict_ms(&single_vector(f, k))))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("the pool has kernels")
    }

    /// Predicted times of `plan` (over `binning`, the binning of its scheme) and of
    /// the best single kernel; `None` for a plan with no bins, or one that uses a
    /// kernel this model does not know.
    pub fn predict_plan(
        &self,
        f: &Features,
        plan: &Plan,
        binning: &Binning,
    ) -> Option<TimePrediction> {
        let x = plan_vector(f, plan, binning)?;
        let ms = self.predict_ms(&x);
        if ms.is_nan() {
            return None;
        }
        let (k, single) = self.best_single(f);
        Some(TimePrediction {
            plan: self.estimate(ms),
            best_single_kernel: k.name(),
            best_single: self.estimate(single),
            band: match &self.band {
                Some(b) => format!(
                    "10th to 90th percentile of measured / predicted on the {} ({} timed plans, median absolute error {:.1}%)",
                    b.source, b.samples, b.mdape
                ),
                None => "no held-out error band recorded for this model".into(),
            },
            calibration: None,
            used_by_planner: !self.predict_only,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sparse::Csr;

    /// The shipped H100 f32 model's performance part, fitted before merge_tile
    /// existed (the test fails if models/ lacks it: it ships with the repository;
    /// the f64 model was refitted with merge_tile, the f32 one was kept).
    fn shipped_h100_perf() -> PerfModel {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../models/nvidia-h100-80gb-hbm3-f32.json");
        let m = crate::Model::load(&path).expect("the shipped H100 model loads");
        m.perf().expect("it carries a performance model").clone()
    }

    /// `predict_only` round-trips, is left out of files where it is false
    /// (the H100 models' bytes do not change), and takes the performance
    /// part away from the planner alone.
    #[test]
    fn a_predict_only_perf_model_round_trips_and_is_not_the_planners() {
        let mut m = crate::Model::load(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../models/nvidia-h100-80gb-hbm3-f64.json"),
        )
        .unwrap();
        let perf = m.perf().unwrap().clone();
        assert!(!perf.predict_only);
        assert!(!serde_json::to_string(&perf)
            .unwrap()
            .contains("predict_only"));
        assert!(m.planning_perf().is_some());
        let a = sparse::gen::stencil_2d(30, 20).unwrap();
        let f = Features::of(&a);
        let b = Binning::new(a.row_ptr(), Scheme::Single);
        let plan = Plan::single(KernelId::Serial);
        assert!(m.predict_time(&f, &plan, &b).unwrap().used_by_planner);
        let mut p2 = perf.clone();
        p2.predict_only = true;
        let json = serde_json::to_string(&p2).unwrap();
        assert!(json.contains("\"predict_only\":true"));
        let back: PerfModel = serde_json::from_str(&json).unwrap();
        assert_eq!(back, p2);
        m.set_perf(Some(p2));
        assert!(m.planning_perf().is_none());
        let t = m.predict_time(&f, &plan, &b).unwrap();
        assert!(!t.used_by_planner && t.plan.ms > 0.0);
    }

    #[test]
    fn a_perf_model_older_than_a_kernel_predicts_as_before_and_not_for_it() {
        let perf = shipped_h100_perf();
        assert!(perf.features.len() < perf_features().len());
        let known = perf.kernels();
        assert!(known.contains(&KernelId::MergePath) && !known.contains(&KernelId::MergeTile));
        let a = sparse::gen::stencil_2d(30, 20).unwrap();
        let f = Features::of(&a);
        // Its own layout is this build's without the newer kernels' columns, so
        // a vector that gives them nothing predicts exactly what the model did
        // when it was fitted (the trees read the same values).
        let current = perf_features();
        for k in &known {
            let x = single_vector(&f, *k);
            let own: Vec<f64> = perf
                .features
                .iter()
                .map(|n| x[current.iter().position(|c| c == n).unwrap()])
                .collect();
            assert_eq!(perf.predict_ms(&x), perf.model.predict(&own).exp(), "{k}");
        }
        assert!(perf
            .predict_ms(&single_vector(&f, KernelId::MergeTile))
            .is_nan());
        let (best, ms) = perf.best_single(&f);
        assert!(known.contains(&best) && ms.is_finite());
        let b = Binning::new(a.row_ptr(), Scheme::Single);
        assert!(perf
            .predict_plan(&f, &Plan::single(KernelId::MergeTile), &b)
            .is_none());
        assert!(perf
            .predict_plan(&f, &Plan::single(KernelId::Serial), &b)
            .is_some());
    }

    /// Matrices over three decades of size; on each, kernel i takes 2% more
    /// than kernel i - 1 (merge_tile is never timed): differences far below
    /// the spread of sizes.
    fn graded_samples() -> Vec<PerfSample> {
        let kernels: Vec<KernelId> = KernelId::all()
            .into_iter()
            .filter(|k| *k != KernelId::MergeTile)
            .collect();
        let mut samples = Vec::new();
        for (i, n) in [8usize, 12, 20, 30, 45, 70, 100, 150, 220, 300]
            .iter()
            .enumerate()
        {
            let f = Features::of(&sparse::gen::stencil_2d(*n, *n + i).unwrap());
            let base = 1e-5 * feature(&f, "nnz");
            for (j, k) in kernels.iter().enumerate() {
                samples.push(PerfSample {
                    matrix: format!("m{i}"),
                    x: single_vector(&f, *k),
                    ms: base * 1.02f64.powi(j as i32),
                });
            }
        }
        samples
    }

    #[test]
    fn the_relative_form_orders_close_plans_of_an_unseen_matrix() {
        let samples = graded_samples();
        let p = fit_perf_form(&samples, PerfParams::default(), PerfForm::Relative).unwrap();
        assert_eq!(p.form(), PerfForm::Relative);
        p.validate().unwrap();
        let f = Features::of(&sparse::gen::stencil_2d(90, 80).unwrap());
        let kernels = p.kernels();
        let pred: Vec<f64> = kernels
            .iter()
            .map(|k| p.predict_ms(&single_vector(&f, *k)))
            .collect();
        for w in pred.windows(2) {
            assert!(w[0] < w[1], "{pred:?}");
        }
        // The level is the median plan's time on the fitted matrices, away
        // from the three smallest and three largest (leaves hold 3 or more).
        let n = matrix_columns(&p.features);
        let level = p.level.as_ref().unwrap();
        let per = kernels.len();
        for s in samples.iter().step_by(per).skip(3).take(4) {
            let truth = s.ms * 1.02f64.powf((per - 1) as f64 / 2.0);
            let got = level.predict(&s.x[..n]).exp();
            assert!(
                (got / truth - 1.0).abs() < 0.01,
                "{}: {got} vs {truth}",
                s.matrix
            );
        }
    }

    #[test]
    fn a_kernel_never_timed_is_left_out_and_gets_no_prediction() {
        let samples = graded_samples();
        for form in [PerfForm::Absolute, PerfForm::Relative] {
            let p = fit_perf_form(&samples, PerfParams::default(), form).unwrap();
            assert_eq!(p.form(), form);
            assert!(!p.kernels().contains(&KernelId::MergeTile));
            assert_eq!(p.features.len(), perf_features().len() - 2);
            p.validate().unwrap();
            let f = Features::of(&sparse::gen::stencil_2d(40, 40).unwrap());
            assert!(p
                .predict_ms(&single_vector(&f, KernelId::MergeTile))
                .is_nan());
            assert!(p
                .predict_ms(&single_vector(&f, KernelId::Serial))
                .is_finite());
        }
    }

    #[test]
    fn the_same_samples_give_the_same_file_bytes() {
        // Matrices interleaved and named so that hash order differs from
        // first-appearance order; each fit builds its own maps.
        let mut samples = graded_samples();
        samples.reverse();
        let p = PerfParams {
            rounds: 60,
            ..PerfParams::default()
        };
        let json =
            |form| serde_json::to_string(&fit_perf_form(&samples, p, form).unwrap()).unwrap();
        for form in [PerfForm::Absolute, PerfForm::Relative] {
            let a = json(form);
            assert_eq!(a, json(form));
            let back: PerfModel = serde_json::from_str(&a).unwrap();
            assert_eq!(serde_json::to_string(&back).unwrap(), a);
        }
    }

    /// A matrix between two training sizes: trees alone predict the time of
    /// a neighbour (a staircase in size); over the size law they interpolate.
    #[test]
    fn a_size_law_under_the_trees_interpolates_between_training_sizes() {
        let samples = graded_samples();
        let f = Features::of(&sparse::gen::stencil_2d(180, 185).unwrap());
        let truth = 1e-5 * feature(&f, "nnz");
        let err = |base| {
            let p =
                fit_perf_with(&samples, PerfParams::default(), PerfForm::Absolute, base).unwrap();
            p.validate().unwrap();
            assert_eq!(p.base.is_some(), base);
            (p.predict_ms(&single_vector(&f, KernelId::Serial)) / truth - 1.0).abs()
        };
        let (trees, law) = (err(false), err(true));
        assert!(law < 0.05, "over the size law: {law}");
        assert!(law < trees / 2.0, "trees alone {trees}, over the law {law}");
        // The relative form puts the law under the matrix level.
        let p = fit_perf_with(&samples, PerfParams::default(), PerfForm::Relative, true).unwrap();
        p.validate().unwrap();
        let b = p.base.as_ref().unwrap();
        assert_eq!(b.columns, SIZE_COLUMNS);
        assert!(b.coef.iter().all(|c| c.is_finite()));
        let got = p.predict_ms(&single_vector(&f, KernelId::Serial));
        assert!((got / truth - 1.0).abs() < 0.1, "{got} vs {truth}");
    }

    /// A size law round-trips through JSON; one whose positions or
    /// coefficients do not fit its columns is refused at load.
    #[test]
    fn a_size_law_round_trips_and_a_broken_one_is_refused() {
        let p = fit_perf_with(
            &graded_samples(),
            PerfParams {
                rounds: 40,
                ..PerfParams::default()
            },
            PerfForm::Absolute,
            true,
        )
        .unwrap();
        let json = serde_json::to_string(&p).unwrap();
        assert!(json.contains("\"positions\""));
        let back: PerfModel = serde_json::from_str(&json).unwrap();
        assert_eq!(back, p);
        back.validate().unwrap();
        let mut moved = p.clone();
        moved.base.as_mut().unwrap().at[0] += 1;
        assert!(moved.validate().is_err());
        let mut short = p.clone();
        short.base.as_mut().unwrap().coef.pop();
        assert!(short.validate().is_err());
        let mut nan = p;
        nan.base.as_mut().unwrap().coef[1] = f64::NAN;
        assert!(nan.validate().is_err());
    }

    #[test]
    fn a_perf_layout_with_an_unknown_or_misplaced_column_is_refused() {
        let mut perf = shipped_h100_perf();
        assert!(perf.validate().is_ok());
        let n = perf.features.len();
        perf.features.swap(n - 1, n - 3);
        assert!(perf.validate().is_err());
        perf.features.swap(n - 1, n - 3);
        perf.features[n - 1] = "row_share_no_such_kernel".into();
        assert!(perf.validate().is_err());
    }

    #[test]
    fn vectors_describe_the_plan() {
        let a =
            Csr::<f64>::from_triplets(4, 4, &[0, 1, 1, 3, 3], &[0, 1, 2, 0, 3], &[1.0; 5]).unwrap();
        let f = Features::of(&a);
        let names = perf_features();
        let at = |n: &str| names.iter().position(|x| x == n).unwrap();
        let s = single_vector(&f, KernelId::Vector);
        assert_eq!(s.len(), names.len());
        assert_eq!(s[at("nnz_share_vector")], 1.0);
        assert_eq!(s[at("row_share_vector")], 1.0);
        assert_eq!(s[at("nnz_share_serial")], 0.0);
        assert_eq!(s[at("plan_u")], 0.0);
        let b = Binning::new(a.row_ptr(), Scheme::Single);
        assert_eq!(
            plan_vector(&f, &Plan::single(KernelId::Vector), &b),
            Some(s)
        );
        let b = Binning::new(a.row_ptr(), Scheme::Granularity(1));
        let plan = Plan {
            scheme: Scheme::Granularity(1),
            kernels: b
                .nonempty_bins()
                .map(|bin| {
                    (
                        bin,
                        if bin == 2 {
                            KernelId::Vector
                        } else {
                            KernelId::Serial
                        },
                    )
                })
                .collect(),
        };
        let v = plan_vector(&f, &plan, &b).unwrap();
        assert_eq!(v[at("plan_u")], 1.0);
        assert_eq!(v[at("plan_bins")], plan.kernels.len() as f64);
        assert_eq!(v[at("plan_kernels")], 2.0);
        assert!((v[at("nnz_share_vector")] - 0.8).abs() < 1e-12);
        assert!((v[at("nnz_share_serial")] - 0.2).abs() < 1e-12);
        let empty = Plan {
            scheme: Scheme::Granularity(1),
            kernels: vec![],
        };
        assert_eq!(plan_vector(&f, &empty, &b), None);
    }

    #[test]
    fn bad_samples_and_params_are_refused() {
        let ok = PerfSample {
            matrix: "m".into(),
            x: vec![0.0; perf_features().len()],
            ms: 1.0,
        };
        assert!(fit_perf(std::slice::from_ref(&ok), PerfParams::default()).is_ok());
        assert!(fit_perf(&[], PerfParams::default()).is_err());
        for bad in [
            PerfSample {
                ms: 0.0,
                ..ok.clone()
            },
            PerfSample {
                ms: f64::NAN,
                ..ok.clone()
            },
            PerfSample {
                x: vec![0.0; 3],
                ..ok.clone()
            },
        ] {
            let e = fit_perf(&[ok.clone(), bad], PerfParams::default()).unwrap_err();
            assert!(
                matches!(
                    e,
                    SelectorError::InvalidSample {
                        stage: 3,
                        index: 1,
                        ..
                    }
                ),
                "{e}"
            );
        }
        let p = PerfParams {
            rate: 0.0,
            ..PerfParams::default()
        };
        assert!(fit_perf(std::slice::from_ref(&ok), p).is_err());
    }
}
