//! Migrations from an empty database (SQLite's set and PostgreSQL's twins), and
//! the connection settings.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use store::testing::TestDb;
use store::{Backend, DbLocation, Store};

/// The folder of a backend's migration files.
fn migrations_dir(backend: Backend) -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations");
    match backend {
        Backend::Sqlite => root,
        Backend::Postgres => root.join("postgres"),
    }
}

/// `(version, description)` of every `NNNN_description.sql` file directly in
/// the backend's migrations folder.
fn migration_files(backend: Backend) -> BTreeSet<(i64, String)> {
    let dir = migrations_dir(backend);
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("migrations folder") {
        let entry = entry.unwrap();
        if !entry.file_type().unwrap().is_file() {
            continue;
        }
        let name = entry.file_name().into_string().unwrap();
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

const TABLES: [&str; 10] = [
    "devices",
    "label_queue",
    "matrices",
    "measurement_contexts",
    "measurements",
    "models",
    "plans",
    "requests",
    "training_runs",
    "uploads",
];

#[test]
fn every_sqlite_migration_has_a_postgres_twin() {
    // A migration added to migrations/ needs its PostgreSQL form, with the same
    // number and name, in migrations/postgres/ (see migrations/README.md).
    assert_eq!(
        migration_files(Backend::Postgres),
        migration_files(Backend::Sqlite),
        "migrations/postgres/ must hold one twin of each file of migrations/"
    );
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let embedded: BTreeSet<(i64, String)> =
            Store::embedded_migrations(backend).into_iter().collect();
        assert_eq!(
            embedded,
            migration_files(backend),
            "{backend:?}: the build embeds exactly the files of {}",
            migrations_dir(backend).display()
        );
    }
}

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

    assert_every_table_and_migration(&store).await;
}

/// The store has exactly the schema's tables and every migration file of its
/// backend recorded as applied.
async fn assert_every_table_and_migration(store: &Store) {
    let tables = store.table_names().await.unwrap();
    assert_eq!(tables, TABLES.map(String::from).to_vec());
    let files = migration_files(store.backend());
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
}

store::test_on_both_backends! {
async fn fresh_database_gets_every_table_and_every_migration(db: TestDb) {
    let store = db.open().await;
    assert_eq!(store.backend(), match db {
        TestDb::Sqlite(_) => Backend::Sqlite,
        TestDb::Postgres(_) => Backend::Postgres,
    });
    assert_every_table_and_migration(&store).await;
}

async fn applying_twice_is_a_no_op(db: TestDb) {
    let store = db.open().await;
    let id = store.upsert_device(&common::device("dev")).await.unwrap();
    let before = store.applied_migrations().await.unwrap();
    store.migrate().await.unwrap();
    store.close().await;

    // Reopening applies nothing new and keeps the data.
    let store = db.open().await;
    store.migrate().await.unwrap();
    assert_eq!(store.applied_migrations().await.unwrap(), before);
    let devices = store.list_devices().await.unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0].id, id);
}

async fn foreign_keys_are_enforced(db: TestDb) {
    let store = db.open().await;
    match db {
        TestDb::Sqlite(_) => assert_eq!(store.journal_mode().await.unwrap(), "wal"),
        TestDb::Postgres(_) => assert!(matches!(
            store.journal_mode().await,
            Err(store::StoreError::Unsupported { .. })
        )),
    }
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
    assert!(
        err.to_string().to_lowercase().contains("foreign key"),
        "{err}"
    );
}

async fn an_edited_landed_migration_is_refused(db: TestDb) {
    db.open().await.close().await;
    // Pretend the database was migrated with different contents of migration 1,
    // as happens when a landed migration file is edited.
    db.execute(match db {
        TestDb::Sqlite(_) => "UPDATE _sqlx_migrations SET checksum = x'00' WHERE version = 1",
        TestDb::Postgres(_) => "UPDATE _sqlx_migrations SET checksum = '\\x00' WHERE version = 1",
    })
    .await;
    let err = Store::connect(Some(&db.url())).await.unwrap_err();
    assert!(
        matches!(
            err,
            store::StoreError::Migrate(sqlx::migrate::MigrateError::VersionMismatch(1))
        ),
        "{err:?}"
    );
}
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
    let err = Store::connect(Some("mysql://localhost/spmv"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, store::StoreError::InvalidUrl { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("mysql"), "{err}");
}
