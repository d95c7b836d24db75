//! The first call of a matrix never seen, planned as the service plans an
//! inline /spmv (expected calls = 1: `selector::Model::plan_lazy`, features
//! only when they can pay), with its analysis counted: features when
//! computed, the amortised planning (binning only when it pays) and the
//! preparation of the chosen plan's launches on the device (row lists,
//! CSR-Adaptive blocks, kernel objects), all timed here, together as one
//! span ([`first_call_overhead`]); the same with the
//! features always computed (`plan_for_calls`, as before the lazy planner);
//! and the whole single call from the parsed matrix to y ([`end_to_end`]).

use engine::{AnyMatrix, Engine, LaunchMode};
use selector::{AmortiseContext, Amortised, AnalysisCosts, Model, Planning, Prediction};
use sparse::{Binning, Csr, Features, Plan, Precision, RowPtr};
use std::sync::OnceLock;
use std::time::Instant;

/// What the planner knows of the device, gathered once per evaluation.
#[derive(Debug, Clone)]
pub struct FirstCallSetup {
    /// Analysis costs: calibrated on the host, launch cost measured on the device.
    pub costs: AnalysisCosts,
    /// The device's copy bandwidth (GB/s), when measured: the fastest of
    /// the copies timed, as the server takes it (`CopyBandwidth::peak_gbps`).
    pub copy_gbps: Option<f64>,
}

/// Host repetitions of each timed analysis step (the median is kept: this
/// machine's other work would otherwise land on whichever step it hit).
pub const HOST_REPS: usize = 5;

/// Runs `f` `reps` times: its last result and the median wall-clock time (ms).
pub fn timed<R>(reps: usize, mut f: impl FnMut() -> R) -> (R, f64) {
    let mut out = None;
    let ms = median_ms(reps, || out = Some(f()));
    (out.expect("at least one run"), ms)
}

/// Median of `reps` wall-clock times of `f` (ms).
fn median_ms(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

impl FirstCallSetup {
    /// Calibrates the host costs and, with a device, measures its per-launch
    /// preparation cost and copy bandwidth as the service does at start.
    pub fn new(engine: Option<&Engine>) -> FirstCallSetup {
        let fig = engine.map(Engine::planning_figures);
        FirstCallSetup {
            costs: AnalysisCosts::calibrate()
                .with_device_launch(fig.as_ref().and_then(engine::PlanningFigures::launch)),
            copy_gbps: fig.as_ref().and_then(engine::PlanningFigures::copy_gbps),
        }
    }

    /// The planner's context for values of `value_bytes` bytes.
    pub fn context(&self, value_bytes: usize) -> AmortiseContext {
        AmortiseContext {
            costs: self.costs.clone(),
            copy_gbps: self.copy_gbps,
            value_bytes,
        }
    }
}

/// The plan for one call, and the host time of planning it (ms, median of
/// [`HOST_REPS`]; features not included).
pub fn plan_first_call(
    model: &Model,
    features: &Features,
    row_ptr: RowPtr<'_>,
    ctx: &AmortiseContext,
) -> (Prediction, Planning, f64) {
    let (a, ms) = timed(HOST_REPS, || {
        model.plan_for_calls(features, row_ptr, 1, ctx, false)
    });
    (a.prediction, a.planning, ms)
}

/// Host time of preparing `plan` (over `binning`) on the device for an
/// uploaded matrix, median of 3 (ms); NaN when the engine refuses it.
pub fn prepare_ms(engine: &Engine, dm: &AnyMatrix, binning: &Binning, plan: &Plan) -> f64 {
    if plan.kernels.is_empty() {
        return 0.0;
    }
    let mut ok = true;
    let t = median_ms(3, || {
        ok &= engine
            .prepare_binned_any(dm, binning, plan, LaunchMode::Grouped)
            .is_ok();
    });
    if ok {
        t
    } else {
        f64::NAN
    }
}

/// The plan for one call as the service plans an inline /spmv
/// (`Model::plan_lazy`: features only when the planner asks for them), and
/// the host time of planning it (ms, median of [`HOST_REPS`], each from a
/// matrix whose features are not known yet, so the features count when
/// computed); whether they were.
pub fn plan_lazy_first_call(
    model: &Model,
    a: &Csr<f64>,
    ctx: &AmortiseContext,
) -> (Prediction, Planning, f64) {
    let (p, ms) = timed(HOST_REPS, || plan_one_call(model, a, ctx));
    (p.prediction, p.planning, ms)
}

/// A first call's whole fixed cost on the host, as an inline /spmv pays it
/// for a matrix `dm` already uploaded (upload, x, the run and y are the
/// oracle's too, and timed with it): planning for one call
/// ([`plan_one_call`], features when the planner asks), preparing the chosen
/// plan's launches, and dropping both. Timed as one span, median of
/// [`HOST_REPS`] (ms; NaN when the engine refuses the plan): two spans
/// counted a clock read more, about 30 ns, on a cost of a few hundred. Also
/// returns the plan, from one more call outside the timing.
pub fn first_call_overhead(
    engine: &Engine,
    dm: &AnyMatrix,
    model: &Model,
    a: &Csr<f64>,
    ctx: &AmortiseContext,
) -> (Amortised, f64) {
    let mut ok = true;
    let ms = median_ms(HOST_REPS, || {
        let p = plan_one_call(model, a, ctx);
        let (b, plan) = (&p.prediction.binning, &p.prediction.plan);
        if !plan.kernels.is_empty() {
            ok &= engine
                .prepare_binned_any(dm, b, plan, LaunchMode::Grouped)
                .is_ok();
        }
    });
    let p = plan_one_call(model, a, ctx);
    (p, if ok { ms } else { f64::NAN })
}

/// Plans `a` for one call as an inline /spmv does, from a matrix whose
/// features are not known yet (computed only if the planner asks).
pub fn plan_one_call(model: &Model, a: &Csr<f64>, ctx: &AmortiseContext) -> Amortised {
    let cell = OnceLock::new();
    model.plan_lazy(
        &cell,
        || Features::of(a),
        a.rows(),
        a.ncols(),
        1,
        ctx,
        false,
    )
}

/// Wall times of one SpMV from the parsed matrix to y (ms, medians).
#[derive(Debug, Clone, Copy)]
pub struct EndToEnd {
    /// Ours: planning for one call (features when it asks), upload,
    /// preparation of the chosen plan, writing x, the run, reading y.
    pub ours_ms: f64,
    /// The oracle's plan given for free: upload, writing x, the run, reading
    /// y (no analysis; its preparation outside the timing).
    pub oracle_ms: f64,
}

/// [`EndToEnd`] of `a` in `p`, `reps` interleaved repetitions of each.
pub fn end_to_end(
    engine: &Engine,
    (a, p): (&Csr<f64>, Precision),
    model: &Model,
    ctx: &AmortiseContext,
    oracle: &Plan,
    reps: usize,
) -> engine::Result<EndToEnd> {
    if oracle.kernels.is_empty() || a.nnz() == 0 {
        return Ok(EndToEnd {
            ours_ms: f64::NAN,
            oracle_ms: f64::NAN,
        });
    }
    let x = crate::label::test_vector(a.ncols());
    let oracle_binning = Binning::new(a.row_ptr(), oracle.scheme);
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let pl = plan_one_call(model, a, ctx);
        let dm = engine.upload_as(a, p)?;
        let pp = engine.prepare_binned_any(
            &dm,
            &pl.prediction.binning,
            &pl.prediction.plan,
            LaunchMode::Grouped,
        )?;
        std::hint::black_box(engine.execute_any(&dm, &pp, &x)?);
        ours.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let dm = engine.upload_as(a, p)?;
        let upload_ms = t.elapsed().as_secs_f64() * 1e3;
        let pp = engine.prepare_binned_any(&dm, &oracle_binning, oracle, LaunchMode::Grouped)?;
        let t = Instant::now();
        std::hint::black_box(engine.execute_any(&dm, &pp, &x)?);
        theirs.push(upload_ms + t.elapsed().as_secs_f64() * 1e3);
    }
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(EndToEnd {
        ours_ms: med(ours),
        oracle_ms: med(theirs),
    })
}
