//! Model choice and planning: the models of the models folder, the one matching
//! the device and each precision, the rule baseline otherwise, and the JSON view
//! of a plan (scheme, bins with their rows, nonzeros and kernel).

use crate::input::Precision;
use selector::{Explanation, Model, Prediction, Selector, SelectorInfo};
use serde::Serialize;
use sparse::{Binning, Features, Plan, Scheme};
use std::path::{Path, PathBuf};

/// A model file found in the models folder.
#[derive(Debug, Clone, Serialize)]
pub struct ModelFile {
    /// The file.
    pub path: String,
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
    /// Why it could not be loaded.
    pub error: Option<String>,
    /// Whether the server uses it (it matches the device and its precision).
    pub in_use: bool,
}

/// Which selector planned a request, as sent in responses.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelUsed {
    /// `model` or `rule`.
    pub kind: String,
    /// The model's content id (`rule` for the baseline).
    pub id: String,
    /// The model's device (`None` for the rule).
    pub device: Option<String>,
    /// The model's precision (`None` for the rule).
    pub precision: Option<String>,
    /// The model's creation date.
    pub created: Option<String>,
    /// True when no model matched and the rule baseline was used instead.
    pub fallback: bool,
    /// Why the rule was used, when it was.
    pub reason: Option<String>,
}

/// The selectors in use, one per precision.
pub struct Planner {
    folder: PathBuf,
    device: Option<String>,
    files: Vec<ModelFile>,
    f32: (Selector, ModelUsed),
    f64: (Selector, ModelUsed),
}

fn used(sel: &Selector, info: SelectorInfo, reason: Option<String>) -> ModelUsed {
    let fallback = matches!(sel, Selector::Rule);
    ModelUsed {
        kind: info.kind,
        id: info.id.unwrap_or_else(|| "rule".into()),
        device: info.device,
        precision: info.precision,
        created: info.created,
        fallback,
        reason: if fallback { reason } else { None },
    }
}

impl Planner {
    /// Loads the models of `folder` (a missing folder or bad files are reported in
    /// [`Planner::files`] and the log, never fatal) and picks, for each precision,
    /// the model matching `device` (the OpenCL device name), else the rule.
    pub fn load(folder: &Path, device: Option<&str>) -> Planner {
        let mut models = Vec::new();
        let mut files = Vec::new();
        match selector::load_models_dir(folder) {
            Ok(entries) => {
                for (path, res) in entries {
                    let path_s = path.display().to_string();
                    match res {
                        Ok(m) => {
                            files.push(ModelFile {
                                path: path_s,
                                id: Some(m.id()),
                                device: Some(m.card.device.clone()),
                                precision: Some(m.card.precision.clone()),
                                created: Some(m.card.created.clone()),
                                corpus: Some(m.card.corpus.clone()),
                                error: None,
                                in_use: false,
                            });
                            models.push(m);
                        }
                        Err(e) => {
                            tracing::warn!(file = %path_s, error = %e, "skipping a model file that does not load");
                            files.push(ModelFile {
                                path: path_s,
                                id: None,
                                device: None,
                                precision: None,
                                created: None,
                                corpus: None,
                                error: Some(e.to_string()),
                                in_use: false,
                            });
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(folder = %folder.display(), error = %e, "no models folder; planning with the rule baseline")
            }
        }
        let pick = |p: Precision| -> (Selector, ModelUsed) {
            let sel = match device {
                Some(d) => Selector::choose(models.iter().cloned(), d, p.name()),
                None => Selector::Rule,
            };
            let reason = match device {
                Some(d) => format!(
                    "no model in {} matches device '{d}' and precision {p}; using the rule baseline",
                    folder.display()
                ),
                None => format!("no OpenCL device, so no model can match; using the rule baseline for {p}"),
            };
            let info = sel.info();
            let u = used(&sel, info, Some(reason));
            (sel, u)
        };
        let f32 = pick(Precision::F32);
        let f64 = pick(Precision::F64);
        for f in &mut files {
            f.in_use = f.id.is_some()
                && (f.id.as_deref() == Some(&f32.1.id) || f.id.as_deref() == Some(&f64.1.id));
        }
        for (p, (_, u)) in [(Precision::F32, &f32), (Precision::F64, &f64)] {
            tracing::info!(precision = %p, kind = %u.kind, id = %u.id, "plan selector");
        }
        Planner {
            folder: folder.to_path_buf(),
            device: device.map(str::to_string),
            files,
            f32,
            f64,
        }
    }

    /// The models folder.
    pub fn folder(&self) -> &Path {
        &self.folder
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

    /// Plans a matrix for precision `p`, with the decision paths when `explain`.
    pub fn plan(
        &self,
        p: Precision,
        features: &Features,
        row_ptr: &[u32],
        explain: bool,
    ) -> Prediction {
        let sel = &self.pair(p).0;
        if explain {
            sel.plan_explained(features, row_ptr)
        } else {
            sel.plan(features, row_ptr)
        }
    }

    /// A planner with the rule only (for tests and a server without models).
    pub fn rule_only(device: Option<&str>) -> Planner {
        Planner::load(Path::new("/nonexistent-models-folder"), device)
    }

    /// Loads a model list directly (for tests).
    pub fn from_models(models: Vec<Model>, device: &str) -> Planner {
        let pick = |p: Precision| {
            let sel = Selector::choose(models.iter().cloned(), device, p.name());
            let reason = format!(
                "no model matches device '{device}' and precision {p}; using the rule baseline"
            );
            let info = sel.info();
            let u = used(&sel, info, Some(reason));
            (sel, u)
        };
        Planner {
            folder: PathBuf::new(),
            device: Some(device.to_string()),
            files: Vec::new(),
            f32: pick(Precision::F32),
            f64: pick(Precision::F64),
        }
    }
}

/// One non-empty bin of a plan.
#[derive(Debug, Clone, Serialize, PartialEq)]
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

/// A plan as sent in responses.
#[derive(Debug, Clone, Serialize, PartialEq)]
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
}
