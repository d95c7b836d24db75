//! The records the store reads and writes, and the ids of stored rows.

use crate::rows::Stored;
use crate::StoreError;
use serde::{Deserialize, Serialize};
use sparse::plan::{KernelId, Plan};
use sparse::{Features, Scheme, FEATURE_NAMES};
use std::fmt;
use std::str::FromStr;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, sqlx::Type,
        )]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(pub i64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id_type!(
    /// Row id of a device.
    DeviceId
);
id_type!(
    /// Row id of a matrix.
    MatrixId
);
id_type!(
    /// Row id of a measurement.
    MeasurementId
);
id_type!(
    /// Row id of a stored plan.
    PlanId
);
id_type!(
    /// Row id of a model.
    ModelId
);
id_type!(
    /// Row id of a training run.
    RunId
);
id_type!(
    /// Row id of a measurement context (`measurement_contexts`).
    ContextId
);
id_type!(
    /// Row id of a logged request; ids increase with time, so the largest id seen
    /// is a cursor for [`crate::Store::requests_since`].
    RequestId
);

/// Floating-point precision of values and vectors (the workspace's one type).
pub use sparse::Precision;

/// A feature vector together with the names of its entries, as stored in the
/// `features` JSON columns: `{"names": [...], "values": [...]}`. Keeping the names
/// lets a reader notice rows computed under an older feature order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureVector {
    /// Feature names, in order.
    pub names: Vec<String>,
    /// Values, one per name.
    pub values: Vec<f64>,
}

impl FeatureVector {
    /// Wraps features computed by `sparse` with the current [`FEATURE_NAMES`].
    pub fn from_features(features: &Features) -> FeatureVector {
        FeatureVector {
            names: FEATURE_NAMES.iter().map(|n| n.to_string()).collect(),
            values: features.values.clone(),
        }
    }

    /// Whether the names are exactly the current [`FEATURE_NAMES`].
    pub fn has_current_order(&self) -> bool {
        self.names.len() == FEATURE_NAMES.len()
            && self
                .names
                .iter()
                .zip(FEATURE_NAMES.iter())
                .all(|(a, b)| a == b)
            && self.values.len() == self.names.len()
    }

    /// The features in the current order, or `None` when the stored order differs
    /// (recompute them from the matrix then).
    pub fn to_features(&self) -> Option<Features> {
        self.has_current_order().then(|| Features {
            values: self.values.clone(),
        })
    }
}

impl From<&Features> for FeatureVector {
    fn from(f: &Features) -> Self {
        FeatureVector::from_features(f)
    }
}

/// A compute device, as written by [`crate::Store::upsert_device`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct DeviceRecord {
    /// Device name reported by OpenCL.
    pub name: String,
    /// Vendor name.
    pub vendor: String,
    /// Driver version.
    pub driver: String,
    /// Compute units.
    #[sqlx(try_from = "i64")]
    pub compute_units: u32,
    /// Global memory in bytes.
    #[sqlx(try_from = "i64")]
    pub global_mem_bytes: u64,
    /// Host-to-device copy bandwidth measured at start-up, when measured.
    pub copy_bandwidth_gbps: Option<f64>,
}

/// A stored device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct Device {
    /// Row id.
    pub id: DeviceId,
    /// The device's description.
    #[sqlx(flatten)]
    pub record: DeviceRecord,
    /// When the row was first written (ISO-8601 UTC).
    pub created_at: String,
}

/// A matrix of the corpus or of served work, as written by [`crate::Store::upsert_matrix`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct MatrixRecord {
    /// `Csr::content_hash()`: the identity of the matrix.
    pub content_hash: String,
    /// A human name (file stem, generator parameters, ...).
    pub name: String,
    /// Where it comes from: `suitesparse`, `generator:<family>`,
    /// `standin:<group/name>`, `request`, ...
    pub source: String,
    /// Rows.
    #[sqlx(try_from = "i64")]
    pub nrows: u64,
    /// Columns.
    #[sqlx(try_from = "i64")]
    pub ncols: u64,
    /// Nonzeros.
    #[sqlx(try_from = "i64")]
    pub nnz: u64,
    /// Its feature vector.
    #[sqlx(try_from = "Stored<String>")]
    pub features: FeatureVector,
}

/// A stored matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct Matrix {
    /// Row id.
    pub id: MatrixId,
    /// The matrix's description.
    #[sqlx(flatten)]
    pub record: MatrixRecord,
    /// When the row was first written (ISO-8601 UTC).
    pub created_at: String,
}

/// What a measurement timed: one kernel on one bin alone, or a whole plan.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Target {
    /// `kernel` on bin `bin` of the scheme, alone. The single-bin scheme's bin 0
    /// is the whole matrix under one kernel.
    Bin {
        /// The bin.
        bin: u32,
        /// The kernel.
        kernel: KernelId,
    },
    /// A whole plan, every bin in one run. Holds the canonical plan JSON (kernels
    /// sorted by bin) so that equal plans give equal keys; build it with
    /// [`Target::plan`].
    Plan(String),
}

impl Target {
    /// The target for timing `plan` as a whole.
    pub fn plan(plan: &Plan) -> Result<Target, StoreError> {
        Ok(Target::Plan(canonical_plan_json(plan)?))
    }

    /// The plan of a [`Target::Plan`], parsed.
    pub fn as_plan(&self) -> Result<Option<Plan>, StoreError> {
        match self {
            Target::Bin { .. } => Ok(None),
            Target::Plan(json) => {
                serde_json::from_str(json)
                    .map(Some)
                    .map_err(|e| StoreError::Decode {
                        table: "measurements",
                        column: "plan".into(),
                        message: e.to_string(),
                    })
            }
        }
    }
}

/// The plan as JSON with its kernels sorted by bin: the form stored in `plan`
/// columns and in measurement keys.
pub fn canonical_plan_json(plan: &Plan) -> Result<String, StoreError> {
    let mut p = plan.clone();
    p.kernels.sort();
    serde_json::to_string(&p).map_err(|e| StoreError::InvalidValue {
        what: "plan",
        message: e.to_string(),
    })
}

/// What a timing depends on besides the matrix, device and plan: the kernel
/// sources, the program's build options on the device, and the engine version.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::FromRow)]
pub struct MeasurementContext {
    /// Hash of every kernel source file (the selector's `KernelSources::hash`).
    pub kernel_sources_hash: String,
    /// OpenCL build options of the precision's program on the device.
    pub build_options: String,
    /// Engine version including its timing-semantics version.
    pub engine_version: String,
}

/// `hash` of the context of rows written before contexts were recorded.
pub const LEGACY_CONTEXT: &str = "legacy";

impl MeasurementContext {
    /// BLAKE3 of the three fields (each followed by a NUL), hex: the lookup key.
    pub fn hash(&self) -> String {
        let mut h = blake3::Hasher::new();
        for part in [
            &self.kernel_sources_hash,
            &self.build_options,
            &self.engine_version,
        ] {
            h.update(part.as_bytes());
            h.update(&[0]);
        }
        h.finalize().to_hex().to_string()
    }
}

/// A stored measurement context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct StoredContext {
    /// Row id.
    pub id: ContextId,
    /// Its lookup hash ([`MeasurementContext::hash`], or [`LEGACY_CONTEXT`]).
    pub hash: String,
    /// What it records (all three `legacy` for the legacy context).
    #[sqlx(flatten)]
    pub context: MeasurementContext,
}

/// The identity of a measurement: at most one row exists per key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MeasurementKey {
    /// The matrix.
    pub matrix: MatrixId,
    /// The device.
    pub device: DeviceId,
    /// The precision.
    pub precision: Precision,
    /// The binning scheme (for a whole plan, the plan's scheme).
    pub scheme: Scheme,
    /// What was timed.
    pub target: Target,
    /// The context it was timed in (kernel sources, build options, engine
    /// version): the same target in another context is another measurement.
    pub context: ContextId,
}

/// A timing to store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct NewMeasurement {
    /// What was timed, where.
    #[sqlx(flatten, try_from = "crate::measurements::KeyColumns")]
    pub key: MeasurementKey,
    /// Median kernel time over the repetitions, in milliseconds.
    pub median_ms: f64,
    /// Spread of the kernel times in milliseconds (the trainer documents which:
    /// interquartile range, or max - min).
    pub spread_ms: f64,
    /// How many timed runs the median is over.
    #[sqlx(try_from = "i64")]
    pub repetitions: u32,
    /// Half-width of the median's 95% confidence interval divided by the
    /// median, when known (finite; `None` for legacy rows or too few runs).
    pub ci_rel: Option<f64>,
    /// The training run that measured it, if any.
    #[sqlx(rename = "run_id")]
    pub run: Option<RunId>,
}

/// A stored measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct Measurement {
    /// Row id.
    pub id: MeasurementId,
    /// The timing as it was inserted.
    #[sqlx(flatten)]
    pub data: NewMeasurement,
    /// When it was stored (ISO-8601 UTC).
    pub created_at: String,
}

/// A plan of one scheme for a matrix, device and precision, as written by
/// [`crate::Store::upsert_plan`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct PlanRecord {
    /// The matrix.
    #[sqlx(rename = "matrix_id")]
    pub matrix: MatrixId,
    /// The device.
    #[sqlx(rename = "device_id")]
    pub device: DeviceId,
    /// The precision.
    #[sqlx(try_from = "Stored<String>")]
    pub precision: Precision,
    /// The plan (its scheme is the row's scheme).
    #[sqlx(try_from = "Stored<String>")]
    pub plan: Plan,
    /// Measured time of the whole plan, in milliseconds.
    pub total_ms: f64,
    /// Sum of the times of its bins timed alone, when known.
    pub bins_sum_ms: Option<f64>,
    /// Whether this is the best plan over all schemes (the oracle).
    pub is_oracle: bool,
    /// The context its timings were taken in.
    #[sqlx(rename = "context_id")]
    pub context: ContextId,
}

/// A stored plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct StoredPlan {
    /// Row id.
    pub id: PlanId,
    /// The plan as written.
    #[sqlx(flatten)]
    pub record: PlanRecord,
    /// When it was last written (ISO-8601 UTC).
    pub created_at: String,
}

/// A trained model file, as written by [`crate::Store::insert_model`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct ModelRecord {
    /// Path of the model file.
    pub path: String,
    /// Name of the device it was trained for.
    pub device_name: String,
    /// Its precision.
    #[sqlx(try_from = "Stored<String>")]
    pub precision: Precision,
    /// Evaluation metrics.
    #[sqlx(try_from = "Stored<String>")]
    pub metrics: serde_json::Value,
    /// The model card.
    #[sqlx(try_from = "Stored<String>")]
    pub card: serde_json::Value,
}

/// A stored model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct Model {
    /// Row id.
    pub id: ModelId,
    /// The model as written.
    #[sqlx(flatten)]
    pub record: ModelRecord,
    /// When it was stored (ISO-8601 UTC).
    pub created_at: String,
}

/// How a training run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunStatus {
    /// Started and not finished: still going, or killed.
    Running,
    /// Completed.
    Finished,
    /// Stopped by an error.
    Failed,
    /// Stopped on purpose before the end (time budget, Ctrl-C).
    Interrupted,
}

impl RunStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Finished => "finished",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunStatus {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "running" => Ok(RunStatus::Running),
            "finished" => Ok(RunStatus::Finished),
            "failed" => Ok(RunStatus::Failed),
            "interrupted" => Ok(RunStatus::Interrupted),
            _ => Err(StoreError::InvalidValue {
                what: "run status",
                message: format!("unknown status '{s}'"),
            }),
        }
    }
}

impl Serialize for RunStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RunStatus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The start of a training run, as written by [`crate::Store::start_run`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct RunRecord {
    /// The device it times on, when it times.
    #[sqlx(rename = "device_id")]
    pub device: Option<DeviceId>,
    /// The precision, when the run is for one.
    #[sqlx(try_from = "Stored<Option<String>>")]
    pub precision: Option<Precision>,
    /// The run's parameters.
    #[sqlx(try_from = "Stored<String>")]
    pub params: serde_json::Value,
    /// Free text.
    pub notes: String,
}

/// The process that runs a training run: what the next trainer checks to tell a
/// run still going from one whose process is gone (see [`crate::Store::start_owned_run`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOwner {
    /// Process id.
    pub pid: u32,
    /// Host name of the machine.
    pub host: String,
    /// A random token of the process, so that a later process given the same pid
    /// (common in containers) can tell the run is not its own.
    pub token: String,
}

/// A stored training run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct TrainingRun {
    /// Row id.
    pub id: RunId,
    /// How it started.
    #[sqlx(flatten)]
    pub record: RunRecord,
    /// Where it stands: [`RunStatus::Running`] while unfinished.
    #[sqlx(try_from = "Stored<String>")]
    pub status: RunStatus,
    /// When it started (ISO-8601 UTC).
    pub started_at: String,
    /// When it finished; `None` while running or after a kill.
    pub finished_at: Option<String>,
    /// The process running it, when it was started with one.
    #[sqlx(flatten, try_from = "crate::runs::OwnerColumns")]
    pub owner: Option<RunOwner>,
    /// When it last reported progress (ISO-8601 UTC), when it did.
    pub heartbeat_at: Option<String>,
    /// Seconds from its last heartbeat (else its start) to when it was read.
    pub idle_s: f64,
}

impl TrainingRun {
    /// Whether [`crate::Store::finish_run`] was never called for it.
    pub fn is_unfinished(&self) -> bool {
        self.finished_at.is_none()
    }
}

/// One served HTTP request, as written by [`crate::Store::log_request`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct RequestRecord {
    /// The route (`/predict`, `/spmv`, ...).
    pub route: String,
    /// Content hash of the matrix, when the request had one.
    pub matrix_hash: Option<String>,
    /// Its features, when computed.
    #[sqlx(try_from = "Stored<Option<String>>")]
    pub features: Option<FeatureVector>,
    /// The plan used or predicted.
    #[sqlx(try_from = "Stored<Option<String>>")]
    pub plan: Option<Plan>,
    /// The precision asked for.
    #[sqlx(try_from = "Stored<Option<String>>")]
    pub precision: Option<Precision>,
    /// Name of the device that ran it.
    pub device: Option<String>,
    /// The model that chose the plan (file or id, or `rule` for the baseline).
    pub model: Option<String>,
    /// Device kernel time in milliseconds.
    pub kernel_ms: Option<f64>,
    /// End-to-end time in milliseconds.
    pub e2e_ms: Option<f64>,
    /// HTTP status code of the answer.
    #[sqlx(try_from = "i64")]
    pub status: u16,
}

/// A logged request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct Request {
    /// Row id (increasing with time).
    pub id: RequestId,
    /// When it was logged (ISO-8601 UTC).
    pub at: String,
    /// The request as written.
    #[sqlx(flatten)]
    pub record: RequestRecord,
}
