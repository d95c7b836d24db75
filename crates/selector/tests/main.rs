//! The crate's integration tests in one binary (one link instead of one per
//! file): each module is a former `tests/<name>.rs`, run as `<name>::<test>`.

mod common;
mod first_call_plan;
mod fit;
mod golden_plans;
mod matching;
mod model;
mod perf;
mod shared_matrices;
