//! The two-stage model (stage 1: features -> scheme U; stage 2: features + U +
//! bin -> kernel), its model card, JSON save/load with the feature-order check,
//! and prediction with optional decision paths.

use crate::device::{DeviceClass, DeviceIdentity, DeviceType};
use crate::explain::{BinDecision, Explanation, Prediction, SchemeDecision, Step, Went};
use crate::perf::{PerfModel, TimePrediction};
use crate::quick::{Facts, KeptCell, QuickModel};
use crate::tree::{Hop, Tree};
use crate::vector::{spread, stage2_vector_sized};
use crate::{
    stage1_vector, KernelSources, SelectorError, TrainParams, STAGE1_FEATURES, STAGE2_FEATURES,
};
use serde::{Deserialize, Serialize};
use sparse::{BinSizes, Binning, Features, KernelId, Plan, RowPtr, Scheme};
use std::path::{Path, PathBuf};

/// The model file format this build reads and writes.
pub const MODEL_FORMAT_VERSION: u32 = 1;

/// The feature layouts a model was trained on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureOrder {
    /// Stage-1 names; must equal [`STAGE1_FEATURES`] to load.
    pub stage1: Vec<String>,
    /// Stage-2 names; must equal [`STAGE2_FEATURES`] to load.
    pub stage2: Vec<String>,
}

impl FeatureOrder {
    /// This build's layouts.
    pub fn current() -> Self {
        FeatureOrder {
            stage1: STAGE1_FEATURES.iter().map(|s| s.to_string()).collect(),
            stage2: STAGE2_FEATURES.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// These layouts with `extra` appended to both stages.
    pub fn with_extra(mut self, extra: &[&str]) -> FeatureOrder {
        for e in extra {
            self.stage1.push(e.to_string());
            self.stage2.push(e.to_string());
        }
        self
    }
}

/// What a model is, where it comes from and how good it was: stored with the trees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    /// File format version ([`MODEL_FORMAT_VERSION`]).
    pub version: u32,
    /// The device the labels were measured on (its OpenCL name).
    pub device: String,
    /// `f32` or `f64`.
    pub precision: String,
    /// The feature layouts the trees read.
    pub feature_order: FeatureOrder,
    /// What the model was trained on (a manifest name or a description).
    pub corpus: String,
    /// When it was fitted, `YYYY-MM-DD` (UTC).
    pub created: String,
    /// The training parameters.
    pub hyper_parameters: TrainParams,
    /// Training and evaluation figures (free-form JSON; `fit` fills `train` and `labels`).
    pub metrics: serde_json::Value,
    /// Stage-1 classes: the candidate schemes, class `i` is `schemes[i]`.
    pub schemes: Vec<Scheme>,
    /// Stage-2 classes: the candidate kernels, class `i` is `kernels[i]`.
    pub kernels: Vec<KernelId>,
    /// The device's vendor string (`None` on cards written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    /// The device's driver version (`None` on cards written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// The device's type (`None` on cards written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_type: Option<DeviceType>,
    /// The kernel sources the labels were measured with (`None` on cards written
    /// before they were recorded); a service running other sources refuses the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_sources: Option<KernelSources>,
    /// The matrices the trees were fitted on (corpus names, sorted), so that
    /// an evaluation can leave them out: a held-out figure is one on matrices
    /// the model never saw. Empty on cards written before it was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trained_on: Vec<String>,
}

impl ModelCard {
    /// Records the device and kernel sources the model was trained on.
    pub fn record_training(&mut self, device: &DeviceIdentity, kernels: KernelSources) {
        self.device = device.name.clone();
        self.vendor = Some(device.vendor.clone());
        self.driver = Some(device.driver.clone());
        self.device_type = Some(device.device_type);
        self.kernel_sources = Some(kernels);
    }

    /// The training device as an identity; on a legacy card the missing vendor
    /// and driver are empty, and the type is CPU when the name is PoCL's CPU
    /// device (its names say so), else unknown.
    pub fn identity(&self) -> DeviceIdentity {
        let mut id = DeviceIdentity {
            name: self.device.trim().to_string(),
            vendor: self.vendor.clone().unwrap_or_default(),
            driver: self.driver.clone().unwrap_or_default(),
            device_type: self.device_type.unwrap_or_default(),
        };
        if self.device_type.is_none() && matches!(id.class(), DeviceClass::PoclCpu { .. }) {
            id.device_type = DeviceType::Cpu;
        }
        id
    }

    /// The card fields this card lacks because it predates them.
    pub fn unrecorded(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.kernel_sources.is_none() {
            out.push("kernel source hashes");
        }
        if self.vendor.is_none() {
            out.push("device vendor");
        }
        if self.driver.is_none() {
            out.push("driver version");
        }
        if self.device_type.is_none() {
            out.push("device type");
        }
        out
    }
}

#[cfg(test)]
impl ModelCard {
    /// The card of the unit tests' hand-built models: device `test`, `f64`,
    /// the current feature order, U = 10 as the only scheme, and `kernels` as
    /// the stage-2 classes.
    pub(crate) fn for_test(kernels: Vec<KernelId>, metrics: serde_json::Value) -> Self {
        ModelCard {
            version: MODEL_FORMAT_VERSION,
            device: "test".into(),
            precision: "f64".into(),
            feature_order: FeatureOrder::current(),
            corpus: "test".into(),
            created: "2026-01-01".into(),
            hyper_parameters: TrainParams::default(),
            metrics,
            schemes: vec![Scheme::Granularity(10)],
            kernels,
            vendor: None,
            driver: None,
            device_type: None,
            kernel_sources: None,
            trained_on: Vec::new(),
        }
    }
}

/// A fitted two-stage model with its card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// The model card; the trainer fills `device`, `precision`, `corpus` and adds metrics.
    pub card: ModelCard,
    pub(crate) stage1: Tree,
    pub(crate) stage2: Tree,
    /// The performance model (`None` in files written before it existed, or when
    /// the trainer fitted none): the model then plans but predicts no times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) perf: Option<PerfModel>,
    /// The quick part: one kernel from the matrix's sizes alone, for plans
    /// whose features would not pay (`None` in files written before it
    /// existed: [`Model::quick_kernel`] then falls back to the label counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) quick: Option<QuickModel>,
    /// The quick kernel without a quick part, read from the card once.
    #[serde(skip)]
    pub(crate) fallback: KeptCell<(KernelId, &'static str)>,
    /// Planning with features beyond the features, measured once.
    #[serde(skip)]
    pub(crate) planning_cost: KeptCell<f64>,
}

pub(crate) fn first_difference(
    stage: u8,
    model: &[String],
    current: &[&str],
) -> Result<(), SelectorError> {
    let n = model.len().max(current.len());
    for i in 0..n {
        let (m, c) = (model.get(i).map(String::as_str), current.get(i).copied());
        if m != c {
            let show = |s: Option<&str>| s.map_or("nothing".to_string(), |s| format!("'{s}'"));
            return Err(SelectorError::FeatureOrderMismatch {
                stage,
                position: i,
                model: show(m),
                current: show(c),
            });
        }
    }
    Ok(())
}

impl Model {
    pub(crate) fn new(card: ModelCard, stage1: Tree, stage2: Tree) -> Self {
        Model {
            card,
            stage1,
            stage2,
            perf: None,
            quick: None,
            fallback: KeptCell::default(),
            planning_cost: KeptCell::default(),
        }
    }

    /// The quick part, when the file carries one.
    pub fn quick(&self) -> Option<&QuickModel> {
        self.quick.as_ref()
    }

    /// Attaches (or removes) the quick part.
    pub fn set_quick(&mut self, quick: Option<QuickModel>) {
        self.quick = quick;
    }

    /// The kernel for the whole matrix chosen without features, and how: the
    /// quick part when the file has one, else the kernel most often best in
    /// the card's stage-2 label counts (`metrics.labels.stage2.label_counts`,
    /// read the first time it is needed: a card changed after that is not
    /// read again), else the card's first kernel.
    pub fn quick_kernel(&self, facts: &Facts) -> (KernelId, &'static str) {
        if let Some(q) = &self.quick {
            return (q.kernel(facts), "the model's quick part");
        }
        self.fallback.get_or_init(|| self.label_count_kernel())
    }

    /// The kernel most often best in the card's stage-2 label counts (read
    /// once, the first time a quick plan needs it: see [`Model::quick_kernel`]).
    fn label_count_kernel(&self) -> (KernelId, &'static str) {
        let counts = self.card.metrics["labels"]["stage2"]["label_counts"].as_object();
        let most = counts.and_then(|c| {
            self.card
                .kernels
                .iter()
                .map(|k| (*k, c.get(&k.name()).and_then(|v| v.as_u64()).unwrap_or(0)))
                .filter(|(_, n)| *n > 0)
                .fold(None, |b: Option<(KernelId, u64)>, x| match b {
                    Some(b) if b.1 >= x.1 => Some(b),
                    _ => Some(x),
                })
        });
        match most {
            Some((k, _)) => (
                k,
                "no quick part: the kernel most often best in the model's labels",
            ),
            None => (
                self.card.kernels[0],
                "no quick part and no label counts: the model's first kernel",
            ),
        }
    }

    /// The performance model, when the file carries one.
    pub fn perf(&self) -> Option<&PerfModel> {
        self.perf.as_ref()
    }

    /// The performance model when the planner may choose plans by it (none
    /// when it predicts only, [`PerfModel::predict_only`]).
    pub fn planning_perf(&self) -> Option<&PerfModel> {
        self.perf.as_ref().filter(|p| !p.predict_only)
    }

    /// Attaches (or removes) the performance model.
    pub fn set_perf(&mut self, perf: Option<PerfModel>) {
        self.perf = perf;
    }

    /// Predicted times of `plan` (over `binning`, the binning of its scheme) and of
    /// the best single kernel; `None` without a performance model or for a plan
    /// with no bins.
    pub fn predict_time(
        &self,
        features: &Features,
        plan: &Plan,
        binning: &Binning,
    ) -> Option<TimePrediction> {
        self.perf.as_ref()?.predict_plan(features, plan, binning)
    }

    /// Parses a model from JSON. Checks, in this order: the format version, the
    /// feature order of each stage against this build (the error names the first
    /// differing feature), then that the trees only use known features and classes.
    pub fn from_json_str(s: &str) -> Result<Model, SelectorError> {
        let v: serde_json::Value = serde_json::from_str(s)?;
        let card = v
            .get("card")
            .ok_or_else(|| SelectorError::InvalidModel("no `card` object".into()))?;
        let version = card.get("version").and_then(|v| v.as_u64());
        if version != Some(MODEL_FORMAT_VERSION as u64) {
            return Err(SelectorError::UnsupportedVersion {
                found: version.unwrap_or(0),
                supported: MODEL_FORMAT_VERSION,
            });
        }
        let order: FeatureOrder = serde_json::from_value(
            card.get("feature_order")
                .cloned()
                .ok_or_else(|| SelectorError::InvalidModel("no `card.feature_order`".into()))?,
        )?;
        first_difference(1, &order.stage1, &STAGE1_FEATURES)?;
        first_difference(2, &order.stage2, &STAGE2_FEATURES)?;
        let m: Model = serde_json::from_value(v)?;
        if m.card.schemes.is_empty() || m.card.kernels.is_empty() {
            return Err(SelectorError::InvalidModel(
                "the card lists no schemes or no kernels".into(),
            ));
        }
        m.stage1
            .validate(STAGE1_FEATURES.len(), m.card.schemes.len())
            .map_err(|e| SelectorError::InvalidModel(format!("stage-1 tree: {e}")))?;
        m.stage2
            .validate(STAGE2_FEATURES.len(), m.card.kernels.len())
            .map_err(|e| SelectorError::InvalidModel(format!("stage-2 tree: {e}")))?;
        if let Some(p) = &m.perf {
            p.validate()?;
        }
        if let Some(q) = &m.quick {
            q.validate()?;
        }
        Ok(m)
    }

    /// The model as pretty JSON.
    pub fn to_json_string(&self) -> String {
        serde_json::to_string_pretty(self).expect("a model always serializes")
    }

    /// Reads a model file (see [`Model::from_json_str`]).
    pub fn load(path: impl AsRef<Path>) -> Result<Model, SelectorError> {
        let path = path.as_ref();
        let s = std::fs::read_to_string(path).map_err(|source| SelectorError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Model::from_json_str(&s)
    }

    /// Writes the model as JSON (through a temporary file renamed into place, so a
    /// reader never sees half a model).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), SelectorError> {
        let path = path.as_ref();
        let io = |source| SelectorError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, self.to_json_string()).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// A short content id: the first 16 hex digits of the BLAKE3 hash of the JSON.
    pub fn id(&self) -> String {
        let json = serde_json::to_vec(self).expect("a model always serializes");
        blake3::hash(&json).to_hex()[..16].to_string()
    }

    /// Stage 1 on a stage-1 vector (order [`STAGE1_FEATURES`]).
    pub fn predict_scheme(&self, x: &[f64]) -> Scheme {
        self.scheme_of(x).0
    }

    /// Stage 2 on a stage-2 vector (order [`STAGE2_FEATURES`]).
    pub fn predict_kernel(&self, x: &[f64]) -> KernelId {
        self.kernel_of(x).0
    }

    /// Number of leaves of (stage 1, stage 2).
    pub fn leaves(&self) -> (usize, usize) {
        (self.stage1.leaves(), self.stage2.leaves())
    }

    /// Depth of (stage 1, stage 2).
    pub fn depths(&self) -> (usize, usize) {
        (self.stage1.depth(), self.stage2.depth())
    }

    pub(crate) fn scheme_class(&self, x: &[f64]) -> usize {
        let tx: Vec<f64> = x.iter().map(|&v| spread(v)).collect();
        self.stage1.walk(&tx).0
    }

    pub(crate) fn kernel_class(&self, x: &[f64]) -> usize {
        let tx: Vec<f64> = x.iter().map(|&v| spread(v)).collect();
        self.stage2.walk(&tx).0
    }

    pub(crate) fn scheme_of(&self, x: &[f64]) -> (Scheme, Vec<Hop>) {
        let tx: Vec<f64> = x.iter().map(|&v| spread(v)).collect();
        let (c, path) = self.stage1.walk(&tx);
        // A validated model has every class in its list; Single is the safe default.
        (
            self.card.schemes.get(c).copied().unwrap_or(Scheme::Single),
            path,
        )
    }

    pub(crate) fn kernel_of(&self, x: &[f64]) -> (KernelId, Vec<Hop>) {
        let tx: Vec<f64> = x.iter().map(|&v| spread(v)).collect();
        let (c, path) = self.stage2.walk(&tx);
        (
            self.card
                .kernels
                .get(c)
                .copied()
                .unwrap_or(KernelId::Serial),
            path,
        )
    }

    /// Plans a matrix: stage 1 picks the scheme, the matrix is binned with it, stage 2
    /// picks a kernel for each non-empty bin. `row_ptr` is the matrix's CSR row
    /// pointer (as [`sparse::Csr::row_ptr`] gives). Never panics: an empty matrix
    /// gets a plan with no bins, and a malformed `row_ptr` (not non-decreasing) is
    /// binned with the single-bin scheme.
    pub fn predict<'r>(&self, features: &Features, row_ptr: impl Into<RowPtr<'r>>) -> Prediction {
        self.plan_matrix(features, row_ptr.into(), false)
    }

    /// As [`Model::predict`], with the decision path of each tree.
    pub fn predict_explained<'r>(
        &self,
        features: &Features,
        row_ptr: impl Into<RowPtr<'r>>,
    ) -> Prediction {
        self.plan_matrix(features, row_ptr.into(), true)
    }

    fn plan_matrix(&self, features: &Features, rp: RowPtr<'_>, explain: bool) -> Prediction {
        let row_ptr = rp.as_slice();
        let x1 = stage1_vector(features);
        let (mut scheme, hops1) = self.scheme_of(&x1);
        if !rp.is_monotone() {
            scheme = Scheme::Single;
        }
        // Kernels are chosen from the bins' sizes; the lists of their virtual
        // rows are built below only if the plan keeps the bins.
        let sizes = BinSizes::new(row_ptr, scheme);
        let mut kernels = Vec::new();
        let mut bins = Vec::new();
        for b in sizes.nonempty_bins() {
            let x2 = stage2_vector_sized(features, &sizes, b);
            let (k, hops2) = self.kernel_of(&x2);
            kernels.push((b, k));
            if explain {
                bins.push(BinDecision {
                    bin: b,
                    rows: sizes.rows[b] as usize,
                    nnz: sizes.nnz[b],
                    path: steps(&hops2, &x2, &STAGE2_FEATURES),
                    kernel: k,
                });
            }
        }
        // Every bin chose the same kernel: the grouped launch is that kernel over
        // every row as a plain range (`engine::launch_key`), the launch of the
        // single-bin scheme, but preparing it would first expand and merge the
        // bins' rows on the host. Same launch, less analysis, so the plan is
        // collapsed (and the explanation says so), and its bins never listed.
        let uniform = kernels
            .first()
            .map(|f| f.1)
            .filter(|k| kernels.iter().all(|(_, kk)| kk == k));
        let (plan, binning, collapsed_from) = match uniform {
            Some(k) if scheme != Scheme::Single => (
                Plan::single(k),
                Binning::new(row_ptr, Scheme::Single),
                Some(scheme),
            ),
            _ => (
                Plan { scheme, kernels },
                Binning::new(row_ptr, scheme),
                None,
            ),
        };
        let explanation = explain.then(|| Explanation {
            selector: "model".into(),
            stage1: SchemeDecision {
                path: steps(&hops1, &x1, &STAGE1_FEATURES),
                scheme,
            },
            stage2: bins,
            collapsed_from,
        });
        Prediction {
            plan,
            binning,
            explanation,
        }
    }
}

pub(crate) fn steps(hops: &[Hop], x: &[f64], names: &[&str]) -> Vec<Step> {
    hops.iter()
        .map(|h| Step {
            feature: names.get(h.feature).copied().unwrap_or("?").to_string(),
            threshold: h.threshold,
            value: x.get(h.feature).copied().unwrap_or(f64::NAN),
            went: if h.left { Went::Left } else { Went::Right },
        })
        .collect()
}

/// A model file's path and what loading it gave.
pub type LoadedModel = (PathBuf, Result<Model, SelectorError>);

/// Loads every `*.json` file of a folder as a model, sorted by file name; each
/// entry carries its own result, so one bad file does not hide the others.
pub fn load_models_dir(dir: impl AsRef<Path>) -> Result<Vec<LoadedModel>, SelectorError> {
    let dir = dir.as_ref();
    let rd = std::fs::read_dir(dir).map_err(|source| SelectorError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut paths: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json") && p.is_file())
        .collect();
    paths.sort();
    Ok(paths
        .into_iter()
        .map(|p| {
            let m = Model::load(&p);
            (p, m)
        })
        .collect())
}

/// Today's date (UTC) as `YYYY-MM-DD`.
pub(crate) fn today_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    civil_date((secs / 86_400) as i64)
}

/// Days since 1970-01-01 -> `YYYY-MM-DD` (proleptic Gregorian calendar).
fn civil_date(days: i64) -> String {
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(59), "1970-03-01");
        assert_eq!(civil_date(11_016), "2000-02-29");
        assert_eq!(civil_date(19_723), "2024-01-01");
        assert_eq!(today_utc().len(), 10);
    }

    #[test]
    fn first_difference_names_the_feature() {
        let m: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        assert!(first_difference(1, &m, &["a", "b", "c"]).is_ok());
        let e = first_difference(2, &m, &["a", "x", "c"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("stage-2")
                && e.contains("position 1")
                && e.contains("'b'")
                && e.contains("'x'"),
            "{e}"
        );
        let e = first_difference(1, &m, &["a", "b", "c", "d"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("position 3") && e.contains("nothing") && e.contains("'d'"),
            "{e}"
        );
    }
}
