//! The crate's integration tests in one binary (one link instead of one per
//! file): each module is a former `tests/<name>.rs`, run as `<name>::<test>`.

mod any_precision;
mod kernels_equal_reference;
mod solve;
