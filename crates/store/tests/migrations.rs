//! Migrations from an empty database, and the connection settings.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use store::{DbLocation, Store};

/// `(version, description)` of every `NNNN_description.sql` in the workspace's
/// `migrations/` folder.
fn migration_files() -> BTreeSet<(i64, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations");
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("migrations folder") {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(stem) = name.strip_suffix(".sql") else {
            continue;
        };
        let (num, desc) = stem.split_once('_').expect("NNNN_description.sql");
        out.insert((
            num.parse().expect("numbered migration"),
            desc.replace('_', " "),
        ));
    }
    assert!(
        !out.is_empty(),
        "no migration files found in {}",
        dir.display()
    );
    out
}

const TABLES: [&str; 8] = [
    "devices",
    "matrices",
    "measurement_contexts",
    "measurements",
    "models",
    "plans",
    "requests",
    "training_runs",
];

#[tokio::test]
async fn fresh_file_gets_every_table_and_every_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/folder/fresh.db");
    assert!(!path.exists());
    let store = Store::connect(Some(path.to_str().unwrap())).await.unwrap();
    assert!(
        path.exists(),
        "the database file and its folders are created"
    );
    assert_eq!(store.location(), &DbLocation::File(path.clone()));

    let tables = store.table_names().await.unwrap();
    assert_eq!(tables, TABLES.map(String::from).to_vec());

    let files = migration_files();
    let applied = store.applied_migrations().await.unwrap();
    let applied_set: BTreeSet<(i64, String)> = applied
        .iter()
        .map(|m| (m.version, m.description.clone()))
        .collect();
    assert_eq!(
        applied_set, files,
        "the version table lists every migration file"
    );
    assert!(applied.iter().all(|m| m.success));
    let embedded: BTreeSet<(i64, String)> = Store::embedded_migrations().into_iter().collect();
    assert_eq!(
        embedded, files,
        "every migration file is embedded in the build"
    );
}

#[tokio::test]
async fn applying_twice_is_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::file_store(dir.path()).await;
    let id = store.upsert_device(&common::device("dev")).await.unwrap();
    let before = store.applied_migrations().await.unwrap();
    store.migrate().await.unwrap();
    store.close().await;

    // Reopening applies nothing new and keeps the data.
    let store = common::file_store(dir.path()).await;
    store.migrate().await.unwrap();
    assert_eq!(store.applied_migrations().await.unwrap(), before);
    let devices = store.list_devices().await.unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0].id, id);
}

#[tokio::test]
async fn wal_and_foreign_keys_are_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::file_store(dir.path()).await;
    assert_eq!(store.journal_mode().await.unwrap(), "wal");
    assert!(store.foreign_keys_enabled().await.unwrap());

    // A measurement naming a matrix and device that do not exist is refused.
    let key = common::bin_key(
        store::MatrixId(999),
        store::DeviceId(999),
        store::Precision::F32,
        sparse::Scheme::Single,
        0,
        sparse::KernelId::Serial,
    );
    let err = store
        .insert_measurement(&common::timing(key, 1.0, None))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            store::StoreError::Query {
                operation: "insert_measurement",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("FOREIGN KEY"), "{err}");
}

#[tokio::test]
async fn in_memory_store_has_the_schema() {
    let store = Store::open_in_memory().await.unwrap();
    assert_eq!(store.table_names().await.unwrap().len(), TABLES.len());
    assert!(store.foreign_keys_enabled().await.unwrap());
    assert_eq!(store.location(), &DbLocation::Memory);
}

#[tokio::test]
async fn not_a_database_is_a_connect_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.db");
    std::fs::write(&path, vec![b'x'; 4096]).unwrap();
    let err = Store::connect(Some(path.to_str().unwrap()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            store::StoreError::Connect { .. } | store::StoreError::Migrate(_)
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn unsupported_url_is_refused() {
    let err = Store::connect(Some("postgres://localhost/spmv"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, store::StoreError::InvalidUrl { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("postgres"), "{err}");
}

#[tokio::test]
async fn an_edited_landed_migration_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::file_store(dir.path()).await;
    store.close().await;
    // Pretend the database was migrated with different contents of migration 1,
    // as happens when a landed migration file is edited.
    let url = format!("sqlite://{}", dir.path().join("results.db").display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("UPDATE _sqlx_migrations SET checksum = x'00' WHERE version = 1")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let err = Store::connect(Some(&url)).await.unwrap_err();
    assert!(
        matches!(
            err,
            store::StoreError::Migrate(sqlx::migrate::MigrateError::VersionMismatch(1))
        ),
        "{err:?}"
    );
}
