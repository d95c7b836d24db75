//! Planning before the feature pass: from the matrix's [`Facts`] alone (sizes
//! and value width) and the expected calls, whether the features can pay
//! back their cost; when they cannot, a quick plan (one kernel over the whole
//! matrix, from the model's quick part) without computing them.
//!
//! Any plan chosen with features saves at most `BINNED_GAIN_BOUND` of one
//! SpMV's copy-bandwidth bound per call over the quick plan (the bound the
//! amortisation rule uses for binning; on the PoCL held-out split the oracle
//! beat the best single kernel by at most 17%), so the features are computed
//! only when `calls x BINNED_GAIN_BOUND x bound` reaches the estimated cost
//! of computing them and planning with them: the feature pass
//! ([`AnalysisCosts::features_ms`], calibrated at start; about a microsecond
//! since a matrix keeps its row and column facts) plus the model's planning
//! with features ([`Model::planning_with_features_ms`], measured once per
//! model: trees, candidates and their pricing, about ten times the quick
//! plan's). Without a bandwidth, from [`MIN_CALLS_WITHOUT_ESTIMATE`] calls
//! on. The rule baseline and matrices whose features are already known plan
//! as before.

use crate::amortise::{synthetic_matrix, synthetic_row_ptr, trivial_candidate};
use crate::quick::Facts;
use crate::{
    AmortiseContext, Amortised, Candidate, Model, Planning, Prediction, Reason, Selector,
    BINNED_GAIN_BOUND, MIN_CALLS_WITHOUT_ESTIMATE,
};
use sparse::{Binning, Features, KernelId, Plan, RowPtr, Scheme};
use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::Instant;

/// Whether the feature pass can pay, and the figures behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureWeighing {
    /// Whether the features should be computed.
    pub pays: bool,
    /// The estimated cost of computing the features and planning with them
    /// rather than planning quickly (ms).
    pub features_ms: f64,
    /// The copy-bandwidth bound of one SpMV (ms), when the bandwidth is known.
    pub bound_ms: Option<f64>,
    /// Calls from which the features pay.
    pub break_even_calls: u64,
    /// The calls weighed.
    pub calls: u64,
}

impl FeatureWeighing {
    /// Why, in a sentence (formatted only when read).
    pub fn reason(&self) -> Reason {
        self.reason_with(None)
    }

    /// The same, adding the kernel chosen without features and how.
    fn reason_with(&self, quick: Option<(&'static str, KernelId)>) -> Reason {
        Reason::features(
            self.features_ms,
            self.bound_ms,
            self.break_even_calls,
            self.calls,
            quick,
        )
    }
}

/// Weighs the feature pass of a matrix with `facts`, and `planning_ms` of
/// planning with the features, against `calls` calls.
pub fn weigh_features(
    facts: &Facts,
    calls: u64,
    ctx: &AmortiseContext,
    planning_ms: f64,
) -> FeatureWeighing {
    let features_ms = ctx.costs.features_ms(facts.rows, facts.nnz) + planning_ms.max(0.0);
    let bound_ms = ctx.bound_of(facts);
    let break_even_calls = match bound_ms {
        Some(t) => {
            let gain = BINNED_GAIN_BOUND * t;
            let be = (features_ms / gain.max(f64::MIN_POSITIVE)).ceil().max(1.0);
            if be.is_finite() {
                be as u64
            } else {
                u64::MAX
            }
        }
        None => MIN_CALLS_WITHOUT_ESTIMATE,
    };
    FeatureWeighing {
        pays: calls >= break_even_calls,
        features_ms,
        bound_ms,
        break_even_calls,
        calls,
    }
}

impl Selector {
    /// Plans a matrix (CSR `row_ptr`, `ncols` columns) expected to be
    /// multiplied `calls` times, computing its features only when they can
    /// pay (see the module docs): `features` holds them once computed
    /// (`compute` is called at most once, and not at all for a quick plan);
    /// features already in the cell are used as they are. A quick plan has
    /// no explanation (no tree read features).
    #[allow(clippy::too_many_arguments)]
    pub fn plan_lazy<'r>(
        &self,
        features: &OnceLock<Features>,
        compute: impl FnOnce() -> Features,
        row_ptr: impl Into<RowPtr<'r>>,
        ncols: usize,
        calls: u64,
        ctx: &AmortiseContext,
        explain: bool,
    ) -> Amortised {
        let row_ptr = row_ptr.into();
        match self {
            Selector::Model(m) => {
                m.plan_lazy(features, compute, row_ptr, ncols, calls, ctx, explain)
            }
            Selector::Rule => {
                let f = features.get_or_init(compute);
                self.plan_for_calls(f, row_ptr, calls, ctx, explain)
            }
        }
    }
}

impl Model {
    /// See [`Selector::plan_lazy`].
    #[allow(clippy::too_many_arguments)]
    pub fn plan_lazy<'r>(
        &self,
        features: &OnceLock<Features>,
        compute: impl FnOnce() -> Features,
        row_ptr: impl Into<RowPtr<'r>>,
        ncols: usize,
        calls: u64,
        ctx: &AmortiseContext,
        explain: bool,
    ) -> Amortised {
        let row_ptr = row_ptr.into();
        let calls = calls.max(1);
        let mut weighed = None;
        if features.get().is_none() {
            let facts = Facts::of(row_ptr.as_slice(), ncols, ctx.value_bytes);
            let w = weigh_features(&facts, calls, ctx, self.planning_with_features_ms(ctx));
            if facts.rows > 0 && !w.pays {
                return self.quick_plan(&facts, row_ptr.as_slice(), calls, ctx, w);
            }
            weighed = Some(w.features_ms);
        }
        let f = features.get_or_init(compute);
        let mut a = self.plan_for_calls(f, row_ptr, calls, ctx, explain);
        a.planning.features_estimate_ms = weighed;
        a
    }

    /// The host time (ms) of planning one call with features, beyond the
    /// features themselves: the trees, the candidates and their pricing, as
    /// [`Model::plan_for_calls`] does for one call. Measured once per model,
    /// with the first context that asks, on four small synthetic matrices
    /// (512 rows of 0-63, 1 and 8 nonzeros, 4096 rows of 4: the paths a
    /// small matrix takes differ, single-bin or binned stage 1), the least of
    /// 5 rounds of 20 plans each, the largest of the four kept (about 0.5 ms
    /// in all for a model without a performance part, 5 ms with one). The
    /// quick plan's own cost (about a tenth) is not subtracted, which leans
    /// towards the quick plan.
    pub fn planning_with_features_ms(&self, ctx: &AmortiseContext) -> f64 {
        self.planning_cost.get_or_init(|| {
            let regular = |rows: usize, per_row: usize| -> Vec<u32> {
                (0..=rows).map(|i| (i * per_row) as u32).collect()
            };
            let shapes = [
                synthetic_row_ptr(512),
                regular(512, 1),
                regular(512, 8),
                regular(4096, 4),
            ];
            const PLANS: u32 = 20;
            shapes
                .into_iter()
                .map(|rp| {
                    let a = synthetic_matrix(rp);
                    let f = Features::of(&a);
                    (0..5)
                        .map(|_| {
                            let t = Instant::now();
                            for _ in 0..PLANS {
                                let p = self.plan_for_calls(&f, a.rows(), 1, ctx, false);
                                std::hint::black_box(p);
                            }
                            t.elapsed().as_secs_f64() * 1e3 / f64::from(PLANS)
                        })
                        .fold(f64::INFINITY, f64::min)
                })
                .fold(0.0, f64::max)
        })
    }

    /// The quick plan: the quick kernel over the single bin, and a planning
    /// that says why the features were not computed.
    fn quick_plan(
        &self,
        facts: &Facts,
        row_ptr: &[u32],
        calls: u64,
        ctx: &AmortiseContext,
        w: FeatureWeighing,
    ) -> Amortised {
        let (k, how) = self.quick_kernel(facts);
        let single = Binning::new(row_ptr, Scheme::Single);
        let quick = trivial_candidate(Some(k), false, ctx);
        let with_features = Candidate {
            name: Cow::Borrowed("model"),
            scheme: Cow::Borrowed("unknown"),
            kernels: Vec::new(),
            stage2_pick: false,
            analysis_ms: w.features_ms,
            predicted_ms: None,
            total_ms: None,
            analysed: false,
        };
        Amortised {
            prediction: Prediction {
                plan: Plan::uniform(&single, k),
                binning: single,
                explanation: None,
            },
            planning: Planning {
                expected_calls: calls,
                chosen: quick.name.clone(),
                method: "quick".into(),
                reason: w.reason_with(Some((how, k))),
                stage1_scheme: "none".into(),
                spmv_bound_ms: w.bound_ms,
                break_even_calls: Some(w.break_even_calls),
                candidates: vec![with_features, quick],
                costs: ctx.costs.clone(),
                features_estimate_ms: Some(w.features_ms),
                features_computed: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{Node, Tree};
    use crate::{AnalysisCosts, ModelCard};
    use crate::{QuickModel, QuickNode, QUICK_FACTS};
    use sparse::Csr;
    use std::cell::Cell;

    /// 20000 rows of 8 nonzeros.
    fn matrix() -> Csr<f64> {
        let rows = 20_000;
        let rp: Vec<u32> = (0..=rows).map(|i| (i * 8) as u32).collect();
        let ci: Vec<u32> = (0..rows * 8).map(|i| (i % 64) as u32).collect();
        Csr::try_new(rows, 64, rp, ci, vec![1.0; rows * 8]).unwrap()
    }

    /// Stage 1: U = 10; stage 2: subvector4 everywhere; label counts say vector.
    fn model() -> Model {
        let card = ModelCard::for_test(
            vec![KernelId::Serial, KernelId::Vector, KernelId::Subvector(4)],
            serde_json::json!({"labels": {"stage2": {"label_counts":
                {"serial": 3, "vector": 7, "subvector4": 1}}}}),
        );
        let leaf = |class| Tree {
            nodes: vec![Node::Leaf { class }],
        };
        Model::new(card, leaf(0), leaf(2))
    }

    fn ctx() -> AmortiseContext {
        AmortiseContext {
            costs: AnalysisCosts::for_test(20.0, 3.0),
            copy_gbps: Some(10.0),
            value_bytes: 8,
        }
    }

    #[test]
    fn one_call_gets_a_quick_plan_without_the_feature_pass() {
        let (m, a) = (Selector::Model(model()), matrix());
        let (cell, calls) = (OnceLock::new(), Cell::new(0));
        let compute = || {
            calls.set(calls.get() + 1);
            Features::of(&a)
        };
        let p = m.plan_lazy(&cell, compute, a.row_ptr(), a.ncols(), 1, &ctx(), true);
        assert_eq!(calls.get(), 0, "the features were computed");
        assert!(cell.get().is_none());
        assert_eq!(p.planning.method, "quick");
        assert!(!p.planning.features_computed);
        // No quick part: the kernel most often best in the label counts.
        assert_eq!(p.prediction.plan, Plan::single(KernelId::Vector));
        assert_eq!(p.planning.chosen, "single:vector");
        let est = p.planning.features_estimate_ms.unwrap();
        // 20000 x 20 ns + 160000 x 3 ns, and planning with the features as
        // measured for this model (kept: the same value when asked again).
        let Selector::Model(inner) = &m else {
            unreachable!("a model")
        };
        let planning = inner.planning_with_features_ms(&ctx());
        assert!(planning > 0.0 && planning < 0.1, "{planning}");
        assert!((est - (0.88 + planning)).abs() < 1e-12, "{est}");
        let be = p.planning.break_even_calls.unwrap();
        assert!(be > 1, "{be}");
        assert_eq!(p.planning.candidates.len(), 2);
        assert!(p.prediction.explanation.is_none());
    }

    #[test]
    fn many_calls_compute_the_features_once_and_plan_as_before() {
        let (m, a) = (Selector::Model(model()), matrix());
        let (cell, calls) = (OnceLock::new(), Cell::new(0));
        let compute = || {
            calls.set(calls.get() + 1);
            Features::of(&a)
        };
        let p = m.plan_lazy(
            &cell,
            compute,
            a.row_ptr(),
            a.ncols(),
            100_000,
            &ctx(),
            false,
        );
        assert_eq!(calls.get(), 1);
        let f = Features::of(&a);
        let old = m.plan_for_calls(&f, a.row_ptr(), 100_000, &ctx(), false);
        assert_eq!(p.prediction, old.prediction);
        assert_eq!(p.planning.chosen, "model");
        assert!(p.planning.features_computed);
        assert!(p.planning.features_estimate_ms.is_some());
        // Features already known are used as they are, whatever the calls.
        let again = m.plan_lazy(
            &cell,
            || unreachable!(),
            a.row_ptr(),
            a.ncols(),
            1,
            &ctx(),
            false,
        );
        assert_eq!(
            again.prediction,
            m.plan_for_calls(&f, a.row_ptr(), 1, &ctx(), false)
                .prediction
        );
    }

    #[test]
    fn the_quick_part_picks_the_kernel_and_old_files_still_load() {
        let mut model = model();
        let json = model.to_json_string();
        assert!(
            !json.contains("\"quick\""),
            "no quick part written when absent"
        );
        let back = Model::from_json_str(&json).unwrap();
        assert_eq!(back, model);
        model.set_quick(Some(QuickModel {
            facts: QUICK_FACTS.iter().map(|s| s.to_string()).collect(),
            nodes: vec![
                QuickNode::Split {
                    fact: 3,
                    threshold: 4.0,
                    left: 1,
                    right: 2,
                },
                QuickNode::Leaf {
                    kernel: KernelId::Serial,
                },
                QuickNode::Leaf {
                    kernel: KernelId::Subvector(4),
                },
            ],
        }));
        let back = Model::from_json_str(&model.to_json_string()).unwrap();
        assert_eq!(back, model);
        let a = matrix();
        let p = Selector::Model(back).plan_lazy(
            &OnceLock::new(),
            || unreachable!(),
            a.row_ptr(),
            a.ncols(),
            1,
            &ctx(),
            false,
        );
        assert_eq!(p.prediction.plan, Plan::single(KernelId::Subvector(4)));
        assert!(
            p.planning.reason.to_string().contains("quick part"),
            "{}",
            p.planning.reason
        );
    }

    #[test]
    fn the_rule_and_no_bandwidth_take_the_old_path_or_the_threshold() {
        let a = matrix();
        let cell = OnceLock::new();
        let r = Selector::Rule.plan_lazy(
            &cell,
            || Features::of(&a),
            a.row_ptr(),
            64,
            1,
            &ctx(),
            false,
        );
        assert_eq!(r.planning.method, "single_only");
        assert!(cell.get().is_some());
        let mut c = ctx();
        c.copy_gbps = None;
        let m = Selector::Model(model());
        let few = m.plan_lazy(
            &OnceLock::new(),
            || unreachable!(),
            a.row_ptr(),
            64,
            9,
            &c,
            false,
        );
        assert_eq!(few.planning.method, "quick");
        let cell = OnceLock::new();
        let enough = m.plan_lazy(&cell, || Features::of(&a), a.row_ptr(), 64, 10, &c, false);
        assert_ne!(enough.planning.method, "quick");
        assert!(cell.get().is_some());
    }
}
