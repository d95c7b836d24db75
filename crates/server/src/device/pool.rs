//! Host buffers of x and y reused from call to call on one prepared matrix
//! (heap, pinned or shared memory).
//!
//! A pool keeps one idle buffer, so a steady stream of calls allocates (and
//! faults in) no new memory for x's body or y's answer. The pools are seeded
//! ([`VectorPools::seeded`], see [`crate::domain::config::HostPools`]) on a GPU
//! with pinned host memory: x is received into it and y answered from it, and
//! the device's copies of both run at DMA speed with no host copy; on a CPU
//! device with shared memory, which the kernels read and write in place.

use crate::domain::config::PoolKind;
use axum::body::Bytes;
use engine::HostBytes;
use std::sync::{Arc, Mutex};

/// One reusable byte buffer at most, kept while idle.
#[derive(Debug, Default)]
pub struct BufPool {
    idle: Mutex<Option<HostBytes>>,
}

impl BufPool {
    /// A pool whose idle buffer is `buf`.
    fn seeded(buf: HostBytes) -> Arc<BufPool> {
        Arc::new(BufPool {
            idle: Mutex::new(Some(buf)),
        })
    }

    /// A buffer of `len` bytes: the idle one when it has that length (its
    /// contents are stale: the caller overwrites every byte), else a new one
    /// of zeros on the heap (while a concurrent call holds the idle one). It
    /// comes back here when dropped.
    pub fn take(self: &Arc<Self>, len: usize) -> Pooled {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let buf = match idle.take() {
            Some(b) if b.len() == len => b,
            other => {
                *idle = other;
                HostBytes::heap(len)
            }
        };
        Pooled {
            buf,
            home: Arc::downgrade(self),
        }
    }

    /// Bytes held while idle.
    pub fn idle_bytes(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(0, HostBytes::len)
    }

    /// Whether the idle buffer is pinned or shared host memory, not the heap.
    pub fn idle_device_host(&self) -> bool {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(HostBytes::is_device_host)
    }

    /// Keeps `buf` as the idle buffer, unless the idle one is pinned or
    /// shared and `buf` is not (such a buffer is the one worth keeping).
    fn give_back(&self, buf: HostBytes) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if buf.is_device_host() || !idle.as_ref().is_some_and(HostBytes::is_device_host) {
            *idle = Some(buf);
        }
    }
}

/// A buffer out of a [`BufPool`], given back to it when dropped (or freed,
/// when its pool is gone).
#[derive(Debug)]
pub struct Pooled {
    buf: HostBytes,
    home: std::sync::Weak<BufPool>,
}

impl Pooled {
    /// The buffer, to fill.
    pub fn host_mut(&mut self) -> &mut HostBytes {
        &mut self.buf
    }

    /// Whether the buffer is pinned host memory.
    pub fn is_pinned(&self) -> bool {
        self.buf.is_pinned()
    }

    /// A handle on the buffer when it is shared memory
    /// ([`engine::HostBytes::shared_view`]).
    pub fn shared_view(&self) -> Option<engine::SharedView> {
        self.buf.shared_view()
    }

    /// As a `Bytes` (no copy) that gives the buffer back once every clone
    /// of it has been dropped (a response body, once sent).
    pub fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        self.buf.as_ref()
    }
}

impl AsMut<[u8]> for Pooled {
    fn as_mut(&mut self) -> &mut [u8] {
        self.buf.as_mut()
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(pool) = self.home.upgrade() {
            pool.give_back(std::mem::replace(&mut self.buf, HostBytes::heap(0)));
        }
    }
}

/// The pools of one prepared matrix: x's body and y's answer.
#[derive(Debug, Default)]
pub struct VectorPools {
    /// x's little-endian bytes, as received.
    pub x: Arc<BufPool>,
    /// y's little-endian bytes, as answered.
    pub y: Arc<BufPool>,
    /// What both were seeded with (the heap when either could not be).
    kind: PoolKind,
}

impl VectorPools {
    /// Pools seeded with buffers of `kind` of x's `x_len` and y's `y_len`
    /// bytes, made by `make` (the engine's [`engine::Engine::pinned_bytes`]
    /// or [`engine::Engine::shared_bytes`]); a pool whose buffer could not
    /// be made starts empty (its buffers are then on the heap), since such
    /// memory only saves copies.
    pub fn seeded(
        kind: PoolKind,
        x_len: usize,
        y_len: usize,
        make: impl Fn(usize) -> engine::Result<HostBytes>,
    ) -> VectorPools {
        let pool = |len: usize| match make(len) {
            Ok(b) => BufPool::seeded(b),
            Err(e) => {
                tracing::warn!("no {kind:?} host buffer of {len} bytes ({e}); on the heap instead");
                Arc::default()
            }
        };
        let (x, y) = (pool(x_len), pool(y_len));
        let both = x.idle_device_host() && y.idle_device_host();
        VectorPools {
            kind: if both { kind } else { PoolKind::Heap },
            x,
            y,
        }
    }

    /// What x's and y's pools were both seeded with.
    pub fn kind(&self) -> PoolKind {
        self.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_comes_back_and_is_reused_only_at_its_length() {
        let pool = Arc::new(BufPool::default());
        let mut a = pool.take(8);
        a.as_mut().copy_from_slice(b"12345678");
        drop(a);
        assert_eq!(pool.idle_bytes(), 8);
        // The same length: the idle buffer, stale bytes and all.
        let b = pool.take(8);
        assert_eq!(b.as_ref(), b"12345678");
        assert_eq!(pool.idle_bytes(), 0);
        // Another length meanwhile: a new buffer, and the one held stays out.
        let c = pool.take(3);
        assert_eq!(c.as_ref(), &[0, 0, 0]);
        drop(b);
        assert_eq!(pool.idle_bytes(), 8);
        drop(c);
        assert_eq!(pool.idle_bytes(), 3, "the last one back is kept");
    }

    #[test]
    fn a_buffer_answered_as_bytes_comes_back_when_the_bytes_are_dropped() {
        let pool = Arc::new(BufPool::default());
        let bytes = pool.take(4).into_bytes();
        let clone = bytes.clone();
        drop(bytes);
        assert_eq!(pool.idle_bytes(), 0);
        drop(clone);
        assert_eq!(pool.idle_bytes(), 4);
    }

    #[test]
    fn a_buffer_whose_pool_is_gone_is_freed() {
        let pool = Arc::new(BufPool::default());
        let a = pool.take(4);
        drop(pool);
        drop(a);
    }

    #[test]
    fn unpinnable_pools_start_empty_and_use_the_heap() {
        for kind in [PoolKind::Pinned, PoolKind::Shared] {
            let pools = VectorPools::seeded(kind, 16, 8, |_| Err(engine::EngineError::WrongMatrix));
            assert_eq!(pools.x.idle_bytes(), 0);
            assert!(!pools.y.idle_device_host());
            assert!(!pools.x.take(16).is_pinned());
            assert!(pools.x.take(16).shared_view().is_none());
            assert_eq!(pools.kind(), PoolKind::Heap);
        }
    }
}
