//! Re-embeds the migrations whenever a file in `migrations/` (SQLite's) or
//! `migrations/postgres/` (PostgreSQL's) changes.

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
    println!("cargo:rerun-if-changed=../../migrations/postgres");
}
