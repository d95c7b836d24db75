//! Recovery from device faults: the engine in a [`DeviceSlot`] with a
//! generation, dropped on an OpenCL error and rebuilt by the worker.
//!
//! When a device job fails with an OpenCL error the slot drops the engine
//! (context, queue, programs) at once, bumps the generation (so device buffers
//! and prepared plans made before are never used again) and marks the device as
//! rebuilding; the device worker then reopens the same device with the
//! service's configuration (programs from the on-disk binary cache where
//! present) and checks it with the readiness SpMV, retrying with a doubling
//! backoff a bounded number of times. While it rebuilds, device work is
//! answered 503 with `Retry-After` and `/readyz` says why; after the last
//! failed attempt the device is down until a request arrives past a cool-down,
//! which starts another round.

use crate::device::state::DeviceState;
use crate::domain::error::ApiError;
use engine::{Engine, EngineConfig};
use prometheus_client::metrics::counter::Counter;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How a lost device is reopened.
#[derive(Debug, Clone, Copy)]
pub struct RebuildPolicy {
    /// Attempts per round (at least 1).
    pub attempts: u32,
    /// Wait after the first failed attempt; doubled after each further one.
    pub backoff: Duration,
}

impl RebuildPolicy {
    /// The wait after failed attempt `k` (1-based), capped at 30 s.
    fn wait(&self, k: u32) -> Duration {
        let factor = 1u32 << k.saturating_sub(1).min(16);
        (self.backoff * factor).min(Duration::from_secs(30))
    }

    /// How long a device stays down after a failed round before a request may
    /// start another.
    fn cooldown(&self) -> Duration {
        self.wait(self.attempts.max(1) + 1)
    }
}

/// Counters of faults and rebuilds (registered by [`crate::service::metrics::Metrics`]).
#[derive(Clone, Default)]
pub struct RecoveryCounters {
    /// Device jobs that failed with an OpenCL error.
    pub faults: Counter,
    /// Engines rebuilt and checked after a fault.
    pub rebuilds: Counter,
    /// Rebuild attempts that failed.
    pub rebuild_failures: Counter,
}

#[derive(Debug, Clone)]
enum Health {
    Up,
    Rebuilding {
        cause: String,
        attempt: u32,
    },
    Down {
        cause: String,
        last: String,
        retry_at: Instant,
    },
    Absent(String),
}

/// The engine in use, its generation and its health.
pub struct DeviceSlot {
    engine: RwLock<Option<Arc<Engine>>>,
    generation: AtomicU64,
    health: Mutex<Health>,
    pending: AtomicBool,
    reopen: EngineConfig,
    device_name: Option<String>,
    policy: RebuildPolicy,
    counters: RecoveryCounters,
    injected_faults: AtomicU32,
    injected_rebuild_failures: AtomicU32,
}

impl DeviceSlot {
    /// The slot for the device opened at start; a lost device is reopened with `reopen`.
    pub fn new(
        dev: &DeviceState,
        reopen: EngineConfig,
        policy: RebuildPolicy,
        counters: RecoveryCounters,
    ) -> Self {
        let health = match &dev.engine {
            Some(_) => Health::Up,
            None => Health::Absent(dev.unavailable.clone().unwrap_or_default()),
        };
        DeviceSlot {
            engine: RwLock::new(dev.engine.clone()),
            generation: AtomicU64::new(1),
            health: Mutex::new(health),
            pending: AtomicBool::new(false),
            reopen,
            device_name: dev.name().map(str::to_string),
            policy,
            counters,
            injected_faults: AtomicU32::new(0),
            injected_rebuild_failures: AtomicU32::new(0),
        }
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The generation of the engine in use (bumped by every fault).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether the device is up (not rebuilding, not down, not absent).
    pub fn is_up(&self) -> bool {
        matches!(*self.health(), Health::Up)
    }

    /// "up", "rebuilding", "down" or "absent", with the reason when not up.
    pub fn state(&self) -> (&'static str, Option<String>) {
        let h = self.health().clone();
        let word = match &h {
            Health::Up => return ("up", None),
            Health::Rebuilding { .. } => "rebuilding",
            Health::Down { .. } => "down",
            Health::Absent(_) => "absent",
        };
        (word, Some(self.describe(&h)))
    }

    fn why_not(&self) -> String {
        let h = self.health().clone();
        self.describe(&h)
    }

    fn describe(&self, h: &Health) -> String {
        match h {
            Health::Up => "the device is up".into(),
            Health::Rebuilding { cause, attempt } => format!(
                "after a device fault ({cause}) the OpenCL context is being rebuilt (attempt {attempt} of {})",
                self.policy.attempts.max(1)
            ),
            Health::Down { cause, last, retry_at } => format!(
                "after a device fault ({cause}) the device could not be reopened in {} attempts (last: {last}); another round starts with a request after {} ms",
                self.policy.attempts.max(1),
                retry_at.saturating_duration_since(Instant::now()).as_millis()
            ),
            Health::Absent(r) => format!("no OpenCL device ({r})"),
        }
    }

    /// The engine a device job runs on now and its generation, or why there is
    /// none (503: no device, or recovering with `Retry-After`). A device down
    /// past its cool-down starts another round; `wake` is then called to wake
    /// the worker.
    pub fn current(
        &self,
        retry_after_s: u64,
        wake: impl FnOnce(),
    ) -> Result<(Arc<Engine>, u64), ApiError> {
        let mut retry_after_s = retry_after_s.max(1);
        {
            let mut h = self.health();
            match &*h {
                Health::Up => {}
                Health::Absent(r) => return Err(ApiError::NoDevice(r.clone())),
                Health::Down {
                    cause, retry_at, ..
                } if Instant::now() >= *retry_at => {
                    *h = Health::Rebuilding {
                        cause: cause.clone(),
                        attempt: 1,
                    };
                    self.pending.store(true, Ordering::Release);
                    drop(h);
                    wake();
                    return Err(self.recovering(retry_after_s));
                }
                Health::Down { retry_at, .. } => {
                    let left = retry_at.saturating_duration_since(Instant::now());
                    retry_after_s = retry_after_s.max(left.as_secs_f64().ceil() as u64);
                    drop(h);
                    return Err(self.recovering(retry_after_s));
                }
                Health::Rebuilding { .. } => {
                    drop(h);
                    return Err(self.recovering(retry_after_s));
                }
            }
        }
        let engine = self
            .engine
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match engine {
            Some(e) => Ok((e, self.generation())),
            None => Err(self.recovering(retry_after_s)),
        }
    }

    fn recovering(&self, retry_after_s: u64) -> ApiError {
        ApiError::Recovering {
            reason: self.why_not(),
            retry_after_s,
        }
    }

    /// A fault injected for testing, if one is due (see [`DeviceSlot::inject`]).
    pub fn injected_fault(&self) -> Option<ApiError> {
        take_one(&self.injected_faults)
            .then(|| ApiError::DeviceFault("CL_OUT_OF_RESOURCES (injected for testing)".into()))
    }

    /// Makes the next `faults` device jobs fail with a device fault before
    /// they run, and the next `rebuild_failures` rebuild attempts fail.
    pub fn inject(&self, faults: u32, rebuild_failures: u32) {
        self.injected_faults.store(faults, Ordering::Release);
        self.injected_rebuild_failures
            .store(rebuild_failures, Ordering::Release);
    }

    /// Records a fault of the engine of generation `generation` (on the
    /// worker thread, inside the failed job): drops the engine, bumps the
    /// generation and asks the worker to rebuild. False when that engine was
    /// already given up (the fault is not counted twice).
    pub fn fault(&self, generation: u64, cause: &str) -> bool {
        let mut h = self.health();
        if !matches!(*h, Health::Up) || self.generation() != generation {
            return false;
        }
        self.counters.faults.inc();
        self.generation.fetch_add(1, Ordering::AcqRel);
        *h = Health::Rebuilding {
            cause: cause.to_string(),
            attempt: 1,
        };
        self.pending.store(true, Ordering::Release);
        drop(h);
        let old = self
            .engine
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        tracing::error!(
            cause,
            generation,
            "device fault: dropping the OpenCL context to rebuild it"
        );
        drop(old);
        true
    }

    /// Whether a rebuild waits for [`DeviceSlot::recover`] (a fault was
    /// seen, or a retry's time came).
    pub fn recovery_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Runs on the device worker after each job: when a rebuild is pending,
    /// reopens the device, retrying with backoff (blocking the worker, which
    /// has nothing else it may run meanwhile).
    pub fn recover(&self) {
        if !self.pending.swap(false, Ordering::AcqRel) {
            return;
        }
        let cause = match &*self.health() {
            Health::Rebuilding { cause, .. } => cause.clone(),
            _ => return,
        };
        let attempts = self.policy.attempts.max(1);
        let mut last = String::new();
        for k in 1..=attempts {
            *self.health() = Health::Rebuilding {
                cause: cause.clone(),
                attempt: k,
            };
            let t = Instant::now();
            match self.reopen_once() {
                Ok(engine) => {
                    *self.engine.write().unwrap_or_else(|e| e.into_inner()) =
                        Some(Arc::new(engine));
                    *self.health() = Health::Up;
                    self.counters.rebuilds.inc();
                    tracing::info!(
                        attempt = k,
                        ms = t.elapsed().as_millis() as u64,
                        generation = self.generation(),
                        "device rebuilt after a fault"
                    );
                    return;
                }
                Err(e) => {
                    self.counters.rebuild_failures.inc();
                    tracing::warn!(attempt = k, of = attempts, error = %e, "rebuilding the device failed");
                    last = e;
                    if k < attempts {
                        std::thread::sleep(self.policy.wait(k));
                    }
                }
            }
        }
        tracing::error!(
            cause,
            last,
            "the device could not be reopened; device work answers 503"
        );
        *self.health() = Health::Down {
            cause,
            last,
            retry_at: Instant::now() + self.policy.cooldown(),
        };
    }

    /// One attempt: open the same device, load (or build) its programs, and
    /// check it with the readiness SpMV.
    fn reopen_once(&self) -> Result<Engine, String> {
        if take_one(&self.injected_rebuild_failures) {
            return Err("CL_DEVICE_NOT_AVAILABLE (injected for testing)".into());
        }
        let engine = Engine::with_config(&self.reopen).map_err(|e| e.to_string())?;
        let name = &engine.info().name;
        if let Some(want) = &self.device_name {
            if name != want {
                return Err(format!(
                    "the selector now opens '{name}' instead of '{want}'"
                ));
            }
        }
        crate::device::state::build_programs(&engine).map_err(|e| e.to_string())?;
        if engine.info().fp64 {
            crate::device::probe::probe(&engine).map_err(|e| e.to_string())?;
        }
        Ok(engine)
    }
}

/// Takes one from a counter of injected events; false when none is left.
fn take_one(n: &AtomicU32) -> bool {
    n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1))
        .is_ok()
}
