//! Every record type written and read back, idempotent inserts, and refusals,
//! each on SQLite and on PostgreSQL.

use crate::common;

use common::{bin_key, dev_and_matrix, device, matrix, plan_u10, run_on, timing};
use serde_json::json;
use sparse::plan::{KernelId, Plan};
use sparse::Scheme;
use std::collections::HashSet;
use store::{
    FeatureVector, MeasurementKey, ModelRecord, PlanRecord, Precision, RequestId, RequestRecord,
    RunRecord, RunStatus, StoreError, Target,
};

#[test]
fn feature_vector_with_another_order_is_not_current() {
    let mut f = common::matrix("x", "s", 0.0).features;
    assert!(f.to_features().is_some());
    f.names.swap(0, 1);
    assert!(!f.has_current_order());
    assert!(f.to_features().is_none());
    let short = FeatureVector {
        names: vec!["rows".into()],
        values: vec![1.0],
    };
    assert!(short.to_features().is_none());
}

/// Asserts that `err` refuses the value of `what`.
fn assert_invalid(err: &StoreError, what: &str) {
    assert!(
        matches!(err, StoreError::InvalidValue { what: w, .. } if *w == what),
        "{err:?}"
    );
}

store::test_on_both_backends! {
async fn devices_round_trip_and_upsert_on_name_vendor_driver(db: TestDb) {
    let s = db.open().await;
    let a = device("gpu0");
    let id = s.upsert_device(&a).await.unwrap();
    let got = s.device(id).await.unwrap().unwrap();
    assert_eq!(got.record, a);
    assert!(got.created_at.ends_with('Z'), "{}", got.created_at);

    // Same name, vendor, driver: same row, new figures; a missing bandwidth keeps the old.
    let mut b = a.clone();
    b.compute_units = 132;
    b.copy_bandwidth_gbps = None;
    assert_eq!(s.upsert_device(&b).await.unwrap(), id);
    let got = s.device(id).await.unwrap().unwrap().record;
    assert_eq!(got.compute_units, 132);
    assert_eq!(got.copy_bandwidth_gbps, Some(7.5));

    // A new driver is a new device.
    let mut c = a.clone();
    c.driver = "7.0".into();
    let id2 = s.upsert_device(&c).await.unwrap();
    assert_ne!(id2, id);
    assert_eq!(s.list_devices().await.unwrap().len(), 2);
    assert!(s.device(store::DeviceId(12345)).await.unwrap().is_none());
}

async fn matrices_round_trip_by_hash_and_filter_by_source(db: TestDb) {
    let s = db.open().await;
    let a = matrix("aaa", "suitesparse", 1.0);
    let id = s.upsert_matrix(&a).await.unwrap();
    let got = s.matrix_by_hash("aaa").await.unwrap().unwrap();
    assert_eq!(got.id, id);
    assert_eq!(got.record, a);
    assert!(got.record.features.has_current_order());
    assert_eq!(
        got.record.features.to_features().unwrap().values,
        a.features.values
    );
    assert_eq!(s.matrix(id).await.unwrap().unwrap().record, a);
    assert!(s.matrix_by_hash("nope").await.unwrap().is_none());

    // Same hash again: same id, first name and source kept, features replaced.
    let mut again = matrix("aaa", "request", 5.0);
    again.name = "renamed".into();
    assert_eq!(s.upsert_matrix(&again).await.unwrap(), id);
    let got = s.matrix_by_hash("aaa").await.unwrap().unwrap().record;
    assert_eq!(got.name, "m-aaa");
    assert_eq!(got.source, "suitesparse");
    assert_eq!(got.features, again.features);

    for (hash, source, x) in [
        ("b", "generator:stencil2d", 2.0),
        ("c", "generator:power_law", 3.0),
        ("d", "standin:HB/bcsstk01", 4.0),
        ("e", "generatorX", 4.0),
    ] {
        s.upsert_matrix(&matrix(hash, source, x)).await.unwrap();
    }
    let hashes = |v: Vec<store::Matrix>| {
        v.into_iter()
            .map(|m| m.record.content_hash)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        hashes(s.list_matrices(None).await.unwrap()),
        ["aaa", "b", "c", "d", "e"]
    );
    assert_eq!(
        hashes(s.list_matrices(Some("generator")).await.unwrap()),
        ["b", "c"]
    );
    assert_eq!(
        hashes(s.list_matrices(Some("generator:stencil2d")).await.unwrap()),
        ["b"]
    );
    assert_eq!(
        hashes(s.list_matrices(Some("standin")).await.unwrap()),
        ["d"]
    );
    assert!(s.list_matrices(Some("gen")).await.unwrap().is_empty());
}


async fn measurements_round_trip_and_inserts_are_idempotent(db: TestDb) {
    let s = db.open().await;
    let (d, m) = dev_and_matrix(&s, "h").await;
    let m2 = s
        .upsert_matrix(&matrix("h2", "suitesparse", 0.0))
        .await
        .unwrap();
    let run = s
        .start_run(&run_on(d, Precision::F32, json!({})))
        .await
        .unwrap();

    let k1 = bin_key(
        m,
        d,
        Precision::F32,
        Scheme::Granularity(10),
        0,
        KernelId::Serial,
    );
    let k2 = bin_key(
        m,
        d,
        Precision::F32,
        Scheme::Granularity(10),
        99,
        KernelId::Subvector(128),
    );
    let k3 = bin_key(m, d, Precision::F32, Scheme::Single, 0, KernelId::MergePath);
    let kp = MeasurementKey {
        matrix: m,
        device: d,
        precision: Precision::F32,
        scheme: Scheme::Granularity(10),
        target: Target::plan(&plan_u10()).unwrap(),
        context: common::LEGACY,
    };
    let other_precision = bin_key(
        m,
        d,
        Precision::F64,
        Scheme::Granularity(10),
        0,
        KernelId::Serial,
    );
    let other_matrix = bin_key(
        m2,
        d,
        Precision::F32,
        Scheme::Granularity(10),
        0,
        KernelId::Serial,
    );

    assert!(!s.has_measurement(&k1).await.unwrap());
    assert!(s
        .insert_measurement(&timing(k1.clone(), 1.5, Some(run)))
        .await
        .unwrap());
    // The same key again keeps the first timing.
    assert!(!s
        .insert_measurement(&timing(k1.clone(), 99.0, None))
        .await
        .unwrap());
    let batch = vec![
        timing(k1.clone(), 42.0, None),
        timing(k2.clone(), 0.25, Some(run)),
        timing(k3.clone(), 3.0, None),
        timing(kp.clone(), 2.0, Some(run)),
        timing(kp.clone(), 2.5, Some(run)),
        timing(other_precision.clone(), 7.0, None),
        timing(other_matrix.clone(), 8.0, None),
    ];
    assert_eq!(s.insert_measurements(&batch).await.unwrap(), 5);
    assert_eq!(s.insert_measurements(&batch).await.unwrap(), 0);
    assert_eq!(s.measurement_count().await.unwrap(), 6);
    assert!(s.has_measurement(&k1).await.unwrap());
    assert!(s.has_measurement(&kp).await.unwrap());

    let keys = s.measured_keys(m, d, Precision::F32).await.unwrap();
    assert_eq!(
        keys,
        HashSet::from([k1.clone(), k2.clone(), k3.clone(), kp.clone()])
    );

    let got = s.measurements_for(m, d, Precision::F32).await.unwrap();
    assert_eq!(got.len(), 4);
    assert_eq!(got[0].data, timing(k1.clone(), 1.5, Some(run)));
    assert_eq!(got[1].data, timing(k2, 0.25, Some(run)));
    assert_eq!(got[2].data, timing(k3, 3.0, None));
    assert_eq!(got[3].data, timing(kp.clone(), 2.0, Some(run)));
    let mut canonical = plan_u10();
    canonical.kernels.sort();
    assert_eq!(got[3].data.key.target.as_plan().unwrap(), Some(canonical));
    assert_eq!(got[0].data.key.target.as_plan().unwrap(), None);

    let all = s.all_measurements(d, Precision::F32).await.unwrap();
    assert_eq!(all.len(), 5);
    assert!(all
        .windows(2)
        .all(|w| w[0].data.key.matrix <= w[1].data.key.matrix));
    let all64 = s.all_measurements(d, Precision::F64).await.unwrap();
    assert_eq!(all64.len(), 1);
    assert_eq!(all64[0].data.key, other_precision);
}

async fn plan_keys_are_canonical_whatever_the_kernel_order(db: TestDb) {
    let s = db.open().await;
    let (d, m) = dev_and_matrix(&s, "h").await;
    let mut reversed = plan_u10();
    reversed.kernels.reverse();
    let key = |p: &Plan| MeasurementKey {
        matrix: m,
        device: d,
        precision: Precision::F64,
        scheme: p.scheme,
        target: Target::plan(p).unwrap(),
        context: common::LEGACY,
    };
    assert_eq!(key(&plan_u10()), key(&reversed));
    assert!(s
        .insert_measurement(&timing(key(&plan_u10()), 1.0, None))
        .await
        .unwrap());
    assert!(!s
        .insert_measurement(&timing(key(&reversed), 1.0, None))
        .await
        .unwrap());

    // Hand-written, non-canonical JSON is refused rather than stored under a second key.
    let mut bad = key(&plan_u10());
    bad.target = Target::Plan(serde_json::to_string(&plan_u10()).unwrap());
    let err = s
        .insert_measurement(&timing(bad, 1.0, None))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("canonical"), "{err}");
}

async fn bad_measurements_are_refused(db: TestDb) {
    let s = db.open().await;
    let (d, m) = dev_and_matrix(&s, "h").await;
    let k = bin_key(m, d, Precision::F32, Scheme::Single, 0, KernelId::Vector);

    let mut nan = timing(k.clone(), f64::NAN, None);
    let err = s.insert_measurement(&nan).await.unwrap_err();
    assert_invalid(&err, "median time");
    nan.median_ms = -1.0;
    assert!(s.insert_measurement(&nan).await.is_err());

    let mut zero = timing(k.clone(), 1.0, None);
    zero.repetitions = 0;
    let err = s.insert_measurement(&zero).await.unwrap_err();
    assert_invalid(&err, "repetitions");

    // A whole-plan key whose scheme differs from the plan's.
    let wrong_scheme = MeasurementKey {
        scheme: Scheme::Granularity(20),
        target: Target::plan(&plan_u10()).unwrap(),
        ..k.clone()
    };
    let err = s
        .insert_measurement(&timing(wrong_scheme, 1.0, None))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("scheme"), "{err}");

    // A bad item makes the whole batch fail before anything is written.
    let batch = [timing(k.clone(), 1.0, None), zero];
    assert!(s.insert_measurements(&batch).await.is_err());
    assert!(!s.has_measurement(&k).await.unwrap());
}

async fn plans_round_trip_with_one_oracle(db: TestDb) {
    let s = db.open().await;
    let (d, m) = dev_and_matrix(&s, "h").await;
    assert!(s
        .oracle_plan(m, d, Precision::F32, common::LEGACY)
        .await
        .unwrap()
        .is_none());

    let single = PlanRecord {
        matrix: m,
        device: d,
        precision: Precision::F32,
        plan: Plan::single(KernelId::Vector),
        total_ms: 3.0,
        bins_sum_ms: Some(3.0),
        is_oracle: true,
        context: common::LEGACY,
    };
    let id_single = s.upsert_plan(&single).await.unwrap();
    assert_eq!(
        s.oracle_plan(m, d, Precision::F32, common::LEGACY)
            .await
            .unwrap()
            .unwrap()
            .record,
        single
    );

    let mut u10 = PlanRecord {
        plan: plan_u10(),
        total_ms: 2.0,
        bins_sum_ms: None,
        ..single.clone()
    };
    s.upsert_plan(&u10).await.unwrap();
    // The new oracle took the flag away from the single-bin plan.
    let oracle = s
        .oracle_plan(m, d, Precision::F32, common::LEGACY)
        .await
        .unwrap()
        .unwrap();
    let mut sorted = plan_u10();
    sorted.kernels.sort();
    assert_eq!(oracle.record.plan, sorted);
    assert_eq!(oracle.record.total_ms, 2.0);
    let plans = s
        .plans_for(m, d, Precision::F32, common::LEGACY)
        .await
        .unwrap();
    assert_eq!(plans.len(), 2);
    assert_eq!(plans[0].id, id_single);
    assert!(!plans[0].record.is_oracle);
    assert!(plans[1].record.is_oracle);

    // Re-writing a scheme replaces its row.
    u10.total_ms = 1.0;
    u10.is_oracle = false;
    s.upsert_plan(&u10).await.unwrap();
    let plans = s
        .plans_for(m, d, Precision::F32, common::LEGACY)
        .await
        .unwrap();
    assert_eq!(plans.len(), 2);
    assert_eq!(plans[1].record.total_ms, 1.0);
    assert!(s
        .oracle_plan(m, d, Precision::F32, common::LEGACY)
        .await
        .unwrap()
        .is_none());

    // Other precision is separate; oracle_plans lists oracles only.
    s.upsert_plan(&PlanRecord {
        precision: Precision::F64,
        ..single.clone()
    })
    .await
    .unwrap();
    assert!(s
        .oracle_plans(d, Precision::F32, common::LEGACY)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        s.oracle_plans(d, Precision::F64, common::LEGACY)
            .await
            .unwrap()
            .len(),
        1
    );

    // Another context has its own plans and its own oracle.
    let ctx = s
        .upsert_context(&store::MeasurementContext {
            kernel_sources_hash: "k".into(),
            build_options: "-D X".into(),
            engine_version: "0.1.0+timing2".into(),
        })
        .await
        .unwrap();
    s.upsert_plan(&PlanRecord {
        precision: Precision::F64,
        total_ms: 9.0,
        context: ctx,
        ..single.clone()
    })
    .await
    .unwrap();
    let legacy = s
        .oracle_plans(d, Precision::F64, common::LEGACY)
        .await
        .unwrap();
    let new = s.oracle_plans(d, Precision::F64, ctx).await.unwrap();
    assert_eq!((legacy.len(), new.len()), (1, 1));
    assert_eq!(
        (legacy[0].record.total_ms, new[0].record.total_ms),
        (3.0, 9.0)
    );
}

async fn models_round_trip(db: TestDb) {
    let s = db.open().await;
    let rec = ModelRecord {
        path: "models/cpu-f64.json".into(),
        device_name: "pthread-cpu".into(),
        precision: Precision::F64,
        metrics: json!({"geomean_oracle_ratio": 0.97, "stage1_accuracy": 0.8}),
        card: json!({"feature_order": ["rows", "cols"], "date": "2026-11-21"}),
    };
    let id = s.insert_model(&rec).await.unwrap();
    let id2 = s
        .insert_model(&ModelRecord {
            precision: Precision::F32,
            ..rec.clone()
        })
        .await
        .unwrap();
    let models = s.list_models().await.unwrap();
    assert_eq!(models.iter().map(|m| m.id).collect::<Vec<_>>(), [id, id2]);
    assert_eq!(models[0].record, rec);
    assert_eq!(models[1].record.precision, Precision::F32);
}

async fn runs_start_and_finish(db: TestDb) {
    let s = db.open().await;
    let d = s.upsert_device(&device("dev")).await.unwrap();
    let rec = RunRecord {
        device: Some(d),
        precision: Some(Precision::F64),
        params: json!({"budget_s": 600, "seed": 7}),
        notes: "corpus default".into(),
    };
    let id = s.start_run(&rec).await.unwrap();
    let run = s.run(id).await.unwrap().unwrap();
    assert_eq!(run.record, rec);
    assert_eq!(run.status, RunStatus::Running);
    assert!(run.is_unfinished());
    assert_eq!(s.unfinished_runs().await.unwrap().len(), 1);

    s.finish_run(id, RunStatus::Finished, "1234 measurements")
        .await
        .unwrap();
    let run = s.run(id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Finished);
    assert!(run.finished_at.is_some());
    assert_eq!(run.record.notes, "corpus default\n1234 measurements");
    assert!(s.unfinished_runs().await.unwrap().is_empty());

    let bare = s
        .start_run(&RunRecord {
            device: None,
            precision: None,
            params: json!(null),
            notes: String::new(),
        })
        .await
        .unwrap();
    s.finish_run(bare, RunStatus::Interrupted, "")
        .await
        .unwrap();
    let bare = s.run(bare).await.unwrap().unwrap();
    assert_eq!(bare.status, RunStatus::Interrupted);
    assert_eq!(bare.record.notes, "");
    assert_eq!(s.list_runs().await.unwrap().len(), 2);

    let err = s
        .finish_run(store::RunId(777), RunStatus::Failed, "")
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NotFound {
                table: "training_runs",
                id: 777
            }
        ),
        "{err:?}"
    );
    assert!(s.finish_run(id, RunStatus::Running, "").await.is_err());
}

async fn an_owned_run_keeps_its_owner_and_heartbeat_and_is_interrupted_once(db: TestDb) {
    let s = db.open().await;
    let owner = store::RunOwner {
        pid: 4242,
        host: "box".into(),
        token: "t0k".into(),
    };
    let rec = RunRecord {
        device: None,
        precision: Some(Precision::F32),
        params: json!({}),
        notes: "labelling".into(),
    };
    let id = s.start_owned_run(&rec, &owner).await.unwrap();
    let run = s.run(id).await.unwrap().unwrap();
    assert_eq!(run.owner.as_ref(), Some(&owner));
    let first = run.heartbeat_at.clone().expect("a first heartbeat");
    assert!(run.idle_s >= 0.0 && run.idle_s < 60.0, "{}", run.idle_s);
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    s.heartbeat_run(id).await.unwrap();
    let beat = s.run(id).await.unwrap().unwrap().heartbeat_at.unwrap();
    assert!(beat > first, "{beat} after {first}");

    assert!(s.interrupt_abandoned_run(id, "process gone").await.unwrap());
    // A second trainer noticing it too changes nothing.
    assert!(!s.interrupt_abandoned_run(id, "again").await.unwrap());
    let run = s.run(id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Interrupted);
    assert_eq!(run.finished_at.as_deref(), Some(beat.as_str()));
    assert_eq!(run.record.notes, "labelling\nprocess gone");
    assert!(s.unfinished_runs().await.unwrap().is_empty());
    // A finished run takes no heartbeat, and cannot be marked abandoned.
    s.heartbeat_run(id).await.unwrap();
    assert_eq!(s.run(id).await.unwrap().unwrap().heartbeat_at, Some(beat));
    let done = s.start_run(&rec).await.unwrap();
    assert!(s.run(done).await.unwrap().unwrap().owner.is_none());
    s.finish_run(done, RunStatus::Finished, "").await.unwrap();
    assert!(!s.interrupt_abandoned_run(done, "no").await.unwrap());
    assert_eq!(
        s.run(done).await.unwrap().unwrap().status,
        RunStatus::Finished
    );
}

async fn requests_are_logged_and_read_incrementally(db: TestDb) {
    let s = db.open().await;
    let full = RequestRecord {
        route: "/spmv".into(),
        matrix_hash: Some("abc".into()),
        features: Some(matrix("abc", "request", 1.0).features),
        plan: Some(plan_u10()),
        precision: Some(Precision::F32),
        device: Some("NVIDIA H200".into()),
        model: Some("models/gpu-f32.json".into()),
        kernel_ms: Some(0.125),
        e2e_ms: Some(0.5),
        status: 200,
    };
    let bare = RequestRecord {
        route: "/predict".into(),
        matrix_hash: None,
        features: None,
        plan: None,
        precision: None,
        device: None,
        model: None,
        kernel_ms: None,
        e2e_ms: None,
        status: 400,
    };
    let a = s.log_request(&full).await.unwrap();
    let b = s.log_request(&bare).await.unwrap();
    assert!(b > a);

    let all = s.requests_since(RequestId(0), 100).await.unwrap();
    assert_eq!(all.len(), 2);
    let mut expected = full.clone();
    expected.plan.as_mut().unwrap().kernels.sort();
    assert_eq!(all[0].record, expected);
    assert_eq!(all[1].record, bare);
    assert!(all[0].at.ends_with('Z'));

    assert_eq!(s.requests_since(RequestId(0), 1).await.unwrap().len(), 1);
    let later = s.requests_since(a, 100).await.unwrap();
    assert_eq!(later.iter().map(|r| r.id).collect::<Vec<_>>(), [b]);
    assert!(s.requests_since(b, 100).await.unwrap().is_empty());
}

async fn corrupt_json_in_a_row_is_a_decode_error(db: TestDb) {
    let s = db.open().await;
    s.upsert_matrix(&matrix("h", "suitesparse", 0.0))
        .await
        .unwrap();
    // Damage the row behind the store's back, as another program might.
    db.execute("UPDATE matrices SET features = '{not json'")
        .await;
    let err = s.matrix_by_hash("h").await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Decode {
                table: "matrices",
                ref column,
                ..
            } if column == "features"
        ),
        "{err:?}"
    );
}

async fn unknown_kernel_in_a_row_is_a_decode_error(db: TestDb) {
    let s = db.open().await;
    let (d, m) = dev_and_matrix(&s, "h").await;
    let k = bin_key(m, d, Precision::F32, Scheme::Single, 0, KernelId::Serial);
    s.insert_measurement(&timing(k, 1.0, None)).await.unwrap();
    db.execute("UPDATE measurements SET kernel = 'warp9'").await;
    let err = s.measured_keys(m, d, Precision::F32).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Decode {
                table: "measurements",
                ref column,
                ..
            } if column == "kernel"
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("warp9"), "{err}");
}
}
