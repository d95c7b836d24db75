//! Test support (always compiled, so that `cargo test` and `cargo build` resolve
//! the same features and share one build of the dependencies): what a test does when something it needs
//! is missing on this machine (an OpenCL device, PostgreSQL, the shared
//! matrices folder): outside CI it says so and skips (or falls back); under CI
//! it fails, so that a missing device is never a pass.
//!
//! This module reads the environment itself, unlike the rest of the crate: it
//! serves test binaries only, which have no `main` to read it in.

/// Whether tests must fail rather than skip when something is missing: under
/// CI (`CI`) or with `SPMV_REQUIRE_DEVICE`, either set to `1` or `true`.
pub fn required() -> bool {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    set("CI") || set("SPMV_REQUIRE_DEVICE")
}

/// `what` is missing: a panic when [`required`], else `instead` (what the test
/// does without it: `SKIP: ...`, or the fallback it uses) printed to stderr.
pub fn missing(what: &str, instead: &str) {
    if required() {
        panic!("{what} is required under CI / SPMV_REQUIRE_DEVICE=1, and it is missing");
    }
    eprintln!("{instead}");
}

/// The shared data folder `name` (`matrices`, `uf-stats`):
/// `$SPMV_SHARED_DIR/<name>`, by default `shared/<name>` beside the
/// workspace's folder; `None` when it is not a folder.
pub fn shared_dir(name: &str) -> Option<std::path::PathBuf> {
    let base = match std::env::var_os("SPMV_SHARED_DIR") {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    };
    let dir = base.join(name);
    dir.is_dir().then_some(dir)
}

/// [`shared_dir`], or `None` after [`missing`] (the test skips; under CI it
/// fails).
pub fn shared_dir_or_skip(name: &str) -> Option<std::path::PathBuf> {
    let dir = shared_dir(name);
    if dir.is_none() {
        let instead = format!("SKIP: ../shared/{name} not found (set SPMV_SHARED_DIR)");
        missing(&format!("../shared/{name}"), &instead);
    }
    dir
}
