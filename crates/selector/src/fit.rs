//! Fitting the two trees from labelled samples: our own recursion, one exact
//! deterministic split search per node ([`crate::split`]).
//!
//! Why not linfa-trees 0.8.1 (used here until its two faults were measured, each
//! shown by a test in `tests/fit.rs`):
//! * its recursion decides whether two sorted neighbours are tied by looking at
//!   the next sample in the *global* sort order, even one outside the node, so on
//!   features with many tied values (U, bin ids) deep nodes miss obvious cuts
//!   (the `Grower` below asked it for one node at a time to get around this);
//! * its split scores are `f32` sums over a `HashMap<label, weight>` in iteration
//!   order (`gini_impurity`/`entropy` and the node total, in
//!   `decision_trees/algorithm.rs`), and each map takes a fresh `RandomState`, so
//!   the last bits of a score change from process to process; whenever two
//!   candidate splits are equally good (two features cutting the node's samples
//!   the same way, common in small nodes) which one wins is random, and two fits
//!   of the same samples gave different trees. Nothing we pass in fixes that: the
//!   hasher is not a parameter, any label type is hashed with the random keys, and
//!   a sum of three or more `f32` terms depends on its order whatever the weights.
//!
//! Kept from the linfa days: features go through the monotone
//! [`crate::vector::spread`] transform (cuts are stored in its units), a split
//! must lower the impurity by `min_impurity_decrease` (default 1e-7), leaf classes
//! are the heaviest label (lowest index on ties), and subtrees predicting one class
//! are merged.

use crate::labels::{
    class_samples, make_labels, stage1_classes, stage2_classes, ClassSamples, LabelSet,
};
use crate::model::{today_utc, FeatureOrder, ModelCard, MODEL_FORMAT_VERSION};
use crate::split::SplitSearch;
use crate::tree::{Node, Tree};
use crate::vector::{spread, unspread};
use crate::{
    evaluate_stage1, evaluate_stage2, Model, SelectorError, Stage1Sample, Stage2Sample,
    TrainParams, ValidTrainParams,
};
use rand::seq::index::sample;
use rand::SeedableRng;
use serde_json::json;

/// What fitting one stage produced besides the tree.
struct StageFit {
    tree: Tree,
    labels: LabelSet,
}

fn fit_stage(
    s: &ClassSamples,
    n_classes: usize,
    p: &ValidTrainParams,
) -> Result<StageFit, SelectorError> {
    let labels = make_labels(s, n_classes, p);
    let tx: Vec<Vec<f64>> =
        s.x.iter()
            .map(|x| x.iter().map(|&v| spread(v)).collect())
            .collect();
    let grower = Grower {
        tx: &tx,
        labels: &labels.labels,
        weights: &labels.weights,
        n_classes,
        params: p,
    };
    let mut nodes = Vec::new();
    grower.grow((0..tx.len()).collect(), 0, &mut nodes)?;
    let tree = Tree { nodes };
    Ok(StageFit {
        tree: tree.pruned(),
        labels,
    })
}

/// Grows a tree top-down: each node split by the best exact split of its own rows.
struct Grower<'a> {
    tx: &'a [Vec<f64>],
    labels: &'a [usize],
    weights: &'a [f32],
    n_classes: usize,
    params: &'a ValidTrainParams,
}

impl Grower<'_> {
    /// The heaviest class of `rows` (lowest index on exact ties) and whether it is the only one.
    fn majority(&self, rows: &[usize]) -> (usize, bool) {
        let mut mass = vec![0f64; self.n_classes];
        for &r in rows {
            mass[self.labels[r]] += self.weights[r] as f64;
        }
        let best = mass
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
            .map_or(0, |(c, _)| c);
        let first = self.labels[rows[0]];
        (best, rows.iter().all(|&r| self.labels[r] == first))
    }

    /// The best split of `rows` ([`SplitSearch`]): (feature, cut), or `None`.
    fn best_split(&self, rows: &[usize]) -> Option<(usize, f64)> {
        let p = self.params;
        let search = SplitSearch {
            tx: self.tx,
            labels: self.labels,
            weights: self.weights,
            n_classes: self.n_classes,
            criterion: p.criterion(),
            min_weight_leaf: p.min_weight_leaf() as f64,
            min_impurity_decrease: p.min_impurity_decrease(),
        };
        search.best(rows).map(|s| (s.feature, s.cut))
    }

    /// Grows the subtree of `rows` into `out` (pre-order) and returns its index.
    fn grow(
        &self,
        rows: Vec<usize>,
        depth: usize,
        out: &mut Vec<Node>,
    ) -> Result<usize, SelectorError> {
        let me = out.len();
        let (class, pure) = self.majority(&rows);
        out.push(Node::Leaf { class });
        if pure
            || depth >= self.params.max_depth()
            || (rows.len() as f32) < self.params.min_weight_split()
        {
            return Ok(me);
        }
        let Some((feature, cut)) = self.best_split(&rows) else {
            return Ok(me);
        };
        // Our walk sends `value < cut` left (as linfa's prediction does).
        let (left, right): (Vec<usize>, Vec<usize>) =
            rows.into_iter().partition(|&r| self.tx[r][feature] < cut);
        if left.is_empty() || right.is_empty() {
            return Ok(me);
        }
        let l = self.grow(left, depth + 1, out)?;
        let r = self.grow(right, depth + 1, out)?;
        out[me] = Node::Split {
            feature,
            cut,
            threshold: unspread(cut),
            left: l,
            right: r,
        };
        Ok(me)
    }
}

/// What the labels of one fitted stage were: counts per class, near-ties,
/// relabels, the sizes of the equal sets, and the tree's size.
fn label_info(f: &StageFit, names: Vec<String>) -> serde_json::Value {
    let mut counts = serde_json::Map::new();
    for (c, name) in names.iter().enumerate() {
        let n = f.labels.labels.iter().filter(|&&l| l == c).count();
        counts.insert(name.clone(), json!(n));
    }
    let sizes = &f.labels.equal_set_sizes;
    let mut histogram = std::collections::BTreeMap::<usize, usize>::new();
    for &k in sizes {
        *histogram.entry(k).or_default() += 1;
    }
    json!({
        "samples": f.labels.labels.len(),
        "near_ties": f.labels.near_ties,
        "relabelled": f.labels.relabelled,
        "equal_set_mean": sizes.iter().sum::<usize>() as f64 / sizes.len().max(1) as f64,
        "equal_set_sizes": histogram,
        "equal_sets_widened_by_ci": f.labels.widened_by_ci,
        "label_counts": counts,
        "leaves": f.tree.leaves(),
        "depth": f.tree.depth(),
    })
}

/// Fits both stages. Stage 1 learns features -> scheme from `stage1` (one sample per
/// matrix); stage 2 learns features + U + bin -> kernel from `stage2` (one sample
/// per matrix, scheme and non-empty bin; which schemes' bins to include is the
/// trainer's choice). Labels and weights follow `params.weighting()`.
///
/// The returned model's card has `device` and `precision` set to `unknown` and an
/// empty `corpus`: the caller fills them. `metrics` holds `train` (the stage
/// metrics on the training samples) and `labels` (label counts, near-ties, relabels,
/// tree sizes).
pub fn fit(
    stage1: &[Stage1Sample],
    stage2: &[Stage2Sample],
    params: &ValidTrainParams,
) -> Result<Model, SelectorError> {
    fit_extended(stage1, stage2, params, &[])
}

/// As [`fit`], on vectors that carry the values of the features `extra` after
/// the layouts' own (stage 1: after [`crate::STAGE1_FEATURES`]; stage 2: after
/// [`crate::STAGE2_FEATURES`], so every other position is unchanged). The card's
/// feature order lists them, so this build refuses to load such a model: it is
/// for judging features offline (`trainer feature-study`), with
/// [`Model::predict_scheme`] and [`Model::predict_kernel`] on such vectors.
pub fn fit_extended(
    stage1: &[Stage1Sample],
    stage2: &[Stage2Sample],
    params: &ValidTrainParams,
    extra: &[&str],
) -> Result<Model, SelectorError> {
    if stage1.is_empty() {
        return Err(SelectorError::NoSamples { what: "stage-1" });
    }
    if stage2.is_empty() {
        return Err(SelectorError::NoSamples { what: "stage-2" });
    }
    let schemes = stage1_classes(stage1, crate::STAGE1_FEATURES.len() + extra.len())?;
    let kernels = stage2_classes(stage2, crate::STAGE2_LEN + extra.len())?;
    let s1 = class_samples(stage1, &schemes);
    let fit1 = fit_stage(&s1, schemes.len(), params)?;

    let used2: Vec<Stage2Sample>;
    let stage2_used: &[Stage2Sample] = match params.max_stage2_samples() {
        Some(max) if stage2.len() > max => {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(params.seed());
            let mut idx = sample(&mut rng, stage2.len(), max).into_vec();
            idx.sort_unstable();
            used2 = idx.into_iter().map(|i| stage2[i].clone()).collect();
            &used2
        }
        _ => stage2,
    };
    let s2 = class_samples(stage2_used, &kernels);
    let fit2 = fit_stage(&s2, kernels.len(), params)?;

    let labels = json!({
        "stage1": label_info(&fit1, schemes.iter().map(|s| s.to_string()).collect()),
        "stage2": label_info(&fit2, kernels.iter().map(|k| k.name()).collect()),
    });
    let card = ModelCard {
        version: MODEL_FORMAT_VERSION,
        device: "unknown".into(),
        precision: "unknown".into(),
        feature_order: FeatureOrder::current().with_extra(extra),
        corpus: String::new(),
        created: today_utc(),
        hyper_parameters: TrainParams::from(*params),
        metrics: json!({}),
        schemes,
        kernels,
        vendor: None,
        driver: None,
        device_type: None,
        kernel_sources: None,
        trained_on: Vec::new(),
    };
    let mut model = Model::new(card, fit1.tree, fit2.tree);
    let train1 = evaluate_stage1(&model, stage1)?;
    let train2 = evaluate_stage2(&model, stage2)?;
    model.card.metrics = json!({
        "train": { "stage1": train1, "stage2": train2 },
        "labels": labels,
    });
    Ok(model)
}
