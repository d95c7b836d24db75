//! The one error type of the selector crate.

use std::path::PathBuf;

/// Everything that can go wrong while fitting, loading, saving or evaluating a model.
#[derive(Debug, thiserror::Error)]
pub enum SelectorError {
    /// A training parameter is out of its allowed range (found by `TrainParams::check`).
    #[error("invalid training parameter `{name}`: {reason}")]
    InvalidParam {
        /// The parameter's name.
        name: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// A set of samples that must not be empty was empty.
    #[error("no usable {what} samples")]
    NoSamples {
        /// Which samples (`stage-1`, `stage-2`).
        what: &'static str,
    },
    /// A training or evaluation sample is malformed (wrong vector length, non-finite
    /// feature, no finite positive time, ...).
    #[error("stage-{stage} sample {index} (matrix '{matrix}'): {reason}")]
    InvalidSample {
        /// 1 or 2 (the trees), 3 (the performance model).
        stage: u8,
        /// Position of the sample in the slice given.
        index: usize,
        /// The sample's matrix name.
        matrix: String,
        /// What is wrong.
        reason: String,
    },
    /// A fit could not be made (the reason, as text).
    #[error("decision tree fit failed: {0}")]
    Fit(String),
    /// A model file was written for another feature layout than the one this build computes.
    #[error(
        "model's stage-{stage} feature order differs from this build at position {position}: \
         the model has {model}, this build computes {current}; retrain the model"
    )]
    FeatureOrderMismatch {
        /// 1 or 2 (the trees), 3 (the performance model).
        stage: u8,
        /// Index of the first differing feature.
        position: usize,
        /// The model's feature at that position (quoted), or `nothing` when its list is shorter.
        model: String,
        /// This build's feature at that position (quoted), or `nothing` when its list is shorter.
        current: String,
    },
    /// A model file has a format version this build does not read.
    #[error(
        "model format version {found} is not supported (this build reads version {supported})"
    )]
    UnsupportedVersion {
        /// The version in the file.
        found: u64,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// A model file parses as JSON but is not a consistent model (bad tree, unknown class, ...).
    #[error("invalid model: {0}")]
    InvalidModel(String),
    /// JSON (de)serialization failed.
    #[error("model JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Reading or writing a model file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}
