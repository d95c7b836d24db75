//! The crate's integration tests in one binary (one link instead of one per
//! file): each module is a former `tests/<name>.rs`, run as `<name>::<test>`.

mod amortise;
mod auth;
mod bad_input;
mod binary_csr;
mod common;
mod concurrency;
mod endpoints;
mod fault;
mod hostile_input;
mod metrics;
mod models;
mod postgres;
mod predicted_time;
mod ready;
mod replicas;
mod request_path;
mod serve;
mod solve;
mod transpose;
mod tuning;
