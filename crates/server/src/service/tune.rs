//! Tuning an uploaded matrix on the device: the model's plan raced against the
//! single-kernel plans, the fastest kept.
//!
//! An uploaded matrix is multiplied many times, so a few SpMVs spent timing the
//! candidates at its first use pay for themselves: measured on the H100 campaign's
//! held-out matrices, keeping the faster of the model's plan and the best single
//! kernel lifts the geomean from 0.91-0.97 to 0.99 of the exhaustive-search oracle
//! and the worst matrix from 0.15-0.91 to 0.95-0.97 (docs/models.md, "Uploaded matrices are tuned on the device").
//! Inline requests (one multiplication) are not tuned: the race would cost more
//! than it could save. The race is bounded by a time budget; candidates it did
//! not reach are listed as not timed.

use crate::device::run::DeviceBuffers;
use crate::domain::config::Config;
use crate::domain::error::ApiError;
use crate::service::planner::Planned;
use engine::{AnyMatrix, AnyPlan, Engine, LaunchMode};
use serde::Serialize;
use sparse::{Binning, Csr, KernelId, Plan, Scheme};
use std::time::Instant;

/// How much faster a rival must be than the model's plan to replace it: timings
/// of a few repetitions differ by a few percent between equal plans, and a switch
/// on noise alone would make the choice flip from one upload to the next.
pub const SWITCH_MARGIN: f64 = 0.03;

/// How uploaded matrices are tuned (from the server's flags).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TuneConfig {
    /// Whether to race at all.
    pub enabled: bool,
    /// Wall-clock budget of one race, milliseconds (the model's plan is always timed).
    pub budget_ms: f64,
    /// Timed repetitions per candidate (after one warm-up call).
    pub reps: usize,
}

/// (Beside [`TuneConfig`] so the configuration need not know the tuner.)
impl Config {
    /// How uploaded matrices are tuned.
    pub fn tune_config(&self) -> TuneConfig {
        TuneConfig {
            enabled: self.tune_uploads,
            budget_ms: if self.tune_budget_ms.is_finite() {
                self.tune_budget_ms.max(0.0)
            } else {
                0.0
            },
            reps: 3,
        }
    }
}

/// One timed candidate.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[schema(as = TuningCandidate)]
pub struct Candidate {
    /// `model` for the model's plan, else the single kernel's name.
    pub plan: String,
    /// Median kernel time, ms (`None`: not reached within the budget, or it failed).
    pub kernel_ms: Option<f64>,
}

/// What a race found, as sent in responses (`tuning`): the race run on the
/// device at an uploaded matrix's first use in a precision, the model's plan
/// and every single-kernel plan timed (median of a few calls after a warm-up,
/// OpenCL kernel time), the fastest kept (a rival must beat the model's plan
/// by 3%).
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Tuning {
    /// The candidate kept: `model`, or a kernel's name.
    pub chosen: String,
    /// The model plan's time divided by the chosen plan's (1.0 when the model's plan won).
    pub speedup_vs_model: f64,
    /// Every candidate, in the order timed.
    pub candidates: Vec<Candidate>,
    /// Whether every candidate was timed within the budget.
    pub complete: bool,
    /// Wall-clock time of the race, ms.
    pub ms: f64,
}

/// Races the prepared model plan in `buffers` against every single-kernel plan of
/// the pool and keeps the fastest: returns the buffers and plan to keep and the
/// race's record. Runs on the device worker.
pub fn tune_blocking(
    engine: &Engine,
    buffers: DeviceBuffers,
    host: &Csr<f64>,
    planned: Planned,
    cfg: &TuneConfig,
) -> Result<(DeviceBuffers, Planned), ApiError> {
    if !cfg.enabled || host.nnz() == 0 {
        return Ok((buffers, planned));
    }
    let DeviceBuffers {
        matrix,
        plan,
        pools,
    } = buffers;
    let (plan, planned) = race(engine, &matrix, plan, host, planned, cfg)?;
    Ok((
        DeviceBuffers {
            matrix,
            plan,
            pools,
        },
        planned,
    ))
}

/// The single kernels to race against a plan (the plan itself when it is one of them is skipped).
fn rivals(plan: &Plan) -> Vec<KernelId> {
    let own = (plan.scheme == Scheme::Single)
        .then(|| plan.kernel_of(0))
        .flatten();
    KernelId::all()
        .into_iter()
        .filter(|k| Some(*k) != own)
        .collect()
}

fn race(
    engine: &Engine,
    m: &AnyMatrix,
    model_pp: AnyPlan,
    host: &Csr<f64>,
    mut planned: Planned,
    cfg: &TuneConfig,
) -> Result<(AnyPlan, Planned), ApiError> {
    let t0 = Instant::now();
    let x = vec![1.0; host.ncols()];
    let reps = cfg.reps.max(1);
    let model_ms = engine.time_any(m, &model_pp, &x, 1, reps)?.median_ms;
    let mut candidates = vec![Candidate {
        plan: "model".into(),
        kernel_ms: Some(model_ms),
    }];
    let mut best: Option<(KernelId, f64, AnyPlan)> = None;
    let mut complete = true;
    for k in rivals(&planned.plan) {
        if t0.elapsed().as_secs_f64() * 1e3 > cfg.budget_ms {
            complete = false;
            candidates.push(Candidate {
                plan: k.name(),
                kernel_ms: None,
            });
            continue;
        }
        // A kernel that cannot run this matrix (a device limit) is simply not a rival.
        let timed = engine
            .prepare_any(m, &Plan::single(k), LaunchMode::Grouped)
            .and_then(|pp| Ok((engine.time_any(m, &pp, &x, 1, reps)?.median_ms, pp)));
        let kernel_ms = timed.ok().map(|(ms, pp)| {
            if best.as_ref().is_none_or(|b| ms < b.1) {
                best = Some((k, ms, pp));
            }
            ms
        });
        candidates.push(Candidate {
            plan: k.name(),
            kernel_ms,
        });
    }
    let (chosen, keep, speedup) = match best {
        Some((k, ms, pp)) if ms < model_ms * (1.0 - SWITCH_MARGIN) => {
            planned.plan = Plan::single(k);
            planned.binning = Binning::new(host.row_ptr(), Scheme::Single);
            (k.name(), pp, model_ms / ms)
        }
        _ => ("model".to_string(), model_pp, 1.0),
    };
    planned.tuning = Some(Tuning {
        chosen,
        speedup_vs_model: speedup,
        candidates,
        complete,
        ms: t0.elapsed().as_secs_f64() * 1e3,
    });
    Ok((keep, planned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_kernel_plan_is_not_raced_against_itself() {
        let all = KernelId::all().len();
        assert_eq!(rivals(&Plan::single(KernelId::Vector)).len(), all - 1);
        assert!(!rivals(&Plan::single(KernelId::Vector)).contains(&KernelId::Vector));
        let binned = Plan {
            scheme: Scheme::from_code(100),
            kernels: vec![(0, KernelId::Serial)],
        };
        assert_eq!(rivals(&binned).len(), all);
    }
}
