//! The bounded queue in front of the device.
//!
//! OpenCL calls block, so device work never runs on the async runtime: jobs go
//! to one dedicated worker thread that owns the device context and runs them in
//! order. Admission is bounded by a semaphore of `depth` permits (jobs running
//! plus waiting); when none is free the request is turned away at once with
//! 503 and `Retry-After`, so a burst never piles up unbounded work.

use crate::error::ApiError;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::sync::Arc;
use tokio::sync::{oneshot, Semaphore};

type Job<C> = Box<dyn FnOnce(&mut C) + Send>;

/// A worker thread owning a context `C` (the device), fed through a bounded queue.
pub struct DeviceQueue<C> {
    permits: Arc<Semaphore>,
    depth: usize,
    retry_after_s: u64,
    tx: mpsc::Sender<Job<C>>,
}

impl<C: 'static> DeviceQueue<C> {
    /// Starts the worker thread; `init` builds the context on that thread.
    pub fn start(
        depth: usize,
        retry_after_s: u64,
        init: impl FnOnce() -> C + Send + 'static,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<Job<C>>();
        std::thread::Builder::new()
            .name("device-worker".into())
            .spawn(move || {
                let mut ctx = init();
                while let Ok(job) = rx.recv() {
                    // A panicking job must not take the device worker down; its
                    // caller sees the dropped reply channel as an internal error.
                    if std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut ctx))).is_err() {
                        tracing::error!("a device job panicked; the worker keeps serving");
                    }
                }
            })
            .expect("spawning the device worker thread");
        DeviceQueue {
            permits: Arc::new(Semaphore::new(depth)),
            depth,
            retry_after_s,
            tx,
        }
    }

    /// The configured depth.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Jobs admitted and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.depth - self.permits.available_permits()
    }

    /// Runs `f` on the worker thread and awaits its result, or answers
    /// [`ApiError::QueueFull`] at once when `depth` jobs are already admitted.
    pub async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut C) -> R + Send + 'static,
    ) -> Result<R, ApiError> {
        let permit = self
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| ApiError::QueueFull {
                depth: self.depth,
                retry_after_s: self.retry_after_s,
            })?;
        let (reply, answer) = oneshot::channel();
        let job: Job<C> = Box::new(move |ctx: &mut C| {
            // A caller that gave up (deadline passed, client gone) is not served:
            // its job is dropped before it takes the device.
            let r = (!reply.is_closed()).then(|| f(ctx));
            // The slot is free before the answer arrives, so the caller's next
            // job is admitted.
            drop(permit);
            if let Some(r) = r {
                let _ = reply.send(r);
            }
        });
        self.tx
            .send(job)
            .map_err(|_| ApiError::internal("the device worker thread has stopped"))?;
        answer
            .await
            .map_err(|_| ApiError::internal("a device job failed without an answer (it panicked)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn full_queue_is_refused_then_frees_up() {
        let q = Arc::new(DeviceQueue::start(1, 3, || 10u32));
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let q2 = q.clone();
        let slow = tokio::spawn(async move {
            q2.run(move |c| {
                wait.recv().unwrap();
                *c += 1;
                *c
            })
            .await
        });
        while q.in_flight() == 0 {
            tokio::task::yield_now().await;
        }
        let e = q.run(|c| *c).await.unwrap_err();
        assert!(matches!(
            e,
            ApiError::QueueFull {
                depth: 1,
                retry_after_s: 3
            }
        ));
        release.send(()).unwrap();
        assert_eq!(slow.await.unwrap().unwrap(), 11);
        assert_eq!(q.run(|c| *c).await.unwrap(), 11);
    }

    #[tokio::test]
    async fn a_panicking_job_is_an_internal_error_and_the_worker_survives() {
        let q = DeviceQueue::start(2, 1, || ());
        let e = q.run(|_| -> u32 { panic!("boom") }).await.unwrap_err();
        assert_eq!(e.status().as_u16(), 500);
        assert_eq!(q.run(|_| 5).await.unwrap(), 5);
    }
}
