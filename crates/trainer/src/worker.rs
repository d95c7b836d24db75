//! `trainer worker`: labelling fanned out over processes and machines that
//! share one results database (PostgreSQL, or one SQLite file on one machine).
//!
//! `trainer enqueue` (or `trainer worker --enqueue`) writes the corpus items'
//! names into the store's labelling queue. Each worker builds the same corpus
//! from its own flags, then claims one matrix at a time, labels it in every
//! asked precision through [`Labeller::label`] (so the measurements and their
//! resumption are exactly those of `trainer label`), and marks it done or
//! failed. While it works, a thread of its own renews the claim every quarter
//! of the lease, whatever the device is doing; a worker that stops (killed,
//! machine gone) stops renewing, its claim lapses after the lease, and another
//! worker takes the matrix over, skipping what was already measured. A worker
//! leaves when nothing is pending and no live claim of another worker could
//! still lapse back into the queue.

use crate::corpus::Item;
use crate::label::{LabelOptions, Labeller};
use crate::pipeline::Env;
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::{
    DbLocation, LabelClaim, Precision, QueueEntry, QueueId, QueueStatus, RunOwner, RunRecord,
    RunStatus, Store,
};

/// How a worker claims and labels.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The queue's name.
    pub queue: String,
    /// A claim not renewed for this long has lapsed.
    pub lease: Duration,
    /// A matrix is claimed at most this many times (then it is left alone).
    pub max_attempts: u32,
    /// How long to wait before looking again when every open matrix is claimed
    /// by a live worker.
    pub poll: Duration,
    /// The precisions each matrix is labelled in.
    pub precisions: Vec<Precision>,
    /// Timing options of the labeller.
    pub label: LabelOptions,
}

/// What one worker did.
#[derive(Debug, Default)]
pub struct WorkerReport {
    /// This worker's id in the queue (`host:pid:token`).
    pub worker: String,
    /// Matrices it labelled.
    pub labelled: Vec<String>,
    /// Matrices whose labelling failed, with the reason.
    pub failed: Vec<(String, String)>,
    /// Matrices it labelled after its claim had lapsed and been taken over (the
    /// measurements are kept; the other worker finishes the row).
    pub lost: Vec<String>,
}

/// The queue id of a worker process.
pub fn worker_id(owner: &RunOwner) -> String {
    format!("{}:{}:{}", owner.host, owner.pid, owner.token)
}

/// Adds the corpus items to `queue` (items already there are left as they
/// are). Returns how many were added.
pub async fn enqueue(store: &Store, queue: &str, items: &[Item]) -> Result<usize> {
    let rows: Vec<(String, String)> = items
        .iter()
        .map(|i| (i.name.clone(), i.source.clone()))
        .collect();
    Ok(store.enqueue_labels(queue, &rows).await?)
}

/// Whether the queue may still give this worker something: a pending row, or
/// a claim that is live, or lapsed and claimable again.
pub fn queue_open(entries: &[QueueEntry], max_attempts: u32) -> bool {
    entries.iter().any(|e| match e.status {
        QueueStatus::Pending => e.attempts < max_attempts,
        QueueStatus::Claimed => !e.lapsed || e.attempts < max_attempts,
        QueueStatus::Done | QueueStatus::Failed => false,
    })
}

/// Claims and labels matrices of the queue until it is empty; see the module.
pub async fn run_worker(env: &Env, items: &[Item], opts: &WorkerOptions) -> Result<WorkerReport> {
    if matches!(env.store.location(), DbLocation::Memory) {
        bail!("a worker needs a database other processes can reach, not an in-memory one");
    }
    let me = crate::runs::this_process();
    let worker = worker_id(&me);
    crate::runs::interrupt_abandoned(&env.store, &me, opts.label.stale_after).await?;
    let record = RunRecord {
        device: Some(env.device),
        precision: (opts.precisions.len() == 1).then(|| opts.precisions[0]),
        params: serde_json::json!({"worker": worker, "queue": opts.queue}),
        notes: format!("worker on queue '{}'", opts.queue),
    };
    let run = env.store.start_owned_run(&record, &me).await?;
    let lab = env.labeller(Some(run), opts.label.clone());
    let by_name: HashMap<&str, &Item> = items.iter().map(|i| (i.name.as_str(), i)).collect();
    let beater = ClaimBeater::start(env.store.location().clone(), worker.clone(), opts.lease)?;
    let mut report = WorkerReport {
        worker: worker.clone(),
        ..WorkerReport::default()
    };
    let outcome = claim_loop(env, &lab, &by_name, &beater, opts, &mut report).await;
    drop(beater);
    let (status, notes) = match &outcome {
        Ok(()) => (
            RunStatus::Finished,
            format!(
                "{} labelled, {} failed, {} taken over by others",
                report.labelled.len(),
                report.failed.len(),
                report.lost.len()
            ),
        ),
        Err(e) => (RunStatus::Failed, format!("{e:#}")),
    };
    env.store.finish_run(run, status, &notes).await?;
    outcome.map(|()| report)
}

/// The worker's loop: claim, label, finish, until the queue is closed.
async fn claim_loop(
    env: &Env,
    lab: &Labeller<'_>,
    by_name: &HashMap<&str, &Item>,
    beater: &ClaimBeater,
    opts: &WorkerOptions,
    report: &mut WorkerReport,
) -> Result<()> {
    let worker = report.worker.clone();
    loop {
        let claim = env
            .store
            .claim_label(&opts.queue, &worker, opts.lease, opts.max_attempts)
            .await?;
        let Some(claim) = claim else {
            let entries = env.store.label_queue(&opts.queue, opts.lease).await?;
            if !queue_open(&entries, opts.max_attempts) {
                return Ok(());
            }
            tokio::time::sleep(opts.poll).await;
            continue;
        };
        eprintln!(
            "worker {worker}: {} (attempt {})",
            claim.name, claim.attempts
        );
        beater.hold(Some(claim.id));
        let outcome = label_claimed(lab, by_name, &claim, &opts.precisions).await;
        beater.hold(None);
        let ours = env
            .store
            .finish_label(
                claim.id,
                &worker,
                outcome.as_ref().err().map(String::as_str),
            )
            .await?;
        match outcome {
            _ if !ours => report.lost.push(claim.name),
            Ok(()) => report.labelled.push(claim.name),
            Err(e) => report.failed.push((claim.name, e)),
        }
        lab.heartbeat.beat(&env.store).await?;
    }
}

/// Labels the claimed matrix in every precision; `Err` says why it failed.
async fn label_claimed(
    lab: &Labeller<'_>,
    by_name: &HashMap<&str, &Item>,
    claim: &LabelClaim,
    precisions: &[Precision],
) -> Result<(), String> {
    let item = by_name.get(claim.name.as_str()).ok_or_else(|| {
        "not in this worker's corpus (give it the same --manifest, --matrices and corpus \
         flags as the enqueue)"
            .to_string()
    })?;
    let a = item.load().map_err(|e| format!("{e:#}"))?;
    for &p in precisions {
        lab.label(&item.name, &item.source, &a, p, None)
            .await
            .map_err(|e| format!("{p}: {e:#}"))?;
    }
    Ok(())
}

/// A thread that renews the worker's current claim every quarter of the lease,
/// on a store of its own: the labeller blocks its thread in OpenCL calls, and
/// the claim must be renewed meanwhile.
struct ClaimBeater {
    current: Arc<Mutex<Option<QueueId>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ClaimBeater {
    /// Starts the thread, with its own connection to the database at `location`.
    fn start(location: DbLocation, worker: String, lease: Duration) -> Result<ClaimBeater> {
        let current = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let every = (lease / 4).max(Duration::from_millis(50));
        let (cur, halt) = (current.clone(), stop.clone());
        // The thread builds its own runtime and connection (a runtime cannot be
        // started from inside the caller's), and says when it is ready.
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let thread = std::thread::Builder::new()
            .name("claim-heartbeat".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => return drop(ready_tx.send(Err(e.to_string()))),
                };
                rt.block_on(async move {
                    match Store::open(location).await {
                        Ok(store) => {
                            let _ = ready_tx.send(Ok(()));
                            beat_until(store, worker, every, cur, halt).await
                        }
                        Err(e) => drop(ready_tx.send(Err(e.to_string()))),
                    }
                })
            })
            .context("starting the heartbeat thread")?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => bail!("the heartbeat thread's database connection: {e}"),
            Err(_) => bail!("the heartbeat thread ended before connecting"),
        }
        Ok(ClaimBeater {
            current,
            stop,
            thread: Some(thread),
        })
    }

    /// Sets the claim to renew (`None`: none).
    fn hold(&self, claim: Option<QueueId>) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = claim;
    }
}

impl Drop for ClaimBeater {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The heartbeat thread's loop.
async fn beat_until(
    store: Store,
    worker: String,
    every: Duration,
    current: Arc<Mutex<Option<QueueId>>>,
    stop: Arc<AtomicBool>,
) {
    let step = every.min(Duration::from_millis(50));
    let mut since = Duration::ZERO;
    while !stop.load(Ordering::Acquire) {
        tokio::time::sleep(step).await;
        since += step;
        if since < every {
            continue;
        }
        since = Duration::ZERO;
        let held = *current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(id) = held {
            match store.heartbeat_label(id, &worker).await {
                Ok(true) => {}
                Ok(false) => eprintln!(
                    "worker {worker}: claim {} lapsed and was taken over by another worker",
                    id.0
                ),
                Err(e) => eprintln!("worker {worker}: heartbeat failed: {e}"),
            }
        }
    }
    store.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(status: QueueStatus, attempts: u32, lapsed: bool) -> QueueEntry {
        QueueEntry {
            id: QueueId(1),
            name: "m".into(),
            source: "s".into(),
            status,
            attempts,
            worker: None,
            error: None,
            lapsed,
        }
    }

    #[test]
    fn the_queue_stays_open_while_a_claim_can_come_back() {
        use QueueStatus::*;
        assert!(!queue_open(&[], 3));
        assert!(!queue_open(
            &[entry(Done, 1, false), entry(Failed, 1, false)],
            3
        ));
        assert!(queue_open(&[entry(Pending, 0, false)], 3));
        // A live claim of another worker may still lapse back.
        assert!(queue_open(&[entry(Claimed, 3, false)], 3));
        // A lapsed claim is claimable again, unless it used up its attempts.
        assert!(queue_open(&[entry(Claimed, 1, true)], 3));
        assert!(!queue_open(&[entry(Claimed, 3, true)], 3));
    }
}
