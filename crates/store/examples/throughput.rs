//! Prints how fast the store writes: measurements committed one by one, in
//! batches, and request-log rows, on a temporary file database.
//!
//! `cargo run --release -p store --example throughput`

use sparse::plan::KernelId;
use sparse::{Features, Scheme, FEATURE_NAMES};
use std::time::Instant;
use store::{
    DeviceId, DeviceRecord, FeatureVector, MatrixId, MatrixRecord, MeasurementKey, NewMeasurement,
    Precision, RequestRecord, Store, Target,
};

#[tokio::main]
async fn main() -> Result<(), store::StoreError> {
    let dir = std::env::temp_dir().join(format!("store-throughput-{}", std::process::id()));
    let url = format!("sqlite://{}", dir.join("bench.db").display());
    let s = Store::connect(Some(&url)).await?;
    let (d, m, features) = setup(&s).await?;
    let kernels = KernelId::all();
    let meas = |i: usize| NewMeasurement {
        key: MeasurementKey {
            matrix: m,
            device: d,
            precision: Precision::F32,
            scheme: Scheme::Granularity(10),
            target: Target::Bin {
                bin: (i / kernels.len()) as u32,
                kernel: kernels[i % kernels.len()],
            },
            context: store::ContextId(1),
        },
        median_ms: 1.0,
        spread_ms: 0.1,
        repetitions: 10,
        ci_rel: Some(0.01),
        run: None,
    };

    let n = 2000;
    let t = Instant::now();
    for i in 0..n {
        s.insert_measurement(&meas(i)).await?;
    }
    let single = n as f64 / t.elapsed().as_secs_f64();

    let batch: Vec<_> = (n..n + 10 * n).map(meas).collect();
    let t = Instant::now();
    for chunk in batch.chunks(100) {
        s.insert_measurements(chunk).await?;
    }
    let batched = batch.len() as f64 / t.elapsed().as_secs_f64();

    let t = Instant::now();
    let keys = s.measured_keys(m, d, Precision::F32).await?;
    let read_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let all = s.all_measurements(d, Precision::F32).await?;
    let all_ms = t.elapsed().as_secs_f64() * 1e3;
    let logged = log_requests(&s, features, n).await?;

    println!("measurements, one commit each: {single:>9.0} /s");
    println!(
        "measurements, batches of 100:  {batched:>9.0} /s  ({:.1}x)",
        batched / single
    );
    println!(
        "measured_keys over {} rows:   {read_ms:>9.2} ms",
        keys.len()
    );
    println!("all_measurements, {} rows:  {all_ms:>9.2} ms", all.len());
    println!("request log rows:              {logged:>9.0} /s");
    s.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The device and matrix every measurement refers to, and the matrix's features.
async fn setup(s: &Store) -> Result<(DeviceId, MatrixId, FeatureVector), store::StoreError> {
    let d = s
        .upsert_device(&DeviceRecord {
            name: "bench".into(),
            vendor: "none".into(),
            driver: "0".into(),
            compute_units: 1,
            global_mem_bytes: 1,
            copy_bandwidth_gbps: None,
        })
        .await?;
    let features = FeatureVector::from_features(&Features {
        values: vec![1.0; FEATURE_NAMES.len()],
    });
    let m = s
        .upsert_matrix(&MatrixRecord {
            content_hash: "bench".into(),
            name: "bench".into(),
            source: "generator:bench".into(),
            nrows: 1,
            ncols: 1,
            nnz: 1,
            features: features.clone(),
        })
        .await?;
    Ok((d, m, features))
}

/// Logs `n` requests one by one; gives the rows written per second.
async fn log_requests(
    s: &Store,
    features: FeatureVector,
    n: usize,
) -> Result<f64, store::StoreError> {
    let req = RequestRecord {
        route: "/spmv".into(),
        matrix_hash: Some("bench".into()),
        features: Some(features),
        plan: Some(sparse::plan::Plan::single(KernelId::Vector)),
        precision: Some(Precision::F32),
        device: Some("bench".into()),
        model: None,
        kernel_ms: Some(0.1),
        e2e_ms: Some(0.2),
        status: 200,
    };
    let t = Instant::now();
    for _ in 0..n {
        s.log_request(&req).await?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}
