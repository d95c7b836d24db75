//! The bounded queue in front of the device.
//!
//! OpenCL calls block, so device work never runs on the async runtime: jobs go
//! to one dedicated worker thread that owns the device context and runs them in
//! order. Admission is bounded by a semaphore of `depth` permits (jobs running
//! plus waiting); when none is free the request is turned away at once with
//! 503 and `Retry-After`, so a burst never piles up unbounded work.
//!
//! A job may carry a deadline. One still waiting when its deadline passes (or
//! whose caller went away) is cancelled: its closure, and whatever it holds
//! (x, device buffers), is dropped at once, and the worker skips it without
//! touching the device; its slot frees when the worker reaches it, so the
//! channel never holds more than `depth` jobs. A running kernel cannot be
//! interrupted in OpenCL: a job that has started runs to its end on the worker,
//! and a result nobody waits for any more is discarded. Both are counted.
//! After each job the worker runs a hook (the device's fault recovery).
//!
//! A job admitted while no other is (the device idle, nothing waiting) runs
//! in place instead: on the caller's own runtime thread, which tokio's
//! `block_in_place` hands its other tasks away from, under the same lock as the
//! worker's jobs, so device work stays one job at a time and in order. That
//! saves the two thread wake-ups of the hand-over to the worker and back,
//! which after an idle spell of milliseconds cost more than the rest of a
//! request's own work (measured on PoCL at 10M nonzeros: 0.49-0.81 ms of the
//! server's time beyond kernel and copies through the worker, -0.06-0.16 ms in
//! place). The worker is woken afterwards to run its hook when the hook says
//! it has work (a fault to recover from): a wake per request would be one
//! more thread woken on the request's path for nothing. A job in place
//! cannot be abandoned at its deadline: one that ends past it is discarded and
//! answered as expired, as a job that outran its deadline on the worker is.
//! A runtime with one thread (tests) always uses the worker.

use crate::domain::error::ApiError;
use prometheus_client::metrics::counter::Counter;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

tokio::task_local! {
    /// The deadline of the request being served (set by the HTTP deadline layer).
    pub static DEADLINE: std::time::Instant;
}

/// The deadline of the request this task serves, if any: device jobs carry
/// it, so that one still queued when it passes is dropped without running.
pub fn request_deadline() -> Option<std::time::Instant> {
    DEADLINE.try_with(|d| *d).ok()
}

type Job<C> = Box<dyn FnOnce(&mut C) + Send>;

/// Counters of jobs that never ran or whose result was not wanted.
#[derive(Clone, Default)]
pub struct QueueCounters {
    /// Jobs cancelled while waiting (deadline passed or caller gone), never run.
    pub expired: Counter,
    /// Jobs that ran to their end after their caller stopped waiting.
    pub discarded: Counter,
}

const QUEUED: u8 = 0;
const RUNNING: u8 = 1;
const CANCELLED: u8 = 2;

/// A job's closure and whether the worker or the caller owns it.
struct Ticket<F> {
    state: AtomicU8,
    f: Mutex<Option<F>>,
}

impl<F> Ticket<F> {
    /// Moves the job from `QUEUED` to `to`; whoever wins owns the closure.
    fn claim(&self, to: u8) -> Option<F> {
        self.state
            .compare_exchange(QUEUED, to, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        self.f.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn started(&self) -> bool {
        self.state.load(Ordering::Acquire) == RUNNING
    }
}

/// The worker's side of a queued job: runs the ticket's closure unless the
/// caller cancelled it or its deadline passed, frees the slot, then answers
/// (`None`: expired unrun) and counts a job nobody waited for.
fn worker_job<C, R, F>(
    ticket: Arc<Ticket<F>>,
    permit: OwnedSemaphorePermit,
    deadline: Option<Instant>,
    reply: oneshot::Sender<Option<R>>,
    counters: QueueCounters,
) -> Job<C>
where
    R: Send + 'static,
    F: FnOnce(&mut C) -> R + Send + 'static,
{
    Box::new(move |ctx: &mut C| {
        let late = deadline.is_some_and(|d| Instant::now() >= d);
        let f = if late {
            ticket.claim(CANCELLED)
        } else {
            ticket.claim(RUNNING)
        };
        let r = match f {
            Some(f) if !late => Some(f(ctx)),
            _ => None,
        };
        // The slot is free before the answer arrives, so the caller's next
        // job is admitted.
        drop(permit);
        let ran = r.is_some();
        // `None` tells a caller still waiting that its job expired unrun.
        if reply.send(r).is_err() && ran {
            counters.discarded.inc();
        }
        if !ran {
            counters.expired.inc();
        }
    })
}

/// Cancels a job still waiting when its caller stops waiting (deadline or
/// dropped future), dropping its closure there and then.
struct CancelOnDrop<F>(Arc<Ticket<F>>);

impl<F> Drop for CancelOnDrop<F> {
    fn drop(&mut self) {
        drop(self.0.claim(CANCELLED));
    }
}

/// A worker thread owning a context `C` (the device), fed through a bounded queue.
pub struct DeviceQueue<C> {
    permits: Arc<Semaphore>,
    depth: usize,
    retry_after_s: u64,
    tx: mpsc::Sender<Job<C>>,
    counters: QueueCounters,
    /// The context, set by the worker once built; whoever runs a job (the
    /// worker, or a caller in place) holds this lock meanwhile.
    ctx: Arc<Mutex<Option<C>>>,
    /// Whether the hook has work after a job run in place ([`Hook::due`]).
    hook_due: Box<dyn Fn() -> bool + Send + Sync>,
}

/// What the worker runs after each job, and when it must be woken for it.
pub struct Hook<C> {
    after: Box<dyn FnMut(&mut C) + Send>,
    due: Box<dyn Fn() -> bool + Send + Sync>,
}

impl<C> Hook<C> {
    /// `after` runs on the worker after each of its jobs and on each
    /// [`DeviceQueue::wake`]; after a job run in place the worker is woken
    /// for it only when `due` says it has work (`after` must then find it
    /// so, e.g. a flag set by the job).
    pub fn new(
        after: impl FnMut(&mut C) + Send + 'static,
        due: impl Fn() -> bool + Send + Sync + 'static,
    ) -> Hook<C> {
        Hook {
            after: Box::new(after),
            due: Box::new(due),
        }
    }
}

/// A job not run in place, handed back with its permit.
type NotInPlace<F> = (OwnedSemaphorePermit, F);

/// How a job run in place ended.
enum InPlace<R> {
    Done(R),
    /// Ended past its deadline: its result is dropped.
    Late,
    Panicked,
}

fn lock<C>(m: &Mutex<C>) -> std::sync::MutexGuard<'_, C> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<C: Send + 'static> DeviceQueue<C> {
    /// Starts the worker thread; `init` builds the context on that thread.
    pub fn start(
        depth: usize,
        retry_after_s: u64,
        init: impl FnOnce() -> C + Send + 'static,
    ) -> Self {
        Self::start_with(
            depth,
            retry_after_s,
            init,
            Hook::new(|_| {}, || false),
            QueueCounters::default(),
        )
    }

    /// As [`DeviceQueue::start`], with a hook the worker runs after every job
    /// (after its answer is sent) and the counters to count into.
    pub fn start_with(
        depth: usize,
        retry_after_s: u64,
        init: impl FnOnce() -> C + Send + 'static,
        hook: Hook<C>,
        counters: QueueCounters,
    ) -> Self {
        let Hook { mut after, due } = hook;
        let (tx, rx) = mpsc::channel::<Job<C>>();
        let ctx = Arc::new(Mutex::new(None));
        let shared = ctx.clone();
        std::thread::Builder::new()
            .name("device-worker".into())
            .spawn(move || {
                let built = init();
                *lock(&shared) = Some(built);
                while let Ok(job) = rx.recv() {
                    let mut held = lock(&shared);
                    let ctx = held
                        .as_mut()
                        .expect("the context is set before the first job");
                    // A panicking job must not take the device worker down; its
                    // caller sees the dropped reply channel as an internal error.
                    if std::panic::catch_unwind(AssertUnwindSafe(|| job(ctx))).is_err() {
                        tracing::error!("a device job panicked; the worker keeps serving");
                    }
                    if std::panic::catch_unwind(AssertUnwindSafe(|| after(ctx))).is_err() {
                        tracing::error!(
                            "the device worker's hook panicked; the worker keeps serving"
                        );
                    }
                }
            })
            .expect("spawning the device worker thread");
        DeviceQueue {
            permits: Arc::new(Semaphore::new(depth)),
            depth,
            retry_after_s,
            tx,
            counters,
            ctx,
            hook_due: due,
        }
    }

    /// The configured depth.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Jobs admitted and not yet finished (or skipped).
    pub fn in_flight(&self) -> usize {
        self.depth - self.permits.available_permits()
    }

    /// The counters of expired and discarded jobs.
    pub fn counters(&self) -> &QueueCounters {
        &self.counters
    }

    /// Wakes the worker with an empty job (no permit), so that it runs its
    /// hook even when no request comes.
    pub fn wake(&self) {
        let _ = self.tx.send(Box::new(|_: &mut C| {}));
    }

    /// Runs `f` on the worker thread and awaits its result, or answers
    /// [`ApiError::QueueFull`] at once when `depth` jobs are already admitted.
    pub async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut C) -> R + Send + 'static,
    ) -> Result<R, ApiError> {
        self.run_until(None, f).await
    }

    /// As [`DeviceQueue::run`], with a deadline: a job still waiting when it
    /// passes is dropped without running ([`ApiError::DeviceDeadline`] with
    /// `started: false`); one running by then finishes on the worker and its
    /// result is discarded (`started: true`).
    pub async fn run_until<R: Send + 'static, F>(
        &self,
        deadline: Option<Instant>,
        f: F,
    ) -> Result<R, ApiError>
    where
        F: FnOnce(&mut C) -> R + Send + 'static,
    {
        let permit = self
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| ApiError::QueueFull {
                depth: self.depth,
                retry_after_s: self.retry_after_s,
            })?;
        let admitted = Instant::now();
        let expired = |started: bool| ApiError::DeviceDeadline {
            waited_ms: ms(admitted.elapsed()),
            started,
            retry_after_s: self.retry_after_s,
        };
        let (permit, f) = match self.run_in_place(permit, deadline, f) {
            Ok(InPlace::Done(r)) => return Ok(r),
            Ok(InPlace::Late) => {
                self.counters.discarded.inc();
                return Err(expired(true));
            }
            Ok(InPlace::Panicked) => {
                tracing::error!("a device job panicked; the device keeps serving");
                return Err(ApiError::internal(
                    "a device job failed without an answer (it panicked)",
                ));
            }
            Err(back) => back,
        };
        let ticket = Arc::new(Ticket {
            state: AtomicU8::new(QUEUED),
            f: Mutex::new(Some(f)),
        });
        let (reply, mut answer) = oneshot::channel();
        let job = worker_job(
            ticket.clone(),
            permit,
            deadline,
            reply,
            self.counters.clone(),
        );
        self.tx
            .send(job)
            .map_err(|_| ApiError::internal("the device worker thread has stopped"))?;
        let guard = CancelOnDrop(ticket);
        let got = match deadline {
            None => Ok(answer.await),
            Some(d) => tokio::time::timeout_at(d.into(), &mut answer).await,
        };
        match got {
            Ok(Ok(Some(r))) => Ok(r),
            Ok(Ok(None)) => Err(expired(false)),
            Ok(Err(_)) => Err(ApiError::internal(
                "a device job failed without an answer (it panicked)",
            )),
            Err(_) => {
                let started = guard.0.started();
                drop(guard);
                Err(expired(started))
            }
        }
    }

    /// Runs `f` on this thread when it may (a multi-thread runtime, no other
    /// job admitted, the worker neither running a job nor its hook, the
    /// deadline not passed), and says how it went; else `f` and its permit
    /// come back for the worker.
    fn run_in_place<R, F>(
        &self,
        permit: OwnedSemaphorePermit,
        deadline: Option<Instant>,
        f: F,
    ) -> Result<InPlace<R>, NotInPlace<F>>
    where
        F: FnOnce(&mut C) -> R,
    {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let multi =
            Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
        let alone = self.permits.available_permits() + 1 == self.depth;
        let early = deadline.is_none_or(|d| Instant::now() < d);
        if !(multi && alone && early) {
            return Err((permit, f));
        }
        let mut held = match self.ctx.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Err((permit, f)),
        };
        let Some(ctx) = held.as_mut() else {
            drop(held);
            return Err((permit, f));
        };
        let r =
            tokio::task::block_in_place(|| std::panic::catch_unwind(AssertUnwindSafe(|| f(ctx))));
        drop(held);
        drop(permit);
        // The hook runs on the worker, off this request's path, when it has work.
        if (self.hook_due)() {
            self.wake();
        }
        Ok(match r {
            Err(_) => InPlace::Panicked,
            Ok(_) if deadline.is_some_and(|d| Instant::now() >= d) => InPlace::Late,
            Ok(r) => InPlace::Done(r),
        })
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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

    /// Holds the worker until released; returns the release and the task.
    async fn occupy(
        q: &Arc<DeviceQueue<u32>>,
    ) -> (
        mpsc::Sender<()>,
        tokio::task::JoinHandle<Result<(), ApiError>>,
    ) {
        let (release, wait) = mpsc::channel::<()>();
        let q2 = q.clone();
        let busy = tokio::spawn(async move { q2.run(move |_| wait.recv().unwrap()).await });
        while q.in_flight() == 0 {
            tokio::task::yield_now().await;
        }
        (release, busy)
    }

    /// Once the queue has served its jobs: the context holds `context` (what
    /// ran), no slot is held, and `expired` jobs were dropped and `discarded`
    /// ones finished for nobody.
    async fn assert_settled(q: &DeviceQueue<u32>, context: u32, expired: u64, discarded: u64) {
        assert_eq!(q.run(|c| *c).await.unwrap(), context);
        assert_eq!(q.in_flight(), 0);
        let n = q.counters();
        assert_eq!((n.expired.get(), n.discarded.get()), (expired, discarded));
    }

    #[tokio::test]
    async fn a_job_waiting_past_its_deadline_is_dropped_without_running() {
        let q = Arc::new(DeviceQueue::start(4, 2, || 0u32));
        let (release, busy) = occupy(&q).await;
        // What the job holds is freed when it is cancelled, not when the worker
        // reaches it.
        let held = Arc::new(vec![0u8; 1024]);
        let h2 = held.clone();
        let t = Instant::now();
        let deadline = t + Duration::from_millis(100);
        let e = q
            .run_until(Some(deadline), move |c| {
                *c += 1;
                h2.len()
            })
            .await
            .unwrap_err();
        assert!(t.elapsed() >= Duration::from_millis(100));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(
            matches!(
                e,
                ApiError::DeviceDeadline {
                    started: false,
                    retry_after_s: 2,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("dropped without running"), "{e}");
        assert_eq!(
            Arc::strong_count(&held),
            1,
            "the cancelled job's closure was kept"
        );
        assert_eq!(
            q.in_flight(),
            2,
            "the slot frees when the worker reaches it"
        );
        release.send(()).unwrap();
        busy.await.unwrap().unwrap();
        // It never ran: the context is untouched, and the slot is back.
        assert_settled(&q, 0, 1, 0).await;
    }

    #[tokio::test]
    async fn a_job_running_past_its_deadline_finishes_and_its_result_is_discarded() {
        let q = Arc::new(DeviceQueue::start(4, 1, || 0u32));
        let (started_tx, started_rx) = mpsc::channel::<()>();
        let (release, wait) = mpsc::channel::<()>();
        let deadline = Instant::now() + Duration::from_millis(100);
        let e = q
            .run_until(Some(deadline), move |c| {
                started_tx.send(()).unwrap();
                wait.recv().unwrap();
                *c += 1;
            })
            .await
            .unwrap_err();
        started_rx.recv().unwrap();
        assert!(
            matches!(e, ApiError::DeviceDeadline { started: true, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("discarded"), "{e}");
        release.send(()).unwrap();
        // The worker finishes it (a kernel cannot be interrupted) and serves on.
        assert_settled(&q, 1, 0, 1).await;
    }

    #[tokio::test]
    async fn a_caller_that_goes_away_cancels_its_waiting_job() {
        let q = Arc::new(DeviceQueue::start(4, 1, || 0u32));
        let (release, busy) = occupy(&q).await;
        let q2 = q.clone();
        let gone = tokio::spawn(async move { q2.run(|c| *c += 1).await });
        while q.in_flight() < 2 {
            tokio::task::yield_now().await;
        }
        gone.abort();
        let _ = gone.await;
        release.send(()).unwrap();
        busy.await.unwrap().unwrap();
        assert_eq!(q.run(|c| *c).await.unwrap(), 0, "the abandoned job ran");
        assert_eq!(q.counters().expired.get(), 1);
    }

    #[tokio::test]
    async fn the_hook_runs_after_every_job_and_on_wake() {
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let r2 = runs.clone();
        let q = DeviceQueue::start_with(
            2,
            1,
            || (),
            Hook::new(
                move |_| {
                    r2.fetch_add(1, Ordering::SeqCst);
                },
                || false,
            ),
            QueueCounters::default(),
        );
        q.run(|_| ()).await.unwrap();
        q.wake();
        let t = Instant::now();
        while runs.load(Ordering::SeqCst) < 2 {
            assert!(t.elapsed() < Duration::from_secs(5));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn thread_name() -> String {
        std::thread::current().name().unwrap_or("").to_string()
    }

    /// A queue of `depth` whose hook counts its runs and says it has work
    /// while `due` holds, idle once built.
    async fn idle_queue_due(
        depth: usize,
        due: Arc<std::sync::atomic::AtomicBool>,
    ) -> (DeviceQueue<u32>, Arc<std::sync::atomic::AtomicUsize>) {
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let r2 = runs.clone();
        let q = DeviceQueue::start_with(
            depth,
            1,
            || 7u32,
            Hook::new(
                move |_| {
                    r2.fetch_add(1, Ordering::SeqCst);
                },
                move || due.load(Ordering::SeqCst),
            ),
            QueueCounters::default(),
        );
        // The first job may find the context not built yet and go to the
        // worker; after it, and the worker's hook, the device is idle.
        q.run(|_| ()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        (q, runs)
    }

    /// A queue of `depth` whose hook counts its runs and always has work.
    async fn idle_queue(depth: usize) -> (DeviceQueue<u32>, Arc<std::sync::atomic::AtomicUsize>) {
        idle_queue_due(depth, Arc::new(std::sync::atomic::AtomicBool::new(true))).await
    }

    /// Runs a job on `q` until one runs in place (a loaded machine may leave
    /// the worker in its hook a while: the job then goes to the worker, as
    /// it should, and is tried again); the hook's runs before that job.
    async fn run_in_place_once(
        q: &DeviceQueue<u32>,
        runs: &std::sync::atomic::AtomicUsize,
    ) -> usize {
        let mut tries = 0;
        loop {
            let before = runs.load(Ordering::SeqCst);
            let (ctx, name) = q.run(|c| (*c, thread_name())).await.unwrap();
            assert_eq!(ctx, 7);
            if name != "device-worker" {
                return before;
            }
            tries += 1;
            assert!(tries < 50, "the idle device's jobs all went to the worker");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_device_runs_the_job_in_place_and_the_worker_its_hook() {
        let (q, runs) = idle_queue(2).await;
        let before = run_in_place_once(&q, &runs).await;
        let t = Instant::now();
        while runs.load(Ordering::SeqCst) == before {
            assert!(t.elapsed() < Duration::from_secs(5), "the hook never ran");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(q.in_flight(), 0);
    }

    /// After a job in place the worker is woken for its hook only when the
    /// hook has work.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_in_place_wakes_the_worker_only_when_its_hook_has_work() {
        let due = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (q, runs) = idle_queue_due(2, due.clone()).await;
        let before = run_in_place_once(&q, &runs).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            runs.load(Ordering::SeqCst),
            before,
            "woken with nothing to do"
        );
        due.store(true, Ordering::SeqCst);
        let before = run_in_place_once(&q, &runs).await;
        let t = Instant::now();
        while runs.load(Ordering::SeqCst) == before {
            assert!(t.elapsed() < Duration::from_secs(5), "the hook never ran");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_admitted_behind_another_waits_for_the_worker_in_order() {
        let (q, _) = idle_queue(4).await;
        let q = Arc::new(q);
        let (release, wait) = mpsc::channel::<()>();
        let q2 = q.clone();
        // The first runs in place and holds the device until released.
        let first = tokio::spawn(async move {
            q2.run(move |c| {
                wait.recv().unwrap();
                *c += 1;
                (*c, thread_name())
            })
            .await
        });
        while q.in_flight() == 0 {
            tokio::task::yield_now().await;
        }
        let q3 = q.clone();
        let second = tokio::spawn(async move { q3.run(|c| (*c, thread_name())).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!second.is_finished(), "the second job ran beside the first");
        release.send(()).unwrap();
        let (c1, _) = first.await.unwrap().unwrap();
        let (c2, n2) = second.await.unwrap().unwrap();
        assert_eq!((c1, c2), (8, 8), "the second job saw the first's context");
        assert_eq!(
            n2, "device-worker",
            "a job admitted behind another ran in place"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_panicking_in_place_is_an_internal_error_and_the_device_keeps_serving() {
        let (q, _) = idle_queue(2).await;
        let e = q.run(|_| -> u32 { panic!("boom") }).await.unwrap_err();
        assert_eq!(e.status().as_u16(), 500);
        assert_eq!(q.in_flight(), 0);
        assert_eq!(q.run(|c| *c).await.unwrap(), 7);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_in_place_ending_past_its_deadline_is_discarded_as_expired() {
        let (q, _) = idle_queue(2).await;
        let deadline = Instant::now() + Duration::from_millis(20);
        let e = q
            .run_until(Some(deadline), |_| {
                std::thread::sleep(Duration::from_millis(60));
                thread_name()
            })
            .await
            .unwrap_err();
        match e {
            ApiError::DeviceDeadline { started, .. } => assert!(started),
            e => panic!("expected device_deadline, got {e}"),
        }
        // (Counted at once in place; on the worker, when it ends.)
        let t = Instant::now();
        while q.counters().discarded.get() == 0 {
            assert!(t.elapsed() < Duration::from_secs(5));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(q.counters().discarded.get(), 1);
        assert_eq!(q.counters().expired.get(), 0);
    }

    #[tokio::test]
    async fn a_single_threaded_runtime_always_uses_the_worker() {
        let (q, _) = idle_queue(2).await;
        assert_eq!(q.run(|_| thread_name()).await.unwrap(), "device-worker");
    }
}
