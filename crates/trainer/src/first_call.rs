//! The first call of a matrix never seen, planned as the service plans an
//! inline /spmv (expected calls = 1: `selector::Selector::plan_for_calls`),
//! with its analysis counted: features, the amortised planning (binning only
//! when it pays) and the preparation of the chosen plan's launches on the
//! device (row lists, CSR-Adaptive blocks, kernel objects), all timed here.

use engine::{AnyMatrix, Engine, LaunchMode};
use selector::{AmortiseContext, AnalysisCosts, Model, Planning, Prediction};
use sparse::{Binning, Features, Plan};
use std::time::Instant;

/// What the planner knows of the device, gathered once per evaluation.
#[derive(Debug, Clone)]
pub struct FirstCallSetup {
    /// Analysis costs: calibrated on the host, launch cost measured on the device.
    pub costs: AnalysisCosts,
    /// The device's copy bandwidth (GB/s), when measured.
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
        let mut costs = AnalysisCosts::calibrate();
        let mut copy_gbps = None;
        if let Some(e) = engine {
            if let Ok(l) = e.launch_prepare_ms() {
                costs = costs.with_launch_ms(l, &format!("{l:.4} ms measured on the device"));
            }
            copy_gbps = e.copy_bandwidth(64 << 20, 3).ok().map(|b| b.gbps);
        }
        FirstCallSetup { costs, copy_gbps }
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
    row_ptr: &[u32],
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
