//! Model choice and planning: the models per precision, the plan for the calls
//! a matrix is expected to serve, and the JSON view of a plan.
//!
//! The models of the models folder, the closest usable one for the device and
//! each precision (exact device, same architecture class, same device type; see
//! `selector::match_device`), the rule baseline otherwise, the plan for the
//! calls a matrix is expected to serve (analysis cost, calibrated at start,
//! against predicted time: `selector::Selector::plan_for_calls`), and the JSON
//! view of a plan (scheme, bins with their rows, nonzeros and kernel). Nothing
//! sent to clients carries an absolute file-system path: files are named by
//! their file name only.

use selector::{
    AmortiseContext, Amortised, AnalysisCosts, Assessment, DeviceIdentity, Explanation,
    KernelSources, MatchLevel, Model, ModelsDir, Planning, Selector, SelectorError, Target,
    TimePrediction,
};
use serde::Serialize;
use sparse::Precision;
use sparse::{Binning, Csr, Features, KernelId, Plan, Scheme};
use std::path::Path;
use std::sync::OnceLock;

/// A model file found in the models folder.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ModelFile {
    /// The file's name (no folder).
    pub file: String,
    /// The model's content id, when it loaded.
    pub id: Option<String>,
    /// Its device, when it loaded.
    pub device: Option<String>,
    /// Its precision, when it loaded.
    pub precision: Option<String>,
    /// When it was fitted.
    pub created: Option<String>,
    /// Its corpus.
    pub corpus: Option<String>,
    /// How close its device is to this service's (`none` when unusable here).
    #[serde(rename = "match")]
    #[schema(value_type = Option<MatchLevelDoc>)]
    pub match_level: Option<MatchLevel>,
    /// Why it is usable or not here (a refusal names the differing kernel files).
    pub match_reason: Option<String>,
    /// True when it was refused (kernel sources differ from the ones this service runs).
    pub refused: bool,
    /// Why it could not be loaded.
    pub error: Option<String>,
    /// Whether the server uses it (it is the closest usable model for its precision).
    pub in_use: bool,
}

/// Which selector planned a request, as sent in responses.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[schema(as = Model)]
pub struct ModelUsed {
    /// `model` or `rule`.
    #[schema(example = "model")]
    pub kind: String,
    /// The model's content id (`rule` for the baseline).
    pub id: String,
    /// The model's file name (`None` for the rule or a model given directly).
    pub file: Option<String>,
    /// The model's device (`None` for the rule).
    pub device: Option<String>,
    /// The model's precision (`None` for the rule).
    pub precision: Option<String>,
    /// The model's creation date.
    pub created: Option<String>,
    /// How close the model's device is to this one: `exact`, `same_class`,
    /// `same_type`, or `none` for the rule.
    #[serde(rename = "match")]
    #[schema(value_type = MatchLevelDoc)]
    pub match_level: MatchLevel,
    /// Why this model (or the rule) plans, in a sentence.
    pub match_reason: String,
    /// True when no model is usable and the rule baseline was used instead.
    pub fallback: bool,
    /// Why the rule was used, when it was.
    pub reason: Option<String>,
}

/// The selectors in use, one per precision.
pub struct Planner {
    folder: String,
    found: &'static str,
    device: Option<String>,
    files: Vec<ModelFile>,
    f32: (Selector, ModelUsed),
    f64: (Selector, ModelUsed),
    costs: AnalysisCosts,
    copy_gbps: Option<f64>,
}

/// The kernel sources this build runs (embedded in the engine).
pub fn kernel_sources() -> KernelSources {
    KernelSources::of(engine::kernels::SOURCES)
}

/// The last component of a path, for responses sent to clients (a relative path
/// without one, such as `.`, as it is; an absolute one never).
fn file_name(p: &Path) -> String {
    match p.file_name() {
        Some(n) => n.to_string_lossy().into_owned(),
        None if p.is_relative() => p.display().to_string(),
        None => "(unnamed)".into(),
    }
}

/// A load error as sent to clients: an I/O error names the file only.
fn load_error(e: &SelectorError) -> String {
    match e {
        SelectorError::Io { path, source } => format!("{}: {source}", file_name(path)),
        other => other.to_string(),
    }
}

/// One precision's choice among `models` (named by `names`).
fn pick(
    models: &[Model],
    names: &[String],
    device: Option<&DeviceIdentity>,
    kernels: &KernelSources,
    p: Precision,
) -> (Selector, ModelUsed) {
    let Some(device) = device else {
        let reason =
            format!("no OpenCL device, so no model can match; using the rule baseline for {p}");
        return (Selector::Rule, rule_used(reason));
    };
    let target = Target {
        device,
        precision: p.name(),
        kernels,
    };
    let c = Selector::choose(models, &target);
    let used = match (&c.selector, c.index) {
        (Selector::Model(m), Some(i)) => ModelUsed {
            kind: "model".into(),
            id: m.id(),
            file: names.get(i).cloned(),
            device: Some(m.card.device.clone()),
            precision: Some(m.card.precision.clone()),
            created: Some(m.card.created.clone()),
            match_level: c.level,
            match_reason: c.reason.clone(),
            fallback: false,
            reason: None,
        },
        _ => rule_used(c.reason.clone()),
    };
    (c.selector, used)
}

fn rule_used(reason: String) -> ModelUsed {
    ModelUsed {
        kind: "rule".into(),
        id: "rule".into(),
        file: None,
        device: None,
        precision: None,
        created: None,
        match_level: MatchLevel::None,
        match_reason: reason.clone(),
        fallback: true,
        reason: Some(reason),
    }
}

/// What /models says of a model that loaded.
fn describe(
    name: String,
    m: &Model,
    device: Option<&DeviceIdentity>,
    kernels: &KernelSources,
) -> ModelFile {
    let a = device.map(|d| {
        m.assess(&Target {
            device: d,
            precision: &m.card.precision,
            kernels,
        })
    });
    ModelFile {
        file: name,
        id: Some(m.id()),
        device: Some(m.card.device.clone()),
        precision: Some(m.card.precision.clone()),
        created: Some(m.card.created.clone()),
        corpus: Some(m.card.corpus.clone()),
        match_level: Some(a.as_ref().map_or(MatchLevel::None, Assessment::level)),
        match_reason: Some(a.as_ref().map_or_else(
            || "no OpenCL device to match against".to_string(),
            |a| a.reason().to_string(),
        )),
        refused: matches!(a, Some(Assessment::Refused(_))),
        error: None,
        in_use: false,
    }
}

impl Planner {
    /// Loads the models of `folder` (taken as it is; see [`Planner::load_found`]).
    pub fn load(folder: &Path, device: Option<&DeviceIdentity>) -> Planner {
        let dir = ModelsDir {
            path: folder.to_path_buf(),
            found: "as given",
        };
        Planner::load_found(&dir, device)
    }

    /// Loads the models of the folder `dir` (a missing folder or bad files are
    /// reported in [`Planner::files`] and the log, never fatal) and picks, for each
    /// precision, the closest usable model for `device`, else the rule.
    pub fn load_found(dir: &ModelsDir, device: Option<&DeviceIdentity>) -> Planner {
        let kernels = kernel_sources();
        let (mut models, mut names, mut files) = (Vec::new(), Vec::new(), Vec::new());
        match selector::load_models_dir(&dir.path) {
            Ok(entries) => {
                for (path, res) in entries {
                    let name = file_name(&path);
                    match res {
                        Ok(m) => {
                            files.push(describe(name.clone(), &m, device, &kernels));
                            models.push(m);
                            names.push(name);
                        }
                        Err(e) => {
                            tracing::warn!(file = %name, error = %e, "skipping a model file that does not load");
                            files.push(ModelFile {
                                file: name,
                                id: None,
                                device: None,
                                precision: None,
                                created: None,
                                corpus: None,
                                match_level: None,
                                match_reason: None,
                                refused: false,
                                error: Some(load_error(&e)),
                                in_use: false,
                            });
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(folder = %dir.path.display(), error = %e, "no models folder; planning with the rule baseline")
            }
        }
        let f32 = pick(&models, &names, device, &kernels, Precision::F32);
        let f64 = pick(&models, &names, device, &kernels, Precision::F64);
        for f in &mut files {
            f.in_use = f.id.is_some()
                && (f.id.as_deref() == Some(&f32.1.id) || f.id.as_deref() == Some(&f64.1.id));
        }
        for (p, (_, u)) in [(Precision::F32, &f32), (Precision::F64, &f64)] {
            tracing::info!(precision = %p, kind = %u.kind, id = %u.id,
                r#match = u.match_level.as_str(), reason = %u.match_reason, "plan selector");
        }
        let costs = AnalysisCosts::calibrate();
        tracing::info!(
            bin_ns_per_virtual_row = costs.bin_ns_per_virtual_row,
            list_ns_per_row = costs.list_ns_per_row,
            "analysis costs calibrated"
        );
        Planner {
            folder: file_name(&dir.path),
            found: dir.found,
            device: device.map(|d| d.name.clone()),
            files,
            f32,
            f64,
            costs,
            copy_gbps: None,
        }
    }

    /// The models folder's name (its last component only).
    pub fn folder(&self) -> &str {
        &self.folder
    }

    /// How the models folder was found (`working directory`, ...).
    pub fn found(&self) -> &'static str {
        self.found
    }

    /// The device models are matched against.
    pub fn device(&self) -> Option<&str> {
        self.device.as_deref()
    }

    /// Every model file found.
    pub fn files(&self) -> &[ModelFile] {
        &self.files
    }

    fn pair(&self, p: Precision) -> &(Selector, ModelUsed) {
        match p {
            Precision::F32 => &self.f32,
            Precision::F64 => &self.f64,
        }
    }

    /// Which selector plans `p`.
    pub fn used(&self, p: Precision) -> &ModelUsed {
        &self.pair(p).1
    }

    /// Plans a matrix for precision `p` expected to be multiplied `calls`
    /// times, with the decision paths when `explain`.
    pub fn plan(
        &self,
        p: Precision,
        features: &Features,
        row_ptr: &[u32],
        calls: u64,
        explain: bool,
    ) -> Amortised {
        let ctx = self.context(p);
        self.pair(p)
            .0
            .plan_for_calls(features, row_ptr, calls, &ctx, explain)
    }

    /// Plans `a` for precision `p` and `calls` expected calls, computing its
    /// features (into the cell, through the function) only when the
    /// selector's weighing says they can pay (`Selector::plan_lazy`).
    pub fn plan_lazy(
        &self,
        p: Precision,
        (cell, compute): (&OnceLock<Features>, impl FnOnce() -> Features),
        a: &Csr<f64>,
        calls: u64,
        explain: bool,
    ) -> Amortised {
        let ctx = self.context(p);
        self.pair(p)
            .0
            .plan_lazy(cell, compute, a.rows(), a.ncols(), calls, &ctx, explain)
    }

    fn context(&self, p: Precision) -> AmortiseContext {
        AmortiseContext {
            costs: self.costs.clone(),
            copy_gbps: self.copy_gbps,
            value_bytes: p.bytes(),
        }
    }

    /// Predicted times of `plan` (over `binning`) and of the best single kernel,
    /// when the selector planning `p` is a model with a performance part.
    pub fn predict_time(
        &self,
        p: Precision,
        features: &Features,
        plan: &Plan,
        binning: &Binning,
    ) -> Option<TimePrediction> {
        match &self.pair(p).0 {
            Selector::Model(m) => m.predict_time(features, plan, binning),
            Selector::Rule => None,
        }
    }

    /// The performance model of the selector for `p`, if it has one.
    fn perf(&self, p: Precision) -> Option<&selector::PerfModel> {
        match &self.pair(p).0 {
            Selector::Model(m) => m.perf(),
            Selector::Rule => None,
        }
    }

    /// The performance model's own prediction (ms) of `plan` alone (the
    /// plan's part of [`Planner::predict_time`], without the best single
    /// kernel's); `None` as there.
    pub fn predict_plan_ms(
        &self,
        p: Precision,
        features: &Features,
        plan: &Plan,
        binning: &Binning,
    ) -> Option<f64> {
        let perf = self.perf(p)?;
        selector::plan_vector(features, plan, binning)
            .map(|x| perf.predict_ms(&x))
            .filter(|t| !t.is_nan())
    }

    /// The performance model's own prediction (ms) of one kernel alone over a
    /// matrix with these features; `None` without a performance model or for
    /// a kernel it does not know.
    pub fn predict_single(&self, p: Precision, features: &Features, k: KernelId) -> Option<f64> {
        let perf = self.perf(p)?;
        perf.kernels()
            .contains(&k)
            .then(|| perf.predict_ms(&selector::single_vector(features, k)))
            .filter(|t| t.is_finite())
    }

    /// A planner with the rule only (for tests and a server without models).
    pub fn rule_only(device: Option<&DeviceIdentity>) -> Planner {
        Planner::load(Path::new("/nonexistent-models-folder"), device)
    }

    /// Loads a model list directly (for tests); the files are named `model-<i>`.
    pub fn from_models(models: Vec<Model>, device: &DeviceIdentity) -> Planner {
        let kernels = kernel_sources();
        let names: Vec<String> = (0..models.len()).map(|i| format!("model-{i}")).collect();
        Planner {
            folder: String::new(),
            found: "given",
            device: Some(device.name.clone()),
            files: Vec::new(),
            f32: pick(&models, &names, Some(device), &kernels, Precision::F32),
            f64: pick(&models, &names, Some(device), &kernels, Precision::F64),
            costs: AnalysisCosts::calibrate(),
            copy_gbps: None,
        }
    }

    /// Takes the device's figures measured at start: its copy bandwidth (the
    /// time estimate without a performance model) and its per-launch cost.
    pub fn with_device_figures(
        mut self,
        copy_gbps: Option<f64>,
        launch_ms: Option<f64>,
    ) -> Planner {
        self.copy_gbps = copy_gbps;
        self.costs = self.costs.with_device_launch(launch_ms);
        // Each model's cost of planning with features is measured once, here
        // at start rather than on the first inline call that weighs it.
        for p in [Precision::F32, Precision::F64] {
            if let Selector::Model(m) = &self.pair(p).0 {
                let ms = m.planning_with_features_ms(&self.context(p));
                tracing::info!(precision = %p, planning_with_features_ms = ms, "planning cost measured");
            }
        }
        self
    }

    /// The analysis costs the planner weighs.
    pub fn costs(&self) -> &AnalysisCosts {
        &self.costs
    }
}

/// One non-empty bin of a plan.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[schema(as = Bin)]
pub struct BinView {
    /// Bin id.
    pub bin: usize,
    /// Rows in the bin.
    pub rows: usize,
    /// Nonzeros in the bin.
    pub nnz: u64,
    /// The kernel chosen for it.
    pub kernel: String,
}

/// A plan as sent in responses: the binning scheme and one kernel per non-empty bin.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[schema(as = Plan)]
pub struct PlanView {
    /// `single` or the granularity U.
    pub scheme: String,
    /// Rows per virtual row (U; the row count for the single-bin scheme).
    pub u: usize,
    /// The non-empty bins, by increasing id.
    pub bins: Vec<BinView>,
}

impl PlanView {
    /// The view of `plan` over `binning`.
    pub fn of(plan: &Plan, binning: &Binning) -> PlanView {
        PlanView {
            scheme: plan.scheme.to_string(),
            u: match plan.scheme {
                Scheme::Single => binning.nrows,
                Scheme::Granularity(u) => u as usize,
            },
            bins: plan
                .kernels
                .iter()
                .filter(|(b, _)| *b < binning.num_bins() && !binning.bins[*b].is_empty())
                .map(|&(b, k)| BinView {
                    bin: b,
                    rows: binning.row_count(b),
                    nnz: binning.bin_nnz[b],
                    kernel: k.name(),
                })
                .collect(),
        }
    }
}

// The OpenAPI description of `selector::MatchLevel` (its wire form), beside the types that use it.
/// How close a model's training device is to this one: the same device, the
/// same architecture class (e.g. PoCL CPU x86-64 with AVX2/AVX-512, NVIDIA
/// Hopper), only the same device type, or none (the rule baseline).
#[derive(utoipa::ToSchema)]
#[schema(as = MatchLevel)]
#[allow(dead_code)]
pub enum MatchLevelDoc {
    /// The same device.
    #[schema(rename = "exact")]
    Exact,
    /// The same architecture class.
    #[schema(rename = "same_class")]
    SameClass,
    /// Only the same device type.
    #[schema(rename = "same_type")]
    SameType,
    /// Nothing usable: the rule baseline plans.
    #[schema(rename = "none")]
    None,
}

/// A prediction with the selector that made it, ready to send.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The plan.
    pub plan: Plan,
    /// Its binning (reused to prepare the plan on the device).
    pub binning: Binning,
    /// The decision paths, when asked.
    pub explanation: Option<Explanation>,
    /// Which selector made it.
    pub model: ModelUsed,
    /// The race on the device that confirmed or replaced the plan (uploaded
    /// matrices only; see [`crate::service::tune`]).
    pub tuning: Option<crate::service::tune::Tuning>,
    /// How the plan was chosen for the calls the matrix is expected to serve.
    pub planning: Planning,
}
