//! The SpMV plan selector: the two-stage decision-tree model of paper 000
//! (Section III-C, Figure 3), its JSON model card, and the rule baseline.
//!
//! * Stage 1 reads the matrix features ([`STAGE1_FEATURES`]) and picks the binning
//!   scheme (the single-bin scheme or a granularity U).
//! * Stage 2 reads the matrix features, U, the bin id and features of the bin
//!   ([`STAGE2_FEATURES`]) and picks the bin's kernel.
//!
//! Fitting ([`fit`]) grows both trees with an exact, deterministic split search on [`Stage1Sample`]s and [`Stage2Sample`]s
//! that keep every candidate's time, so near-ties can be relabelled or samples
//! weighted by the time lost when wrong ([`Weighting`]); [`evaluate_stage1`],
//! [`evaluate_stage2`] and [`fit_variants`] judge models by time lost.
//! [`Model::predict`] plans a matrix, [`Model::predict_explained`] also returns the
//! decision paths; [`rule_plan`] is the hand-written baseline; [`Selector::choose`]
//! picks the closest usable model for a [`DeviceIdentity`], precision and
//! [`KernelSources`] by the ladder of [`match_device`] (exact device, same
//! [`DeviceClass`], same [`DeviceType`]) or falls back to the rule.
//!
//! [`fit_perf`] fits the optional performance model ([`PerfModel`]: boosted
//! regression trees on log time of whole plans and single kernels), which
//! [`Model::predict_time`] uses to predict what a plan will cost.
//!
//! [`Selector::plan_for_calls`] weighs the analysis a plan needs against the
//! calls it is expected to serve (module `amortise`); [`Selector::plan_lazy`]
//! first weighs the feature pass itself from the matrix's sizes, and when it
//! cannot pay plans one kernel from the model's quick part ([`QuickModel`],
//! fitted by [`fit_quick`]) without computing features (module `lazy`).
//!
//! Architecture invariant: this crate knows nothing of OpenCL, HTTP or SQL; it
//! sees matrices only through `sparse::Features` and a CSR row pointer.

mod amortise;
mod calibration;
mod device;
mod error;
mod eval;
mod explain;
mod fit;
pub(crate) mod labels;
mod lazy;
mod matching;
mod model;
mod models_dir;
mod params;
mod perf;
mod quick;
mod reason;
mod regtree;
mod rule;
mod selector;
mod split;
mod tree;
pub mod vector;

pub use amortise::{
    AmortiseContext, Amortised, AnalysisCosts, Candidate, Planning, BINNED_GAIN_BOUND,
    DEFAULT_LAUNCH_MS, MIN_CALLS_WITHOUT_ESTIMATE,
};
pub use calibration::{Calibration, CalibrationNote, Factor};
pub use device::{DeviceClass, DeviceIdentity, DeviceType, Simd};
pub use error::SelectorError;
pub use eval::{
    evaluate_stage1, evaluate_stage2, fit_variants, EvalReport, StageMetrics, VariantResult,
};
pub use explain::{BinDecision, Explanation, Prediction, SchemeDecision, Step, Went};
pub use fit::{fit, fit_extended};
pub use labels::{Stage1Sample, Stage2Sample};
pub use lazy::{weigh_features, FeatureWeighing};
pub use linfa::ParamGuard;
pub use matching::{match_device, Assessment, DeviceMatch, KernelSources, MatchLevel, Target};
pub use model::{
    load_models_dir, FeatureOrder, LoadedModel, Model, ModelCard, MODEL_FORMAT_VERSION,
};
pub use models_dir::{resolve_models_dir, ModelsDir};
pub use params::{Criterion, TrainParams, ValidTrainParams, Weighting, MAX_DEPTH_LIMIT};
pub use perf::{
    fit_perf, fit_perf_form, fit_perf_with, perf_features, plan_vector, single_vector, ErrorBand,
    Estimate, PerfForm, PerfModel, PerfParams, PerfSample, TimePrediction, PERF_EXTRA,
};
pub use quick::{
    fit_quick, geomean_slowdown, Facts, QuickModel, QuickNode, QuickParams, QuickSample,
    MISSING_SLOWDOWN, QUICK_FACTS,
};
pub use reason::Reason;
pub use rule::{
    rule_kernel, rule_kernel_for, rule_plan, rule_plan_for, rule_prediction, rule_prediction_for,
    RuleClass, RuleThresholds, RULE_SERIAL_BELOW, RULE_SKEW_MAX_OVER_MEAN, RULE_SKEW_MIN_MAX_ROW,
    RULE_VECTOR_FROM,
};
pub use selector::{Choice, Selector, SelectorInfo};
pub use vector::{
    stage1_vector, stage2_vector, STAGE1_FEATURES, STAGE2_EXTRA, STAGE2_FEATURES, STAGE2_LEN,
};
