//! The crate's integration tests in one binary (one link instead of one per
//! file): each module is a former `tests/<name>.rs`, run as `<name>::<test>`.

mod column_facts;
mod gen_families;
mod gen_standin;
mod gen_stats_file;
mod mm_bad_files;
mod mm_roundtrip;
mod shared_matrices;
