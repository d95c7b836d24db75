//! `server`: the binary that starts the SpMV service (see `server --help`).
//!
//! It serves the shipped models on the best device found (`server --help` lists
//! every flag and its environment variable). SIGTERM or SIGINT stop it
//! gracefully: no new connections, requests in flight finish within
//! `--shutdown-grace-s`, the request log is flushed and the database closed.

use anyhow::Context;
use clap::Parser;
use server::serve::{serve, shutdown_on_signals, ServeOptions};
use server::{app, AppState, Config};
use tracing_subscriber::EnvFilter;

fn main() -> anyhow::Result<()> {
    // Before any other thread exists, so that every thread inherits the mask.
    let shutdown = shutdown_on_signals();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(run(shutdown))
}

async fn run(shutdown: impl std::future::Future<Output = ()>) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let config = Config::parse();
    if config.print_openapi {
        println!("{}", server::openapi::document());
        return Ok(());
    }
    let bind = config.bind;
    let opts = ServeOptions::from(&config);
    let state = AppState::from_config(config).await?;
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("binding {bind}"))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    tracing::info!(%addr, "listening");
    println!("spmv server listening on http://{addr} (try: curl http://{addr}/healthz)");
    let report = serve(listener, app(state.clone()), opts, shutdown).await;
    state.shutdown().await;
    if report.drained {
        println!(
            "spmv server stopped: drained ({} connections served, request log flushed, database closed)",
            report.connections
        );
        Ok(())
    } else {
        println!(
            "spmv server stopped: requests still in flight after {} s were cut off (request log flushed, database closed)",
            opts.shutdown_grace.as_secs()
        );
        std::process::exit(75)
    }
}
