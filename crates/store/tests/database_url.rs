//! `DATABASE_URL` and the default location. The test body runs in a child
//! process of its own, because it changes the environment and the working
//! directory, which the other tests of this binary share.

use std::path::PathBuf;
use store::{DbLocation, Store, DATABASE_URL_ENV, DEFAULT_DATABASE_FILE};

/// Set in the child process that runs [`environment_then_default_child`].
const CHILD_ENV: &str = "STORE_DATABASE_URL_CHILD";

#[test]
fn environment_then_default() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "database_url::environment_then_default_child",
            "--exact",
            "--ignored",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .env_remove(DATABASE_URL_ENV)
        .output()
        .expect("spawn the child test process");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "the child failed ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The body of [`environment_then_default`], in a process of its own.
#[tokio::test]
#[ignore = "a child of environment_then_default (it changes the working directory)"]
async fn environment_then_default_child() {
    assert!(
        std::env::var_os(CHILD_ENV).is_some(),
        "run through environment_then_default: this test changes the process's working directory"
    );
    let dir = tempfile::tempdir().unwrap();
    std::env::set_current_dir(dir.path()).unwrap();

    // No URL anywhere: spmv.db in the working directory.
    std::env::remove_var(DATABASE_URL_ENV);
    assert_eq!(
        DbLocation::resolve(None).unwrap(),
        DbLocation::File(PathBuf::from(DEFAULT_DATABASE_FILE))
    );
    let s = Store::connect(None).await.unwrap();
    s.close().await;
    assert!(dir.path().join("spmv.db").exists());

    // Each accepted form of DATABASE_URL, relative and absolute.
    let abs = dir.path().join("abs.db");
    for (url, file) in [
        ("sqlite://env1.db".to_string(), dir.path().join("env1.db")),
        ("sqlite:env2.db".to_string(), dir.path().join("env2.db")),
        ("env3.db".to_string(), dir.path().join("env3.db")),
        (format!("sqlite://{}", abs.display()), abs.clone()),
        (
            "sqlite:sub/dir/env4.db?mode=rwc".to_string(),
            dir.path().join("sub/dir/env4.db"),
        ),
    ] {
        std::env::set_var(DATABASE_URL_ENV, &url);
        let s = Store::connect(None).await.unwrap();
        assert_eq!(s.journal_mode().await.unwrap(), "wal", "{url}");
        s.close().await;
        assert!(file.exists(), "{url} should create {}", file.display());
    }

    // An explicit URL wins over the environment.
    std::env::set_var(DATABASE_URL_ENV, "sqlite:ignored.db");
    let s = Store::connect(Some("sqlite:explicit.db")).await.unwrap();
    s.close().await;
    assert!(dir.path().join("explicit.db").exists());
    assert!(!dir.path().join("ignored.db").exists());

    // An empty DATABASE_URL means "not set"; an in-memory one works.
    std::env::set_var(DATABASE_URL_ENV, "");
    assert_eq!(
        DbLocation::resolve(None).unwrap(),
        DbLocation::File(PathBuf::from(DEFAULT_DATABASE_FILE))
    );
    std::env::set_var(DATABASE_URL_ENV, "sqlite::memory:");
    let s = Store::connect(None).await.unwrap();
    assert_eq!(s.location(), &DbLocation::Memory);

    std::env::set_var(DATABASE_URL_ENV, "mysql://db/x");
    assert!(Store::connect(None).await.is_err());
    std::env::remove_var(DATABASE_URL_ENV);
}
