//! The performance model corrected by what this device has measured.
//!
//! A model's predictions carry the device run they were fitted on: the same
//! H100 model predicted times about 16% too long on another H100 instance
//! (window 3: measured / predicted median 0.84, so the chosen plan's median
//! absolute error was 17.5% and 21.9% (f64 / f32) live, against 7.9% and 11.9%
//! on the campaign's own timings). Nearly all of it is one factor: the best
//! constant factor would have left 3.3%. So a service learns that factor from
//! its own measurements: every timed plan (the upload's tuning race, every
//! /spmv's kernel time) is kept as measured / predicted, one per key (the
//! latest of a matrix and plan, so one hot matrix counts once), and a
//! prediction is scaled by the median of the kept ratios of predictions
//! within a factor of [`NEAR`] of it (launch-bound and bandwidth-bound
//! times can drift apart), or of all of them when too few are near.
//! Replayed on the window-3 timings in their order, each prediction scaled by
//! what the matrices before it had measured, the errors were 3.4% and 4.3%.

use crate::perf::TimePrediction;
use serde::Serialize;
use std::collections::HashMap;

/// Observations kept (the oldest goes first).
pub const KEEP: usize = 512;
/// Fewest observations a factor is taken from.
pub const MIN_OBSERVATIONS: usize = 3;
/// Predictions within this factor of each other share their observations.
pub const NEAR: f64 = 4.0;
/// The factor is kept within [1 / LIMIT, LIMIT].
pub const LIMIT: f64 = 4.0;

/// One kept observation: log predicted time, log (measured / predicted), and
/// when it was made.
#[derive(Debug, Clone, Copy)]
struct Seen {
    log_predicted: f64,
    log_ratio: f64,
    at: u64,
}

/// Measured / predicted times seen on this device (see the module's text).
#[derive(Debug, Default)]
pub struct Calibration {
    seen: HashMap<String, Seen>,
    clock: u64,
}

/// The factor a prediction is scaled by, and what it rests on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Factor {
    /// measured / predicted: the median of the observations used.
    pub factor: f64,
    /// Observations it is the median of.
    pub observations: usize,
    /// Whether they are those near the prediction (`false`: all of them).
    pub near: bool,
}

/// What /predict says of a calibrated prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationNote {
    /// The plan's factor.
    #[serde(flatten)]
    pub plan: Factor,
    /// The model's own prediction of the plan, before the factor (ms).
    pub uncalibrated_plan_ms: f64,
    /// Observations kept in all.
    pub kept: usize,
}

impl Calibration {
    /// Records that a plan predicted at `predicted_ms` measured `measured_ms`
    /// (both ms); `key` names the matrix and plan, and replaces what it said
    /// before. Non-finite or non-positive times are ignored.
    pub fn observe(&mut self, key: &str, predicted_ms: f64, measured_ms: f64) {
        let ok = |t: f64| t.is_finite() && t > 0.0;
        if !ok(predicted_ms) || !ok(measured_ms) {
            return;
        }
        self.clock += 1;
        let seen = Seen {
            log_predicted: predicted_ms.ln(),
            log_ratio: (measured_ms / predicted_ms).ln(),
            at: self.clock,
        };
        // (Looked up first: a key seen before, as a hot matrix's is, costs no
        // allocation.)
        if let Some(s) = self.seen.get_mut(key) {
            *s = seen;
            return;
        }
        self.seen.insert(key.to_string(), seen);
        if self.seen.len() > KEEP {
            if let Some(oldest) = self
                .seen
                .iter()
                .min_by_key(|(_, s)| s.at)
                .map(|(k, _)| k.clone())
            {
                self.seen.remove(&oldest);
            }
        }
    }

    /// Observations kept.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether nothing has been observed.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// The factor for a prediction of `predicted_ms`; `None` with fewer than
    /// [`MIN_OBSERVATIONS`] observations.
    pub fn factor(&self, predicted_ms: f64) -> Option<Factor> {
        if self.seen.len() < MIN_OBSERVATIONS || !(predicted_ms.is_finite() && predicted_ms > 0.0) {
            return None;
        }
        let at = predicted_ms.ln();
        let near: Vec<f64> = self
            .seen
            .values()
            .filter(|s| (s.log_predicted - at).abs() <= NEAR.ln())
            .map(|s| s.log_ratio)
            .collect();
        let (ratios, near) = if near.len() >= MIN_OBSERVATIONS {
            (near, true)
        } else {
            (self.seen.values().map(|s| s.log_ratio).collect(), false)
        };
        Some(Factor {
            observations: ratios.len(),
            factor: median(ratios).exp().clamp(1.0 / LIMIT, LIMIT),
            near,
        })
    }

    /// `t` with the plan's and the best single kernel's times (and bands)
    /// scaled by their factors, and a note of the plan's; `t` as it is when
    /// there are too few observations.
    pub fn apply(&self, mut t: TimePrediction) -> TimePrediction {
        let Some(plan) = self.factor(t.plan.ms) else {
            return t;
        };
        let raw = t.plan.ms;
        t.plan.scale(plan.factor);
        if let Some(single) = self.factor(t.best_single.ms) {
            t.best_single.scale(single.factor);
        }
        t.calibration = Some(CalibrationNote {
            plan,
            uncalibrated_plan_ms: raw,
            kept: self.seen.len(),
        });
        t
    }
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::Estimate;

    fn prediction(plan_ms: f64, single_ms: f64) -> TimePrediction {
        TimePrediction {
            plan: Estimate {
                ms: plan_ms,
                low_ms: Some(plan_ms * 0.9),
                high_ms: Some(plan_ms * 1.1),
            },
            best_single_kernel: "serial".into(),
            best_single: Estimate {
                ms: single_ms,
                low_ms: None,
                high_ms: None,
            },
            band: String::new(),
            calibration: None,
            used_by_planner: true,
        }
    }

    #[test]
    fn too_few_observations_leave_the_prediction_alone() {
        let mut c = Calibration::default();
        c.observe("a", 1.0, 0.8);
        c.observe("b", 1.0, 0.8);
        assert!(c.factor(1.0).is_none());
        assert_eq!(c.apply(prediction(1.0, 2.0)), prediction(1.0, 2.0));
    }

    #[test]
    fn a_device_faster_than_the_models_scales_predictions_down() {
        let mut c = Calibration::default();
        for (i, r) in [0.82, 0.84, 0.86, 0.5, 0.85].iter().enumerate() {
            c.observe(&format!("m{i}"), 0.006, 0.006 * r);
        }
        let f = c.factor(0.007).unwrap();
        assert!((f.factor - 0.84).abs() < 1e-9, "{f:?}");
        assert_eq!((f.observations, f.near), (5, true));
        let t = c.apply(prediction(0.007, 0.006));
        assert!((t.plan.ms - 0.007 * 0.84).abs() < 1e-12);
        assert!((t.plan.low_ms.unwrap() - 0.007 * 0.9 * 0.84).abs() < 1e-12);
        assert!((t.best_single.ms - 0.006 * 0.84).abs() < 1e-12);
        let note = t.calibration.unwrap();
        assert_eq!(note.uncalibrated_plan_ms, 0.007);
        assert_eq!(note.kept, 5);
    }

    #[test]
    fn near_observations_win_over_far_ones_and_far_ones_fill_in() {
        let mut c = Calibration::default();
        // Launch-bound plans measured 20% faster, large ones 10% slower.
        for i in 0..3 {
            c.observe(&format!("small{i}"), 0.005, 0.004);
            c.observe(&format!("large{i}"), 5.0, 5.5);
        }
        assert!((c.factor(0.006).unwrap().factor - 0.8).abs() < 1e-9);
        assert!((c.factor(4.0).unwrap().factor - 1.1).abs() < 1e-9);
        // Nothing within 4x of 0.2 ms: the median of all six.
        let f = c.factor(0.2).unwrap();
        assert!(!f.near && f.observations == 6, "{f:?}");
        assert!((f.factor - (0.8f64.ln() / 2.0 + 1.1f64.ln() / 2.0).exp()).abs() < 1e-9);
    }

    #[test]
    fn a_key_seen_again_replaces_its_observation_and_the_oldest_goes_first() {
        let mut c = Calibration::default();
        for _ in 0..10 {
            c.observe("hot", 1.0, 2.0);
        }
        c.observe("a", 1.0, 1.0);
        c.observe("b", 1.0, 1.0);
        assert_eq!(c.len(), 3);
        assert!((c.factor(1.0).unwrap().factor - 1.0).abs() < 1e-12);
        for i in 0..KEEP {
            c.observe(&format!("k{i}"), 1.0, 1.0);
        }
        assert_eq!(c.len(), KEEP);
        // "hot" was the oldest; it went.
        assert!((c.factor(1.0).unwrap().factor - 1.0).abs() < 1e-12);
        c.observe("bad", f64::NAN, 1.0);
        c.observe("bad", 1.0, 0.0);
        assert_eq!(c.len(), KEEP);
    }

    #[test]
    fn the_factor_is_bounded() {
        let mut c = Calibration::default();
        for i in 0..3 {
            c.observe(&format!("m{i}"), 1.0, 100.0);
        }
        assert_eq!(c.factor(1.0).unwrap().factor, LIMIT);
    }
}
