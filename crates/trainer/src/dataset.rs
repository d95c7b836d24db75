//! Labels become training samples: one stage-1 sample per matrix (the time of
//! each scheme's best plan, timed as a whole) and one stage-2 sample per matrix,
//! scheme and non-empty bin (each kernel's time on that bin alone), and the
//! performance model's samples (each scheme's best plan timed as a whole, and
//! each kernel alone over the whole matrix).

use crate::label::MatrixLabels;
use selector::{PerfSample, Stage1Sample, Stage2Sample};
use sparse::{Binning, Scheme};
use std::collections::HashMap;

/// The samples of one labelled matrix.
#[derive(Debug, Clone)]
pub struct Samples {
    /// Stage 1.
    pub stage1: Stage1Sample,
    /// Stage 2, every scheme's bins.
    pub stage2: Vec<Stage2Sample>,
    /// The performance model's timed plans.
    pub perf: Vec<PerfSample>,
}

/// Builds the samples of a matrix from its labels and its row pointer.
pub fn samples(labels: &MatrixLabels, row_ptr: &[u32]) -> Samples {
    let scheme_times: Vec<(Scheme, f64)> = labels
        .plans
        .iter()
        .map(|(s, p)| (*s, p.total_ms.max(1e-9)))
        .collect();
    let scheme_ci: Vec<(Scheme, f64)> = labels.plans.iter().map(|(s, p)| (*s, p.ci_rel)).collect();
    let stage1 =
        Stage1Sample::new(labels.name.clone(), &labels.features, scheme_times).with_ci(scheme_ci);
    let mut binnings: HashMap<Scheme, Binning> = HashMap::new();
    let mut stage2 = Vec::new();
    for ((scheme, bin), times) in &labels.bins {
        let b = binnings
            .entry(*scheme)
            .or_insert_with(|| Binning::new(row_ptr, *scheme));
        let times: Vec<_> = times.iter().map(|(k, t)| (*k, t.max(1e-9))).collect();
        let ci = labels
            .bin_ci
            .get(&(*scheme, *bin))
            .cloned()
            .unwrap_or_default();
        stage2.push(
            Stage2Sample::new(labels.name.clone(), &labels.features, b, *bin, times).with_ci(ci),
        );
    }
    let perf = perf_samples(labels, &mut binnings, row_ptr);
    Samples {
        stage1,
        stage2,
        perf,
    }
}

/// Each scheme's best plan with its whole-plan time, and each kernel alone over
/// the whole matrix with its time (the single-bin scheme's bin 0).
fn perf_samples(
    labels: &MatrixLabels,
    binnings: &mut HashMap<Scheme, Binning>,
    row_ptr: &[u32],
) -> Vec<PerfSample> {
    let mut out = Vec::new();
    let mut push = |x: Option<Vec<f64>>, ms: f64| {
        if let Some(x) = x.filter(|_| ms.is_finite() && ms > 0.0) {
            out.push(PerfSample {
                matrix: labels.name.clone(),
                x,
                ms,
            });
        }
    };
    for (scheme, p) in &labels.plans {
        let b = binnings
            .entry(*scheme)
            .or_insert_with(|| Binning::new(row_ptr, *scheme));
        push(
            selector::plan_vector(&labels.features, &p.plan, b),
            p.total_ms,
        );
    }
    if let Some(times) = labels.bins.get(&(Scheme::Single, 0)) {
        for (k, t) in times {
            push(Some(selector::single_vector(&labels.features, *k)), *t);
        }
    }
    out
}
