//! The crate's integration tests in one binary (one link instead of one per
//! file): each module is a former `tests/<name>.rs`, run as `<name>::<test>`.

mod common;
mod concurrency;
mod contexts;
mod database_url;
mod migrations;
mod queue;
mod resume;
mod round_trips;
mod uploads;
