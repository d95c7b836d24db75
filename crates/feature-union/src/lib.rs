//! Intentionally empty: this crate exists for its `Cargo.toml`, which turns on
//! the dependency features that `cargo test --workspace` unifies anyway, so that
//! the serve command's `cargo build -p server` reuses the test build's
//! dependencies (see the manifest's comment).
