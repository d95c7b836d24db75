//! Measurement contexts: a database written before them (migrations 1-2 only)
//! is migrated with its rows in the 'legacy' context, and the context is part
//! of the measurement and plan keys.

use crate::common;

use common::{bin_key, dev_and_matrix, timing, LEGACY};
use sparse::plan::KernelId;
use sparse::Scheme;
use store::{MeasurementContext, Precision, Store, LEGACY_CONTEXT};

fn context(engine: &str) -> MeasurementContext {
    MeasurementContext {
        kernel_sources_hash: "abc123".into(),
        build_options: "-D VALUE=double -cl-std=CL1.2".into(),
        engine_version: engine.into(),
    }
}

/// A database file with only migrations 0001 and 0002 applied, and rows.
async fn legacy_database(dir: &std::path::Path) -> String {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations");
    let old = dir.join("old-migrations");
    std::fs::create_dir(&old).unwrap();
    for f in ["0001_initial.sql", "0002_run_owner_heartbeat.sql"] {
        std::fs::copy(src.join(f), old.join(f)).unwrap();
    }
    let path = dir.join("legacy.db");
    let opts = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true);
    let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
    let migrator = sqlx::migrate::Migrator::new(old.as_path()).await.unwrap();
    migrator.run(&pool).await.unwrap();
    for sql in [
        "INSERT INTO devices (id, name, vendor, driver, compute_units, global_mem_bytes) \
         VALUES (1, 'gpu', 'NVIDIA', '550', 132, 80000000000)",
        "INSERT INTO matrices (id, content_hash, name, source, nrows, ncols, nnz, features) \
         VALUES (1, 'h1', 'm1', 'suitesparse', 10, 10, 30, '{\"names\":[],\"values\":[]}')",
        "INSERT INTO measurements (matrix_id, device_id, precision, scheme, bin, kernel, plan, \
         median_ms, spread_ms, repetitions) VALUES (1, 1, 'f64', 0, 0, 'serial', '', 2.5, 0.1, 25)",
        "INSERT INTO measurements (matrix_id, device_id, precision, scheme, bin, kernel, plan, \
         median_ms, spread_ms, repetitions) \
         VALUES (1, 1, 'f64', 0, -1, 'plan', '{\"scheme\":\"single\",\"kernels\":[[0,\"serial\"]]}', 2.4, 0.1, 25)",
        "INSERT INTO plans (matrix_id, device_id, precision, scheme, plan, total_ms, is_oracle) \
         VALUES (1, 1, 'f64', 0, '{\"scheme\":\"single\",\"kernels\":[[0,\"serial\"]]}', 2.4, 1)",
    ] {
        sqlx::query(sql).execute(&pool).await.unwrap();
    }
    pool.close().await;
    path.to_str().unwrap().to_string()
}

#[tokio::test]
async fn a_legacy_database_is_migrated_into_the_legacy_context() {
    let dir = tempfile::tempdir().unwrap();
    let path = legacy_database(dir.path()).await;
    let s = Store::connect(Some(&path)).await.unwrap();
    assert!(s
        .applied_migrations()
        .await
        .unwrap()
        .iter()
        .any(|m| m.version == 3));
    let legacy = s.context_by_hash(LEGACY_CONTEXT).await.unwrap().unwrap();
    assert_eq!(legacy.id, LEGACY);
    assert_eq!(s.contexts().await.unwrap().len(), 1);

    let (m, d) = (store::MatrixId(1), store::DeviceId(1));
    let rows = s.measurements_for(m, d, Precision::F64).await.unwrap();
    assert_eq!(rows.len(), 2, "both rows kept");
    for r in &rows {
        assert_eq!(r.data.key.context, LEGACY);
        assert_eq!(r.data.ci_rel, None);
        assert_eq!(r.data.repetitions, 25);
    }
    let plans = s.plans_for(m, d, Precision::F64, LEGACY).await.unwrap();
    assert_eq!(plans.len(), 1);
    assert!(plans[0].record.is_oracle);
    assert_eq!(plans[0].record.total_ms, 2.4);

    // The same bin timed again in a new context is a new row, not a conflict.
    let ctx = s.upsert_context(&context("0.1.0+timing2")).await.unwrap();
    assert_ne!(ctx, LEGACY);
    let old_key = bin_key(m, d, Precision::F64, Scheme::Single, 0, KernelId::Serial);
    assert!(!s
        .insert_measurement(&timing(old_key.clone(), 9.0, None))
        .await
        .unwrap());
    let new_key = store::MeasurementKey {
        context: ctx,
        ..old_key
    };
    assert!(s
        .insert_measurement(&timing(new_key, 2.0, None))
        .await
        .unwrap());
    assert_eq!(s.measurement_count().await.unwrap(), 3);
}

#[tokio::test]
async fn the_same_measurement_in_two_contexts_does_not_collide() {
    let s = Store::open_in_memory().await.unwrap();
    let (d, m) = dev_and_matrix(&s, "h").await;
    let a = s.upsert_context(&context("0.1.0+timing2")).await.unwrap();
    let b = s.upsert_context(&context("0.1.0+timing3")).await.unwrap();
    assert_ne!(a, b);
    assert_eq!(
        s.upsert_context(&context("0.1.0+timing2")).await.unwrap(),
        a,
        "the same context is stored once"
    );
    let key = |c| store::MeasurementKey {
        context: c,
        ..bin_key(m, d, Precision::F32, Scheme::Single, 0, KernelId::Vector)
    };
    assert!(s
        .insert_measurement(&timing(key(a), 1.0, None))
        .await
        .unwrap());
    assert!(!s.has_measurement(&key(b)).await.unwrap());
    assert!(s
        .insert_measurement(&timing(key(b), 2.0, None))
        .await
        .unwrap());
    assert!(!s
        .insert_measurement(&timing(key(b), 3.0, None))
        .await
        .unwrap());

    // What a resumed trainer in context `a` reuses: only the keys of `a`.
    let keys = s.measured_keys(m, d, Precision::F32).await.unwrap();
    assert_eq!(keys.len(), 2);
    assert!(keys.contains(&key(a)) && keys.contains(&key(b)));
    let by_context: Vec<(store::ContextId, f64)> = s
        .measurements_for(m, d, Precision::F32)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.data.key.context, r.data.median_ms))
        .collect();
    assert_eq!(by_context, vec![(a, 1.0), (b, 2.0)]);

    // Contexts are found by their full hash or a unique prefix of it.
    let stored = s
        .context_by_hash(&context("0.1.0+timing3").hash())
        .await
        .unwrap();
    assert_eq!(stored.unwrap().id, b);
    let prefix = &context("0.1.0+timing2").hash()[..12];
    assert_eq!(s.context_by_hash(prefix).await.unwrap().unwrap().id, a);
    assert!(s.context_by_hash("nonsense").await.unwrap().is_none());
}
