//! `trainer fit-quick`: adds (or refits) only the quick part of an existing
//! model file ([`selector::QuickModel`]: one kernel from the matrix's sizes)
//! from a results database's whole-matrix single-kernel timings (the
//! single-bin scheme's bin 0), leaving stages 1 and 2, the performance part
//! and the card's hashes as they are; the card's metrics record what was
//! added, from which database, and its held-out figures.

use anyhow::{bail, Result};
use selector::{fit_quick, geomean_slowdown, Facts, Model, QuickParams, QuickSample};
use sparse::{KernelId, Scheme};
use std::collections::{BTreeMap, HashSet};
use store::{ContextId, DeviceId, Precision, Store, Target};

/// Every `HELD_OUT_EVERY`-th matrix (by a hash of its name) is held out.
pub const HELD_OUT_EVERY: u8 = 4;

/// Whether `name` is on the held-out side of the quick part's split (a
/// hash of the name, so the same matrices whatever the database holds).
pub fn held_out(name: &str) -> bool {
    blake3::hash(name.as_bytes()).as_bytes()[0].is_multiple_of(HELD_OUT_EVERY)
}

/// The whole-matrix single-kernel timings of every matrix of a device in a
/// precision and measurement context, with the matrices' sizes.
pub async fn quick_samples(
    store: &Store,
    device: DeviceId,
    context: ContextId,
    precision: Precision,
) -> Result<Vec<QuickSample>> {
    let matrices: BTreeMap<i64, store::Matrix> = store
        .list_matrices(None)
        .await?
        .into_iter()
        .map(|m| (m.id.0, m))
        .collect();
    let mut times: BTreeMap<i64, Vec<(KernelId, f64)>> = BTreeMap::new();
    for m in store.all_measurements(device, precision).await? {
        let k = &m.data.key;
        if k.context != context || k.scheme != Scheme::Single {
            continue;
        }
        if let Target::Bin { bin: 0, kernel } = k.target {
            times
                .entry(k.matrix.0)
                .or_default()
                .push((kernel, m.data.median_ms));
        }
    }
    let bytes = precision.bytes();
    Ok(times
        .into_iter()
        .filter_map(|(id, t)| {
            let r = &matrices.get(&id)?.record;
            Some(QuickSample {
                matrix: r.name.clone(),
                facts: Facts {
                    rows: r.nrows as usize,
                    cols: r.ncols as usize,
                    nnz: r.nnz as usize,
                    value_bytes: bytes,
                },
                times: t,
            })
        })
        .filter(|s| s.times.iter().any(|t| t.1.is_finite() && t.1 > 0.0))
        .collect())
}

/// Where the samples came from, for the card.
pub struct QuickSource<'a> {
    /// The database as given (a path or URL without credentials).
    pub database: &'a str,
    /// The device's name in it.
    pub device: &'a str,
    /// The measurement context's hash.
    pub context: &'a str,
}

/// Fits the quick part on the training side of `samples` (held-out by
/// [`held_out`]; names in `excluded` are left out entirely), attaches it to
/// `model` and records in `card.metrics.quick` what was added. Returns that
/// record.
pub fn fit_into(
    model: &mut Model,
    samples: &[QuickSample],
    excluded: &HashSet<String>,
    src: &QuickSource,
    params: QuickParams,
) -> Result<serde_json::Value> {
    let usable: Vec<&QuickSample> = samples
        .iter()
        .filter(|s| !excluded.contains(&s.matrix))
        .collect();
    let (test, train): (Vec<QuickSample>, Vec<QuickSample>) = usable
        .into_iter()
        .cloned()
        .partition(|s| held_out(&s.matrix));
    if train.is_empty() {
        bail!(
            "no training matrix with single-kernel timings in {} for '{}'",
            src.database,
            src.device
        );
    }
    let kernels = model.card.kernels.clone();
    let fallback = model.quick_kernel(&train[0].facts);
    let was_quick = model.quick().is_some();
    let quick = fit_quick(&train, &kernels, params)?;
    let figures = |s: &[QuickSample], q: &selector::QuickModel| {
        serde_json::json!({
            "matrices": s.len(),
            "geomean_slowdown_vs_best_single": geomean_slowdown(s, |x| q.kernel(&x.facts)),
            "geomean_slowdown_of_fallback": if was_quick { f64::NAN } else {
                geomean_slowdown(s, |_| fallback.0)
            },
            "geomean_slowdown_of_serial": geomean_slowdown(s, |_| KernelId::Serial),
        })
    };
    let record = serde_json::json!({
        "added": "quick part: one kernel for the whole matrix from rows, cols, nnz, \
                  nnz_row_mean, density, value_bytes (trainer fit-quick)",
        "database": src.database,
        "device": src.device,
        "context": src.context,
        "params": {"max_depth": params.max_depth, "min_leaf": params.min_leaf},
        "leaves": quick.leaves(),
        "excluded_matrices": excluded.len(),
        "held_out_rule": format!("blake3(name)[0] % {HELD_OUT_EVERY} == 0"),
        "train": figures(&train, &quick),
        "held_out": figures(&test, &quick),
        "fallback_before": if was_quick { None } else { Some(fallback.0.name()) },
    });
    model.set_quick(Some(quick));
    if let Some(o) = model.card.metrics.as_object_mut() {
        o.insert("quick".into(), record.clone());
    } else {
        model.card.metrics = serde_json::json!({ "quick": record.clone() });
    }
    Ok(record)
}

/// The matrix names of the `matrix` column of CSV files (e.g. the held-out
/// evaluations), to leave out of the quick part's fit.
pub fn names_in_csvs(paths: &[std::path::PathBuf]) -> Result<HashSet<String>> {
    let mut out = HashSet::new();
    for p in paths {
        let mut r = csv::Reader::from_path(p)?;
        let col = r
            .headers()?
            .iter()
            .position(|h| h == "matrix")
            .ok_or_else(|| anyhow::anyhow!("{} has no `matrix` column", p.display()))?;
        for rec in r.records() {
            if let Some(n) = rec?.get(col) {
                out.insert(n.to_string());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::{MatrixRecord, MeasurementKey, NewMeasurement};

    /// A synthetic database: 40 matrices, short rows (serial fastest) and
    /// long rows (vector fastest), timed over the whole matrix.
    async fn synthetic_db(url: &std::path::Path) -> (Store, DeviceId, ContextId) {
        let store = Store::connect(Some(url.to_str().unwrap())).await.unwrap();
        let dev = store
            .upsert_device(&store::DeviceRecord {
                name: "dev".into(),
                vendor: "v".into(),
                driver: "d".into(),
                compute_units: 1,
                global_mem_bytes: 1 << 30,
                copy_bandwidth_gbps: Some(10.0),
            })
            .await
            .unwrap();
        let ctx = store
            .upsert_context(&store::MeasurementContext {
                kernel_sources_hash: "k".into(),
                build_options: String::new(),
                engine_version: "e".into(),
            })
            .await
            .unwrap();
        for i in 0..40u64 {
            let long = i % 2 == 1;
            let rows = 1000 + i;
            let nnz = rows * if long { 300 } else { 3 };
            let rec = MatrixRecord {
                content_hash: format!("h{i}"),
                name: format!("m{i}"),
                source: "test".into(),
                nrows: rows,
                ncols: rows,
                nnz,
                features: store::FeatureVector {
                    names: vec![],
                    values: vec![],
                },
            };
            let mid = store.upsert_matrix(&rec).await.unwrap();
            let (serial, vector) = if long { (9.0, 2.0) } else { (1.0, 1.4) };
            for (kernel, ms) in [(KernelId::Serial, serial), (KernelId::Vector, vector)] {
                let key = MeasurementKey {
                    matrix: mid,
                    device: dev,
                    precision: Precision::F64,
                    scheme: Scheme::Single,
                    target: Target::Bin { bin: 0, kernel },
                    context: ctx,
                };
                store
                    .insert_measurement(&NewMeasurement {
                        key,
                        median_ms: ms,
                        spread_ms: 0.0,
                        repetitions: 3,
                        ci_rel: None,
                        run: None,
                    })
                    .await
                    .unwrap();
            }
        }
        (store, dev, ctx)
    }

    /// The quick part fitted from the synthetic database.
    #[tokio::test]
    async fn the_fitted_quick_part_picks_the_fastest_kernel() {
        let dir = tempfile::tempdir().unwrap();
        let (store, dev, ctx) = synthetic_db(&dir.path().join("q.db")).await;
        let samples = quick_samples(&store, dev, ctx, Precision::F64)
            .await
            .unwrap();
        assert_eq!(samples.len(), 40);
        let shipped = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../models/pthread-skylake-avx512-amd-epyc-f64.json"
        );
        let mut model = Model::load(shipped).unwrap();
        let before = (model.clone(), model.id());
        let src = QuickSource {
            database: "test",
            device: "dev",
            context: "c",
        };
        let rec = fit_into(
            &mut model,
            &samples,
            &HashSet::new(),
            &src,
            QuickParams::default(),
        )
        .unwrap();
        let q = model.quick().unwrap();
        for s in &samples {
            let want = if s.facts.nnz > s.facts.rows * 10 {
                KernelId::Vector
            } else {
                KernelId::Serial
            };
            assert_eq!(q.kernel(&s.facts), want, "{}", s.matrix);
        }
        assert_eq!(rec["held_out"]["geomean_slowdown_vs_best_single"], 1.0);
        assert!(model.card.metrics["quick"]["database"] == "test");
        // Only the quick part and the card's metrics changed.
        let mut without = model.clone();
        without.set_quick(None);
        without.card.metrics = before.0.card.metrics.clone();
        assert_eq!(without, before.0);
        assert_eq!(without.id(), before.1);
    }
}
