//! Held-out evaluation by time, measured in one run: for each matrix, the
//! predicted plan (and the overhead of features, prediction and binning), the
//! oracle, the best and worst single kernel, serial and vector alone,
//! CSR-Adaptive, and the hand-written rule baseline, all timed back to back.

use crate::first_call::{self, FirstCallSetup};
use crate::label::{test_vector, Labeller, MatrixLabels};
use crate::report;
use anyhow::Result;
use engine::AnyMatrix;
use selector::{Model, RuleClass};
use serde::Serialize;
use sparse::{Binning, Csr, Features, KernelId, Plan, Precision, Scheme};
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

/// Interleaved timing rounds per evaluated plan (the best round is kept).
pub const EVAL_ROUNDS: usize = 3;

/// Repetitions of each end-to-end single call (the median is kept).
pub const E2E_REPS: usize = 5;

/// One evaluated matrix (times in ms, kernel time from profiling events).
#[derive(Debug, Clone, Serialize)]
pub struct EvalRow {
    /// Matrix name.
    pub matrix: String,
    /// Where it comes from.
    pub source: String,
    /// Rows.
    pub nrows: usize,
    /// Columns.
    pub ncols: usize,
    /// Nonzeros.
    pub nnz: usize,
    /// Features + prediction + binning on the host.
    pub overhead_ms: f64,
    /// Of which the features.
    pub features_ms: f64,
    /// Preparing the predicted plan's launches on the device (row lists,
    /// CSR-Adaptive blocks, kernel objects; NaN when not measured).
    pub prepare_ms: f64,
    /// The plan the service picks for one call (`Selector::plan_for_calls`
    /// with 1 expected call): its candidate name (`model` or `single:<kernel>`).
    pub first_call_plan: String,
    /// Its time.
    pub first_call_ms: f64,
    /// Its whole analysis: features (only when the planner computed them),
    /// planning and preparation (preparation only when timed on the device;
    /// then all three as one span, `first_call::first_call_overhead`).
    pub first_call_overhead_ms: f64,
    /// Whether it is the model's own plan.
    pub first_call_same_plan: bool,
    /// Whether the planner computed the features for it (false: a quick plan).
    pub first_call_features: bool,
    /// The first call as planned before the lazy planner (features always
    /// computed, then `plan_for_calls`): its candidate name.
    pub first_call_eager_plan: String,
    /// Its time.
    pub first_call_eager_ms: f64,
    /// Its whole analysis: features, planning, preparation.
    pub first_call_eager_overhead_ms: f64,
    /// One whole single call of the first-call plan, from the parsed matrix
    /// to y (planning with features when asked, upload, preparation, x, run,
    /// y; wall clock, median; NaN when not timed on a device).
    pub e2e_first_ms: f64,
    /// The same for the oracle's plan given for free (upload, x, run, y).
    pub e2e_oracle_ms: f64,
    /// The plan the service makes for an upload ([`UPLOAD_CALLS`] expected
    /// calls, `Selector::plan_for_calls`): its candidate name (`model`, the
    /// trees' plan, or `single:<kernel>`).
    pub upload_plan: String,
    /// That plan's time, as planned, before the upload's tuning race (ms).
    pub upload_ms: f64,
    /// The predicted plan's scheme.
    pub predicted_scheme: Scheme,
    /// The predicted plan.
    pub predicted_ms: f64,
    /// The oracle's scheme (from exhaustive labelling).
    pub oracle_scheme: Scheme,
    /// Best time of the searched space in this run (the oracle plan re-timed, or
    /// any candidate timed here that beat it).
    pub oracle_ms: f64,
    /// Fastest single kernel on the whole matrix.
    pub best_single: KernelId,
    /// Its time.
    pub best_single_ms: f64,
    /// Every single kernel's time on the whole matrix (NaN where unknown).
    pub singles: Vec<(KernelId, f64)>,
    /// Slowest single kernel.
    pub worst_single: KernelId,
    /// Its time.
    pub worst_single_ms: f64,
    /// Serial alone.
    pub serial_ms: f64,
    /// Vector alone.
    pub vector_ms: f64,
    /// CSR-Adaptive alone.
    pub csr_adaptive_ms: f64,
    /// The rule baseline's plan.
    pub rule_ms: f64,
    /// Stage-2 choices equal to the best kernel, over the predicted scheme's bins.
    pub stage2_hits: usize,
    /// Bins of the predicted scheme with labels.
    pub stage2_bins: usize,
    /// The copy-bandwidth bound: the minimum bytes of one SpMV moved at the
    /// device's measured copy bandwidth (NaN when the bandwidth is unknown).
    pub bound_ms: f64,
    /// cuSPARSE's `cusparseSpMV` with descriptors and buffer made once (NaN when
    /// no cuSPARSE figures were given for this matrix).
    pub cusparse_ms: f64,
    /// CuPy's `A @ x` (descriptors, buffer and y made on every call; NaN when absent).
    pub cusparse_cupy_ms: f64,
    /// How the times were obtained: `timed` (this run, on the device) or
    /// `stored` (from the results database: stored whole-plan times, else the
    /// sum of the bins' times).
    pub timing: &'static str,
}

impl EvalRow {
    /// oracle / predicted: 1.0 is perfect.
    pub fn oracle_ratio(&self) -> f64 {
        self.oracle_ms / self.predicted_ms
    }

    /// The first call as measured before amortisation: oracle / (predicted +
    /// features and prediction), preparation not counted.
    pub fn first_call_ratio(&self) -> f64 {
        self.oracle_ms / (self.predicted_ms + self.overhead_ms)
    }

    /// The same with the model plan's preparation counted.
    pub fn first_call_ratio_prepared(&self) -> f64 {
        self.oracle_ms / (self.predicted_ms + self.overhead_ms + self.prepare_ms)
    }

    /// The first call planned for one call: oracle / (its plan's time + its
    /// whole analysis, preparation included).
    pub fn first_call_ratio_amortised(&self) -> f64 {
        self.oracle_ms / (self.first_call_ms + self.first_call_overhead_ms)
    }

    /// The first call before the lazy planner: oracle / (its plan's time +
    /// features + planning + preparation).
    pub fn first_call_ratio_eager(&self) -> f64 {
        self.oracle_ms / (self.first_call_eager_ms + self.first_call_eager_overhead_ms)
    }

    /// The single call end to end: the oracle's plan given for free over
    /// ours, both from the parsed matrix to y.
    pub fn first_call_ratio_end_to_end(&self) -> f64 {
        self.e2e_oracle_ms / self.e2e_first_ms
    }

    /// The time an uploaded matrix runs at once the service has tuned it: the
    /// model's plan, unless the best single kernel beats it by the server's
    /// switch margin (`server::tune`, 3%). Both times come from the same run.
    pub fn tuned_ms(&self) -> f64 {
        if self.best_single_ms.is_finite()
            && self.best_single_ms < self.predicted_ms * (1.0 - TUNE_SWITCH_MARGIN)
        {
            self.best_single_ms
        } else {
            self.predicted_ms
        }
    }

    /// oracle / tuned.
    pub fn tuned_oracle_ratio(&self) -> f64 {
        self.oracle_ms / self.tuned_ms()
    }

    /// oracle / the upload's plan as planned (before tuning).
    pub fn upload_oracle_ratio(&self) -> f64 {
        self.oracle_ms / self.upload_ms
    }

    /// One single kernel's time on the whole matrix (NaN when unknown).
    pub fn single_ms(&self, k: KernelId) -> f64 {
        self.singles
            .iter()
            .find(|s| s.0 == k)
            .map_or(f64::NAN, |s| s.1)
    }
}

/// The one kernel a user without a selector would run on every matrix: the
/// single kernel of the best geometric-mean time over `rows`, among those
/// timed on all of them (chosen in hindsight on the evaluated matrices, so
/// the strongest such baseline); `None` when no kernel was timed on all.
pub fn fixed_kernel(rows: &[EvalRow]) -> Option<KernelId> {
    KernelId::all()
        .into_iter()
        .filter(|&k| {
            rows.iter()
                .all(|r| r.single_ms(k).is_finite() && r.single_ms(k) > 0.0)
        })
        .map(|k| (k, geomean(rows.iter().map(|r| r.single_ms(k)))))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
}

/// The expected calls the service plans an uploaded matrix for (mirrors the
/// server's `--uploaded-expected-calls` default).
pub const UPLOAD_CALLS: u64 = 1000;

/// The plan the service makes for an upload, and its candidate's name.
fn upload_plan(
    model: &Model,
    f: &Features,
    a: &Csr<f64>,
    ctx: &selector::AmortiseContext,
) -> (String, Plan) {
    let am = model.plan_for_calls(f, a.rows(), UPLOAD_CALLS, ctx, false);
    (am.planning.chosen.into_owned(), am.prediction.plan)
}

/// The margin by which the service's upload tuning wants a single kernel to beat
/// the model's plan before it switches (mirrors `server::tune::SWITCH_MARGIN`).
pub const TUNE_SWITCH_MARGIN: f64 = 0.03;

/// Evaluates one matrix. `labels` are its exhaustive labels in this precision;
/// `setup` is what the service's planner knows of the device (for the first call).
#[allow(clippy::too_many_arguments)]
pub async fn evaluate_matrix(
    lab: &Labeller<'_>,
    class: RuleClass,
    model: &Model,
    setup: &FirstCallSetup,
    (name, source): (&str, &str),
    (a, precision): (&Csr<f64>, Precision),
    labels: &MatrixLabels,
) -> Result<EvalRow> {
    // Overhead: what a user's first call pays on the host before the kernels
    // run (each step the median of a few runs).
    let reps = first_call::HOST_REPS;
    let (features, features_ms) = first_call::timed(reps, || Features::of(a));
    let (pred, predict_ms) = first_call::timed(reps, || model.predict(&features, a.rows()));
    let overhead_ms = features_ms + predict_ms;
    let ctx = setup.context(precision.bytes());
    let (eager, eager_planning, eager_plan_ms) =
        first_call::plan_first_call(model, &features, a.rows(), &ctx);
    let dm = lab.engine.upload_as(a, precision)?;
    let (first, first_overhead_ms) =
        first_call::first_call_overhead(lab.engine, &dm, model, a, &ctx);
    let (first, planning) = (first.prediction, first.planning);
    let prepare_ms = first_call::prepare_ms(lab.engine, &dm, &pred.binning, &pred.plan);
    let eager_prepare_ms = first_call::prepare_ms(lab.engine, &dm, &eager.binning, &eager.plan);
    let (oracle_scheme, oracle_plan) = labels
        .oracle()
        .map(|(s, p)| (s, p.plan.clone()))
        .unwrap_or((Scheme::Single, Plan::single(KernelId::Serial)));
    let e2e = first_call::end_to_end(
        lab.engine,
        (a, precision),
        model,
        &ctx,
        &oracle_plan,
        E2E_REPS,
    )?;
    let mut plans: Vec<Plan> = vec![pred.plan.clone(), oracle_plan];
    plans.extend(KernelId::all().into_iter().map(Plan::single));
    plans.push(selector::rule_plan_for(class, &features, a.row_ptr()));
    plans.push(eager.plan.clone());
    plans.push(first.plan.clone());
    let best_ms = time_plans(lab, labels, &dm, &plans).await?;
    let n = best_ms.len();
    let upload = upload_plan(model, &features, a, &ctx);
    let singles: Vec<(KernelId, f64)> = KernelId::all()
        .into_iter()
        .zip(best_ms[2..2 + KernelId::all().len()].iter().copied())
        .collect();
    Ok(assemble(Measured {
        matrix: (name, source, a),
        overhead_ms,
        features_ms,
        prepare_ms,
        labels,
        plan: &pred.plan,
        predicted_ms: best_ms[0],
        oracle: (oracle_scheme, best_ms[1]),
        singles,
        rule_ms: best_ms[n - 3],
        first_call: FirstCall {
            name: planning.chosen.into_owned(),
            ms: best_ms[n - 1],
            overhead_ms: first_overhead_ms,
            same_plan: same_launches(&first, &pred),
            features: planning.features_computed,
            eager: (
                eager_planning.chosen.into_owned(),
                best_ms[n - 2],
                features_ms + eager_plan_ms + eager_prepare_ms,
            ),
            e2e,
        },
        upload,
        timing: "timed",
    }))
}

/// Times every plan in [`EVAL_ROUNDS`] interleaved rounds, keeping each
/// plan's best round: on a CPU device microsecond kernels drift with the state
/// of the worker threads, and timing one plan after the other would charge
/// that drift to whichever plan came first. Plans that enqueue the same
/// launches (equal [`engine::LaunchKey`]s: the model's single-bin plan and that
/// kernel alone, an oracle plan whose bins all chose one kernel) are timed
/// once and share that time, so a ratio between two names of one plan is 1
/// and not the noise of two measurements. Each timing is the labeller's
/// whole-plan measurement ([`Labeller::plan_time`]: `Engine::measure` under the
/// labelling policy), stored like the labels.
async fn time_plans(
    lab: &Labeller<'_>,
    labels: &MatrixLabels,
    dm: &AnyMatrix,
    plans: &[Plan],
) -> Result<Vec<f64>> {
    let x = test_vector(dm.ncols());
    let binnings: Vec<Binning> = plans
        .iter()
        .map(|p| Binning::new(dm.row_ptr(), p.scheme))
        .collect();
    let keys: Vec<Option<engine::LaunchKey>> = plans
        .iter()
        .zip(&binnings)
        .map(|(p, b)| engine::launch_key(b, p, engine::LaunchMode::default()).ok())
        .collect();
    time_distinct(&keys, EVAL_ROUNDS, async |i| {
        if plans[i].kernels.is_empty() {
            return Ok(0.0);
        }
        lab.plan_time(labels.matrix, dm, &binnings[i], &plans[i], &x)
            .await
    })
    .await
}

/// The first index of each distinct key (`None`: a key of its own), and for
/// each key the position of its representative in that list.
fn distinct<K: PartialEq>(keys: &[Option<K>]) -> (Vec<usize>, Vec<usize>) {
    let (mut reps, mut of) = (Vec::<usize>::new(), Vec::with_capacity(keys.len()));
    for (i, k) in keys.iter().enumerate() {
        let same = k
            .as_ref()
            .and_then(|k| reps.iter().position(|&r| keys[r].as_ref() == Some(k)));
        of.push(same.unwrap_or_else(|| {
            reps.push(i);
            reps.len() - 1
        }));
    }
    (reps, of)
}

/// Times each distinct key (`time(i)` for its first index `i`) in `rounds`
/// interleaved rounds, keeps each one's best, and gives every index the time
/// of its key.
async fn time_distinct<K: PartialEq>(
    keys: &[Option<K>],
    rounds: usize,
    mut time: impl AsyncFnMut(usize) -> Result<f64>,
) -> Result<Vec<f64>> {
    let (reps, of) = distinct(keys);
    let mut best = vec![f64::INFINITY; reps.len()];
    for _ in 0..rounds {
        for (j, &i) in reps.iter().enumerate() {
            best[j] = best[j].min(time(i).await?);
        }
    }
    Ok(of.into_iter().map(|j| best[j]).collect())
}

/// Whether two predictions enqueue the same launches.
fn same_launches(a: &selector::Prediction, b: &selector::Prediction) -> bool {
    let key = |p: &selector::Prediction| {
        engine::launch_key(&p.binning, &p.plan, engine::LaunchMode::default()).ok()
    };
    a.plan == b.plan || key(a).is_some_and(|k| Some(k) == key(b))
}

/// The plan for one call as measured.
struct FirstCall {
    /// The planning's chosen candidate.
    name: String,
    /// Its time.
    ms: f64,
    /// Planning (features when it asked for them) and preparation.
    overhead_ms: f64,
    /// Whether it is the model's own plan.
    same_plan: bool,
    /// Whether the features were computed.
    features: bool,
    /// Before the lazy planner: its plan's name, time and analysis (ms).
    eager: (String, f64, f64),
    /// The whole single call, ours and the oracle's.
    e2e: first_call::EndToEnd,
}

/// What one evaluation measured of a matrix; [`assemble`] makes the row.
struct Measured<'a> {
    /// The matrix's name, source, and the matrix (for its dimensions).
    matrix: (&'a str, &'a str, &'a Csr<f64>),
    overhead_ms: f64,
    features_ms: f64,
    prepare_ms: f64,
    labels: &'a MatrixLabels,
    /// The model's plan.
    plan: &'a Plan,
    predicted_ms: f64,
    /// The oracle's scheme and time (lowered below to any faster candidate).
    oracle: (Scheme, f64),
    /// Each kernel alone over the whole matrix.
    singles: Vec<(KernelId, f64)>,
    rule_ms: f64,
    /// The plan for one call.
    first_call: FirstCall,
    /// The plan for an upload: its candidate name and plan.
    upload: (String, Plan),
    timing: &'static str,
}

/// The row of a matrix from its measurements: best and worst single kernels,
/// the oracle lowered to any faster candidate, stage-2 hits.
fn assemble(m: Measured<'_>) -> EvalRow {
    let single = |k: KernelId| {
        m.singles
            .iter()
            .find(|s| s.0 == k)
            .map_or(f64::NAN, |s| s.1)
    };
    let finite = m.singles.iter().copied().filter(|s| s.1.is_finite());
    let best = finite
        .clone()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((KernelId::Serial, f64::NAN));
    let worst = finite
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((KernelId::Serial, f64::NAN));
    let oracle_ms = [m.predicted_ms, best.1, m.rule_ms]
        .into_iter()
        .filter(|t| t.is_finite() && *t > 0.0)
        .fold(m.oracle.1, f64::min);
    let (hits, bins) = stage2_hits(m.labels, m.plan);
    // The upload's plan is the trees' plan or one kernel alone, both timed.
    let upload_ms = if m.upload.1 == *m.plan {
        m.predicted_ms
    } else {
        match m.upload.1.kernels.as_slice() {
            [(_, k)] if m.upload.1.scheme == Scheme::Single => single(*k),
            _ => f64::NAN,
        }
    };
    let (name, source, a) = m.matrix;
    EvalRow {
        matrix: name.to_string(),
        source: source.to_string(),
        nrows: a.nrows(),
        ncols: a.ncols(),
        nnz: a.nnz(),
        overhead_ms: m.overhead_ms,
        features_ms: m.features_ms,
        prepare_ms: m.prepare_ms,
        first_call_plan: m.first_call.name,
        first_call_ms: m.first_call.ms,
        first_call_overhead_ms: m.first_call.overhead_ms,
        first_call_same_plan: m.first_call.same_plan,
        first_call_features: m.first_call.features,
        first_call_eager_plan: m.first_call.eager.0,
        first_call_eager_ms: m.first_call.eager.1,
        first_call_eager_overhead_ms: m.first_call.eager.2,
        e2e_first_ms: m.first_call.e2e.ours_ms,
        e2e_oracle_ms: m.first_call.e2e.oracle_ms,
        upload_plan: m.upload.0,
        upload_ms,
        predicted_scheme: m.plan.scheme,
        predicted_ms: m.predicted_ms,
        oracle_scheme: m.oracle.0,
        oracle_ms,
        best_single: best.0,
        best_single_ms: best.1,
        singles: m.singles.clone(),
        worst_single: worst.0,
        worst_single_ms: worst.1,
        serial_ms: single(KernelId::Serial),
        vector_ms: single(KernelId::Vector),
        csr_adaptive_ms: single(KernelId::CsrAdaptive),
        rule_ms: m.rule_ms,
        stage2_hits: hits,
        stage2_bins: bins,
        bound_ms: f64::NAN,
        cusparse_ms: f64::NAN,
        cusparse_cupy_ms: f64::NAN,
        timing: m.timing,
    }
}

/// Stage-2 choices of `plan` equal to the best kernel of their bin, and bins with labels.
fn stage2_hits(labels: &MatrixLabels, plan: &Plan) -> (usize, usize) {
    let (mut hits, mut bins) = (0, 0);
    for (bin, k) in &plan.kernels {
        if let Some(times) = labels.bins.get(&(plan.scheme, *bin)) {
            bins += 1;
            let bestk = times.iter().min_by(|a, b| a.1.total_cmp(&b.1)).map(|t| t.0);
            hits += usize::from(bestk == Some(*k));
        }
    }
    (hits, bins)
}

/// Evaluates one matrix from stored measurements alone (no device): a plan's time
/// is its stored whole-plan time when one exists (labelling and earlier
/// evaluations on the device store them), else the estimate from its bins'
/// times ([`crate::pipeline::estimate_plan_ms`]); a single kernel's is its stored
/// whole-plan time, else its time on the single-bin scheme's bin. The first
/// call's analysis counts features and planning; preparation needs a device.
#[allow(clippy::too_many_arguments)]
pub fn evaluate_stored(
    class: RuleClass,
    model: &Model,
    setup: &FirstCallSetup,
    (name, source): (&str, &str),
    (a, precision): (&Csr<f64>, Precision),
    labels: &MatrixLabels,
    plan_times: &HashMap<String, f64>,
) -> Result<EvalRow> {
    let t0 = Instant::now();
    let features = Features::of(a);
    let features_ms = t0.elapsed().as_secs_f64() * 1e3;
    let pred = model.predict(&features, a.rows());
    let overhead_ms = t0.elapsed().as_secs_f64() * 1e3;
    let ctx = setup.context(precision.bytes());
    let (eager, eager_planning, eager_plan_ms) =
        first_call::plan_first_call(model, &features, a.rows(), &ctx);
    let (first, planning, first_plan_ms) = first_call::plan_lazy_first_call(model, a, &ctx);
    let upload = upload_plan(model, &features, a, &ctx);
    let time_of = |plan: &Plan| -> f64 {
        if plan.kernels.is_empty() {
            return 0.0;
        }
        // A plan the engine runs as one kernel over every row (its bins all
        // chose that kernel) is that kernel alone, as a live evaluation
        // times it ([`time_distinct`]); not the sum of its bins' launches.
        let single = as_one_kernel(a.row_ptr(), plan);
        let plan = single.as_ref().unwrap_or(plan);
        store::canonical_plan_json(plan)
            .ok()
            .and_then(|k| plan_times.get(&k).copied())
            .or_else(|| crate::pipeline::estimate_plan_ms(labels, plan))
            .unwrap_or(f64::NAN)
    };
    let (oracle, singles) = stored_oracle_and_singles(labels, &time_of);
    Ok(assemble(Measured {
        matrix: (name, source, a),
        overhead_ms,
        features_ms,
        prepare_ms: f64::NAN,
        labels,
        plan: &pred.plan,
        predicted_ms: time_of(&pred.plan),
        oracle,
        singles,
        rule_ms: time_of(&selector::rule_plan_for(class, &features, a.row_ptr())),
        first_call: FirstCall {
            name: planning.chosen.into_owned(),
            ms: time_of(&first.plan),
            overhead_ms: first_plan_ms,
            same_plan: first.plan == pred.plan,
            features: planning.features_computed,
            eager: (
                eager_planning.chosen.into_owned(),
                time_of(&eager.plan),
                features_ms + eager_plan_ms,
            ),
            e2e: first_call::EndToEnd {
                ours_ms: f64::NAN,
                oracle_ms: f64::NAN,
            },
        },
        upload,
        timing: "stored",
    }))
}

/// The oracle (the scheme with the fastest stored plan) and every kernel's
/// time alone, priced by `time_of` as in [`evaluate_stored`].
fn stored_oracle_and_singles(
    labels: &MatrixLabels,
    time_of: &dyn Fn(&Plan) -> f64,
) -> ((Scheme, f64), Vec<(KernelId, f64)>) {
    // Each scheme's best plan priced as the service would run it: schemes
    // whose plan is one kernel over every row are the same launches as that
    // kernel alone and share its one stored time, so the oracle is not the
    // luckiest of several timings of one launch (on PoCL a 2-5 us launch
    // measured up to 2x apart across schemes).
    let oracle = labels
        .plans
        .iter()
        .map(|(s, p)| (*s, time_of(&p.plan)))
        .filter(|(_, t)| t.is_finite() && *t > 0.0)
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((Scheme::Single, f64::NAN));
    let singles: Vec<(KernelId, f64)> = KernelId::all()
        .into_iter()
        .map(|k| {
            let whole = time_of(&Plan::single(k));
            let t = if whole.is_nan() {
                labels.single_kernel_ms(k).unwrap_or(f64::NAN)
            } else {
                whole
            };
            (k, t)
        })
        .collect();
    (oracle, singles)
}

/// `Plan::single(k)` when the engine runs `plan` exactly as it runs kernel
/// `k` alone over the whole matrix (the same launches over the same rows),
/// else `None`.
fn as_one_kernel(row_ptr: &[u32], plan: &Plan) -> Option<Plan> {
    let k = plan.kernels.first()?.1;
    if plan.scheme == Scheme::Single || plan.kernels.iter().any(|b| b.1 != k) {
        return None;
    }
    let single = Plan::single(k);
    let key = |p: &Plan| {
        let b = Binning::new(row_ptr, p.scheme);
        engine::launch_key(&b, p, engine::LaunchMode::default()).ok()
    };
    let (own, alone) = (key(plan)?, key(&single)?);
    (own == alone).then_some(single)
}

fn geomean(v: impl Iterator<Item = f64>) -> f64 {
    let (mut s, mut n) = (0.0, 0usize);
    for x in v.filter(|x| x.is_finite() && *x > 0.0) {
        s += x.ln();
        n += 1;
    }
    if n == 0 {
        f64::NAN
    } else {
        (s / n as f64).exp()
    }
}

/// The summary lines of an evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Matrices evaluated.
    pub matrices: usize,
    /// Geometric mean of oracle / predicted.
    pub geomean_oracle_ratio: f64,
    /// Worst oracle / predicted.
    pub worst_oracle_ratio: f64,
    /// The matrix of the worst ratio.
    pub worst_matrix: String,
    /// Geometric mean of oracle / (predicted + overhead): the first call's share.
    pub geomean_oracle_ratio_first_call: f64,
    /// Median overhead in SpMV-equivalents (overhead / predicted plan time).
    pub median_overhead_spmv_equivalents: f64,
    /// Geometric mean of oracle / (predicted + overhead + the plan's
    /// preparation): today's first call with preparation counted.
    pub geomean_oracle_ratio_first_call_prepared: f64,
    /// Median of (overhead + preparation) / predicted.
    pub median_overhead_spmv_equivalents_prepared: f64,
    /// Geometric mean of oracle / (first-call plan + its whole analysis): the
    /// first call planned for one call ([`EvalRow::first_call_ratio_amortised`]).
    pub geomean_oracle_ratio_first_call_amortised: f64,
    /// Median of the first-call plan's whole analysis / its time.
    pub median_first_call_overhead_spmv_equivalents: f64,
    /// The same before the lazy planner (features always computed):
    /// [`EvalRow::first_call_ratio_eager`].
    pub geomean_oracle_ratio_first_call_eager: f64,
    /// Median of that first call's whole analysis / its time.
    pub median_first_call_eager_overhead_spmv_equivalents: f64,
    /// Geometric mean of the single call end to end, the oracle's plan given
    /// for free over ours ([`EvalRow::first_call_ratio_end_to_end`]; NaN
    /// without a device).
    pub geomean_oracle_ratio_first_call_end_to_end: f64,
    /// Matrices whose first call computed the features.
    pub first_call_features_computed: usize,
    /// Median of features / predicted plan time (the part no plan avoids).
    pub median_features_spmv_equivalents: f64,
    /// Matrices whose first call ran a plan other than the model's.
    pub first_call_changed: usize,
    /// Stage 1 top-1 accuracy: predicted scheme == oracle scheme.
    pub stage1_accuracy: f64,
    /// Stage 2 top-1 accuracy over the predicted schemes' bins.
    pub stage2_accuracy: f64,
    /// Geometric-mean speedups of the predicted plan over each baseline.
    pub geomean_speedup_vs_serial: f64,
    /// Over vector alone.
    pub geomean_speedup_vs_vector: f64,
    /// Over CSR-Adaptive alone.
    pub geomean_speedup_vs_csr_adaptive: f64,
    /// Over the rule baseline.
    pub geomean_speedup_vs_rule: f64,
    /// Over the best single kernel (per matrix).
    pub geomean_speedup_vs_best_single: f64,
    /// Over the worst single kernel (per matrix).
    pub geomean_speedup_vs_worst_single: f64,
    /// Matrices where the predicted plan beats serial.
    pub beats_serial: usize,
    /// ... vector.
    pub beats_vector: usize,
    /// ... CSR-Adaptive.
    pub beats_csr_adaptive: usize,
    /// ... the rule baseline.
    pub beats_rule: usize,
    /// ... the best single kernel.
    pub beats_best_single: usize,
    /// Matrices with cuSPARSE figures.
    pub cusparse_matrices: usize,
    /// Geometric-mean speedup of the predicted plan over `cusparseSpMV` (NaN without figures).
    pub geomean_speedup_vs_cusparse: f64,
    /// Matrices where the predicted plan beats `cusparseSpMV`.
    pub beats_cusparse: usize,
    /// Geometric mean of bound / predicted: the share of the copy-bandwidth bound reached.
    pub geomean_bound_fraction: f64,
    /// Geometric mean of oracle / the upload's plan as planned for
    /// [`UPLOAD_CALLS`] calls, before tuning ([`EvalRow::upload_ms`]).
    pub geomean_oracle_ratio_uploaded: f64,
    /// Worst oracle / the upload's plan as planned.
    pub worst_oracle_ratio_uploaded: f64,
    /// The matrix of that worst ratio.
    pub worst_matrix_uploaded: String,
    /// Geometric mean of oracle / tuned: an uploaded matrix after the service's
    /// race of the model's plan against the single kernels ([`EvalRow::tuned_ms`]).
    pub geomean_oracle_ratio_tuned: f64,
    /// Worst oracle / tuned.
    pub worst_oracle_ratio_tuned: f64,
    /// The matrix of the worst tuned ratio.
    pub worst_matrix_tuned: String,
    /// Matrices where tuning replaced the model's plan by a single kernel.
    pub tuning_switched: usize,
    /// The best fixed kernel ([`fixed_kernel`]; empty when none was timed on
    /// every matrix).
    pub fixed_kernel: String,
    /// Geometric mean of fixed kernel / predicted.
    pub geomean_speedup_vs_fixed_kernel: f64,
    /// Matrices where the predicted plan beats the fixed kernel.
    pub beats_fixed_kernel: usize,
    /// Geometric-mean speedups of the tuned plan (an uploaded matrix as the
    /// service runs it): over the fixed kernel, the rule baseline and
    /// CSR-Adaptive.
    pub geomean_speedup_tuned_vs_fixed_kernel: f64,
    /// Over the rule baseline.
    pub geomean_speedup_tuned_vs_rule: f64,
    /// Over CSR-Adaptive alone.
    pub geomean_speedup_tuned_vs_csr_adaptive: f64,
    /// Matrices where the tuned plan beats the fixed kernel.
    pub beats_fixed_kernel_tuned: usize,
    /// The least fixed kernel / tuned over the matrices.
    pub worst_tuned_vs_fixed_kernel: f64,
    /// Its matrix.
    pub worst_matrix_tuned_vs_fixed_kernel: String,
    /// The least best single kernel (per matrix) / tuned.
    pub worst_tuned_vs_best_single: f64,
    /// The performance model's predictions against the measured times (`None`
    /// when the model has no performance model).
    pub perf: Option<crate::perf_eval::PerfSummary>,
}

/// The median of `f` over the rows where it is finite (NaN for none).
fn median(rows: &[EvalRow], f: impl Fn(&EvalRow) -> f64) -> f64 {
    let mut v: Vec<f64> = rows.iter().map(f).filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Summarises evaluated rows.
pub fn summarize(rows: &[EvalRow]) -> Summary {
    let sp = |f: fn(&EvalRow) -> f64| geomean(rows.iter().map(|r| f(r) / r.predicted_ms));
    let beats = |f: fn(&EvalRow) -> f64| rows.iter().filter(|r| r.predicted_ms < f(r)).count();
    let worst = rows
        .iter()
        .min_by(|a, b| a.oracle_ratio().total_cmp(&b.oracle_ratio()));
    let eq = median(rows, |r| r.overhead_ms / r.predicted_ms);
    let (h, b) = rows
        .iter()
        .fold((0, 0), |(h, b), r| (h + r.stage2_hits, b + r.stage2_bins));
    let worst_upload = rows
        .iter()
        .filter(|r| r.upload_oracle_ratio().is_finite())
        .min_by(|a, b| a.upload_oracle_ratio().total_cmp(&b.upload_oracle_ratio()));
    let worst_tuned = rows
        .iter()
        .min_by(|a, b| a.tuned_oracle_ratio().total_cmp(&b.tuned_oracle_ratio()));
    let fixed = fixed_kernel(rows);
    let fixed_ms = |r: &EvalRow| fixed.map_or(f64::NAN, |k| r.single_ms(k));
    let tuned_sp = |f: &dyn Fn(&EvalRow) -> f64| geomean(rows.iter().map(|r| f(r) / r.tuned_ms()));
    let worst_vs_fixed = rows
        .iter()
        .map(|r| (r, fixed_ms(r) / r.tuned_ms()))
        .filter(|(_, v)| v.is_finite())
        .min_by(|a, b| a.1.total_cmp(&b.1));
    Summary {
        matrices: rows.len(),
        geomean_oracle_ratio: geomean(rows.iter().map(|r| r.oracle_ratio())),
        worst_oracle_ratio: worst.map_or(f64::NAN, |r| r.oracle_ratio()),
        worst_matrix: worst.map_or(String::new(), |r| r.matrix.clone()),
        geomean_oracle_ratio_first_call: geomean(rows.iter().map(|r| r.first_call_ratio())),
        median_overhead_spmv_equivalents: eq,
        geomean_oracle_ratio_first_call_prepared: geomean(
            rows.iter().map(|r| r.first_call_ratio_prepared()),
        ),
        median_overhead_spmv_equivalents_prepared: median(rows, |r| {
            (r.overhead_ms + r.prepare_ms) / r.predicted_ms
        }),
        geomean_oracle_ratio_first_call_amortised: geomean(
            rows.iter().map(|r| r.first_call_ratio_amortised()),
        ),
        median_first_call_overhead_spmv_equivalents: median(rows, |r| {
            r.first_call_overhead_ms / r.first_call_ms
        }),
        geomean_oracle_ratio_first_call_eager: geomean(
            rows.iter().map(|r| r.first_call_ratio_eager()),
        ),
        median_first_call_eager_overhead_spmv_equivalents: median(rows, |r| {
            r.first_call_eager_overhead_ms / r.first_call_eager_ms
        }),
        geomean_oracle_ratio_first_call_end_to_end: geomean(
            rows.iter().map(|r| r.first_call_ratio_end_to_end()),
        ),
        first_call_features_computed: rows.iter().filter(|r| r.first_call_features).count(),
        median_features_spmv_equivalents: median(rows, |r| r.features_ms / r.predicted_ms),
        first_call_changed: rows.iter().filter(|r| !r.first_call_same_plan).count(),
        stage1_accuracy: rows
            .iter()
            .filter(|r| r.predicted_scheme == r.oracle_scheme)
            .count() as f64
            / rows.len().max(1) as f64,
        stage2_accuracy: h as f64 / b.max(1) as f64,
        geomean_speedup_vs_serial: sp(|r| r.serial_ms),
        geomean_speedup_vs_vector: sp(|r| r.vector_ms),
        geomean_speedup_vs_csr_adaptive: sp(|r| r.csr_adaptive_ms),
        geomean_speedup_vs_rule: sp(|r| r.rule_ms),
        geomean_speedup_vs_best_single: sp(|r| r.best_single_ms),
        geomean_speedup_vs_worst_single: sp(|r| r.worst_single_ms),
        beats_serial: beats(|r| r.serial_ms),
        beats_vector: beats(|r| r.vector_ms),
        beats_csr_adaptive: beats(|r| r.csr_adaptive_ms),
        beats_rule: beats(|r| r.rule_ms),
        beats_best_single: beats(|r| r.best_single_ms),
        cusparse_matrices: rows.iter().filter(|r| r.cusparse_ms.is_finite()).count(),
        geomean_speedup_vs_cusparse: sp(|r| r.cusparse_ms),
        beats_cusparse: beats(|r| r.cusparse_ms),
        geomean_bound_fraction: geomean(rows.iter().map(|r| r.bound_ms / r.predicted_ms)),
        geomean_oracle_ratio_uploaded: geomean(rows.iter().map(|r| r.upload_oracle_ratio())),
        worst_oracle_ratio_uploaded: worst_upload.map_or(f64::NAN, |r| r.upload_oracle_ratio()),
        worst_matrix_uploaded: worst_upload.map_or(String::new(), |r| r.matrix.clone()),
        geomean_oracle_ratio_tuned: geomean(rows.iter().map(|r| r.tuned_oracle_ratio())),
        worst_oracle_ratio_tuned: worst_tuned.map_or(f64::NAN, |r| r.tuned_oracle_ratio()),
        worst_matrix_tuned: worst_tuned.map_or(String::new(), |r| r.matrix.clone()),
        tuning_switched: rows
            .iter()
            .filter(|r| r.tuned_ms() < r.predicted_ms)
            .count(),
        fixed_kernel: fixed.map_or(String::new(), |k| k.name().to_string()),
        geomean_speedup_vs_fixed_kernel: geomean(rows.iter().map(|r| fixed_ms(r) / r.predicted_ms)),
        beats_fixed_kernel: rows.iter().filter(|r| r.predicted_ms < fixed_ms(r)).count(),
        geomean_speedup_tuned_vs_fixed_kernel: tuned_sp(&fixed_ms),
        geomean_speedup_tuned_vs_rule: tuned_sp(&|r| r.rule_ms),
        geomean_speedup_tuned_vs_csr_adaptive: tuned_sp(&|r| r.csr_adaptive_ms),
        beats_fixed_kernel_tuned: rows.iter().filter(|r| r.tuned_ms() < fixed_ms(r)).count(),
        worst_tuned_vs_fixed_kernel: worst_vs_fixed.map_or(f64::NAN, |w| w.1),
        worst_matrix_tuned_vs_fixed_kernel: worst_vs_fixed
            .map_or(String::new(), |w| w.0.matrix.clone()),
        worst_tuned_vs_best_single: rows
            .iter()
            .map(|r| r.best_single_ms / r.tuned_ms())
            .filter(|v| v.is_finite())
            .fold(f64::NAN, f64::min),
        perf: None,
    }
}

/// Prints the per-matrix table.
pub fn print_table(rows: &[EvalRow]) {
    println!(
        "{:<40} {:>9} {:>8} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}",
        "matrix",
        "nnz",
        "scheme",
        "pred_ms",
        "oracle_ms",
        "ratio",
        "best1_ms",
        "serial",
        "vector",
        "csr_adapt",
        "rule",
        "ovh_ms"
    );
    for r in rows {
        println!(
            "{:<40} {:>9} {:>8} {:>9.4} {:>9.4} {:>7.3} {:>9.4} {:>9.4} {:>9.4} {:>9.4} {:>9.4} {:>8.3}",
            r.matrix.chars().take(40).collect::<String>(),
            r.nnz,
            r.predicted_scheme.to_string(),
            r.predicted_ms,
            r.oracle_ms,
            r.oracle_ratio(),
            r.best_single_ms,
            r.serial_ms,
            r.vector_ms,
            r.csr_adaptive_ms,
            r.rule_ms,
            r.overhead_ms
        );
    }
}

/// One row of `evaluation_*.csv`; the field names are the header.
#[derive(serde::Serialize)]
struct EvalCsv<'a> {
    matrix: &'a str,
    source: &'a str,
    nnz: usize,
    #[serde(serialize_with = "ms")]
    overhead_ms: f64,
    #[serde(serialize_with = "display")]
    predicted_scheme: Scheme,
    #[serde(serialize_with = "ms")]
    predicted_ms: f64,
    #[serde(serialize_with = "display")]
    oracle_scheme: Scheme,
    #[serde(serialize_with = "ms")]
    oracle_ms: f64,
    #[serde(serialize_with = "ratio")]
    oracle_ratio: f64,
    best_single: String,
    #[serde(serialize_with = "ms")]
    best_single_ms: f64,
    worst_single: String,
    #[serde(serialize_with = "ms")]
    worst_single_ms: f64,
    #[serde(serialize_with = "ms")]
    serial_ms: f64,
    #[serde(serialize_with = "ms")]
    vector_ms: f64,
    #[serde(serialize_with = "ms")]
    csr_adaptive_ms: f64,
    #[serde(serialize_with = "ms")]
    rule_ms: f64,
    stage2_hits: usize,
    stage2_bins: usize,
    #[serde(serialize_with = "opt_ms")]
    cusparse_ms: f64,
    #[serde(serialize_with = "opt_ms")]
    cusparse_cupy_ms: f64,
    #[serde(serialize_with = "opt_ms")]
    bound_ms: f64,
    #[serde(serialize_with = "ms")]
    features_ms: f64,
    #[serde(serialize_with = "opt_ms")]
    prepare_ms: f64,
    upload_plan: &'a str,
    #[serde(serialize_with = "opt_ms")]
    upload_ms: f64,
    first_call_plan: &'a str,
    #[serde(serialize_with = "ms")]
    first_call_ms: f64,
    #[serde(serialize_with = "ms")]
    first_call_overhead_ms: f64,
    first_call_features: bool,
    #[serde(serialize_with = "ratio")]
    first_call_ratio: f64,
    first_call_eager_plan: &'a str,
    #[serde(serialize_with = "ms")]
    first_call_eager_ms: f64,
    #[serde(serialize_with = "ms")]
    first_call_eager_overhead_ms: f64,
    #[serde(serialize_with = "ratio")]
    first_call_eager_ratio: f64,
    #[serde(serialize_with = "opt_ms")]
    e2e_first_ms: f64,
    #[serde(serialize_with = "opt_ms")]
    e2e_oracle_ms: f64,
    #[serde(serialize_with = "ratio")]
    e2e_ratio: f64,
    timing: &'a str,
}

impl<'a> EvalCsv<'a> {
    fn of(r: &'a EvalRow) -> EvalCsv<'a> {
        EvalCsv {
            matrix: &r.matrix,
            source: &r.source,
            nnz: r.nnz,
            overhead_ms: r.overhead_ms,
            predicted_scheme: r.predicted_scheme,
            predicted_ms: r.predicted_ms,
            oracle_scheme: r.oracle_scheme,
            oracle_ms: r.oracle_ms,
            oracle_ratio: r.oracle_ratio(),
            best_single: r.best_single.name(),
            best_single_ms: r.best_single_ms,
            worst_single: r.worst_single.name(),
            worst_single_ms: r.worst_single_ms,
            serial_ms: r.serial_ms,
            vector_ms: r.vector_ms,
            csr_adaptive_ms: r.csr_adaptive_ms,
            rule_ms: r.rule_ms,
            stage2_hits: r.stage2_hits,
            stage2_bins: r.stage2_bins,
            cusparse_ms: r.cusparse_ms,
            cusparse_cupy_ms: r.cusparse_cupy_ms,
            bound_ms: r.bound_ms,
            features_ms: r.features_ms,
            prepare_ms: r.prepare_ms,
            upload_plan: &r.upload_plan,
            upload_ms: r.upload_ms,
            first_call_plan: &r.first_call_plan,
            first_call_ms: r.first_call_ms,
            first_call_overhead_ms: r.first_call_overhead_ms,
            first_call_features: r.first_call_features,
            first_call_ratio: r.first_call_ratio_amortised(),
            first_call_eager_plan: &r.first_call_eager_plan,
            first_call_eager_ms: r.first_call_eager_ms,
            first_call_eager_overhead_ms: r.first_call_eager_overhead_ms,
            first_call_eager_ratio: r.first_call_ratio_eager(),
            e2e_first_ms: r.e2e_first_ms,
            e2e_oracle_ms: r.e2e_oracle_ms,
            e2e_ratio: r.first_call_ratio_end_to_end(),
            timing: r.timing,
        }
    }
}

/// A time in ms with 6 decimals.
fn ms<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{v:.6}"))
}

/// A ratio with 4 decimals.
fn ratio<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{v:.4}"))
}

/// A time in ms with 6 decimals, or an empty cell when unknown (NaN).
fn opt_ms<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() {
        ms(v, s)
    } else {
        s.serialize_str("")
    }
}

/// A value by its `Display` form.
fn display<S: serde::Serializer, T: std::fmt::Display>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// Writes the rows as CSV, the header taken from [`EvalCsv`]'s fields (no rows:
/// an empty file).
pub fn write_csv(rows: &[EvalRow], path: &Path) -> Result<()> {
    let mut w = csv::Writer::from_path(path)?;
    for r in rows {
        w.serialize(EvalCsv::of(r))?;
    }
    w.flush()?;
    Ok(())
}

/// Figures 6 to 8 of the report: speedups over single kernels, over CSR-Adaptive
/// and the rule, and the bound / cuSPARSE comparison.
fn speedup_figures(dir: &Path, tag: &str, rows: &[EvalRow]) -> Result<()> {
    let cats: Vec<String> = rows.iter().map(|r| r.matrix.clone()).collect();
    let sp = |f: fn(&EvalRow) -> f64| {
        rows.iter()
            .map(|r| f(r) / r.predicted_ms)
            .collect::<Vec<_>>()
    };
    let fig6 = report::bar_chart(
        &format!("Figure 6 ({tag}): speedup of the predicted plan over single kernels"),
        "speedup (x, log scale)",
        &cats,
        &[
            ("vs serial".into(), sp(|r| r.serial_ms)),
            ("vs vector".into(), sp(|r| r.vector_ms)),
            ("vs best single kernel".into(), sp(|r| r.best_single_ms)),
            ("vs worst single kernel".into(), sp(|r| r.worst_single_ms)),
            (
                "oracle / predicted".into(),
                rows.iter().map(|r| r.oracle_ratio()).collect(),
            ),
        ],
    );
    let fig7 = report::bar_chart(
        &format!("Figure 7 ({tag}): speedup over CSR-Adaptive and the rule baseline"),
        "speedup (x, log scale)",
        &cats,
        &[
            ("vs CSR-Adaptive".into(), sp(|r| r.csr_adaptive_ms)),
            ("vs rule baseline".into(), sp(|r| r.rule_ms)),
        ],
    );
    let fig8 = report::bar_chart(
        &format!("Figure 8 ({tag}): share of the copy-bandwidth bound reached, and speedup over cuSPARSE"),
        "bound / time, or cuSPARSE / predicted (x, log scale)",
        &cats,
        &[
            ("predicted plan: bound / time".into(), rows.iter().map(|r| r.bound_ms / r.predicted_ms).collect()),
            ("oracle: bound / time".into(), rows.iter().map(|r| r.bound_ms / r.oracle_ms).collect()),
            ("cuSPARSE: bound / time".into(), rows.iter().map(|r| r.bound_ms / r.cusparse_ms).collect()),
            ("predicted vs cuSPARSE".into(), sp(|r| r.cusparse_ms)),
        ],
    );
    std::fs::write(dir.join(format!("fig6_{tag}.svg")), fig6)?;
    std::fs::write(dir.join(format!("fig7_{tag}.svg")), fig7)?;
    std::fs::write(dir.join(format!("fig8_{tag}.svg")), fig8)?;
    Ok(())
}

/// Writes the report: a Markdown page with the summary, and the SVG figures
/// (the paper's Figures 6 and 7 on this device, and confusion matrices).
#[allow(clippy::too_many_arguments)]
pub fn write_report(
    dir: &Path,
    tag: &str,
    rows: &[EvalRow],
    summary: &Summary,
    stage1_confusion: (&[String], &[Vec<usize>]),
    stage2_confusion: (&[String], &[Vec<usize>]),
    extra: &serde_json::Value,
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    speedup_figures(dir, tag, rows)?;
    let c1 = report::confusion(
        &format!("Stage 1 ({tag}): schemes"),
        stage1_confusion.0,
        stage1_confusion.1,
    );
    let c2 = report::confusion(
        &format!("Stage 2 ({tag}): kernels per bin"),
        stage2_confusion.0,
        stage2_confusion.1,
    );
    std::fs::write(dir.join(format!("confusion_stage1_{tag}.svg")), c1)?;
    std::fs::write(dir.join(format!("confusion_stage2_{tag}.svg")), c2)?;
    let mut md = format!("# Evaluation ({tag})\n\n");
    if rows.iter().any(|r| r.timing == "stored") {
        md.push_str("Times are OpenCL kernel times (median of repetitions) read from the results database, not re-timed here: a plan's stored whole-plan time when one exists, else the sum of its bins' times scaled as its scheme's best plan was.\n\n");
    } else {
        md.push_str("Times are OpenCL kernel times (median of repetitions) measured back to back in one run.\n\n");
    }
    md.push_str("## Summary\n\n```json\n");
    md.push_str(&serde_json::to_string_pretty(summary)?);
    md.push_str("\n```\n\n");
    if let Some(p) = &summary.perf {
        md.push_str(&format!(
            "## Performance model\n\nPredicted time (boosted regression trees on log time) against the measured time of the model's chosen plan and of every single kernel; the top-2 check asks whether the two fastest timed plans of a matrix (each scheme's best plan and each kernel alone) are predicted in the right order. {}.\n\n",
            p.line()
        ));
    }
    if !extra.is_null() {
        md.push_str("## Model and labels\n\n```json\n");
        md.push_str(&serde_json::to_string_pretty(extra)?);
        md.push_str("\n```\n\n");
    }
    md.push_str(&format!(
        "![Figure 6](fig6_{tag}.svg)\n\n![Figure 7](fig7_{tag}.svg)\n\n![Figure 8](fig8_{tag}.svg)\n\n![Stage 1](confusion_stage1_{tag}.svg)\n\n![Stage 2](confusion_stage2_{tag}.svg)\n\n"
    ));
    md.push_str("## Per matrix\n\nTimes in ms; `-` where unknown. cuSPARSE is `cusparseSpMV` with descriptors and buffer made once; the bound is the minimum bytes of one SpMV at the measured copy bandwidth.\n\n| matrix | nnz | model plan | model ms | best single kernel | CSR-Adaptive | oracle ms | oracle/model | cuSPARSE | model/cuSPARSE speedup | bound ms | bound/model | serial | vector | rule |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let cell = |v: f64| {
        if v.is_finite() {
            format!("{v:.4}")
        } else {
            "-".into()
        }
    };
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {} | {:.4} | {} {:.4} | {:.4} | {:.4} | {:.3} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.matrix,
            r.nnz,
            r.predicted_scheme,
            r.predicted_ms,
            r.best_single,
            r.best_single_ms,
            r.csr_adaptive_ms,
            r.oracle_ms,
            r.oracle_ratio(),
            cell(r.cusparse_ms),
            cell(r.cusparse_ms / r.predicted_ms),
            cell(r.bound_ms),
            cell(r.bound_ms / r.predicted_ms),
            cell(r.serial_ms),
            cell(r.vector_ms),
            cell(r.rule_ms)
        ));
    }
    std::fs::write(dir.join(format!("report_{tag}.md")), md)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::{launch_key, LaunchMode};

    /// The plans of one evaluated matrix, with two of them the model's
    /// single-bin plan and an oracle plan at U = 10 whose bins all chose
    /// serial: both are serial over the whole matrix.
    fn plans() -> (Vec<Plan>, Vec<Option<engine::LaunchKey>>) {
        let a = sparse::gen::power_law(2000, 10.0, 3).unwrap();
        let binned = Binning::new(a.row_ptr(), Scheme::Granularity(10));
        let mut mixed = Plan::uniform(&binned, KernelId::Serial);
        mixed.kernels[0].1 = KernelId::Vector;
        let mut plans = vec![
            Plan::single(KernelId::Serial),
            Plan::uniform(&binned, KernelId::Serial),
            mixed,
        ];
        plans.extend(KernelId::all().into_iter().map(Plan::single));
        let keys = plans
            .iter()
            .map(|p| {
                let b = Binning::new(a.row_ptr(), p.scheme);
                launch_key(&b, p, LaunchMode::default()).ok()
            })
            .collect();
        (plans, keys)
    }

    #[tokio::test]
    async fn equal_plans_are_timed_once_and_share_the_time() {
        let (plans, keys) = plans();
        let mut timed = vec![0usize; plans.len()];
        let mut clock = 0.0;
        let t = time_distinct(&keys, 3, async |i| {
            timed[i] += 1;
            clock += 1.0;
            Ok(clock)
        })
        .await
        .unwrap();
        let serial = 3 + KernelId::Serial.index();
        // Every plan that runs serial over the whole matrix was timed once a
        // round, as the first of them; the others never.
        assert_eq!(timed[0], 3);
        assert_eq!(timed[1], 0, "the uniform U = 10 plan was timed again");
        assert_eq!(timed[serial], 0, "serial alone was timed again");
        assert_eq!(t[1], t[0]);
        assert_eq!(t[serial], t[0]);
        // Every other plan is distinct and timed once a round.
        let distinct = plans.len() - 2;
        assert_eq!(timed.iter().sum::<usize>(), 3 * distinct);
        assert!(timed.iter().all(|&n| n == 0 || n == 3));
        let mut all = t.clone();
        all.sort_by(f64::total_cmp);
        all.dedup();
        assert_eq!(all.len(), distinct);
    }

    #[tokio::test]
    async fn plans_without_a_key_are_each_timed() {
        let keys: Vec<Option<u8>> = vec![None, None, Some(1), Some(1)];
        let mut timed = [0usize; 4];
        let t = time_distinct(&keys, 2, async |i| {
            timed[i] += 1;
            Ok(i as f64)
        })
        .await
        .unwrap();
        assert_eq!(timed, [2, 2, 2, 0]);
        assert_eq!(t, vec![0.0, 1.0, 2.0, 2.0]);
    }

    /// A row with only the model plan's and the single kernels' times.
    fn row(name: &str, predicted_ms: f64, singles: &[(KernelId, f64)]) -> EvalRow {
        let best = singles
            .iter()
            .copied()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap();
        let nan = f64::NAN;
        EvalRow {
            matrix: name.into(),
            source: "test".into(),
            nrows: 1,
            ncols: 1,
            nnz: 1,
            overhead_ms: nan,
            features_ms: nan,
            prepare_ms: nan,
            first_call_plan: String::new(),
            upload_plan: "model".into(),
            upload_ms: predicted_ms,
            first_call_ms: nan,
            first_call_overhead_ms: nan,
            first_call_same_plan: true,
            first_call_features: false,
            first_call_eager_plan: String::new(),
            first_call_eager_ms: nan,
            first_call_eager_overhead_ms: nan,
            e2e_first_ms: nan,
            e2e_oracle_ms: nan,
            predicted_scheme: Scheme::Single,
            predicted_ms,
            oracle_scheme: Scheme::Single,
            oracle_ms: best.1.min(predicted_ms),
            best_single: best.0,
            best_single_ms: best.1,
            singles: singles.to_vec(),
            worst_single: best.0,
            worst_single_ms: nan,
            serial_ms: nan,
            vector_ms: nan,
            csr_adaptive_ms: 2.0 * predicted_ms,
            rule_ms: predicted_ms,
            stage2_hits: 0,
            stage2_bins: 0,
            bound_ms: nan,
            cusparse_ms: nan,
            cusparse_cupy_ms: nan,
            timing: "stored",
        }
    }

    #[test]
    fn the_fixed_kernel_is_the_best_on_geomean_over_kernels_timed_everywhere() {
        use KernelId::{Serial, Vector};
        let sub = KernelId::all()
            .into_iter()
            .find(|k| !matches!(k, Serial | Vector))
            .unwrap();
        // Serial wins two matrices narrowly and loses one by 10x; vector is
        // steady; the third kernel is fastest where timed but misses one.
        let rows = vec![
            row("a", 1.0, &[(Serial, 1.0), (Vector, 1.2), (sub, 0.5)]),
            row("b", 1.0, &[(Serial, 1.0), (Vector, 1.2), (sub, 0.5)]),
            row("c", 1.0, &[(Serial, 10.0), (Vector, 1.0), (sub, f64::NAN)]),
        ];
        assert_eq!(fixed_kernel(&rows), Some(Vector));
        let s = summarize(&rows);
        assert_eq!(s.fixed_kernel, Vector.name());
        // The model plan (1.0 everywhere) against vector: 1.2, 1.2, 1.0.
        assert!((s.geomean_speedup_vs_fixed_kernel - 1.44f64.powf(1.0 / 3.0)).abs() < 1e-12);
        assert_eq!(s.beats_fixed_kernel, 2);
        // Tuning switches a and b to the 2x faster kernel; c stays (a tie
        // with vector, not a win).
        assert_eq!(s.tuning_switched, 2);
        assert_eq!(s.beats_fixed_kernel_tuned, 2);
        assert!((s.worst_tuned_vs_fixed_kernel - 1.0).abs() < 1e-12);
        assert_eq!(s.worst_matrix_tuned_vs_fixed_kernel, "c");
        assert!((s.geomean_speedup_tuned_vs_rule - 4f64.powf(1.0 / 3.0)).abs() < 1e-12);
        assert!(
            (s.geomean_speedup_tuned_vs_csr_adaptive - 2.0 * 4f64.powf(1.0 / 3.0)).abs() < 1e-12
        );
        assert!((s.worst_tuned_vs_best_single - 1.0).abs() < 1e-12);
        assert!(
            fixed_kernel(&[row("d", 1.0, &[(Serial, f64::NAN), (Vector, f64::NAN)])]).is_none()
        );
    }

    #[test]
    fn a_binned_plan_of_one_kernel_is_priced_as_that_kernel_alone() {
        let a = sparse::gen::power_law(2000, 10.0, 3).unwrap();
        let binned = Binning::new(a.row_ptr(), Scheme::Granularity(10));
        let all_serial = Plan::uniform(&binned, KernelId::Serial);
        assert_eq!(
            as_one_kernel(a.row_ptr(), &all_serial),
            Some(Plan::single(KernelId::Serial))
        );
        let mut mixed = all_serial.clone();
        mixed.kernels[0].1 = KernelId::Vector;
        assert_eq!(as_one_kernel(a.row_ptr(), &mixed), None);
        // A plan over only some of the rows is not the kernel alone.
        let mut part = all_serial.clone();
        part.kernels.truncate(1);
        assert_eq!(as_one_kernel(a.row_ptr(), &part), None);
        assert_eq!(
            as_one_kernel(a.row_ptr(), &Plan::single(KernelId::Vector)),
            None
        );
    }
}
