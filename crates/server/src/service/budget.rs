//! The memory budget of requests in flight: a semaphore of bytes reserved
//! before they are allocated.
//!
//! The semaphore counts 64 KiB units. Each request reserves what it is
//! estimated to hold (its body as it arrives, the decompressed text, the parse
//! and matrix arrays from the sizes the header declares, x and y) before
//! allocating it, and gives it back when it is answered. A request that does
//! not fit waits a little (one deadline per request, however many times it
//! grows), then gets 503 with `Retry-After`; one larger than the whole budget
//! gets 413 at once.

use crate::domain::error::ApiError;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Bytes per semaphore permit.
const UNIT: u64 = 64 * 1024;

/// The shared budget; cheap to clone.
#[derive(Clone)]
pub struct MemoryBudget {
    sem: Arc<Semaphore>,
    units: u64,
    wait: Duration,
    retry_after_s: u64,
}

fn units_of(bytes: u64) -> u64 {
    bytes.div_ceil(UNIT).max(1)
}

impl MemoryBudget {
    /// A budget of `bytes`, where a request waits up to `wait` for room.
    pub fn new(bytes: u64, wait: Duration, retry_after_s: u64) -> Self {
        // A semaphore holds at most usize::MAX >> 3 permits; u32 per acquire.
        let units = units_of(bytes).min(u64::from(u32::MAX));
        MemoryBudget {
            sem: Arc::new(Semaphore::new(units as usize)),
            units,
            wait,
            retry_after_s,
        }
    }

    /// The budget in bytes.
    pub fn total(&self) -> u64 {
        self.units * UNIT
    }

    /// Bytes reserved by requests in flight.
    pub fn in_use(&self) -> u64 {
        (self.units - self.sem.available_permits() as u64) * UNIT
    }

    /// An empty reservation, grown with [`Reservation::grow_to`]; it may wait
    /// for room until the budget's wait has passed from now.
    pub fn empty(&self) -> Reservation {
        Reservation {
            budget: self.clone(),
            permit: None,
            units: 0,
            deadline: Instant::now() + self.wait,
        }
    }

    /// Reserves `bytes`, waiting for room (see the module's description).
    pub async fn reserve(&self, bytes: u64) -> Result<Reservation, ApiError> {
        let mut r = self.empty();
        r.grow_to(bytes).await?;
        Ok(r)
    }
}

/// Bytes held by one request; released when dropped.
pub struct Reservation {
    budget: MemoryBudget,
    permit: Option<OwnedSemaphorePermit>,
    units: u64,
    deadline: Instant,
}

impl Reservation {
    /// Bytes reserved.
    pub fn bytes(&self) -> u64 {
        self.units * UNIT
    }

    /// Grows the reservation to at least `bytes` in total (never shrinks).
    pub async fn grow_to(&mut self, bytes: u64) -> Result<(), ApiError> {
        let want = units_of(bytes);
        if want <= self.units {
            return Ok(());
        }
        let b = &self.budget;
        if want > b.units {
            return Err(ApiError::too_large(
                "estimated memory of the request in bytes (see --memory-budget-bytes)",
                bytes,
                b.total(),
            ));
        }
        let more = (want - self.units) as u32;
        let busy = || ApiError::Busy {
            needed: bytes,
            in_use: b.in_use(),
            budget: b.total(),
            retry_after_s: b.retry_after_s,
        };
        let acquire = b.sem.clone().acquire_many_owned(more);
        let got = match tokio::time::timeout_at(self.deadline, acquire).await {
            Ok(Ok(p)) => p,
            Ok(Err(_closed)) => return Err(ApiError::internal("memory budget closed")),
            Err(_elapsed) => return Err(busy()),
        };
        match &mut self.permit {
            Some(p) => p.merge(got),
            None => self.permit = Some(got),
        }
        self.units = want;
        Ok(())
    }

    /// Sets the reservation to `bytes`: grows it (waiting as [`Self::grow_to`])
    /// or gives the excess back, once a better estimate is known.
    pub async fn set_to(&mut self, bytes: u64) -> Result<(), ApiError> {
        let want = units_of(bytes);
        if want >= self.units {
            return self.grow_to(bytes).await;
        }
        if let Some(p) = &mut self.permit {
            drop(p.split((self.units - want) as usize));
        }
        self.units = want;
        Ok(())
    }

    /// Grows the reservation by `bytes`.
    pub async fn grow_by(&mut self, bytes: u64) -> Result<(), ApiError> {
        let to = self.bytes().saturating_add(bytes);
        self.grow_to(to).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_then_refuses_and_releases_on_drop() {
        let b = MemoryBudget::new(10 * UNIT, Duration::from_millis(50), 2);
        let mut r1 = b.reserve(6 * UNIT).await.unwrap();
        assert_eq!(b.in_use(), 6 * UNIT);
        let e = match b.reserve(5 * UNIT).await {
            Err(e) => e,
            Ok(_) => panic!("over budget"),
        };
        assert_eq!(e.status().as_u16(), 503, "{e}");
        let e = match b.reserve(11 * UNIT).await {
            Err(e) => e,
            Ok(_) => panic!("over the whole budget"),
        };
        assert_eq!(e.status().as_u16(), 413, "{e}");
        r1.grow_to(8 * UNIT).await.unwrap();
        assert_eq!(b.in_use(), 8 * UNIT);
        r1.set_to(3 * UNIT).await.unwrap();
        assert_eq!(b.in_use(), 3 * UNIT);
        r1.set_to(8 * UNIT).await.unwrap();
        assert_eq!(b.in_use(), 8 * UNIT);
        drop(r1);
        assert_eq!(b.in_use(), 0);
        let r2 = b.reserve(10 * UNIT).await.unwrap();
        assert_eq!(r2.bytes(), 10 * UNIT);
    }
}
