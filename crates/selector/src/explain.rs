//! What a prediction returns: the plan, the binning it was made for, and, when
//! asked, the decision path of each tree (or the rule's tests) as JSON-ready data.

use serde::{Deserialize, Serialize};
use sparse::{Binning, KernelId, Plan, Scheme};

/// The result of planning one matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    /// The scheme and a kernel for each non-empty bin (none for an empty matrix).
    pub plan: Plan,
    /// The binning of the matrix under the plan's scheme (reuse it to run the plan).
    pub binning: Binning,
    /// The decision paths, when asked for.
    pub explanation: Option<Explanation>,
}

/// Which way a decision went. Every test reads "`value < threshold`": left when true.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Went {
    /// `value < threshold`.
    Left,
    /// `value >= threshold` (or the value is NaN).
    Right,
}

/// One test on the way to a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The feature's name (from [`crate::STAGE1_FEATURES`] / [`crate::STAGE2_FEATURES`]).
    pub feature: String,
    /// The threshold in the feature's own units.
    pub threshold: f64,
    /// The matrix's (or bin's) value of the feature.
    pub value: f64,
    /// `left` when `value < threshold`.
    pub went: Went,
}

/// The stage-1 decision: the path and the scheme it led to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchemeDecision {
    /// Tests from the root to the leaf.
    pub path: Vec<Step>,
    /// The scheme chosen.
    pub scheme: Scheme,
}

/// The stage-2 decision for one non-empty bin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BinDecision {
    /// The bin id.
    pub bin: usize,
    /// Rows in the bin.
    pub rows: usize,
    /// Nonzeros in the bin.
    pub nnz: u64,
    /// Tests from the root to the leaf.
    pub path: Vec<Step>,
    /// The kernel chosen.
    pub kernel: KernelId,
}

/// Why a plan is what it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// `model` or `rule`.
    pub selector: String,
    /// Stage 1: the scheme.
    pub stage1: SchemeDecision,
    /// Stage 2: one entry per non-empty bin, by increasing bin.
    pub stage2: Vec<BinDecision>,
    /// When stage 2 chose one kernel for every bin, the plan runs it on the whole
    /// matrix (single-bin scheme, one launch, no row list): the scheme stage 1 chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collapsed_from: Option<Scheme>,
}
