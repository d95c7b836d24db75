//! The trainer's stages wired together: label a corpus in both precisions, split,
//! fit (comparing the weighting variants on a validation slice of the training
//! set, by time lost), evaluate the held-out matrices, and write the models and
//! the report.

use crate::corpus::Item;
use crate::dataset::{samples, Samples};
use crate::evaluate::{self, EvalRow, Summary};
use crate::label::{LabelOptions, Labeller, MatrixLabels};
use crate::split::{kind_class, size_bucket, split, Side};
use anyhow::{Context, Result};
use engine::Engine;
use indicatif::{ProgressBar, ProgressStyle};
use selector::{Model, ParamGuard, Stage1Sample, Stage2Sample, TrainParams, Weighting};
use sparse::Csr;
use std::path::{Path, PathBuf};
use std::time::Instant;
use store::{DeviceId, DeviceRecord, Precision, RunId, RunRecord, RunStatus, Store};

/// One labelled matrix of the corpus, in one precision.
#[derive(Debug, Clone)]
pub struct Labelled {
    /// Index into the corpus.
    pub item: usize,
    /// Its labels.
    pub labels: MatrixLabels,
    /// Its training samples.
    pub samples: Samples,
    /// Its CSR row pointer (to plan it again without reading it again).
    pub row_ptr: Vec<u32>,
}

/// The results of labelling a corpus in both precisions.
#[derive(Debug, Default)]
pub struct LabelledCorpus {
    /// f32 labels.
    pub f32: Vec<Labelled>,
    /// f64 labels.
    pub f64: Vec<Labelled>,
    /// Items that failed to load or run, with the reason.
    pub failed: Vec<(String, String)>,
    /// Whether the time budget ran out before the end.
    pub interrupted: bool,
    /// Wall time spent, seconds.
    pub seconds: f64,
}

impl LabelledCorpus {
    /// The labels of one precision.
    pub fn of(&self, p: Precision) -> &[Labelled] {
        match p {
            Precision::F32 => &self.f32,
            Precision::F64 => &self.f64,
        }
    }

    fn of_mut(&mut self, p: Precision) -> &mut Vec<Labelled> {
        match p {
            Precision::F32 => &mut self.f32,
            Precision::F64 => &mut self.f64,
        }
    }
}

/// The device and database the trainer works with.
pub struct Env {
    /// The OpenCL device.
    pub engine: Engine,
    /// The results database.
    pub store: Store,
    /// The device's row.
    pub device: DeviceId,
}

impl Env {
    /// Opens the device (by selector, or the best found) and the database
    /// (`DATABASE_URL`, else `spmv.db` in the working directory), and registers
    /// the device with its measured copy bandwidth.
    pub async fn open(device: Option<&str>, database: Option<&str>) -> Result<Env> {
        let engine = Engine::new(device).context("opening the OpenCL device")?;
        let store = Store::connect(database)
            .await
            .context("opening the results database")?;
        let bw = engine.copy_bandwidth(256 << 20, 5).ok().map(|b| b.gbps);
        let info = engine.info().clone();
        let device = store
            .upsert_device(&DeviceRecord {
                name: info.name.clone(),
                vendor: info.vendor.clone(),
                driver: info.driver.clone(),
                compute_units: info.compute_units,
                global_mem_bytes: info.global_mem_bytes,
                copy_bandwidth_gbps: bw,
            })
            .await?;
        eprintln!(
            "trainer: device '{}' ({}, {} compute units, copy bandwidth {}), database {}",
            info.name,
            info.kind,
            info.compute_units,
            bw.map_or("not measured".into(), |b| format!("{b:.1} GB/s")),
            store.location()
        );
        Ok(Env {
            engine,
            store,
            device,
        })
    }

    /// A labeller attributed to `run`.
    pub fn labeller(&self, run: Option<RunId>, opts: LabelOptions) -> Labeller<'_> {
        Labeller {
            engine: &self.engine,
            store: &self.store,
            device: self.device,
            run,
            opts,
            heartbeat: crate::runs::Heartbeat::new(run),
        }
    }
}

fn progress(n: usize, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(n as u64);
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "{what} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} ETA {{eta}} {{msg}}"
        ))
        .expect("valid template"),
    );
    pb
}

async fn label_one(
    lab: &Labeller<'_>,
    item: &Item,
    idx: usize,
    (a, precision): (&Csr<f64>, Precision),
    deadline: Option<Instant>,
) -> Result<Option<Labelled>> {
    Ok(lab
        .label(&item.name, &item.source, a, precision, deadline)
        .await?
        .map(|labels| Labelled {
            item: idx,
            samples: samples(&labels, a.row_ptr()),
            row_ptr: a.row_ptr().to_vec(),
            labels,
        }))
}

/// Labels every item in the chosen precisions. Already-stored measurements are
/// reused; a time budget stops between measurements. Runs left `running` by a
/// killed trainer are marked interrupted first (the rule is in [`crate::runs`]).
pub async fn label_corpus(
    env: &Env,
    items: &[Item],
    precisions: &[Precision],
    opts: &LabelOptions,
    budget: Option<std::time::Duration>,
    params: serde_json::Value,
) -> Result<LabelledCorpus> {
    let start = Instant::now();
    let deadline = budget.map(|b| start + b);
    let me = crate::runs::this_process();
    crate::runs::interrupt_abandoned(&env.store, &me, opts.stale_after).await?;
    let record = RunRecord {
        device: Some(env.device),
        precision: (precisions.len() == 1).then(|| precisions[0]),
        params,
        notes: format!("labelling {} matrices", items.len()),
    };
    let run = env.store.start_owned_run(&record, &me).await?;
    let lab = env.labeller(Some(run), opts.clone());
    let mut out = LabelledCorpus::default();
    let pb = progress(items.len(), "label");
    for (i, item) in items.iter().enumerate() {
        pb.set_message(item.name.clone());
        let a = match item.load() {
            Ok(a) => a,
            Err(e) => {
                out.failed.push((item.name.clone(), format!("{e:#}")));
                pb.inc(1);
                continue;
            }
        };
        for &p in precisions {
            let r = label_one(&lab, item, i, (&a, p), deadline).await;
            match r.map(|l| l.map(|l| out.of_mut(p).push(l))) {
                Ok(Some(())) => {}
                Ok(None) => out.interrupted = true,
                Err(e) => out
                    .failed
                    .push((format!("{} ({p})", item.name), format!("{e:#}"))),
            }
        }
        pb.inc(1);
        lab.heartbeat.beat(&env.store).await?;
        if out.interrupted {
            break;
        }
    }
    pb.finish_and_clear();
    out.seconds = start.elapsed().as_secs_f64();
    let status = if out.interrupted {
        RunStatus::Interrupted
    } else {
        RunStatus::Finished
    };
    env.store
        .finish_run(
            run,
            status,
            &format!(
                "{} f32 + {} f64 labelled, {} failed, {:.0} s",
                out.f32.len(),
                out.f64.len(),
                out.failed.len(),
                out.seconds
            ),
        )
        .await?;
    Ok(out)
}

/// The split of labelled items (by corpus item, so both precisions agree).
pub fn split_items(items: &[Item], seed: u64) -> Vec<Side> {
    let strata: Vec<(String, u32)> = items
        .iter()
        .map(|it| {
            let nnz = match &it.spec {
                crate::corpus::Spec::Generator { nnz, .. } => *nnz,
                crate::corpus::Spec::Standin {
                    nnz_budget, stats, ..
                } => (*nnz_budget).min(stats.nnz as usize),
                crate::corpus::Spec::File(p) => std::fs::metadata(p)
                    .map(|m| m.len() as usize / 8)
                    .unwrap_or(0),
            };
            (kind_class(&it.source, &it.kind), size_bucket(nnz))
        })
        .collect();
    split(&strata, 0.25, seed)
}

/// Near-tie tolerances tried when fitting (relative to the best time).
pub const TIE_TOLERANCES: [f64; 4] = [0.02, 0.05, 0.10, 0.20];

/// Tree depths tried when fitting.
pub const MAX_DEPTHS: [usize; 4] = [4, 6, 9, 14];

/// Smallest leaf weights tried when fitting (larger leaves average out timer noise).
pub const MIN_WEIGHT_LEAF: [f32; 2] = [1.0, 4.0];

/// The time (ms) of `plan` on a labelled matrix, estimated from the labels: the
/// sum of its bins' times alone, scaled by how the scheme's best plan as a whole
/// compared with its bins alone (launch interaction). `None` when a bin or kernel
/// was not labelled.
pub fn estimate_plan_ms(labels: &MatrixLabels, plan: &sparse::Plan) -> Option<f64> {
    let mut sum = 0.0;
    for (bin, k) in &plan.kernels {
        let times = labels.bins.get(&(plan.scheme, *bin))?;
        sum += times.iter().find(|(kk, _)| kk == k)?.1;
    }
    let factor = labels
        .plans
        .get(&plan.scheme)
        .filter(|p| p.bins_sum_ms > 0.0 && plan.kernels.len() > 1)
        .map_or(1.0, |p| p.total_ms / p.bins_sum_ms);
    Some(sum * factor)
}

/// Geometric mean over labelled matrices of oracle time / estimated time of the
/// model's plan (1.0 is perfect); matrices whose plan cannot be estimated count as
/// their slowest scheme.
pub fn validation_score(model: &Model, labelled: &[&Labelled]) -> f64 {
    let mut log = 0.0;
    let mut n = 0usize;
    for l in labelled {
        let Some((_, oracle)) = l.labels.oracle() else {
            continue;
        };
        let pred = model.predict(&l.labels.features, &l.row_ptr);
        let worst = l
            .labels
            .plans
            .values()
            .map(|p| p.total_ms)
            .fold(oracle.total_ms, f64::max);
        let t = estimate_plan_ms(&l.labels, &pred.plan)
            .unwrap_or(worst)
            .max(1e-12);
        log += (oracle.total_ms.min(t) / t).ln();
        n += 1;
    }
    if n == 0 {
        0.0
    } else {
        (log / n as f64).exp()
    }
}

/// What fitting produced for one precision.
pub struct Fitted {
    /// The chosen model (card filled).
    pub model: Model,
    /// Validation results of every weighting variant.
    pub variants: serde_json::Value,
}

/// Fits a model on the training side: the weighting variants are compared on a
/// validation quarter of the training matrices by time lost, and the best one is
/// refitted on all training matrices.
pub fn fit_precision(
    train: &[&Labelled],
    device: &str,
    precision: Precision,
    corpus: &str,
    seed: u64,
) -> Result<Fitted> {
    let perf = selector::PerfParams::default();
    fit_precision_with(train, device, precision, corpus, seed, perf)
}

/// As [`fit_precision`], with the performance model's parameters.
pub fn fit_precision_with(
    train: &[&Labelled],
    device: &str,
    precision: Precision,
    corpus: &str,
    seed: u64,
    perf_params: selector::PerfParams,
) -> Result<Fitted> {
    let v = Validation::split(train, seed);
    let (results, params, best_score) = search_params(&v, seed)?;
    let all1: Vec<Stage1Sample> = train.iter().map(|l| l.samples.stage1.clone()).collect();
    let all2: Vec<Stage2Sample> = train
        .iter()
        .flat_map(|l| l.samples.stage2.iter().cloned())
        .collect();
    let mut model = selector::fit(&all1, &all2, &params)?;
    let perf = crate::perf_fit::fit(train, perf_params, seed)?;
    model.card.device = device.to_string();
    model.card.precision = precision.as_str().to_string();
    model.card.corpus = corpus.to_string();
    let variants = serde_json::to_value(&results)?;
    if let Some(m) = model.card.metrics.as_object_mut() {
        m.insert("variants_on_validation".into(), variants.clone());
        m.insert(
            "chosen_weighting".into(),
            serde_json::to_value(params.weighting())?,
        );
        m.insert(
            "chosen_tie_tolerance".into(),
            serde_json::json!(params.tie_tolerance()),
        );
        m.insert(
            "chosen_max_depth".into(),
            serde_json::json!(params.max_depth()),
        );
        m.insert(
            "chosen_min_weight_leaf".into(),
            serde_json::json!(params.min_weight_leaf()),
        );
        m.insert(
            "validation_geomean_oracle_ratio".into(),
            serde_json::json!(best_score),
        );
        m.insert("train_matrices".into(), serde_json::json!(train.len()));
        if let Some((_, fitted)) = &perf {
            m.insert("perf_fit".into(), fitted.clone());
        }
    }
    model.set_perf(perf.map(|(p, _)| p));
    Ok(Fitted { model, variants })
}

/// The training matrices split into a fitting part and a validation quarter.
struct Validation<'a> {
    /// Stage-1 and stage-2 samples of the fitting part.
    fit: (Vec<Stage1Sample>, Vec<Stage2Sample>),
    /// The validation matrices.
    valid: Vec<&'a Labelled>,
}

impl<'a> Validation<'a> {
    /// A quarter of `train` for validation, stratified by size.
    fn split(train: &'a [&'a Labelled], seed: u64) -> Validation<'a> {
        let (fit, valid) =
            crate::split::validation_part(train, |l| l.labels.features.values[2] as usize, seed);
        let t1 = fit.iter().map(|l| l.samples.stage1.clone()).collect();
        let t2 = fit
            .iter()
            .flat_map(|l| l.samples.stage2.iter().cloned())
            .collect();
        Validation {
            fit: (t1, t2),
            valid,
        }
    }
}

/// The trainer's parameter grid in search order: every tie tolerance, then
/// depth, leaf weight (splits need twice the leaf's) and weighting.
pub(crate) fn param_grid(seed: u64) -> Result<Vec<selector::ValidTrainParams>> {
    let mut grid = Vec::new();
    for tol in TIE_TOLERANCES {
        for depth in MAX_DEPTHS {
            for leaf in MIN_WEIGHT_LEAF {
                for w in Weighting::ALL {
                    grid.push(
                        TrainParams::new()
                            .seed(seed)
                            .tie_tolerance(tol)
                            .max_depth(depth)
                            .min_weight_leaf(leaf)
                            .min_weight_split(2.0 * leaf)
                            .weighting(w)
                            .check()?,
                    );
                }
            }
        }
    }
    Ok(grid)
}

/// Every (tolerance, weighting, depth, leaf) fitted on the fitting part and
/// judged on the validation matrices by what users feel: the time of the whole
/// plan it predicts (estimated from the labels) against the oracle's, geometric
/// mean over matrices. Timer noise on microsecond kernels is larger than 2%,
/// hence the tolerances; near-tied labels invite overfitting, hence the depths.
/// Returns every variant's result, the best parameters and their score.
fn search_params(
    v: &Validation<'_>,
    seed: u64,
) -> Result<(Vec<serde_json::Value>, selector::ValidTrainParams, f64)> {
    let mut results = Vec::new();
    let mut best: Option<(selector::ValidTrainParams, f64)> = None;
    for p in param_grid(seed)? {
        let model = selector::fit(&v.fit.0, &v.fit.1, &p)?;
        let score = validation_score(&model, &v.valid);
        results.push(serde_json::json!({
            "tie_tolerance": p.tie_tolerance(), "max_depth": p.max_depth(),
            "min_weight_leaf": p.min_weight_leaf(), "weighting": p.weighting(),
            "validation_geomean_oracle_ratio": score,
        }));
        if best.as_ref().is_none_or(|(_, b)| score > *b + 1e-12) {
            best = Some((p, score));
        }
    }
    let (params, score) = best.expect("at least one configuration");
    Ok((results, params, score))
}

/// Evaluates `model` on labelled matrices (all timed in this run) and returns the rows.
pub async fn evaluate_labelled(
    env: &Env,
    class: selector::RuleClass,
    model: &Model,
    items: &[Item],
    labelled: &[&Labelled],
    precision: Precision,
    opts: &LabelOptions,
) -> Result<Vec<EvalRow>> {
    let lab = env.labeller(None, opts.clone());
    let setup = crate::first_call::FirstCallSetup::new(Some(&env.engine));
    let mut rows = Vec::new();
    let pb = progress(labelled.len(), "evaluate");
    for l in labelled {
        let item = &items[l.item];
        pb.set_message(item.name.clone());
        let a = item.load()?;
        let row = evaluate::evaluate_matrix(
            &lab,
            class,
            model,
            &setup,
            (&item.name, &item.source),
            (&a, precision),
            &l.labels,
        )
        .await;
        match row {
            Ok(r) => rows.push(r),
            Err(e) => eprintln!("evaluate: {} failed: {e:#}", item.name),
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(rows)
}

/// A confusion matrix: class names, and counts by (best, predicted).
pub type Confusion = (Vec<String>, Vec<Vec<usize>>);

/// Confusion matrices of both stages on labelled matrices.
pub fn confusions(model: &Model, labelled: &[&Labelled]) -> (Confusion, Confusion) {
    let schemes: Vec<sparse::Scheme> = sparse::Scheme::all();
    let mut c1 = vec![vec![0usize; schemes.len()]; schemes.len()];
    for l in labelled {
        let pred = model.predict_scheme(&l.samples.stage1.features);
        if let (Some((o, _)), Some(pi)) =
            (l.labels.oracle(), schemes.iter().position(|s| *s == pred))
        {
            if let Some(oi) = schemes.iter().position(|s| *s == o) {
                c1[oi][pi] += 1;
            }
        }
    }
    let kernels = sparse::KernelId::all();
    let mut c2 = vec![vec![0usize; kernels.len()]; kernels.len()];
    for l in labelled {
        for s in &l.samples.stage2 {
            let pred = model.predict_kernel(&s.x);
            let best = s
                .kernel_times
                .iter()
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|t| t.0);
            if let (Some(b), Some(pi)) = (best, kernels.iter().position(|k| *k == pred)) {
                if let Some(bi) = kernels.iter().position(|k| *k == b) {
                    c2[bi][pi] += 1;
                }
            }
        }
    }
    (
        (schemes.iter().map(|s| s.to_string()).collect(), c1),
        (kernels.iter().map(|k| k.name()).collect(), c2),
    )
}

/// Label distribution: how often each scheme is the oracle and each kernel the best on a bin.
pub fn label_distribution(labelled: &[Labelled]) -> serde_json::Value {
    use std::collections::BTreeMap;
    let mut schemes: BTreeMap<String, usize> = BTreeMap::new();
    let mut kernels: BTreeMap<String, usize> = BTreeMap::new();
    let mut whole: BTreeMap<String, usize> = BTreeMap::new();
    for l in labelled {
        if let Some((s, _)) = l.labels.oracle() {
            *schemes.entry(s.to_string()).or_default() += 1;
        }
        for times in l.labels.bins.values() {
            if let Some(b) = times.iter().min_by(|a, b| a.1.total_cmp(&b.1)) {
                *kernels.entry(b.0.name()).or_default() += 1;
            }
        }
        if let Some(times) = l.labels.bins.get(&(sparse::Scheme::Single, 0)) {
            if let Some(b) = times.iter().min_by(|a, b| a.1.total_cmp(&b.1)) {
                *whole.entry(b.0.name()).or_default() += 1;
            }
        }
    }
    serde_json::json!({
        "oracle_scheme": schemes,
        "best_kernel_per_bin": kernels,
        "best_single_kernel_whole_matrix": whole,
    })
}

/// File name of a model for a device and precision: `<device-slug>-<precision>.json`.
pub fn model_file_name(device: &str, precision: Precision) -> String {
    let slug: String = device
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect::<String>()
        .split('-')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    format!("{slug}-{}.json", precision.as_str())
}

/// Prints the summary lines and returns the JSON of the summary.
pub fn print_summary(tag: &str, s: &Summary) {
    println!("== {tag}: {} matrices", s.matrices);
    println!(
        "   oracle/predicted: geomean {:.3}, worst {:.3} ({}); first call incl. overhead: geomean {:.3}; overhead median {:.2} SpMV-equivalents",
        s.geomean_oracle_ratio, s.worst_oracle_ratio, s.worst_matrix, s.geomean_oracle_ratio_first_call, s.median_overhead_spmv_equivalents
    );
    println!(
        "   first call with the model plan's preparation counted: geomean {:.3}, overhead median {:.2}; planned for one call (amortised, all analysis counted): geomean {:.3}, overhead median {:.2} SpMV-equivalents ({} of {} ran another plan); features alone median {:.2}",
        s.geomean_oracle_ratio_first_call_prepared,
        s.median_overhead_spmv_equivalents_prepared,
        s.geomean_oracle_ratio_first_call_amortised,
        s.median_first_call_overhead_spmv_equivalents,
        s.first_call_changed,
        s.matrices,
        s.median_features_spmv_equivalents
    );
    println!(
        "   first call through the lazy planner (features only when they pay; {} of {} computed them): kernel-only geomean {:.3}, before (features always) {:.3}, overhead median {:.2} vs {:.2} SpMV-equivalents; end to end (parsed matrix to y, oracle's plan given for free): geomean {:.3}",
        s.first_call_features_computed,
        s.matrices,
        s.geomean_oracle_ratio_first_call_amortised,
        s.geomean_oracle_ratio_first_call_eager,
        s.median_first_call_overhead_spmv_equivalents,
        s.median_first_call_eager_overhead_spmv_equivalents,
        s.geomean_oracle_ratio_first_call_end_to_end
    );
    println!(
        "   uploaded, planned for {} calls as the service does (before tuning): geomean {:.3}, worst {:.3} ({})",
        crate::evaluate::UPLOAD_CALLS, s.geomean_oracle_ratio_uploaded, s.worst_oracle_ratio_uploaded, s.worst_matrix_uploaded
    );
    println!(
        "   uploaded and tuned (model plan raced against the single kernels): geomean {:.3}, worst {:.3} ({}); {} of {} switched",
        s.geomean_oracle_ratio_tuned, s.worst_oracle_ratio_tuned, s.worst_matrix_tuned, s.tuning_switched, s.matrices
    );
    println!(
        "   top-1 accuracy: stage 1 {:.1}%, stage 2 {:.1}%",
        100.0 * s.stage1_accuracy,
        100.0 * s.stage2_accuracy
    );
    println!(
        "   geomean speedup vs serial {:.2}x ({} won), vector {:.2}x ({}), CSR-Adaptive {:.2}x ({}), rule {:.2}x ({}), best single {:.2}x ({}), worst single {:.2}x",
        s.geomean_speedup_vs_serial, s.beats_serial, s.geomean_speedup_vs_vector, s.beats_vector,
        s.geomean_speedup_vs_csr_adaptive, s.beats_csr_adaptive, s.geomean_speedup_vs_rule, s.beats_rule,
        s.geomean_speedup_vs_best_single, s.beats_best_single, s.geomean_speedup_vs_worst_single
    );
    println!(
        "   best fixed kernel ({}, one kernel on every matrix): model plan {:.3}x ({} of {} won), tuned {:.3}x ({} won), tuned worst {:.3} ({}); tuned vs rule {:.3}x, vs CSR-Adaptive {:.3}x, worst vs the best single kernel {:.3}",
        if s.fixed_kernel.is_empty() { "none timed on every matrix" } else { &s.fixed_kernel },
        s.geomean_speedup_vs_fixed_kernel, s.beats_fixed_kernel, s.matrices,
        s.geomean_speedup_tuned_vs_fixed_kernel, s.beats_fixed_kernel_tuned,
        s.worst_tuned_vs_fixed_kernel, s.worst_matrix_tuned_vs_fixed_kernel,
        s.geomean_speedup_tuned_vs_rule, s.geomean_speedup_tuned_vs_csr_adaptive,
        s.worst_tuned_vs_best_single
    );
    if let Some(p) = &s.perf {
        println!("   {}", p.line());
    }
}

/// Writes CSV and report for rows, returns the summary.
pub fn write_outputs(
    out: &Path,
    tag: &str,
    rows: &[EvalRow],
    model: &Model,
    labelled: &[&Labelled],
    extra: serde_json::Value,
) -> Result<Summary> {
    std::fs::create_dir_all(out)?;
    let mut summary = evaluate::summarize(rows);
    summary.perf = crate::perf_eval::evaluate(model, labelled, rows);
    evaluate::write_csv(rows, &out.join(format!("evaluation_{tag}.csv")))?;
    let ((l1, c1), (l2, c2)) = confusions(model, labelled);
    evaluate::write_report(out, tag, rows, &summary, (&l1, &c1), (&l2, &c2), &extra)?;
    Ok(summary)
}

/// Where reports go by default.
pub fn default_report_dir() -> PathBuf {
    crate::corpus::repo_root().join("training-data/report")
}

/// Where a device's report goes by default: `training-data/report/<device-slug>/`.
pub fn device_report_dir(device: &str) -> PathBuf {
    let slug = model_file_name(device, Precision::F32);
    default_report_dir().join(slug.trim_end_matches("-f32.json"))
}
