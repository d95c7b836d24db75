//! The end of a training run, shared by `trainer run` (on the device) and
//! `trainer fit --from-db` (anywhere): per precision, split, fit, evaluate the
//! held-out matrices (re-timed on the device, or from stored measurements),
//! add the cuSPARSE and bandwidth-bound columns, write the model and the report.

use crate::corpus::Item;
use crate::evaluate::{self, EvalRow, Summary};
use crate::label::{self, LabelOptions};
use crate::peers::{self, CusparseTable};
use crate::pipeline::{self, Labelled};
use crate::split::Side;
use anyhow::{bail, Context, Result};
use selector::{Model, RuleClass};
use std::path::{Path, PathBuf};
use store::{ContextId, DeviceId, ModelRecord, Precision, Store};

/// How held-out matrices are timed.
pub enum Evaluator<'a> {
    /// Re-timed now on the device, back to back.
    Device(&'a pipeline::Env, LabelOptions),
    /// From the results database alone (no device), in one measurement context.
    Stored(&'a Store, DeviceId, ContextId),
}

/// Everything the end of a run needs besides the labels.
pub struct Finish<'a> {
    /// The corpus the labels index into.
    pub items: &'a [Item],
    /// Its split.
    pub sides: Vec<Side>,
    /// Description of the corpus for the model card.
    pub corpus: String,
    /// Seed of the fit.
    pub seed: u64,
    /// Device name the model is for.
    pub device: String,
    /// The device as the model card records it (name, vendor, driver, type).
    pub identity: selector::DeviceIdentity,
    /// Device class (the rule baseline's thresholds).
    pub class: RuleClass,
    /// Measured copy bandwidth of the device, GB/s.
    pub copy_gbps: Option<f64>,
    /// cuSPARSE figures, when given.
    pub cusparse: Option<CusparseTable>,
    /// Where models go.
    pub models_dir: PathBuf,
    /// Where the report goes.
    pub out: PathBuf,
    /// Extra facts for the model card (labelling time, ...).
    pub card_extra: serde_json::Value,
    /// How the performance model is fitted.
    pub perf: selector::PerfParams,
    /// Refit only the performance model of existing models (`None`: fit all).
    pub refit_perf: Option<PerfRefit>,
    /// The performance model predicts only ([`selector::PerfModel::predict_only`]).
    pub perf_predict_only: bool,
}

/// `fit --from-db --refit-perf-of`: the trees and card of existing models are
/// kept and only their performance model is refitted.
pub struct PerfRefit {
    /// Where the models to keep are.
    pub models_dir: PathBuf,
    /// What the card records of the refit (database, command); the new
    /// model's fitting choice and held-out figures are added to it.
    pub record: serde_json::Value,
}

/// What one precision produced.
pub struct Finished {
    /// The model file written.
    pub model_path: PathBuf,
    /// Summary over every held-out matrix.
    pub all: Summary,
    /// Summary over held-out real matrices.
    pub real: Summary,
}

impl Finish<'_> {
    /// Fits, evaluates and writes one precision's model and report.
    pub async fn precision(
        &self,
        ev: &Evaluator<'_>,
        store: &Store,
        precision: Precision,
        labelled: &[Labelled],
    ) -> Result<Finished> {
        let (train, test) = self.split(precision, labelled)?;
        let (mut model, replaced) = match &self.refit_perf {
            Some(r) => {
                let old = self.kept_model(r, precision)?;
                (self.refit_perf(r, old.clone(), &train)?, Some(old))
            }
            None => (self.fit(&train, precision)?, None),
        };
        if let Some(perf) = model.perf().filter(|_| self.perf_predict_only) {
            let mut perf = perf.clone();
            perf.predict_only = true;
            model.set_perf(Some(perf));
        }
        let t0 = std::time::Instant::now();
        let mut rows = self.evaluate(ev, &model, &test, precision).await?;
        peers::annotate(&mut rows, precision, self.copy_gbps, self.cusparse.as_ref());
        let extra = serde_json::json!({
            "labels": pipeline::label_distribution(labelled),
            "model_metrics": model.card.metrics,
            "train_matrices": train.len(),
            "test_matrices": test.len(),
            "device_copy_bandwidth_gbps": self.copy_gbps,
            "evaluation": match ev { Evaluator::Device(..) => "re-timed on the device", Evaluator::Stored(..) => "from stored measurements" },
        });
        let (all, real) = self.report(precision, &rows, &model, &test, &extra)?;
        // The error band /predict reports comes from matrices the model never saw.
        if let (Some(ps), Some(perf)) = (&all.perf, model.perf()) {
            let mut perf = perf.clone();
            perf.band = Some(ps.band(&format!("held-out split, {} matrices", test.len())));
            model.set_perf(Some(perf));
        }
        println!("   evaluation took {:.0} s", t0.elapsed().as_secs_f64());
        if let Some(old) = &replaced {
            // The card's held-out figures are the trees' (kept): only the
            // performance model's are new; the one replaced is checked on the
            // same matrices and plans, for a before/after pair.
            let before = self.perf_before(old, &rows, &test);
            let refit = &mut model.card.metrics["perf_refit"];
            refit["held_out_all"] = serde_json::to_value(&all.perf)?;
            refit["held_out_real"] = serde_json::to_value(&real.perf)?;
            refit["held_out_all_before"] = serde_json::to_value(&before)?;
        } else if let Some(m) = model.card.metrics.as_object_mut() {
            m.insert("test_all".into(), serde_json::to_value(&all)?);
            m.insert("test_real".into(), serde_json::to_value(&real)?);
            if let Some(o) = self.card_extra.as_object() {
                m.extend(o.clone());
            }
        }
        let model_path = self.save(store, precision, &model).await?;
        Ok(Finished {
            model_path,
            all,
            real,
        })
    }

    /// The labelled matrices on each side of the split; too few to fit is an error.
    fn split<'l>(
        &self,
        precision: Precision,
        labelled: &'l [Labelled],
    ) -> Result<(Vec<&'l Labelled>, Vec<&'l Labelled>)> {
        let pick = |side| -> Vec<&Labelled> {
            labelled
                .iter()
                .filter(|l| self.sides[l.item] == side)
                .collect()
        };
        let (train, test) = (pick(Side::Train), pick(Side::Test));
        if train.len() < 4 || test.is_empty() {
            bail!(
                "{precision}: too few labelled matrices to split ({} train, {} test)",
                train.len(),
                test.len()
            );
        }
        Ok((train, test))
    }

    /// Fits the model on the training side. The card says which device, driver
    /// and kernel sources the labels were measured with, so a service can match
    /// devices and refuse other kernels.
    fn fit(&self, train: &[&Labelled], precision: Precision) -> Result<Model> {
        let fitted = pipeline::fit_precision_with(
            train,
            &self.device,
            precision,
            &self.corpus,
            self.seed,
            self.perf,
        )?;
        let mut model = fitted.model;
        model.card.record_training(
            &self.identity,
            selector::KernelSources::of(engine::kernels::SOURCES),
        );
        model.card.trained_on = trained_on(self.items, train);
        Ok(model)
    }

    /// The model of `r.models_dir` for this device and precision.
    fn kept_model(&self, r: &PerfRefit, precision: Precision) -> Result<Model> {
        let path = r
            .models_dir
            .join(pipeline::model_file_name(&self.device, precision));
        Model::load(&path).with_context(|| format!("loading the model to refit {}", path.display()))
    }

    /// The held-out check of the performance model `old` replaced, printed.
    fn perf_before(
        &self,
        old: &Model,
        rows: &[EvalRow],
        test: &[&Labelled],
    ) -> Option<crate::perf_eval::PerfSummary> {
        let before = crate::perf_eval::evaluate(old, test, rows)?;
        println!("   replaced {}", before.line());
        Some(before)
    }

    /// `model` (kept from the refit's folder) with its
    /// performance model refitted on `train`; the metrics of the one it
    /// replaces move under `perf_refit.previous`.
    fn refit_perf(&self, r: &PerfRefit, mut model: Model, train: &[&Labelled]) -> Result<Model> {
        let Some((perf, fitted)) = crate::perf_fit::fit(train, self.perf, self.seed)? else {
            bail!("no timed plans to fit a performance model on");
        };
        let mut record = r.record.clone();
        record["fit"] = fitted;
        record["replaced"] = serde_json::json!(model.perf().map(|p| (p.samples, p.params)));
        if let Some(m) = model.card.metrics.as_object_mut() {
            let previous: serde_json::Map<String, serde_json::Value> =
                ["perf_fit", "perf_held_out"]
                    .iter()
                    .filter_map(|k| m.remove(*k).map(|v| (k.to_string(), v)))
                    .collect();
            record["previous"] = serde_json::Value::Object(previous);
            m.insert("perf_refit".into(), record);
        }
        model.set_perf(Some(perf));
        Ok(model)
    }

    /// Writes and prints the reports over every held-out matrix and over the
    /// real ones; returns both summaries.
    fn report(
        &self,
        precision: Precision,
        rows: &[EvalRow],
        model: &Model,
        test: &[&Labelled],
        extra: &serde_json::Value,
    ) -> Result<(Summary, Summary)> {
        let tag = precision.as_str();
        let real_rows: Vec<EvalRow> = rows
            .iter()
            .filter(|r| r.source == "suitesparse")
            .cloned()
            .collect();
        let test_real: Vec<&Labelled> = test
            .iter()
            .copied()
            .filter(|l| self.items[l.item].is_real())
            .collect();
        let all = write(&self.out, &format!("{tag}_all"), rows, model, test, extra)?;
        let real = write(
            &self.out,
            &format!("{tag}_real"),
            &real_rows,
            model,
            &test_real,
            extra,
        )?;
        evaluate::print_table(rows);
        pipeline::print_summary(&format!("{tag}: all held-out matrices"), &all);
        pipeline::print_summary(&format!("{tag}: held-out real SuiteSparse matrices"), &real);
        Ok((all, real))
    }

    /// Writes the model file and records it in the database; returns its path.
    async fn save(&self, store: &Store, precision: Precision, model: &Model) -> Result<PathBuf> {
        std::fs::create_dir_all(&self.models_dir)?;
        let path = self
            .models_dir
            .join(pipeline::model_file_name(&self.device, precision));
        model.save(&path)?;
        store
            .insert_model(&ModelRecord {
                path: path.display().to_string(),
                device_name: self.device.clone(),
                precision,
                metrics: model.card.metrics.clone(),
                card: serde_json::to_value(&model.card)?,
            })
            .await?;
        println!("   model written to {}", path.display());
        Ok(path)
    }

    async fn evaluate(
        &self,
        ev: &Evaluator<'_>,
        model: &Model,
        test: &[&Labelled],
        precision: Precision,
    ) -> Result<Vec<EvalRow>> {
        match ev {
            Evaluator::Device(env, opts) => {
                pipeline::evaluate_labelled(
                    env, self.class, model, self.items, test, precision, opts,
                )
                .await
            }
            Evaluator::Stored(store, device, context) => {
                let mut setup = crate::first_call::FirstCallSetup::new(None);
                setup.copy_gbps = self.copy_gbps;
                let mut rows = Vec::new();
                for l in test {
                    let item = &self.items[l.item];
                    let times = label::stored_plan_times(
                        store,
                        *device,
                        precision,
                        *context,
                        l.labels.matrix,
                    )
                    .await?;
                    let a = item.load()?;
                    let row = evaluate::evaluate_stored(
                        self.class,
                        model,
                        &setup,
                        (&item.name, &item.source),
                        (&a, precision),
                        &l.labels,
                        &times,
                    );
                    rows.push(row?);
                }
                Ok(rows)
            }
        }
    }
}

fn write(
    out: &Path,
    tag: &str,
    rows: &[EvalRow],
    model: &Model,
    labelled: &[&Labelled],
    extra: &serde_json::Value,
) -> Result<Summary> {
    pipeline::write_outputs(out, tag, rows, model, labelled, extra.clone())
}

/// The labels of every corpus item that the database holds complete for `device`
/// in `precision` and measurement context `context`, without a device. Returns them and the names of items whose
/// labelling was started but not finished.
pub async fn labelled_from_store(
    store: &Store,
    device: DeviceId,
    context: ContextId,
    items: &[Item],
    precision: Precision,
) -> Result<(Vec<Labelled>, Vec<String>)> {
    let known: std::collections::HashSet<String> = store
        .list_matrices(None)
        .await?
        .into_iter()
        .map(|m| m.record.name)
        .collect();
    let (mut out, mut partial) = (Vec::new(), Vec::new());
    for (i, item) in items.iter().enumerate() {
        if !known.contains(&item.name) {
            continue;
        }
        let a = item.load()?;
        let a = label::in_precision(&a, precision);
        let l = from_store(store, (device, context), precision, i, item, &a).await?;
        match l {
            Some(Some(l)) => out.push(l),
            Some(None) => partial.push(item.name.clone()),
            None => {}
        }
    }
    Ok((out, partial))
}

/// `None`: the matrix is not in the database in this precision; `Some(None)`:
/// its labels are incomplete.
async fn from_store(
    store: &Store,
    (device, context): (DeviceId, ContextId),
    precision: Precision,
    idx: usize,
    item: &Item,
    a: &sparse::Csr<f64>,
) -> Result<Option<Option<Labelled>>> {
    let Some(m) = store.matrix_by_hash(&a.content_hash()).await? else {
        return Ok(None);
    };
    let features = sparse::Features::of(a);
    let labels = label::labels_from_store(
        store,
        device,
        precision,
        context,
        m.id,
        &item.name,
        features,
        a.row_ptr(),
    )
    .await?;
    Ok(Some(labels.map(|labels| Labelled {
        item: idx,
        samples: crate::dataset::samples(&labels, a.row_ptr()),
        row_ptr: a.row_ptr().to_vec(),
        labels,
    })))
}

/// The corpus names of the matrices `train` holds, sorted (the card's
/// `trained_on`, which `trainer evaluate` leaves out).
fn trained_on(items: &[Item], train: &[&Labelled]) -> Vec<String> {
    let mut names: Vec<String> = train.iter().map(|l| items[l.item].name.clone()).collect();
    names.sort();
    names.dedup();
    names
}
