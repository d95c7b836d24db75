//! Mutation fuzzing on stable Rust (no sanitizer, no nightly): seeds from the
//! shared matrices and the bad-file fixtures, mutated by [`mutate`], fed to
//! the Matrix Market reader, the JSON CSR reader and the whole HTTP input path
//! of the service (gzip, JSON /spmv bodies, streamed multipart) through
//! [`targets`]. A panic, a 5xx other than 503, or an input running longer than
//! the hang limit is a crash, written to `target/fuzz-crashes/`; each one
//! fixed is kept in `crates/fuzz/regressions/` and replayed by this crate's tests.

pub mod mutate;
pub mod seeds;
pub mod targets;
