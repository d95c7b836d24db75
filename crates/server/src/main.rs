//! `server`: starts the SpMV service with the shipped models on the best device
//! found (see `server --help` for every flag and its environment variable).

use anyhow::Context;
use clap::Parser;
use server::{app, AppState, Config};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let config = Config::parse();
    let bind = config.bind;
    let state = AppState::from_config(config).await?;
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("binding {bind}"))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    tracing::info!(%addr, "listening");
    println!("spmv server listening on http://{addr} (try: curl http://{addr}/healthz)");
    axum::serve(listener, app(state))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("shutting down");
        })
        .await
        .context("serving")?;
    Ok(())
}
