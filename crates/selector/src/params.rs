//! Training parameters, checked once into a validated type in linfa's
//! `ParamGuard` style: [`TrainParams`] (builder) -> `check()` -> [`ValidTrainParams`].

use crate::SelectorError;
use linfa::ParamGuard;
use serde::{Deserialize, Serialize};

/// How samples are turned into labels and weights before fitting.
///
/// Many labels are near-ties (several kernels within a few percent of the best), so
/// the plain argmin label is noisy: the same kind of bin gets different labels for
/// reasons the features cannot see. The other modes make the tree learn what costs time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Weighting {
    /// The label is the fastest candidate; every sample weighs 1.
    Plain,
    /// The label is a canonical choice among the candidates within noise of the
    /// best (within `tie_tolerance`, or with measured CIs overlapping the best's:
    /// the equal set): a greedy cover of the near-best sets (the class near-best for the
    /// most samples labels all of them, then the same on the rest), so the tree sees
    /// the same label for bins where the same kernels tie; every sample weighs 1.
    TieRelabel,
    /// The label is the fastest candidate; a sample weighs the time lost when it is
    /// predicted wrong (relative loss of the runner-up, capped).
    TimeWeighted,
    /// Both: canonical near-tie labels, and a sample weighs the relative loss of
    /// the cheapest candidate outside its equal set (capped): expected slowdown.
    TieRelabelTimeWeighted,
}

impl Weighting {
    /// Every mode, for trainers that fit each and keep the best.
    pub const ALL: [Weighting; 4] = [
        Weighting::Plain,
        Weighting::TieRelabel,
        Weighting::TimeWeighted,
        Weighting::TieRelabelTimeWeighted,
    ];

    /// Whether labels are relabelled among near-ties.
    pub fn relabels(self) -> bool {
        matches!(
            self,
            Weighting::TieRelabel | Weighting::TieRelabelTimeWeighted
        )
    }

    /// Whether samples are weighted by time lost.
    pub fn weights_by_time(self) -> bool {
        matches!(
            self,
            Weighting::TimeWeighted | Weighting::TieRelabelTimeWeighted
        )
    }
}

/// The split criterion of the trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Criterion {
    /// Gini impurity.
    Gini,
    /// Entropy.
    Entropy,
}

/// Validated training parameters. Build them with [`TrainParams`] and `check()`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ValidTrainParams {
    max_depth: usize,
    min_weight_split: f32,
    min_weight_leaf: f32,
    min_impurity_decrease: f64,
    criterion: Criterion,
    tie_tolerance: f64,
    weighting: Weighting,
    loss_cap: f64,
    max_stage2_samples: Option<usize>,
    seed: u64,
}

impl ValidTrainParams {
    /// Deepest level of either tree (the root is depth 0).
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }
    /// A node with fewer samples than this is not split (linfa compares the sample *count*).
    pub fn min_weight_split(&self) -> f32 {
        self.min_weight_split
    }
    /// Each side of a split must carry at least this much sample weight (weights are
    /// normalized to a mean of 1, so this is in units of an average sample).
    pub fn min_weight_leaf(&self) -> f32 {
        self.min_weight_leaf
    }
    /// A split must lower the impurity by at least this much.
    pub fn min_impurity_decrease(&self) -> f64 {
        self.min_impurity_decrease
    }
    /// The split criterion.
    pub fn criterion(&self) -> Criterion {
        self.criterion
    }
    /// Relative tolerance of a near-tie: a candidate within `best * (1 + tie_tolerance)`
    /// is near-best (so is one whose measured CI overlaps the best's).
    pub fn tie_tolerance(&self) -> f64 {
        self.tie_tolerance
    }
    /// How labels and weights are made.
    pub fn weighting(&self) -> Weighting {
        self.weighting
    }
    /// Upper bound of a sample's relative time loss before normalization, so that one
    /// pathological sample (a kernel 1000x slower) cannot outweigh everything else.
    pub fn loss_cap(&self) -> f64 {
        self.loss_cap
    }
    /// When set, at most this many stage-2 samples are used, drawn with `seed`
    /// (linfa's fit visits every sample for every feature at every node).
    pub fn max_stage2_samples(&self) -> Option<usize> {
        self.max_stage2_samples
    }
    /// Seed of the stage-2 subsample.
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

impl ValidTrainParams {
    /// The same parameters with another weighting mode (every mode is valid).
    pub fn with_weighting(mut self, w: Weighting) -> Self {
        self.weighting = w;
        self
    }
}

impl From<ValidTrainParams> for TrainParams {
    fn from(p: ValidTrainParams) -> Self {
        TrainParams(p)
    }
}

/// Training parameters before validation (builder). `TrainParams::default()` gives
/// sensible values; `check()` validates them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TrainParams(ValidTrainParams);

impl Default for TrainParams {
    fn default() -> Self {
        TrainParams(ValidTrainParams {
            max_depth: 14,
            min_weight_split: 2.0,
            min_weight_leaf: 1.0,
            min_impurity_decrease: 1e-7,
            criterion: Criterion::Gini,
            tie_tolerance: 0.02,
            weighting: Weighting::TieRelabel,
            loss_cap: 10.0,
            max_stage2_samples: Some(200_000),
            seed: 42,
        })
    }
}

/// The builder's setters: `name(v)` sets the field `name` of the wrapped
/// [`ValidTrainParams`] (checked later, by `check()`).
macro_rules! setters {
    ($($(#[$doc:meta])* $field:ident: $t:ty;)*) => {
        $(
            $(#[$doc])*
            pub fn $field(mut self, v: $t) -> Self {
                self.0.$field = v;
                self
            }
        )*
    };
}

/// The deepest tree allowed (also bounds the JSON nesting of explanations).
pub const MAX_DEPTH_LIMIT: usize = 64;

impl TrainParams {
    /// The default parameters.
    pub fn new() -> Self {
        Self::default()
    }
    setters! {
        /// Sets [`ValidTrainParams::max_depth`] (1..=64).
        max_depth: usize;
        /// Sets [`ValidTrainParams::min_weight_split`] (finite, >= 0).
        min_weight_split: f32;
        /// Sets [`ValidTrainParams::min_weight_leaf`] (finite, >= 0).
        min_weight_leaf: f32;
        /// Sets [`ValidTrainParams::min_impurity_decrease`] (finite, > 0 as linfa requires).
        min_impurity_decrease: f64;
        /// Sets [`ValidTrainParams::criterion`].
        criterion: Criterion;
        /// Sets [`ValidTrainParams::tie_tolerance`] (in `[0, 1)`).
        tie_tolerance: f64;
        /// Sets [`ValidTrainParams::weighting`].
        weighting: Weighting;
        /// Sets [`ValidTrainParams::loss_cap`] (finite, > 0).
        loss_cap: f64;
        /// Sets [`ValidTrainParams::max_stage2_samples`] (`None`, or at least 1).
        max_stage2_samples: Option<usize>;
        /// Sets [`ValidTrainParams::seed`].
        seed: u64;
    }
}

fn bad(name: &'static str, reason: String) -> SelectorError {
    SelectorError::InvalidParam { name, reason }
}

impl ParamGuard for TrainParams {
    type Checked = ValidTrainParams;
    type Error = SelectorError;

    fn check_ref(&self) -> Result<&ValidTrainParams, SelectorError> {
        let p = &self.0;
        if p.max_depth == 0 || p.max_depth > MAX_DEPTH_LIMIT {
            return Err(bad(
                "max_depth",
                format!("must be in 1..={MAX_DEPTH_LIMIT}, got {}", p.max_depth),
            ));
        }
        if !p.min_weight_split.is_finite() || p.min_weight_split < 0.0 {
            return Err(bad(
                "min_weight_split",
                format!("must be finite and >= 0, got {}", p.min_weight_split),
            ));
        }
        if !p.min_weight_leaf.is_finite() || p.min_weight_leaf < 0.0 {
            return Err(bad(
                "min_weight_leaf",
                format!("must be finite and >= 0, got {}", p.min_weight_leaf),
            ));
        }
        if !p.min_impurity_decrease.is_finite() || p.min_impurity_decrease < f64::EPSILON {
            return Err(bad(
                "min_impurity_decrease",
                format!(
                    "must be finite and > 0 (linfa refuses 0), got {}",
                    p.min_impurity_decrease
                ),
            ));
        }
        if !(0.0..1.0).contains(&p.tie_tolerance) {
            return Err(bad(
                "tie_tolerance",
                format!("must be in [0, 1), got {}", p.tie_tolerance),
            ));
        }
        if !p.loss_cap.is_finite() || p.loss_cap <= 0.0 {
            return Err(bad(
                "loss_cap",
                format!("must be finite and > 0, got {}", p.loss_cap),
            ));
        }
        if p.max_stage2_samples == Some(0) {
            return Err(bad(
                "max_stage2_samples",
                "must be None or at least 1, got 0".into(),
            ));
        }
        Ok(p)
    }

    fn check(self) -> Result<ValidTrainParams, SelectorError> {
        self.check_ref()?;
        Ok(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err_name(p: TrainParams) -> &'static str {
        match p.check() {
            Err(SelectorError::InvalidParam { name, .. }) => name,
            other => panic!("expected a parameter error, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid() {
        let v = TrainParams::default().check().unwrap();
        assert_eq!(v.tie_tolerance(), 0.02);
        assert_eq!(v.weighting(), Weighting::TieRelabel);
    }

    #[test]
    fn each_bad_value_is_named() {
        let p = TrainParams::new;
        assert_eq!(err_name(p().max_depth(0)), "max_depth");
        assert_eq!(err_name(p().max_depth(65)), "max_depth");
        assert_eq!(err_name(p().min_weight_split(-1.0)), "min_weight_split");
        assert_eq!(err_name(p().min_weight_leaf(f32::NAN)), "min_weight_leaf");
        assert_eq!(
            err_name(p().min_impurity_decrease(0.0)),
            "min_impurity_decrease"
        );
        assert_eq!(err_name(p().tie_tolerance(1.0)), "tie_tolerance");
        assert_eq!(err_name(p().tie_tolerance(-0.01)), "tie_tolerance");
        assert_eq!(err_name(p().loss_cap(f64::INFINITY)), "loss_cap");
        assert_eq!(
            err_name(p().max_stage2_samples(Some(0))),
            "max_stage2_samples"
        );
        let msg = p().tie_tolerance(2.0).check().unwrap_err().to_string();
        assert!(msg.contains("tie_tolerance") && msg.contains('2'), "{msg}");
    }

    #[test]
    fn serde_round_trip() {
        let p = TrainParams::new()
            .weighting(Weighting::TimeWeighted)
            .seed(7);
        let s = serde_json::to_string(&p).unwrap();
        assert!(s.contains("\"time_weighted\""), "{s}");
        assert_eq!(serde_json::from_str::<TrainParams>(&s).unwrap(), p);
    }
}
