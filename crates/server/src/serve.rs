//! Serving the app on a socket: a cap on open connections, a header deadline
//! and a graceful shutdown.
//!
//! The header deadline also closes idle keep-alive connections; the graceful
//! shutdown stops accepting, lets requests in flight finish within a grace
//! period, then closes the rest.
//!
//! `axum::serve` sets no header timeout, so slow clients could hold connections
//! for ever; this loop drives hyper directly with a timer.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How connections are served.
#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    /// Time allowed for a request's headers, and for an idle keep-alive wait.
    pub header_timeout: Duration,
    /// Open connections at once; the listener waits while at the cap.
    pub max_connections: usize,
    /// Time given to requests in flight once shutdown starts.
    pub shutdown_grace: Duration,
}

impl From<&crate::domain::config::Config> for ServeOptions {
    fn from(c: &crate::domain::config::Config) -> ServeOptions {
        ServeOptions {
            header_timeout: Duration::from_secs(c.header_timeout_s.max(1)),
            max_connections: c.max_connections.max(1),
            shutdown_grace: Duration::from_secs(c.shutdown_grace_s),
        }
    }
}

/// How the serving loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeReport {
    /// Connections accepted over the service's life.
    pub connections: u64,
    /// Whether every connection closed within the grace period.
    pub drained: bool,
}

/// Serves `app` on `listener` until `shutdown` resolves, then drains.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> ServeReport {
    let slots = Arc::new(Semaphore::new(opts.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(opts.header_timeout)
        .keep_alive(true);
    let mut connections = 0u64;
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s.expect("the connection semaphore is never closed"),
            _ = &mut shutdown => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        connections += 1;
        let conn =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    tracing::info!("shutting down: no new connections; waiting for requests in flight");
    let drained = tokio::select! {
        _ = graceful.shutdown() => true,
        _ = tokio::time::sleep(opts.shutdown_grace) => false,
    };
    ServeReport {
        connections,
        drained,
    }
}

/// Blocks SIGTERM and SIGINT in the calling thread, and so in every thread it
/// starts afterwards, and waits for them on a thread of its own; the returned
/// future resolves on the first one, and a second one ends the process at once.
///
/// Call it first in `main`, before any runtime or OpenCL thread exists. A
/// signal handler is not enough here: PoCL's embedded LLVM installs its own
/// SIGTERM handler when it compiles kernels, which removes its temporary files
/// and re-raises the signal with the default action, killing the process
/// (seen: SIGTERM exited 143 with a device, 0 without). A blocked signal taken
/// by `sigwait` never reaches any handler.
#[cfg(unix)]
pub fn shutdown_on_signals() -> impl Future<Output = ()> + Send + 'static {
    let (tx, rx) = tokio::sync::oneshot::channel::<i32>();
    // SAFETY: plain libc calls on a local, initialised signal set.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut tx = Some(tx);
            loop {
                let mut sig: libc::c_int = 0;
                // SAFETY: `set` is initialised and `sig` is a valid out-pointer.
                if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                    continue;
                }
                match tx.take() {
                    Some(tx) => {
                        let _ = tx.send(sig);
                    }
                    None => {
                        eprintln!("second signal: stopping at once");
                        std::process::exit(128 + sig);
                    }
                }
            }
        })
        .expect("spawning the signal thread");
    async move {
        if let Ok(sig) = rx.await {
            let name = if sig == libc::SIGTERM {
                "SIGTERM"
            } else {
                "SIGINT"
            };
            tracing::info!(signal = name, "shutdown requested");
        }
    }
}

/// Resolves on Ctrl-C (platforms without POSIX signals).
#[cfg(not(unix))]
pub fn shutdown_on_signals() -> impl Future<Output = ()> + Send + 'static {
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
