//! Amortisation-aware planning: the plan that minimises analysis cost plus
//! expected calls times the predicted time of one SpMV, among the model's
//! binned plan and the trivial plans (one kernel over the whole matrix, the
//! single-bin scheme: no binning, no row lists).
//!
//! The analysis cost is a host-side estimate ([`AnalysisCosts`]): binning
//! (per virtual row), the row lists of the bins (per row: expanding, merging
//! and copying them, as the engine's grouped preparation does) and a fixed
//! cost per launch (kernel object and arguments). The per-row costs are
//! calibrated once by timing the same operations on a synthetic row pointer
//! ([`AnalysisCosts::calibrate`]); the per-launch cost is measured by the
//! caller on its device when it has one.
//!
//! The predicted time of one SpMV comes from the model's performance part
//! when it has one ([`crate::PerfModel`]). Without it, the binned plan's gain
//! is unknown, and the rule is: bin only when its estimated analysis cost is
//! at most `expected_calls x BINNED_GAIN_BOUND x t`, where `t` is the
//! copy-bandwidth bound of one SpMV (its minimum bytes at the device's copy
//! bandwidth), i.e. when even an optimistic per-call gain would pay the
//! analysis back within the expected calls. Without a bandwidth either, the
//! binned plan is taken from [`MIN_CALLS_WITHOUT_ESTIMATE`] calls on.
//!
//! Work a plan does not need is not done: the trivial plans never bin, and
//! the binned plan is binned only when it is a candidate that can still win.

use crate::explain::{BinDecision, Explanation, Prediction, SchemeDecision};
use crate::model::steps;
use crate::quick::Facts;
use crate::vector::{feature, stage1_vector, stage2_vector};
use crate::{Model, Reason, Selector, STAGE1_FEATURES, STAGE2_FEATURES};
use serde::Serialize;
use sparse::{Binning, Features, KernelId, Plan, RowPtr, Scheme};
use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// An optimistic bound on the share of one SpMV that the model's binned plan
/// saves over the single-bin plan, used when no performance model predicts
/// times. On the PoCL held-out split the oracle beat the best single kernel
/// by at most 17% (f64, `training-data/report/evaluation_f64_real.csv`), so
/// 0.25 errs towards binning.
pub const BINNED_GAIN_BOUND: f64 = 0.25;

/// Expected calls from which the binned plan is taken when neither a
/// performance model nor the device's copy bandwidth gives a time.
pub const MIN_CALLS_WITHOUT_ESTIMATE: u64 = 10;

/// Per-launch cost assumed until the caller measures its own (ms).
pub const DEFAULT_LAUNCH_MS: f64 = 0.02;

/// Launches assumed for a binned plan before stage 2 says (grouped launches:
/// one per distinct kernel).
const BINNED_LAUNCHES_GUESS: f64 = 2.0;

/// Host-side costs of preparing a plan, for the planner's estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnalysisCosts {
    /// Binning, per virtual row (ns).
    pub bin_ns_per_virtual_row: f64,
    /// Row lists of a binned plan (expand, merge, copy), per row (ns).
    pub list_ns_per_row: f64,
    /// Per kernel launch prepared (ms).
    pub launch_ms: f64,
    /// The feature pass, fixed part (ns): what a pass over a tiny matrix costs.
    pub features_ns_fixed: f64,
    /// The feature pass, per row (ns).
    pub features_ns_per_row: f64,
    /// The feature pass, per nonzero read (ns).
    pub features_ns_per_entry: f64,
    /// How the figures were obtained (shared: every planning record carries
    /// the costs, and copying the sentence was part of each first call).
    #[serde(serialize_with = "shared_str")]
    pub source: Arc<str>,
}

/// An `Arc<str>` as the string it holds.
fn shared_str<S: serde::Serializer>(s: &Arc<str>, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(s)
}

/// A synthetic row pointer of `n` rows with lengths 0..64 (xorshift, seeded).
pub(crate) fn synthetic_row_ptr(n: usize) -> Vec<u32> {
    let (mut s, mut acc) = (0x9e37_79b9_7f4a_7c15u64, 0u32);
    let mut rp = Vec::with_capacity(n + 1);
    rp.push(0);
    for _ in 0..n {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        acc += (s % 64) as u32;
        rp.push(acc);
    }
    rp
}

/// A synthetic square matrix whose row lengths are those of `row_ptr`,
/// columns scattered (a fixed stride), for timing the feature pass.
pub(crate) fn synthetic_matrix(row_ptr: Vec<u32>) -> sparse::Csr<f64> {
    let n = row_ptr.len() - 1;
    let widest = row_ptr.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0) as usize;
    let mut ci = Vec::with_capacity(row_ptr[n] as usize);
    for i in 0..n {
        let len = (row_ptr[i + 1] - row_ptr[i]) as usize;
        let mut row: Vec<u32> = (0..len).map(|j| ((i + j * 7919) % n) as u32).collect();
        row.sort_unstable();
        row.dedup();
        while row.len() < len {
            row.push(row.last().map_or(0, |c| c + 1));
        }
        ci.extend(row);
    }
    let nnz = ci.len();
    sparse::Csr::try_new(n, n + widest, row_ptr, ci, vec![1.0; nnz])
        .expect("a valid synthetic matrix")
}

/// The feature pass's fixed cost, cost per row and per nonzero (ns): the
/// fixed part from 64 rows of 1 nonzero; the per-nonzero part from 2^15 rows
/// of 1 and of 16 nonzeros a row; the per-row part from 2^15 rows of
/// irregular lengths (0 to 63, as [`synthetic_row_ptr`]). Best of three
/// each. Since a matrix keeps the facts its constructor gathered,
/// `Features::of` reads no array and both slopes come out near zero; they
/// are still measured, so that the estimate follows the pass if it changes.
fn calibrate_features() -> (f64, f64, f64) {
    let n = 1usize << 15;
    let best = |a: &sparse::Csr<f64>| {
        (0..3)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(Features::of(a));
                t.elapsed().as_secs_f64() * 1e9
            })
            .fold(f64::INFINITY, f64::min)
    };
    let regular = |rows: usize, per_row: usize| -> Vec<u32> {
        (0..=rows).map(|i| (i * per_row) as u32).collect()
    };
    let irregular = synthetic_matrix(synthetic_row_ptr(n));
    let (tiny, thin, thick) = (
        synthetic_matrix(regular(64, 1)),
        synthetic_matrix(regular(n, 1)),
        synthetic_matrix(regular(n, 16)),
    );
    let (t0, t1, t16) = (best(&tiny), best(&thin), best(&thick));
    let per_entry = ((t16 - t1) / (15.0 * n as f64)).max(0.0);
    let t_irregular = best(&irregular) - per_entry * irregular.nnz() as f64;
    let per_row = ((t_irregular - t0) / n as f64).max(0.0);
    (t0.max(0.0), per_row, per_entry)
}

/// The row lists of a binning as the engine's grouped preparation builds
/// them: the rows of the bins of each of two kernels, merged in row order and
/// copied (the copy stands for the upload); returns the rows listed.
fn build_lists(b: &Binning) -> usize {
    let bins: Vec<usize> = b.nonempty_bins().collect();
    let mut listed = 0;
    for half in [&bins[..bins.len() / 2], &bins[bins.len() / 2..]] {
        let mut all: Vec<u32> = half.iter().flat_map(|&k| b.rows(k)).collect();
        all.sort_unstable();
        let copy = all.clone();
        listed += std::hint::black_box(copy).len();
    }
    listed
}

impl AnalysisCosts {
    /// Times binning and row-list building on a synthetic row pointer of
    /// 2^18 rows (best of three; a few milliseconds), with the per-launch
    /// cost [`DEFAULT_LAUNCH_MS`] until [`AnalysisCosts::with_launch_ms`].
    pub fn calibrate() -> AnalysisCosts {
        let n = 1usize << 18;
        let rp = synthetic_row_ptr(n);
        let u = 10usize;
        let (mut bin_ns, mut list_ns) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..3 {
            let t = Instant::now();
            let b = std::hint::black_box(Binning::new(&rp, Scheme::Granularity(u as u32)));
            bin_ns = bin_ns.min(t.elapsed().as_secs_f64() * 1e9 / n.div_ceil(u) as f64);
            let t = Instant::now();
            let rows = build_lists(&b);
            list_ns = list_ns.min(t.elapsed().as_secs_f64() * 1e9 / rows.max(1) as f64);
        }
        let (features_ns_fixed, features_ns_per_row, features_ns_per_entry) = calibrate_features();
        AnalysisCosts {
            bin_ns_per_virtual_row: bin_ns,
            list_ns_per_row: list_ns,
            launch_ms: DEFAULT_LAUNCH_MS,
            features_ns_fixed,
            features_ns_per_row,
            features_ns_per_entry,
            source: format!(
                "binning, row lists and the feature pass timed on synthetic matrices at start; \
                 {DEFAULT_LAUNCH_MS} ms per launch assumed"
            )
            .into(),
        }
    }

    /// The fixed costs of the unit tests' contexts (5 ns a virtual row, 10 ns
    /// a listed row, 0.02 ms a launch) with the given feature-pass costs.
    #[cfg(test)]
    pub(crate) fn for_test(features_ns_per_row: f64, features_ns_per_entry: f64) -> Self {
        AnalysisCosts {
            bin_ns_per_virtual_row: 5.0,
            list_ns_per_row: 10.0,
            launch_ms: 0.02,
            features_ns_fixed: 0.0,
            features_ns_per_row,
            features_ns_per_entry,
            source: "test".into(),
        }
    }

    /// The estimated cost of the feature pass over `rows` rows and `nnz`
    /// nonzeros (ms).
    pub fn features_ms(&self, rows: usize, nnz: usize) -> f64 {
        (self.features_ns_fixed
            + rows as f64 * self.features_ns_per_row
            + nnz as f64 * self.features_ns_per_entry)
            * 1e-6
    }

    /// The same with a measured per-launch cost.
    pub fn with_launch_ms(mut self, launch_ms: f64, how: &str) -> AnalysisCosts {
        if launch_ms.is_finite() && launch_ms >= 0.0 {
            self.launch_ms = launch_ms;
            self.source = format!(
                "binning, row lists and the feature pass timed on synthetic matrices at \
                 start; launch cost {how}"
            )
            .into();
        }
        self
    }

    /// The same with the device's per-launch cost when it was measured
    /// (`engine::PlanningFigures::launch_ms`), else unchanged.
    pub fn with_device_launch(self, launch_ms: Option<f64>) -> AnalysisCosts {
        match launch_ms {
            Some(l) => self.with_launch_ms(l, &format!("{l:.4} ms measured on the device")),
            None => self,
        }
    }

    /// Binning `nrows` rows under `scheme` (ms).
    pub fn binning_ms(&self, nrows: usize, scheme: Scheme) -> f64 {
        match scheme {
            Scheme::Single => 0.0,
            Scheme::Granularity(u) => {
                nrows.div_ceil(u.max(1) as usize) as f64 * self.bin_ns_per_virtual_row * 1e-6
            }
        }
    }

    /// The whole analysis of a plan of `scheme` over `nrows` rows with
    /// `launches` launches: binning, row lists (none for the single-bin
    /// scheme or a plan collapsed to it: `lists` false) and launches (ms).
    pub fn analysis_ms(&self, nrows: usize, scheme: Scheme, lists: bool, launches: f64) -> f64 {
        let lists_ms = if lists && scheme != Scheme::Single {
            nrows as f64 * self.list_ns_per_row * 1e-6
        } else {
            0.0
        };
        self.binning_ms(nrows, scheme) + lists_ms + launches * self.launch_ms
    }
}

/// What the planner knows besides the matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct AmortiseContext {
    /// Host-side analysis costs.
    pub costs: AnalysisCosts,
    /// The device's copy bandwidth (GB/s), when measured.
    pub copy_gbps: Option<f64>,
    /// Bytes per value of the precision planned (4 or 8).
    pub value_bytes: usize,
}

impl AmortiseContext {
    /// The copy-bandwidth bound of one SpMV of a matrix (ms), when the
    /// bandwidth is known: its minimum bytes (DESIGN.md) at that bandwidth.
    pub fn bound_ms(&self, f: &Features) -> Option<f64> {
        let facts = Facts {
            rows: feature(f, "rows") as usize,
            cols: feature(f, "cols") as usize,
            nnz: feature(f, "nnz") as usize,
            value_bytes: self.value_bytes,
        };
        self.bound_of(&facts)
    }

    /// The same from the matrix's facts alone.
    pub fn bound_of(&self, facts: &Facts) -> Option<f64> {
        let gbps = self.copy_gbps.filter(|g| g.is_finite() && *g > 0.0)?;
        Some(facts.min_bytes() / (gbps * 1e9) * 1e3)
    }
}

/// One plan the planner considered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// `model` (the two-stage plan with stage 1's scheme) or `single:<kernel>`.
    pub name: Cow<'static, str>,
    /// Its scheme (`single` or U).
    pub scheme: Cow<'static, str>,
    /// Its kernels, when known (the binned plan's are known only once binned).
    pub kernels: Vec<Cow<'static, str>>,
    /// Whether stage 2 chose this kernel for the single bin.
    pub stage2_pick: bool,
    /// Estimated analysis cost (ms).
    pub analysis_ms: f64,
    /// Predicted time of one SpMV (ms), when a performance model predicts it.
    pub predicted_ms: Option<f64>,
    /// analysis + expected calls x predicted (ms), when predicted.
    pub total_ms: Option<f64>,
    /// Whether its analysis (binning, stage 2 per bin) was done to judge it.
    pub analysed: bool,
}

/// How a plan was chosen for the expected number of calls.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Planning {
    /// How often the matrix is expected to be multiplied.
    pub expected_calls: u64,
    /// The chosen candidate's name.
    pub chosen: Cow<'static, str>,
    /// `perf_model` (predicted times), `bandwidth_bound` (the rule without a
    /// performance model), `calls_threshold` (neither), `single_only`
    /// (stage 1 or the rule chose the single-bin scheme: nothing to weigh),
    /// `quick` (the feature pass would not pay: one kernel from the
    /// matrix's sizes, see [`Selector::plan_lazy`]).
    pub method: Cow<'static, str>,
    /// Why, in a sentence (written out when read).
    pub reason: Reason,
    /// Stage 1's scheme (before amortisation).
    pub stage1_scheme: Cow<'static, str>,
    /// The copy-bandwidth bound of one SpMV (ms), when the bandwidth is known.
    pub spmv_bound_ms: Option<f64>,
    /// Calls from which the binned plan would be chosen (rule without a
    /// performance model).
    pub break_even_calls: Option<u64>,
    /// Every candidate.
    pub candidates: Vec<Candidate>,
    /// The analysis cost figures used.
    pub costs: AnalysisCosts,
    /// The feature pass's estimated cost (ms), when the planner weighed it
    /// before computing the features ([`Selector::plan_lazy`]).
    pub features_estimate_ms: Option<f64>,
    /// Whether the features were computed for this plan (or already known).
    pub features_computed: bool,
}

/// A plan with how it was chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct Amortised {
    /// The plan, its binning and (when asked) its explanation.
    pub prediction: Prediction,
    /// The choice.
    pub planning: Planning,
}

impl Selector {
    /// Plans a matrix expected to be multiplied `calls` times (see the module
    /// docs); `explain` adds the decision paths.
    pub fn plan_for_calls<'r>(
        &self,
        f: &Features,
        row_ptr: impl Into<RowPtr<'r>>,
        calls: u64,
        ctx: &AmortiseContext,
        explain: bool,
    ) -> Amortised {
        let rp = row_ptr.into();
        match self {
            Selector::Model(m) => m.plan_for_calls(f, rp, calls.max(1), ctx, explain),
            Selector::Rule => {
                let prediction = crate::rule_prediction(f, rp.as_slice(), explain);
                let planning = single_only(
                    &prediction,
                    "the rule chose the single-bin scheme: no binning to weigh",
                    calls,
                    ctx,
                );
                Amortised {
                    prediction,
                    planning,
                }
            }
        }
    }
}

/// The planning of a plan that is already the single-bin scheme.
fn single_only(
    pred: &Prediction,
    why: &'static str,
    calls: u64,
    ctx: &AmortiseContext,
) -> Planning {
    let c = trivial_candidate(pred.plan.kernels.first().map(|k| k.1), true, ctx);
    Planning {
        expected_calls: calls,
        chosen: c.name.clone(),
        method: "single_only".into(),
        reason: why.into(),
        stage1_scheme: scheme_name(Scheme::Single),
        spmv_bound_ms: None,
        break_even_calls: None,
        candidates: vec![c],
        costs: ctx.costs.clone(),
        features_estimate_ms: None,
        features_computed: true,
    }
}

impl Candidate {
    /// Prices the candidate from its analysis time and its predicted time per
    /// call (none when not predicted): the total over `calls` calls.
    fn price(&mut self, predicted_ms: Option<f64>, calls: u64) {
        self.predicted_ms = predicted_ms;
        self.total_ms = predicted_ms.map(|t| self.analysis_ms + calls as f64 * t);
    }
}

/// A kernel's name and the name of its single-bin candidate
/// (`single:<kernel>`), made once for every kernel of the pool and shared: a
/// one-call plan names one kernel, and formatting both names was a tenth of
/// planning it.
pub(crate) fn kernel_name(k: KernelId) -> (Cow<'static, str>, Cow<'static, str>) {
    static NAMES: OnceLock<Vec<(KernelId, String, String)>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        KernelId::all()
            .into_iter()
            .map(|k| (k, k.name(), format!("single:{}", k.name())))
            .collect()
    });
    match names.iter().find(|n| n.0 == k) {
        Some((_, name, single)) => (Cow::Borrowed(name), Cow::Borrowed(single)),
        None => (k.name().into(), format!("single:{}", k.name()).into()),
    }
}

/// A scheme's name as [`Scheme`]'s `Display` writes it (the single-bin
/// scheme's without formatting it).
pub(crate) fn scheme_name(s: Scheme) -> Cow<'static, str> {
    match s {
        Scheme::Single => Cow::Borrowed("single"),
        s => Cow::Owned(s.to_string()),
    }
}

pub(crate) fn trivial_candidate(
    k: Option<KernelId>,
    stage2_pick: bool,
    ctx: &AmortiseContext,
) -> Candidate {
    let (name, kernels) = match k.map(kernel_name) {
        Some((kernel, single)) => (single, vec![kernel]),
        None => (Cow::Borrowed("single:none"), Vec::new()),
    };
    Candidate {
        name,
        scheme: scheme_name(Scheme::Single),
        kernels,
        stage2_pick,
        analysis_ms: if k.is_some() {
            ctx.costs.launch_ms
        } else {
            0.0
        },
        predicted_ms: None,
        total_ms: None,
        analysed: true,
    }
}

/// What [`Model::plan_for_calls`] was asked, handed on to the two ways of choosing.
struct Ask<'a> {
    f: &'a Features,
    row_ptr: RowPtr<'a>,
    calls: u64,
    ctx: &'a AmortiseContext,
    explain: bool,
}

/// Stage 1's and stage 2's (single bin) decisions, made without binning.
struct Cheap {
    scheme: Scheme,
    stage2: KernelId,
    /// Built only when asked (its paths allocate a string per test).
    explanation: Option<Explanation>,
    single: Binning,
}

impl Model {
    fn cheap_decisions(&self, f: &Features, row_ptr: &[u32], explain: bool) -> Cheap {
        let x1 = stage1_vector(f);
        let (scheme, hops1) = self.scheme_of(&x1);
        let single = Binning::new(row_ptr, Scheme::Single);
        let x2 = stage2_vector(f, &single, 0);
        let (k, hops2) = self.kernel_of(&x2);
        let explanation = explain.then(|| Explanation {
            selector: "model".into(),
            stage1: SchemeDecision {
                path: steps(&hops1, &x1, &STAGE1_FEATURES),
                scheme,
            },
            stage2: vec![BinDecision {
                bin: 0,
                rows: single.nrows,
                nnz: single.bin_nnz[0],
                path: steps(&hops2, &x2, &STAGE2_FEATURES),
                kernel: k,
            }],
            collapsed_from: None,
        });
        Cheap {
            scheme,
            stage2: k,
            explanation,
            single,
        }
    }

    /// See [`Selector::plan_for_calls`].
    pub fn plan_for_calls<'r>(
        &self,
        f: &Features,
        row_ptr: impl Into<RowPtr<'r>>,
        calls: u64,
        ctx: &AmortiseContext,
        explain: bool,
    ) -> Amortised {
        let row_ptr = row_ptr.into();
        let binnable = row_ptr.nrows() > 0 && row_ptr.is_monotone();
        let cheap = self.cheap_decisions(f, row_ptr.as_slice(), explain);
        if !binnable || (cheap.scheme == Scheme::Single && self.planning_perf().is_none()) {
            // Stage 1 chose the single-bin scheme (or there is nothing to bin):
            // the model's plan is stage 2's kernel over the whole matrix.
            let prediction = if binnable {
                trivial_prediction(cheap, cheap_kernel_plan, explain)
            } else {
                self.plan_matrix_for(f, row_ptr, explain)
            };
            let planning = single_only(
                &prediction,
                "the model's stage 1 chose the single-bin scheme: no binning to weigh",
                calls,
                ctx,
            );
            return Amortised {
                prediction,
                planning,
            };
        }
        let ask = Ask {
            f,
            row_ptr,
            calls,
            ctx,
            explain,
        };
        match self.planning_perf() {
            Some(perf) => self.choose_by_perf(&ask, cheap, perf),
            None => self.choose_by_bound(&ask, cheap),
        }
    }

    fn plan_matrix_for(&self, f: &Features, row_ptr: RowPtr<'_>, explain: bool) -> Prediction {
        if explain {
            self.predict_explained(f, row_ptr)
        } else {
            self.predict(f, row_ptr)
        }
    }

    /// The binned candidate before binning: estimated analysis, nothing known.
    fn binned_candidate(&self, scheme: Scheme, nrows: usize, ctx: &AmortiseContext) -> Candidate {
        Candidate {
            name: "model".into(),
            scheme: scheme_name(scheme),
            kernels: Vec::new(),
            stage2_pick: false,
            analysis_ms: ctx
                .costs
                .analysis_ms(nrows, scheme, true, BINNED_LAUNCHES_GUESS),
            predicted_ms: None,
            total_ms: None,
            analysed: false,
        }
    }

    /// Without a performance model: the bandwidth-bound rule of the module docs.
    fn choose_by_bound(&self, ask: &Ask, cheap: Cheap) -> Amortised {
        let &Ask {
            f,
            row_ptr,
            calls,
            ctx,
            explain,
        } = ask;
        let nrows = cheap.single.nrows;
        let mut binned = self.binned_candidate(cheap.scheme, nrows, ctx);
        let trivial = trivial_candidate(Some(cheap.stage2), true, ctx);
        let bound = ctx.bound_ms(f);
        let extra = binned.analysis_ms - trivial.analysis_ms;
        let (method, break_even) = match bound {
            Some(t) => (
                "bandwidth_bound",
                (extra / (BINNED_GAIN_BOUND * t)).ceil().max(1.0) as u64,
            ),
            None => ("calls_threshold", MIN_CALLS_WITHOUT_ESTIMATE),
        };
        let take_binned = calls >= break_even;
        let reason = Reason::binning(extra, bound, break_even, calls);
        let prediction = if take_binned {
            let p = self.plan_matrix_for(f, row_ptr, explain);
            binned.analysed = true;
            binned.kernels = kernel_names(&p.plan);
            p
        } else {
            trivial_prediction(cheap, cheap_kernel_plan, explain)
        };
        let chosen = if take_binned { &binned } else { &trivial }.name.clone();
        Amortised {
            prediction,
            planning: Planning {
                expected_calls: calls,
                chosen,
                method: method.into(),
                reason,
                stage1_scheme: binned.scheme.clone(),
                spmv_bound_ms: bound,
                break_even_calls: Some(break_even),
                candidates: vec![binned, trivial],
                costs: ctx.costs.clone(),
                features_estimate_ms: None,
                features_computed: true,
            },
        }
    }

    /// With a performance model: every kernel alone, and the binned plan when
    /// its analysis alone does not exceed the best trivial plan's total.
    fn choose_by_perf(&self, ask: &Ask, cheap: Cheap, perf: &crate::PerfModel) -> Amortised {
        let &Ask {
            f,
            row_ptr,
            calls,
            ctx,
            explain,
        } = ask;
        let stage1_scheme = scheme_name(cheap.scheme);
        let (mut cands, per_prediction_ms, note) = price_trivial(perf, f, calls, ctx, &cheap);
        let total = |c: &Candidate| c.total_ms.unwrap_or(f64::INFINITY);
        let best_trivial = cands.iter().map(total).fold(f64::INFINITY, f64::min);
        let mut binned_pred = None;
        if cheap.scheme != Scheme::Single {
            let mut b = self.binned_candidate(cheap.scheme, cheap.single.nrows, ctx);
            b.analysis_ms += per_prediction_ms;
            if b.analysis_ms < best_trivial {
                let p = self.plan_matrix_for(f, row_ptr, explain);
                price_binned(&mut b, &p, perf, f, calls, ctx, per_prediction_ms);
                binned_pred = Some(p);
            }
            cands.insert(0, b);
        }
        let best = cands
            .iter()
            .min_by(|a, b| total(a).total_cmp(&total(b)))
            .expect("the pool has kernels")
            .clone();
        let reason = format!(
            "least analysis + {calls} x predicted time: {} ({:.4} ms in all){note}",
            best.name,
            total(&best)
        )
        .into();
        let prediction = match (best.name.as_ref(), binned_pred) {
            ("model", Some(p)) => p,
            _ => {
                let k = best_kernel(&best).unwrap_or(cheap.stage2);
                trivial_prediction(cheap, |c| Plan::uniform(&c.single, k), explain)
            }
        };
        Amortised {
            prediction,
            planning: Planning {
                expected_calls: calls,
                chosen: best.name.clone(),
                method: "perf_model".into(),
                reason,
                stage1_scheme,
                spmv_bound_ms: ctx.bound_ms(f),
                break_even_calls: None,
                candidates: cands,
                costs: ctx.costs.clone(),
                features_estimate_ms: None,
                features_computed: true,
            },
        }
    }
}

/// The single-bin plans priced by the performance model. Predicting a time
/// is analysis too (hundreds of trees): stage 2's kernel first, the others
/// only when predicting them costs less than the expected calls of that
/// kernel take in all. Returns the candidates, the time of one prediction
/// (ms) and a note for the reason when the others were not predicted.
fn price_trivial(
    perf: &crate::PerfModel,
    f: &Features,
    calls: u64,
    ctx: &AmortiseContext,
    cheap: &Cheap,
) -> (Vec<Candidate>, f64, String) {
    let n = calls as f64;
    let predict = |k: KernelId| {
        let mut c = trivial_candidate(Some(k), k == cheap.stage2, ctx);
        c.price(Some(perf.predict_ms(&crate::single_vector(f, k))), calls);
        c
    };
    let t0 = Instant::now();
    let mut cands = vec![predict(cheap.stage2)];
    let per_prediction_ms = t0.elapsed().as_secs_f64() * 1e3;
    let others: Vec<KernelId> = KernelId::all()
        .into_iter()
        .filter(|k| *k != cheap.stage2)
        .collect();
    let deciding_ms = per_prediction_ms * others.len() as f64;
    let stage2_all_calls = n * cands[0].predicted_ms.unwrap_or(f64::INFINITY);
    if stage2_all_calls >= deciding_ms {
        cands.extend(others.iter().map(|&k| predict(k)));
        return (cands, per_prediction_ms, String::new());
    }
    let note = format!(
        "; the other {} kernels were not predicted: that would cost about {deciding_ms:.4} ms, \
         more than the {stage2_all_calls:.4} ms stage 2's kernel is predicted to take over the \
         calls expected",
        others.len()
    );
    (cands, per_prediction_ms, note)
}

/// Fills the binned candidate from the model's plan `p` (binned now):
/// its analysis, kernels and predicted time.
fn price_binned(
    b: &mut Candidate,
    p: &Prediction,
    perf: &crate::PerfModel,
    f: &Features,
    calls: u64,
    ctx: &AmortiseContext,
    per_prediction_ms: f64,
) {
    let launches = distinct_kernels(&p.plan) as f64;
    let lists = p.plan.scheme != Scheme::Single;
    let scheme: Scheme = b.scheme.parse().unwrap_or(Scheme::Single);
    b.analysis_ms = ctx
        .costs
        .analysis_ms(p.binning.nrows, scheme, lists, launches)
        + per_prediction_ms;
    b.kernels = kernel_names(&p.plan);
    b.price(
        crate::plan_vector(f, &p.plan, &p.binning).map(|x| perf.predict_ms(&x)),
        calls,
    );
    b.analysed = true;
}

fn cheap_kernel_plan(c: &Cheap) -> Plan {
    Plan::uniform(&c.single, c.stage2)
}

fn best_kernel(c: &Candidate) -> Option<KernelId> {
    c.kernels.first().and_then(|k| k.parse().ok())
}

/// A trivial plan over the single bin, with the cheap decisions as its explanation.
fn trivial_prediction(cheap: Cheap, plan: impl Fn(&Cheap) -> Plan, explain: bool) -> Prediction {
    let plan = plan(&cheap);
    Prediction {
        plan,
        binning: cheap.single,
        explanation: cheap.explanation.filter(|_| explain),
    }
}

fn kernel_names(plan: &Plan) -> Vec<Cow<'static, str>> {
    let mut v: Vec<Cow<'static, str>> = plan
        .kernels
        .iter()
        .map(|(_, k)| kernel_name(*k).0)
        .collect();
    v.sort();
    v.dedup();
    v
}

fn distinct_kernels(plan: &Plan) -> usize {
    kernel_names(plan).len().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{Node, Tree};
    use crate::vector::spread;
    use crate::{fit_perf, plan_vector, single_vector, ModelCard, PerfParams, PerfSample};
    use sparse::Csr;

    /// Blocks of 10 rows alternating between 2 and 40 nonzeros a row: under
    /// U = 10 two bins (2 and 40), which the model below gives two kernels.
    fn matrix(rows: usize) -> Csr<f64> {
        let (mut rp, mut ci) = (vec![0u32], Vec::new());
        for r in 0..rows {
            let len = if (r / 10) % 2 == 0 { 2 } else { 40 };
            ci.extend(0..len as u32);
            rp.push(ci.len() as u32);
        }
        let n = ci.len();
        Csr::try_new(rows, 40, rp, ci, vec![1.0; n]).unwrap()
    }

    /// Stage 1: always U = 10; stage 2: serial below a mean row length of 8, else vector.
    fn model() -> Model {
        let card = ModelCard::for_test(
            vec![KernelId::Serial, KernelId::Vector],
            serde_json::Value::Null,
        );
        let stage1 = Tree {
            nodes: vec![Node::Leaf { class: 0 }],
        };
        let stage2 = Tree {
            nodes: vec![
                Node::Split {
                    feature: STAGE1_FEATURES.len() + 2,
                    cut: spread(8.0),
                    threshold: 8.0,
                    left: 1,
                    right: 2,
                },
                Node::Leaf { class: 0 },
                Node::Leaf { class: 1 },
            ],
        };
        Model::new(card, stage1, stage2)
    }

    fn ctx(gbps: Option<f64>) -> AmortiseContext {
        AmortiseContext {
            costs: AnalysisCosts::for_test(10.0, 2.0),
            copy_gbps: gbps,
            value_bytes: 8,
        }
    }

    #[test]
    fn one_call_without_a_perf_model_skips_the_binning() {
        let (m, a) = (model(), matrix(2000));
        let f = Features::of(&a);
        // The model's own plan bins (U = 10) with two kernels.
        let full = m.predict(&f, a.row_ptr());
        assert_eq!(full.plan.scheme, Scheme::Granularity(10));
        assert_eq!(full.plan.kernels.len(), 2);
        let one = m.plan_for_calls(&f, a.row_ptr(), 1, &ctx(Some(10.0)), false);
        assert_eq!(one.planning.method, "bandwidth_bound");
        assert_eq!(one.prediction.plan.scheme, Scheme::Single);
        let k = one.prediction.plan.kernels[0].1;
        assert_eq!(one.planning.chosen, format!("single:{}", k.name()));
        // Stage 2's pick for the whole matrix (mean row length 21: vector).
        assert_eq!(k, KernelId::Vector);
        let binned = &one.planning.candidates[0];
        assert_eq!(binned.name, "model");
        assert!(
            !binned.analysed,
            "the binned plan was analysed for one call"
        );
        assert!(binned.kernels.is_empty());
        let be = one.planning.break_even_calls.unwrap();
        assert!(be > 1, "break-even {be}");
        // From the break-even on, the binned plan.
        let many = m.plan_for_calls(&f, a.row_ptr(), be, &ctx(Some(10.0)), false);
        assert_eq!(many.planning.chosen, "model");
        assert_eq!(many.prediction, full);
        assert!(many.planning.candidates[0].analysed);
    }

    /// A performance model fitted on this matrix's own plans: every kernel
    /// alone 0.010 ms, the binned plan 0.008 ms.
    fn with_perf(m: &mut Model, a: &Csr<f64>) {
        let f = Features::of(a);
        let binned = m.predict(&f, a.row_ptr());
        let mut samples = Vec::new();
        for _ in 0..4 {
            for k in KernelId::all() {
                samples.push(PerfSample {
                    matrix: "a".into(),
                    x: single_vector(&f, k),
                    ms: 0.010,
                });
            }
            samples.push(PerfSample {
                matrix: "a".into(),
                x: plan_vector(&f, &binned.plan, &binned.binning).unwrap(),
                ms: 0.008,
            });
        }
        let params = PerfParams {
            rounds: 200,
            rate: 0.3,
            max_depth: 3,
            min_leaf: 1,
        };
        m.set_perf(Some(fit_perf(&samples, params).unwrap()));
    }

    #[test]
    fn with_a_perf_model_the_calls_decide() {
        let (mut m, a) = (model(), matrix(2000));
        with_perf(&mut m, &a);
        let f = Features::of(&a);
        let c = ctx(None);
        // One call: the binned plan's analysis (about 0.06 ms) exceeds the best
        // trivial plan's whole cost (0.03 ms): not even binned.
        let one = m.plan_for_calls(&f, a.row_ptr(), 1, &c, false);
        assert_eq!(one.planning.method, "perf_model");
        assert!(
            one.planning.chosen.starts_with("single:"),
            "{:?}",
            one.planning
        );
        assert_eq!(one.prediction.plan.scheme, Scheme::Single);
        let binned = &one.planning.candidates[0];
        assert_eq!(binned.name, "model");
        assert!(!binned.analysed && binned.predicted_ms.is_none());
        // Stage 2's kernel is always predicted; the others when predicting
        // them costs less than its calls (timed here: not asserted for one call).
        let stage2 = &one.planning.candidates[1];
        assert!(stage2.stage2_pick, "{stage2:?}");
        for t in one.planning.candidates[1..].iter() {
            let p = t.predicted_ms.unwrap();
            assert!((p - 0.010).abs() < 0.001, "{t:?}");
        }
        // A thousand calls: 2 us saved per call pays the analysis back.
        let many = m.plan_for_calls(&f, a.row_ptr(), 1000, &c, false);
        assert_eq!(many.planning.chosen, "model", "{:?}", many.planning);
        assert_eq!(many.prediction.plan.scheme, Scheme::Granularity(10));
        assert_eq!(
            many.planning.candidates.len(),
            1 + KernelId::all().len(),
            "every kernel predicted for a thousand calls"
        );
        let b = &many.planning.candidates[0];
        assert!(b.analysed);
        assert!((b.predicted_ms.unwrap() - 0.008).abs() < 0.001, "{b:?}");
        assert_eq!(b.kernels, vec!["serial".to_string(), "vector".to_string()]);
    }

    #[test]
    fn when_stage_1_says_single_the_plan_is_the_model_s_own() {
        let mut m = model();
        m.card.schemes = vec![Scheme::Single];
        let a = matrix(2000);
        let f = Features::of(&a);
        for explain in [false, true] {
            let p = m.plan_for_calls(&f, a.row_ptr(), 1, &ctx(Some(10.0)), explain);
            assert_eq!(p.planning.method, "single_only");
            let own = if explain {
                m.predict_explained(&f, a.row_ptr())
            } else {
                m.predict(&f, a.row_ptr())
            };
            assert_eq!(p.prediction, own);
        }
    }

    #[test]
    fn the_explanation_of_a_trivial_plan_is_stage_2_on_the_single_bin() {
        let (m, a) = (model(), matrix(2000));
        let f = Features::of(&a);
        let one = m.plan_for_calls(&f, a.row_ptr(), 1, &ctx(Some(10.0)), true);
        let e = one.prediction.explanation.unwrap();
        assert_eq!(e.stage1.scheme, Scheme::Granularity(10));
        assert_eq!(e.stage2.len(), 1);
        assert_eq!(e.stage2[0].kernel, one.prediction.plan.kernels[0].1);
        assert_eq!(e.stage2[0].rows, 2000);
    }

    #[test]
    fn without_any_estimate_a_threshold_of_calls_decides() {
        let (m, a) = (model(), matrix(2000));
        let f = Features::of(&a);
        let few = m.plan_for_calls(
            &f,
            a.row_ptr(),
            MIN_CALLS_WITHOUT_ESTIMATE - 1,
            &ctx(None),
            false,
        );
        assert_eq!(few.planning.method, "calls_threshold");
        assert_eq!(few.prediction.plan.scheme, Scheme::Single);
        let enough = m.plan_for_calls(
            &f,
            a.row_ptr(),
            MIN_CALLS_WITHOUT_ESTIMATE,
            &ctx(None),
            false,
        );
        assert_eq!(enough.prediction.plan.scheme, Scheme::Granularity(10));
    }

    #[test]
    fn the_rule_and_empty_matrices_have_nothing_to_weigh() {
        let a = matrix(200);
        let f = Features::of(&a);
        let r = Selector::Rule.plan_for_calls(&f, a.row_ptr(), 1, &ctx(Some(10.0)), false);
        assert_eq!(r.planning.method, "single_only");
        assert_eq!(r.planning.candidates.len(), 1);
        let e = Csr::<f64>::try_new(0, 0, vec![0], vec![], vec![]).unwrap();
        let fe = Features::of(&e);
        let p = model().plan_for_calls(&fe, e.row_ptr(), 1, &ctx(Some(10.0)), false);
        assert!(p.prediction.plan.kernels.is_empty());
    }

    #[test]
    fn calibration_gives_positive_finite_costs() {
        let c = AnalysisCosts::calibrate();
        for v in [c.bin_ns_per_virtual_row, c.list_ns_per_row] {
            assert!(v.is_finite() && v > 0.0, "{c:?}");
        }
        // The feature pass reads every row and entry: it costs something.
        assert!(c.features_ms(1 << 20, 1 << 24) > 0.0, "{c:?}");
        assert!(c.features_ns_per_row.is_finite() && c.features_ns_per_entry.is_finite());
        // Binning reads one row pointer entry per virtual row; lists touch
        // every row: a binned plan over many rows costs more than none.
        assert!(c.analysis_ms(1 << 20, Scheme::Granularity(10), true, 2.0) > c.launch_ms);
        let m = c.with_launch_ms(0.5, "measured");
        assert_eq!(m.launch_ms, 0.5);
    }
}
