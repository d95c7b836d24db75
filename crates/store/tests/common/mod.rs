//! Sample records shared by the store's integration tests.
#![allow(dead_code)]

use sparse::plan::{KernelId, Plan};
use sparse::{Features, Scheme, FEATURE_NAMES};
use store::{
    ContextId, DeviceId, DeviceRecord, FeatureVector, MatrixId, MatrixRecord, MeasurementKey,
    NewMeasurement, Precision, RunId, RunRecord, Store, Target,
};

/// The legacy context, which every migrated database has (id 1).
pub const LEGACY: ContextId = ContextId(1);

/// Stores the device `dev` and a suitesparse matrix with content hash `hash`:
/// the pair most tests key their rows by.
pub async fn dev_and_matrix(s: &Store, hash: &str) -> (DeviceId, MatrixId) {
    let d = s.upsert_device(&device("dev")).await.unwrap();
    let m = s
        .upsert_matrix(&matrix(hash, "suitesparse", 0.0))
        .await
        .unwrap();
    (d, m)
}

/// A training run on device `d` in `precision` with `params` and no notes.
pub fn run_on(d: DeviceId, precision: Precision, params: serde_json::Value) -> RunRecord {
    RunRecord {
        device: Some(d),
        precision: Some(precision),
        params,
        notes: String::new(),
    }
}

/// A device description.
pub fn device(name: &str) -> DeviceRecord {
    DeviceRecord {
        name: name.to_string(),
        vendor: "The pocl project".to_string(),
        driver: "6.0".to_string(),
        compute_units: 2,
        global_mem_bytes: 24 << 30,
        copy_bandwidth_gbps: Some(7.5),
    }
}

/// A matrix description whose features are `seed`, `seed + 1`, ...
pub fn matrix(hash: &str, source: &str, seed: f64) -> MatrixRecord {
    let values = (0..FEATURE_NAMES.len())
        .map(|i| seed + i as f64 * 0.25)
        .collect();
    MatrixRecord {
        content_hash: hash.to_string(),
        name: format!("m-{hash}"),
        source: source.to_string(),
        nrows: 1000,
        ncols: 900,
        nnz: 12345,
        features: FeatureVector::from_features(&Features { values }),
    }
}

/// The key of kernel `kernel` on bin `bin` of `scheme`.
pub fn bin_key(
    matrix: MatrixId,
    device: DeviceId,
    precision: Precision,
    scheme: Scheme,
    bin: u32,
    kernel: KernelId,
) -> MeasurementKey {
    MeasurementKey {
        matrix,
        device,
        precision,
        scheme,
        target: Target::Bin { bin, kernel },
        context: LEGACY,
    }
}

/// A measurement of `key` whose median is `ms`.
pub fn timing(key: MeasurementKey, ms: f64, run: Option<RunId>) -> NewMeasurement {
    NewMeasurement {
        key,
        median_ms: ms,
        spread_ms: ms / 10.0,
        repetitions: 25,
        ci_rel: Some(0.01),
        run,
    }
}

/// A two-bin plan for U = 10.
pub fn plan_u10() -> Plan {
    Plan {
        scheme: Scheme::Granularity(10),
        kernels: vec![(3, KernelId::Subvector(4)), (0, KernelId::Serial)],
    }
}

/// The i-th key of a deterministic sequence of distinct bin keys, as the child
/// writer of the resume test produces them.
pub fn nth_key(i: u32, matrix: MatrixId, device: DeviceId) -> MeasurementKey {
    let kernels = KernelId::all();
    let kernel = kernels[(i as usize) % kernels.len()];
    let bin = i / kernels.len() as u32;
    bin_key(
        matrix,
        device,
        Precision::F64,
        Scheme::Granularity(10),
        bin,
        kernel,
    )
}

/// A store on a fresh file in `dir`.
pub async fn file_store(dir: &std::path::Path) -> Store {
    let url = format!("sqlite://{}", dir.join("results.db").display());
    Store::connect(Some(&url)).await.expect("connect")
}
