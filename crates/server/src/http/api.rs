//! The wire types: every JSON body the service sends, with its schema.
//!
//! Each is a `serde` struct with a `utoipa::ToSchema` derive, so that
//! `/openapi.json` is generated from the same types the handlers serialise.
//! Types of other crates that responses carry as they are (the planner's
//! `Planning`, the model's time prediction, the decision paths) are described
//! by the `*Doc` mirrors in [`crate::http::openapi`]; the endpoint tests
//! validate real answers against the document, extra fields included, so a
//! mirror that drifts fails them.

use crate::http::openapi::{ExplanationDoc, PlanningDoc, PrecisionDoc, TimePredictionDoc};
use crate::service::planner::{ModelFile, ModelUsed, PlanView};
use crate::service::state::StoredMatrix;
use crate::service::tune::Tuning;
use selector::{Explanation, Planning, TimePrediction};
use serde::Serialize;
use sparse::{Features, Precision};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// Every error: `{"error": {"code", "message"}}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// Error answers every route reading a request body can give, said once for
/// their `#[utoipa::path]`s.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum BodyErrors {
    /// The body was too slow.
    #[response(
        status = 408,
        description = "body_timeout: the body was not received within --body-timeout-s"
    )]
    Timeout(ErrorBody),
    /// The body's media type.
    #[response(
        status = 415,
        description = "unsupported_media_type, or nested_gzip (gzip inside gzip)"
    )]
    MediaType(ErrorBody),
}

/// The code and message of an error.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Machine-readable: one of the codes listed here, each always with the
    /// same status (see the responses of each route).
    #[schema(schema_with = crate::http::openapi::error_codes)]
    pub code: &'static str,
    /// What happened, in a sentence (for a 500, only that the details are in the server log).
    pub message: String,
}

/// A matrix's id and sizes.
#[derive(Debug, Serialize, ToSchema)]
pub struct MatrixSummary {
    /// The matrix id: a keyed BLAKE3 hash of its content and its owner (the API key), 64 hex digits.
    pub id: String,
    /// Rows.
    pub nrows: usize,
    /// Columns.
    pub ncols: usize,
    /// Stored nonzeros (after duplicates are summed).
    pub nnz: usize,
}

impl MatrixSummary {
    /// The summary of a stored matrix.
    pub fn of(m: &StoredMatrix) -> MatrixSummary {
        MatrixSummary {
            id: m.id.clone(),
            nrows: m.host.nrows(),
            ncols: m.host.ncols(),
            nnz: m.host.nnz(),
        }
    }
}

/// The feature vector by name (`sparse::FEATURE_NAMES`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(transparent)]
pub struct FeatureMap(BTreeMap<String, f64>);

/// The named features of a matrix.
pub fn features(f: &Features) -> FeatureMap {
    FeatureMap(f.named().map(|(n, v)| (n.to_string(), v)).collect())
}

/// Times of a /predict request, milliseconds.
#[derive(Debug, Serialize, ToSchema)]
pub struct PredictTimings {
    /// Parsing and validating the body.
    pub parse: f64,
    /// Computing the features.
    pub features: f64,
    /// Hashing the content into the id.
    pub hash: f64,
    /// Planning (both stages and the amortisation).
    pub predict: f64,
    /// The whole request.
    pub total: f64,
}

/// The answer of `POST /predict`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Prediction {
    /// The matrix.
    pub matrix: MatrixSummary,
    /// The precision planned for.
    #[schema(value_type = PrecisionDoc)]
    pub precision: Precision,
    /// The feature vector, by name.
    pub features: FeatureMap,
    /// The plan: scheme and a kernel per non-empty bin.
    pub plan: PlanView,
    /// Which selector planned.
    pub model: ModelUsed,
    /// How the plan was chosen for the expected calls.
    #[schema(value_type = PlanningDoc)]
    pub planning: Planning,
    /// The device kernel time the model's performance part predicts (gradient-boosted
    /// regression trees on log time, fitted on the results database's whole-plan and
    /// single-kernel timings) for the chosen plan and for the kernel predicted fastest
    /// over the whole matrix, each with the model's held-out error band; null when the
    /// model in use has no performance part (models written before it) or the rule
    /// baseline plans.
    #[schema(value_type = Option<TimePredictionDoc>)]
    pub predicted_ms: Option<TimePrediction>,
    /// Times of this request.
    pub timings_ms: PredictTimings,
    /// With `?explain=true`: the decision path of each tree.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<ExplanationDoc>)]
    pub explanation: Option<Explanation>,
}

/// Bytes an upload holds.
#[derive(Debug, Serialize, ToSchema)]
pub struct UploadBytes {
    /// The host copy.
    pub host: u64,
    /// The device buffers of this precision (0 without a device).
    pub device: u64,
}

/// Times of an upload, milliseconds.
#[derive(Debug, Serialize, ToSchema)]
pub struct UploadTimings {
    /// Parsing and validating the body.
    pub parse: f64,
    /// Computing the features.
    pub features: f64,
    /// Hashing the content into the id.
    pub hash: f64,
    /// Planning, upload to the device, preparation and tuning, when this call did them.
    pub setup: Option<f64>,
    /// The whole request.
    pub total: f64,
}

/// The answer of `POST /matrices` (201).
#[derive(Debug, Serialize, ToSchema)]
pub struct Upload {
    /// The id to multiply by (`matrix_id` of /spmv) and to GET or DELETE.
    pub id: String,
    /// The matrix.
    pub matrix: MatrixSummary,
    /// The precision it was put on the device in.
    #[schema(value_type = PrecisionDoc)]
    pub precision: Precision,
    /// The plan kept for it.
    pub plan: PlanView,
    /// Which selector planned.
    pub model: ModelUsed,
    /// How the plan was chosen for the expected calls.
    #[schema(value_type = PlanningDoc)]
    pub planning: Planning,
    /// The race on the device that confirmed or replaced the model's plan;
    /// null when not tuned (no device, or `--tune-uploads false`).
    pub tuning: Option<Tuning>,
    /// Whether this caller had uploaded the same matrix before.
    pub already_uploaded: bool,
    /// Whether it is on the device (false without one: it is kept on the host).
    pub on_device: bool,
    /// The device's name (null without one).
    pub device: Option<String>,
    /// Bytes it holds.
    pub bytes: UploadBytes,
    /// Times of this request.
    pub timings_ms: UploadTimings,
}

/// An uploaded matrix's state on the device in one precision.
#[derive(Debug, Serialize, ToSchema)]
pub struct OnDevice {
    /// The precision.
    #[schema(value_type = PrecisionDoc)]
    pub precision: Precision,
    /// The plan prepared on the device.
    pub plan: PlanView,
    /// Which selector planned.
    pub model: ModelUsed,
    /// How the plan was chosen for the expected calls.
    #[schema(value_type = PlanningDoc)]
    pub planning: Planning,
    /// Bytes of its device buffers.
    pub device_bytes: u64,
    /// Whether binary x is received into, and binary y answered from,
    /// pinned host memory that the device copies at DMA speed
    /// (`--host-pools`; by default on a device that is not a CPU).
    pub pinned_host_buffers: bool,
    /// Whether binary x is received into, and binary y answered from, host
    /// memory the device's kernels use in place, with no copy
    /// (`--host-pools`; by default on a CPU device).
    pub shared_host_buffers: bool,
    /// Planning, upload, preparation and tuning, ms.
    pub setup_ms: f64,
}

/// Bytes an uploaded matrix holds, all precisions.
#[derive(Debug, Serialize, ToSchema)]
pub struct MatrixBytes {
    /// The host copy.
    pub host: u64,
    /// Host copy, plans and device buffers together (what the cache charges).
    pub total: usize,
}

/// The answer of `GET /matrices/{id}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct MatrixInfo {
    /// The id.
    pub id: String,
    /// The matrix.
    pub matrix: MatrixSummary,
    /// The feature vector, by name.
    pub features: FeatureMap,
    /// Bytes it holds.
    pub bytes: MatrixBytes,
    /// One entry per precision it is on the device in (empty: host copy only).
    pub uploaded: Vec<OnDevice>,
}

/// Times of an /spmv request, milliseconds.
#[derive(Debug, Serialize, ToSchema)]
pub struct SpmvTimings {
    /// Device kernel time (OpenCL profiling events of the SpMV kernels only).
    pub kernel: f64,
    /// x upload from host memory (OpenCL profiling).
    pub upload_x: f64,
    /// Of which the part after x's last byte arrived: x is uploaded whole
    /// once it has all arrived, so this equals `upload_x`.
    pub upload_x_after: f64,
    /// y download to pinned host memory (OpenCL profiling).
    pub download_y: f64,
    /// x upload + kernels + y download, wall clock.
    pub device: f64,
    /// Planning, upload and preparation done by this call (null when none was needed).
    pub setup: Option<f64>,
    /// Receiving and parsing the request body (binary x by `matrix_id` on a
    /// device: received straight into the buffer x's upload reads, each value
    /// checked as it arrives, less a first use's set-up).
    pub read: f64,
    /// The whole request inside the server, up to the answer's encoding.
    pub server: f64,
}

/// y compared with the reference SpMV (`verify=true`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Verification {
    /// Whether every row is within its tolerance (scaled by row length and precision).
    pub ok: bool,
    /// Largest relative error over the rows.
    pub max_rel_err: f64,
    /// Largest ratio of a row's error to its allowed bound (at most 1 is equal).
    pub worst_bound_ratio: f64,
    /// The row of that ratio.
    pub worst_row: usize,
    /// The reference it was compared with.
    pub reference: &'static str,
}

/// y, written straight from the result array.
#[derive(Debug)]
pub enum YJson<'a> {
    /// Single precision.
    F32(&'a [f32]),
    /// Double precision.
    F64(&'a [f64]),
}

impl Serialize for YJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            YJson::F32(y) => y.serialize(s),
            YJson::F64(y) => y.serialize(s),
        }
    }
}

/// The JSON answer of `POST /spmv` (binary y: see the headers instead).
#[derive(Debug, Serialize, ToSchema)]
pub struct SpmvResult<'a> {
    /// The id of the matrix (uploaded, or the id an inline matrix would get).
    pub matrix_id: &'a str,
    /// The matrix.
    pub matrix: MatrixSummary,
    /// The precision computed in.
    #[schema(value_type = PrecisionDoc)]
    pub precision: Precision,
    /// Whether an uploaded matrix (device buffers and plan reused) served the call.
    pub uploaded: bool,
    /// The plan run.
    pub plan: &'a PlanView,
    /// Which selector planned.
    pub model: &'a ModelUsed,
    /// How the plan was chosen for the expected calls.
    #[schema(value_type = PlanningDoc)]
    pub planning: &'a Planning,
    /// The race that chose the plan of an uploaded matrix (null for inline matrices).
    pub tuning: Option<&'a Tuning>,
    /// Kernel launches of this call.
    pub launches: usize,
    /// Times of this request.
    pub timings_ms: SpmvTimings,
    /// Minimum bytes of one SpMV over the kernel time (GB/s).
    pub gbps: f64,
    /// Minimum bytes one SpMV must move (matrix arrays, x and y once).
    pub min_bytes: u64,
    /// The check against the reference SpMV, with `verify=true` (else null).
    pub verify: Option<Verification>,
    /// y = A x, one value per row.
    #[schema(value_type = Vec<f64>)]
    pub y: YJson<'a>,
}

/// The answer of `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`: the process answers.
    pub status: &'static str,
    /// Whether an OpenCL device is open.
    pub device: bool,
    /// Seconds since start.
    pub uptime_s: f64,
}

/// The device's copy bandwidth, measured at start.
#[derive(Debug, Serialize, ToSchema)]
pub struct CopyBandwidth {
    /// GB/s.
    pub gbps: f64,
    /// Bytes copied per measurement.
    pub bytes: u64,
    /// Median time of one copy, ms.
    pub median_ms: f64,
    /// GB/s of the fastest copy: the figure the planner bounds an SpMV's
    /// time with (a copy is only ever slowed by other work, so it is the
    /// steadiest on a busy machine).
    pub peak_gbps: f64,
    /// Fastest time of one copy, ms.
    pub min_ms: f64,
}

/// An open OpenCL device.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeviceUp {
    /// Always true.
    pub available: bool,
    /// The OpenCL device name.
    pub name: String,
    /// Its vendor.
    pub vendor: String,
    /// Its platform.
    pub platform: String,
    /// `GPU`, `CPU` or `accelerator`.
    pub kind: String,
    /// Driver version.
    pub driver: String,
    /// OpenCL version.
    pub version: String,
    /// Compute units.
    pub compute_units: u32,
    /// Global memory, bytes.
    pub global_mem_bytes: u64,
    /// Largest single allocation, bytes.
    pub max_alloc_bytes: u64,
    /// Local memory per work-group, bytes.
    pub local_mem_bytes: u64,
    /// Largest work-group.
    pub max_work_group_size: usize,
    /// Whether it computes in double precision.
    pub fp64: bool,
    /// `up`, `rebuilding` (after a fault) or `down`.
    pub state: &'static str,
    /// Why it is not up (null when up).
    pub state_reason: Option<String>,
    /// The engine's generation: one more per fault and rebuild.
    pub generation: u64,
    /// Copy bandwidth measured at start (null when not measured).
    pub copy_bandwidth: Option<CopyBandwidth>,
    /// What shared host pools (`--host-pools shared`, the default on a CPU
    /// device) are made of: `svm` (fine-grained SVM, used with no map or
    /// unmap) or `mapped` (a host-pointer buffer, unmapped for each call).
    pub shared_memory: &'static str,
    /// The fewest bytes of x and y together for which shared pools are
    /// used in place (smaller ones are copied).
    pub in_place_min_bytes: u64,
}

/// No OpenCL device.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeviceDown {
    /// Always false.
    pub available: bool,
    /// Why there is none.
    pub reason: Option<String>,
}

/// The answer of `GET /device`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum DeviceReport {
    /// A device is open.
    Up(Box<DeviceUp>),
    /// None is.
    Down(DeviceDown),
}

/// The selector planning each precision.
#[derive(Debug, Serialize, ToSchema)]
pub struct InUse<'a> {
    /// Single precision.
    pub f32: &'a ModelUsed,
    /// Double precision.
    pub f64: &'a ModelUsed,
}

/// The answer of `GET /models`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Models<'a> {
    /// The models folder's name (its last component only).
    pub folder: &'a str,
    /// How the folder was found (`working directory`, ...).
    pub found: &'a str,
    /// The device models are matched against (null without one).
    pub device: Option<&'a str>,
    /// The selector used for each precision (the closest usable model, else the rule baseline).
    pub in_use: InUse<'a>,
    /// Every model file found, how close each is to this device or why it is refused.
    pub files: &'a [ModelFile],
}

/// The body of `POST /matrices/{id}/solve`.
#[derive(Debug, serde::Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SolveRequest {
    /// The method: `cg` (conjugate gradients, for symmetric positive definite
    /// matrices).
    #[serde(default = "default_method")]
    pub method: String,
    /// The right-hand side, one entry per row.
    pub b: Vec<f64>,
    /// The first iterate (default: zeros).
    #[serde(default)]
    pub x0: Option<Vec<f64>>,
    /// Stop when ||b - A x|| <= tol ||b|| (default 1e-8; above 0).
    #[serde(default)]
    pub tol: Option<f64>,
    /// Most iterations (default 1000, at most 100000).
    #[serde(default)]
    pub maxiter: Option<usize>,
    /// `none` (default) or `jacobi`.
    #[serde(default)]
    pub preconditioner: Option<String>,
    /// Value precision of the device copy (default f64).
    #[serde(default)]
    #[schema(value_type = Option<PrecisionDoc>)]
    pub precision: Option<Precision>,
}

/// A JSON operation on an uploaded matrix (solve, spmm): whether it runs on
/// the matrix's transpose.
pub trait OnUploaded {
    /// True for Aᵀ.
    fn transposed(&self) -> bool {
        false
    }
}

impl OnUploaded for SolveRequest {}

impl OnUploaded for SpmmRequest {
    fn transposed(&self) -> bool {
        self.transpose
    }
}

fn default_method() -> String {
    "cg".into()
}

/// The answer of `POST /matrices/{id}/solve`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SolveAnswer {
    /// The matrix.
    pub matrix_id: String,
    /// The method run.
    pub method: String,
    /// The preconditioner used.
    pub preconditioner: String,
    /// The precision it ran in.
    #[schema(value_type = PrecisionDoc)]
    pub precision: Precision,
    /// The last iterate.
    pub x: Vec<f64>,
    /// Iterations run.
    pub iterations: usize,
    /// ||r|| / ||b|| before the first iteration and after each.
    pub residuals: Vec<f64>,
    /// Why it stopped: `converged`, `maxiter` or `deadline` (a breakdown is a 422).
    pub stop: String,
    /// Whether the tolerance was reached.
    pub converged: bool,
    /// Time of the solve on the device worker (vectors in, iterations, x out), ms.
    pub device_ms: f64,
    /// Planning, upload and preparation when this call put the matrix on the device, ms.
    pub setup_ms: Option<f64>,
}

/// The body of `POST /matrices/{id}/spmm`.
#[derive(Debug, serde::Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SpmmRequest {
    /// The k vectors, each with one entry per column of A (k >= 1).
    pub x: Vec<Vec<f64>>,
    /// Value precision of the device copy (default f64).
    #[serde(default)]
    #[schema(value_type = Option<PrecisionDoc>)]
    pub precision: Option<Precision>,
    /// y = Aᵀ X instead (each vector one entry per row of A).
    #[serde(default)]
    pub transpose: bool,
}

/// The answer of `POST /matrices/{id}/spmm`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SpmmAnswer {
    /// The matrix the products ran on (`<id>.T` for the transpose).
    pub matrix_id: String,
    /// The precision they ran in.
    #[schema(value_type = PrecisionDoc)]
    pub precision: Precision,
    /// The k products, in the order of the vectors given.
    pub y: Vec<Vec<f64>>,
    /// Time on the device worker (X in, the SpMM, Y out), ms.
    pub device_ms: f64,
}
