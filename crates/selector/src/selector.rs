//! One entry point for planning: the closest usable model for the device and
//! precision (see the match ladder in `matching`), else the rule baseline, and a
//! description of which was used and why.

use crate::{rule_prediction, Assessment, DeviceMatch, MatchLevel, Model, Prediction, Target};
use serde::{Deserialize, Serialize};
use sparse::{Features, RowPtr};

/// Where plans come from.
// A server holds one selector for its whole life, so the size of the model variant
// does not matter; boxing it would only make matching on it clumsier.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Selector {
    /// A fitted two-stage model.
    Model(Model),
    /// The hand-written rule ([`crate::rule_plan`]).
    Rule,
}

/// The outcome of [`Selector::choose`]: the selector, which model it is, and how close.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The chosen model, or the rule.
    pub selector: Selector,
    /// The model's position in the list given (`None` for the rule).
    pub index: Option<usize>,
    /// How close its device is to the target (`None` for the rule).
    pub level: MatchLevel,
    /// Why it was chosen, or why the rule plans.
    pub reason: String,
}

fn rule_reason(assessed: &[Assessment], target: &Target) -> String {
    let head = format!(
        "no usable model for '{}' in {}; using the rule baseline",
        target.device.name, target.precision
    );
    let why: Vec<&str> = assessed
        .iter()
        .filter(|a| !matches!(a, Assessment::OtherPrecision(_)))
        .map(Assessment::reason)
        .collect();
    if why.is_empty() {
        return format!(
            "{head} (none of the {} models loaded is for {})",
            assessed.len(),
            target.precision
        );
    }
    format!("{head} ({})", why.join("; "))
}

/// What a [`Selector`] is, for responses and logs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectorInfo {
    /// `model` or `rule`.
    pub kind: String,
    /// The model's content id ([`Model::id`]); `None` for the rule.
    pub id: Option<String>,
    /// The model's device; `None` for the rule.
    pub device: Option<String>,
    /// The model's precision; `None` for the rule.
    pub precision: Option<String>,
    /// The model's creation date; `None` for the rule.
    pub created: Option<String>,
}

impl Selector {
    /// The closest usable model for `target` among `models`, else the rule.
    ///
    /// Every model is assessed ([`Model::assess`]): another precision or an
    /// unrelated device is not a candidate, other kernel sources are refused.
    /// Among the usable ones the best rung wins ([`MatchLevel`]: exact, same
    /// class, same type), then the higher rank on that rung, then the most
    /// recently created, then the first given. With none, the rule baseline
    /// plans and the reason summarises why each model was passed over.
    pub fn choose(models: &[Model], target: &Target) -> Choice {
        let assessed: Vec<Assessment> = models.iter().map(|m| m.assess(target)).collect();
        let mut best: Option<(usize, &DeviceMatch)> = None;
        for (i, a) in assessed.iter().enumerate() {
            let Assessment::Usable(m) = a else { continue };
            let better = match best {
                None => true,
                Some((j, b)) => {
                    (m.level, std::cmp::Reverse(m.rank)) < (b.level, std::cmp::Reverse(b.rank))
                        || (m.level == b.level
                            && m.rank == b.rank
                            && models[i].card.created > models[j].card.created)
                }
            };
            if better {
                best = Some((i, m));
            }
        }
        match best {
            Some((i, m)) => Choice {
                selector: Selector::Model(models[i].clone()),
                index: Some(i),
                level: m.level,
                reason: m.reason.clone(),
            },
            None => Choice {
                selector: Selector::Rule,
                index: None,
                level: MatchLevel::None,
                reason: rule_reason(&assessed, target),
            },
        }
    }

    /// Plans a matrix (see [`Model::predict`]; the rule ignores `row_ptr` except to
    /// find the non-empty bin). Never panics.
    pub fn plan<'r>(&self, features: &Features, row_ptr: impl Into<RowPtr<'r>>) -> Prediction {
        let rp = row_ptr.into();
        match self {
            Selector::Model(m) => m.predict(features, rp),
            Selector::Rule => rule_prediction(features, rp.as_slice(), false),
        }
    }

    /// As [`Selector::plan`], with the explanation.
    pub fn plan_explained<'r>(
        &self,
        features: &Features,
        row_ptr: impl Into<RowPtr<'r>>,
    ) -> Prediction {
        let rp = row_ptr.into();
        match self {
            Selector::Model(m) => m.predict_explained(features, rp),
            Selector::Rule => rule_prediction(features, rp.as_slice(), true),
        }
    }

    /// Which selector this is.
    pub fn info(&self) -> SelectorInfo {
        match self {
            Selector::Model(m) => SelectorInfo {
                kind: "model".into(),
                id: Some(m.id()),
                device: Some(m.card.device.clone()),
                precision: Some(m.card.precision.clone()),
                created: Some(m.card.created.clone()),
            },
            Selector::Rule => SelectorInfo {
                kind: "rule".into(),
                id: None,
                device: None,
                precision: None,
                created: None,
            },
        }
    }
}
