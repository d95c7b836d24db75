//! The OpenAPI 3.1 document served at `/openapi.json`: its frame, the layers'
//! responses, the query and request-body shapes and the `*Doc` mirrors.
//!
//! The document is generated once from the routes
//! ([`crate::http::routes_documented`], each handler's `#[utoipa::path]`) and
//! the wire types of [`crate::http::api`]; here the document's frame (title,
//! prose, auth scheme), the responses every route gets from the layers, the
//! query parameters and request-body shapes, and `*Doc` mirrors describing the
//! types of other crates that responses carry as they are.

use crate::http::api::ErrorBody;
use serde_json::{json, Value};
use std::sync::OnceLock;
use utoipa::openapi::{ObjectBuilder, RefOr, Schema, Type};
use utoipa::{IntoParams, OpenApi, ToSchema};

/// The frame of the document; the paths come from the router.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "SpMV kernel selector service",
        description = "Predicts an SpMV plan (binning scheme U and one kernel per bin, after Hou, Feng and Che) for a sparse matrix and runs y = A x on the OpenCL device with it. Upload a matrix once (POST /matrices) and multiply many times (POST /spmv with matrix_id).\n\nEvery error is a JSON body {\"error\": {\"code\", \"message\"}}; an unknown route is 404 no_route and a known route with another method 405 method_not_allowed. Policy on values: matrices and x must be finite; NaN and infinities (including values that overflow f32 when f32 is asked for) are rejected with 422. Without an OpenCL device, /predict works and /spmv answers 503.\n\nBounded memory: one layer of gzip is decoded (gzip inside gzip is 415 nested_gzip), up to --max-decompressed-bytes (413 past it); a Matrix Market size line is checked against the limits and against what the body can hold before anything is allocated (413: a 67-byte body cannot declare 50 million rows); requests in flight share a memory budget estimated from their declared sizes, and one that does not fit within --memory-wait-ms gets 503 busy with Retry-After (413 when it could never fit). A y that JSON cannot carry (an overflow to infinity, or NaN) is 422 non_finite_result naming the first bad row; ask for binary y (Accept: application/octet-stream) to receive it as is.\n\nAuth: when the service has API keys, every route but /healthz, /readyz and /openapi.json needs one (Authorization: Bearer KEY, or X-API-Key: KEY), else 401 unauthorized; an uploaded matrix is visible to the key that uploaded it only (404 to any other).",
    ),
    components(schemas(ErrorBody))
)]
pub struct Frame;

/// The document, generated on first use and kept.
pub fn document() -> &'static str {
    static DOC: OnceLock<String> = OnceLock::new();
    DOC.get_or_init(|| {
        let (_, api) = crate::http::routes_documented().split_for_parts();
        let mut doc = serde_json::to_value(&api).expect("the OpenAPI document serialises");
        add_layer_responses(&mut doc);
        serde_json::to_string_pretty(&doc).expect("a JSON value serialises")
    })
}

/// What the layers of `app()` add to every route: 401 from the auth layer
/// (API keys configured; not on the open routes), 503 `deadline` from the
/// request deadline, 500 `internal` from panic catching, and the API-key
/// security requirement; `Retry-After` on every 503.
fn add_layer_responses(doc: &mut Value) {
    let error = json!({"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}});
    doc["components"]["securitySchemes"] = json!({
        "bearer": {"type": "http", "scheme": "bearer",
                   "description": "An API key as `Authorization: Bearer KEY` (only when the service has keys)"},
        "api_key": {"type": "apiKey", "in": "header", "name": "X-API-Key",
                    "description": "The same key as `X-API-Key: KEY`"},
    });
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let Some(ops) = item.as_object_mut() else {
            continue;
        };
        for op in ops.values_mut().filter(|o| o.get("responses").is_some()) {
            let r = &mut op["responses"];
            let mut put = |status: &str, description: &str| {
                let entry = r.as_object_mut().expect("responses is an object");
                let e = entry
                    .entry(status)
                    .or_insert_with(|| json!({"description": "", "content": error.clone()}));
                let d = e["description"].as_str().unwrap_or("");
                let joined = if d.is_empty() {
                    description.to_string()
                } else {
                    format!("{d}; {description}")
                };
                e["description"] = json!(joined);
            };
            put("500", "internal: a failure inside the server (a panicking handler included); the details are in the server log");
            put("503", "deadline: not answered within --request-timeout-s");
            if !crate::http::auth::OPEN_ROUTES.contains(&path.as_str()) {
                put(
                    "401",
                    "unauthorized: the service has API keys and none, or an unknown one, was sent",
                );
                op["security"] = json!([{}, {"bearer": []}, {"api_key": []}]);
            }
            let retry = json!({"schema": {"type": "integer", "minimum": 0},
                               "description": "Seconds to wait before retrying"});
            op["responses"]["503"]["headers"]["Retry-After"] = retry;
        }
    }
}

/// The schema of an error code: a string, one of the codes [`crate::domain::error::ApiError`] sends.
pub fn error_codes() -> impl Into<RefOr<Schema>> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(crate::domain::error::ApiError::CODES.iter().copied()))
}

/// The value precision.
#[derive(ToSchema)]
#[schema(as = Precision)]
#[allow(dead_code)]
pub enum PrecisionDoc {
    /// Single precision (IEEE binary32).
    #[schema(rename = "f32")]
    F32,
    /// Double precision (IEEE binary64).
    #[schema(rename = "f64")]
    F64,
}

/// Host-side analysis cost figures the planner weighs (`selector::AnalysisCosts`).
#[derive(ToSchema)]
#[schema(as = AnalysisCosts)]
#[allow(dead_code)]
pub struct AnalysisCostsDoc {
    /// Binning, per virtual row (ns).
    bin_ns_per_virtual_row: f64,
    /// Row lists of a binned plan, per row (ns).
    list_ns_per_row: f64,
    /// Preparing one kernel launch (ms).
    launch_ms: f64,
    /// The feature pass, fixed part (ns).
    features_ns_fixed: f64,
    /// The feature pass, per row (ns).
    features_ns_per_row: f64,
    /// The feature pass, per nonzero (ns).
    features_ns_per_entry: f64,
    /// How the figures were obtained.
    source: String,
}

/// One plan the planner weighed (`selector::Candidate`).
#[derive(ToSchema)]
#[schema(as = Candidate)]
#[allow(dead_code)]
pub struct CandidateDoc {
    /// `model` (the two-stage plan with stage 1's scheme) or `single:<kernel>`
    /// (one kernel over the whole matrix, no binning).
    name: String,
    /// Its scheme (`single` or U).
    scheme: String,
    /// Its kernels; empty for the binned plan when it was not analysed.
    kernels: Vec<String>,
    /// Stage 2 chose this kernel for the single bin.
    stage2_pick: bool,
    /// Estimated host analysis cost: binning, row lists, launch preparation (ms).
    analysis_ms: f64,
    /// Predicted time of one SpMV (performance model; ms); null without one.
    predicted_ms: Option<f64>,
    /// analysis_ms + expected_calls x predicted_ms; null without a prediction.
    total_ms: Option<f64>,
    /// Whether its analysis (binning, stage 2 per bin) was done to judge it.
    analysed: bool,
}

/// How the planner judged the plans.
#[derive(ToSchema)]
#[schema(as = PlanningMethod)]
#[allow(dead_code)]
pub enum PlanningMethodDoc {
    /// Predicted times of the performance model.
    #[schema(rename = "perf_model")]
    PerfModel,
    /// The copy-bandwidth rule (no performance model).
    #[schema(rename = "bandwidth_bound")]
    BandwidthBound,
    /// A fixed number of calls (neither a model nor the bandwidth).
    #[schema(rename = "calls_threshold")]
    CallsThreshold,
    /// Stage 1 or the rule chose the single-bin scheme: nothing to weigh.
    #[schema(rename = "single_only")]
    SingleOnly,
    /// The feature pass could not pay back within the expected calls: one
    /// kernel from the matrix's sizes (the model's quick part), no features.
    #[schema(rename = "quick")]
    Quick,
}

/// How the plan was chosen for the calls the matrix is expected to serve: the
/// least analysis cost + expected_calls x predicted time among the model's
/// binned plan and the single-kernel plans. Before any of that, an inline
/// matrix's feature pass is weighed against at most 25% of the copy-bandwidth
/// bound saved per call; when it cannot pay, method is quick (one kernel from
/// the matrix's sizes, stage1_scheme none, break_even_calls the calls from
/// which features would pay). Without a performance model the
/// binned plan is taken from break_even_calls on: its extra analysis over at
/// most 25% of the copy-bandwidth bound of one SpMV saved per call.
#[derive(ToSchema)]
#[schema(as = Planning)]
#[allow(dead_code)]
pub struct PlanningDoc {
    /// How often the matrix is expected to be multiplied.
    #[schema(minimum = 1)]
    expected_calls: u64,
    /// The chosen candidate's name.
    chosen: String,
    /// How the candidates were judged.
    method: PlanningMethodDoc,
    /// Why, in a sentence.
    reason: String,
    /// The scheme stage 1 chose, before amortisation.
    stage1_scheme: String,
    /// Minimum bytes of one SpMV at the device's copy bandwidth (ms); null when unknown.
    spmv_bound_ms: Option<f64>,
    /// Calls from which the binned plan is chosen (rule without a performance model).
    break_even_calls: Option<u64>,
    /// Every candidate weighed.
    candidates: Vec<CandidateDoc>,
    /// The analysis cost figures used.
    costs: AnalysisCostsDoc,
    /// The feature pass's estimated cost (ms), when it was weighed before
    /// computing the features (inline matrices); null otherwise.
    features_estimate_ms: Option<f64>,
    /// Whether the matrix's features were computed (false for `quick`).
    features_computed: bool,
}

/// A predicted time with its band.
#[derive(ToSchema)]
#[schema(as = TimeEstimate)]
#[allow(dead_code)]
pub struct EstimateDoc {
    /// Predicted time, ms.
    ms: f64,
    /// Lower end of the band (predicted x the 10th percentile of measured /
    /// predicted on the model's held-out matrices); null when the model records no band.
    low_ms: Option<f64>,
    /// Upper end of the band (90th percentile); null without a band.
    high_ms: Option<f64>,
}

/// The performance model's predicted device times.
#[derive(ToSchema)]
#[schema(as = TimePrediction)]
#[allow(dead_code)]
pub struct TimePredictionDoc {
    /// The chosen plan.
    plan: EstimateDoc,
    /// The kernel predicted fastest alone over the whole matrix.
    best_single_kernel: String,
    /// Its time.
    best_single: EstimateDoc,
    /// What the band means and where it was measured, or why there is none.
    band: String,
    /// Present when the times were scaled by what this device has measured:
    /// the plan's factor (measured / predicted, the median over the kept
    /// observations near its predicted time, or over all of them), how many
    /// it rests on, the model's own prediction of the plan, and how many are
    /// kept. Absent until at least 3 timed plans have been seen (the upload
    /// tuning races and /spmv calls of uploaded matrices feed it).
    calibration: Option<CalibrationDoc>,
    /// Whether the planner chose plans by these times; false where the
    /// model's performance part only predicts (the shipped CPU models: planning
    /// by it was measured worse on the first call than the bandwidth rule).
    used_by_planner: bool,
}

/// The device's correction of the performance model.
#[derive(ToSchema)]
#[schema(as = Calibration)]
#[allow(dead_code)]
pub struct CalibrationDoc {
    /// measured / predicted applied to the plan's time (the best single
    /// kernel's has its own, by the same rule).
    factor: f64,
    /// Observations the factor is the median of.
    observations: usize,
    /// Whether those are the observations within 4x of the plan's predicted
    /// time (false: all of them, too few being near).
    near: bool,
    /// The model's own prediction of the plan, ms.
    uncalibrated_plan_ms: f64,
    /// Observations kept in all (one per matrix, precision and plan; the 512 newest).
    kept: usize,
}

/// Which way a test went: every test reads `value < threshold`, left when true.
#[derive(ToSchema)]
#[schema(as = Went)]
#[allow(dead_code)]
pub enum WentDoc {
    /// `value < threshold`.
    #[schema(rename = "left")]
    Left,
    /// `value >= threshold` (or NaN).
    #[schema(rename = "right")]
    Right,
}

/// One test on the way to a decision.
#[derive(ToSchema)]
#[schema(as = Step)]
#[allow(dead_code)]
pub struct StepDoc {
    /// The feature's name.
    feature: String,
    /// The threshold in the feature's own units.
    threshold: f64,
    /// The matrix's (or bin's) value of the feature.
    value: f64,
    /// Which way it went.
    went: WentDoc,
}

/// Stage 1: the path and the scheme it led to.
#[derive(ToSchema)]
#[schema(as = SchemeDecision)]
#[allow(dead_code)]
pub struct SchemeDecisionDoc {
    /// Tests from the root to the leaf.
    path: Vec<StepDoc>,
    /// The scheme: `single` or the granularity U.
    scheme: String,
}

/// Stage 2 for one non-empty bin.
#[derive(ToSchema)]
#[schema(as = BinDecision)]
#[allow(dead_code)]
pub struct BinDecisionDoc {
    /// The bin id.
    bin: usize,
    /// Rows in the bin.
    rows: usize,
    /// Nonzeros in the bin.
    nnz: u64,
    /// Tests from the root to the leaf.
    path: Vec<StepDoc>,
    /// The kernel chosen.
    kernel: String,
}

/// Why a plan is what it is (`?explain=true`).
#[derive(ToSchema)]
#[schema(as = Explanation)]
#[allow(dead_code)]
pub struct ExplanationDoc {
    /// `model` or `rule`.
    selector: String,
    /// Stage 1: the scheme.
    stage1: SchemeDecisionDoc,
    /// Stage 2: one entry per non-empty bin, by increasing bin.
    stage2: Vec<BinDecisionDoc>,
    /// When stage 2 chose one kernel for every bin, the plan runs it on the
    /// whole matrix (single-bin scheme): the scheme stage 1 chose. Absent otherwise.
    #[schema(required = false)]
    collapsed_from: Option<String>,
}

/// The query parameter `POST /predict` has besides [`PlanParams`].
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct ExplainParams {
    /// Add the decision path of each tree (`explanation`).
    explain: Option<bool>,
}

/// Query parameters of `POST /matrices` and `POST /predict`: how the matrix
/// is planned.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct PlanParams {
    /// Value precision (default f64); of the device copy for an upload.
    #[param(value_type = Option<PrecisionDoc>)]
    precision: Option<String>,
    /// How often the matrix is expected to be multiplied (default: the
    /// server's --uploaded-expected-calls, 1000); 400 unless an integer >= 1.
    #[param(minimum = 1)]
    expected_calls: Option<u64>,
}

/// Query parameters of `POST /spmv` (a body field of the same name, with the
/// same value, may be given too; different values are 400).
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct SpmvParams {
    /// Value precision (default f64).
    #[param(value_type = Option<PrecisionDoc>)]
    precision: Option<String>,
    /// Check y against the reference SpMV (tolerance scaled by row length and precision).
    verify: Option<bool>,
    /// Id of an uploaded matrix (for binary x).
    matrix_id: Option<String>,
    /// For an inline matrix (binary CSR bodies, or beside a JSON field of the
    /// same value): how often it is expected to be multiplied (default 1); 400
    /// unless an integer >= 1.
    #[param(minimum = 1)]
    expected_calls: Option<u64>,
    /// y = Aᵀ x for an uploaded matrix (x has one entry per row of A): the
    /// transpose is built on first use and kept in the cache with its own plan
    /// and device buffers; 422 for an inline matrix.
    transpose: Option<bool>,
}

/// Matrix Market text (coordinate or array; real, integer, pattern, symmetric,
/// skew-symmetric), plain or one layer of gzip (recognised by its magic bytes
/// or `Content-Encoding: gzip`).
#[derive(ToSchema)]
#[schema(as = MatrixMarket, example = "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1.0\n2 2 2.0\n")]
#[allow(dead_code)]
pub struct MatrixMarketDoc(String);

/// Bytes: gzip-compressed Matrix Market, or little-endian values.
#[derive(ToSchema)]
#[schema(as = Bytes, value_type = String, format = Binary)]
#[allow(dead_code)]
pub struct BytesDoc(Vec<u8>);

/// Binary CSR (Content-Type application/vnd.spmv-select.csr), all little-endian.
/// Header, 40 bytes: offset 0, 8 bytes: magic "SPMVCSR\u0000" (53 50 4D 56 43 53 52 00);
/// 8, u16: version = 1; 10, u8: index width, 4 (u32) or 8 (u64); 11, u8: value
/// width, 4 (f32) or 8 (f64); 12, u32: flags, bit 0 = an x section follows
/// (inline POST /spmv only), other bits 0; 16, u64: nrows; 24, u64: ncols; 32,
/// u64: nnz. Then row_ptr (nrows + 1 indices), col_idx (nnz indices), values (nnz
/// values) and, when flag bit 0 is set, x (ncols values of the same width). The
/// body must be exactly 40 + (nrows + 1 + nnz) * index width + (nnz [+ ncols]) *
/// value width bytes. The header is checked before anything is allocated: sizes
/// over --max-rows/--max-cols/--max-nnz are 413 too_large; bad magic, version,
/// widths, flags or a length other than declared are 400 invalid_binary_csr. The
/// arrays are then checked as JSON CSR: row_ptr starting at 0, never decreasing
/// and ending at nnz, column indices below ncols and within 32 bits, values
/// finite (422 invalid_matrix, unprocessable or non_finite); columns within a row
/// may come in any order (rows are sorted, duplicates summed). f32 values are
/// widened exactly; the precision of the computation is the precision query
/// parameter (default f64), whatever the value width.
#[derive(ToSchema)]
#[schema(as = BinaryCsr, value_type = String, format = Binary)]
#[allow(dead_code)]
pub struct BinaryCsrDoc(Vec<u8>);

/// The matrix field of a JSON /spmv body: Matrix Market text or a CSR object.
#[derive(serde::Deserialize, ToSchema)]
#[serde(untagged)]
#[schema(as = MatrixField)]
#[allow(dead_code)]
pub enum MatrixFieldDoc {
    /// Matrix Market text.
    Text(String),
    /// CSR arrays.
    Csr(crate::http::input::CsrJson),
}

/// The JSON body of /spmv: the matrix as `matrix` (Matrix Market text or a CSR
/// object), as `matrix_id` (uploaded before), or as the CSR fields nrows, ncols,
/// row_ptr, col_idx, values at the top level beside x.
#[derive(ToSchema)]
#[schema(as = SpmvRequest)]
#[allow(dead_code)]
pub struct SpmvJsonDoc {
    /// The matrix, inline.
    matrix: Option<MatrixFieldDoc>,
    /// The id of an uploaded matrix.
    matrix_id: Option<String>,
    /// x: one value per matrix column.
    x: Vec<f64>,
    /// Value precision (default f64).
    precision: Option<PrecisionDoc>,
    /// Check y against the reference SpMV.
    verify: Option<bool>,
    /// How often the client expects to multiply by this inline matrix; the
    /// planner weighs analysis against it (400 unless an integer >= 1; default 1).
    /// Ignored for matrix_id: an upload keeps its own figure.
    #[schema(minimum = 1)]
    expected_calls: Option<u64>,
    /// Top-level CSR: rows.
    nrows: Option<u64>,
    /// Top-level CSR: columns.
    ncols: Option<u64>,
    /// Top-level CSR: nrows + 1 offsets.
    row_ptr: Option<Vec<u64>>,
    /// Top-level CSR: 0-based column of each entry.
    col_idx: Option<Vec<u64>>,
    /// Top-level CSR: value of each entry.
    values: Option<Vec<f64>>,
}

/// The multipart/form-data body of /spmv, part by part.
#[derive(ToSchema)]
#[schema(as = SpmvForm)]
#[allow(dead_code)]
pub struct SpmvFormDoc {
    /// Matrix Market (optionally gzip), or JSON CSR with a JSON part content
    /// type; a part with Content-Type application/vnd.spmv-select.csr is binary
    /// CSR (no x section; x comes in the x part).
    #[schema(value_type = Option<String>, format = Binary)]
    matrix: Option<Vec<u8>>,
    /// x as a JSON array of numbers.
    x: String,
    /// `f32` or `f64`.
    precision: Option<String>,
    /// `true` or `false`.
    verify: Option<String>,
    /// The id of an uploaded matrix (instead of the matrix part).
    matrix_id: Option<String>,
    /// Integer >= 1, as for the JSON field.
    expected_calls: Option<String>,
}

/// y as little-endian values of the precision's width (4 or 8 bytes each).
#[derive(ToSchema)]
#[schema(as = BinaryVector, value_type = String, format = Binary)]
#[allow(dead_code)]
pub struct BinaryVectorDoc(Vec<u8>);
