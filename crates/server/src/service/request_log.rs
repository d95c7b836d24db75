//! The request log: served requests written to the results database by one
//! writer task through a bounded queue.
//!
//! The queue is bounded so that a slow or locked database never holds request
//! memory without bound; entries past the bound are dropped and counted
//! (`spmv_request_log_dropped_total`), and shutdown flushes the rest.

use crate::service::metrics::Metrics;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The queue in front of the writer task.
pub struct RequestLog {
    tx: Mutex<Option<mpsc::Sender<store::RequestRecord>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    store: store::Store,
}

impl RequestLog {
    /// Starts the writer task (needs a Tokio runtime) with room for `capacity`
    /// waiting entries.
    pub fn start(store: store::Store, capacity: usize, metrics: Arc<Metrics>) -> RequestLog {
        let (tx, mut rx) = mpsc::channel::<store::RequestRecord>(capacity.max(1));
        let db = store.clone();
        let writer = tokio::spawn(async move {
            while let Some(r) = rx.recv().await {
                if let Err(e) = db.log_request(&r).await {
                    tracing::warn!(error = %e, route = %r.route, "could not log the request to the results database");
                    metrics.log_failure();
                }
            }
        });
        RequestLog {
            tx: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            store,
        }
    }

    /// Queues an entry; returns false when it was dropped (queue full or closed).
    pub fn push(&self, r: store::RequestRecord) -> bool {
        let guard = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        match guard.as_ref() {
            Some(tx) => tx.try_send(r).is_ok(),
            None => false,
        }
    }

    /// Stops taking entries, waits until every queued one is written, then
    /// closes the database. Later calls do nothing.
    pub async fn flush_and_close(&self) {
        drop(self.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
        let writer = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = writer {
            let _ = w.await;
            self.store.close().await;
        }
    }
}
