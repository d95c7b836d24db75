//! One entry point for planning: a fitted model when one matches the device and
//! precision, else the rule baseline, and a description of which was used.

use crate::{rule_prediction, Model, Prediction};
use serde::{Deserialize, Serialize};
use sparse::Features;

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
    /// The model for `device` and `precision` among `models` (see [`Model::matches`];
    /// the most recently created on several matches, the first on equal dates), or
    /// the rule when none matches.
    pub fn choose(
        models: impl IntoIterator<Item = Model>,
        device: &str,
        precision: &str,
    ) -> Selector {
        let mut best: Option<Model> = None;
        for m in models.into_iter().filter(|m| m.matches(device, precision)) {
            let newer = match &best {
                None => true,
                Some(b) => m.card.created > b.card.created,
            };
            if newer {
                best = Some(m);
            }
        }
        best.map_or(Selector::Rule, Selector::Model)
    }

    /// Plans a matrix (see [`Model::predict`]; the rule ignores `row_ptr` except to
    /// find the non-empty bin). Never panics.
    pub fn plan(&self, features: &Features, row_ptr: &[u32]) -> Prediction {
        match self {
            Selector::Model(m) => m.predict(features, row_ptr),
            Selector::Rule => rule_prediction(features, row_ptr, false),
        }
    }

    /// As [`Selector::plan`], with the explanation.
    pub fn plan_explained(&self, features: &Features, row_ptr: &[u32]) -> Prediction {
        match self {
            Selector::Model(m) => m.predict_explained(features, row_ptr),
            Selector::Rule => rule_prediction(features, row_ptr, true),
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
