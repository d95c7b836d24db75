//! Host buffers of x and y reused from call to call on one prepared matrix:
//! a pool keeps one idle buffer, so a steady stream of calls allocates (and
//! faults in) no new memory for x's body or y's answer.

use axum::body::Bytes;
use std::sync::{Arc, Mutex};

/// One reusable byte buffer at most, kept while idle.
#[derive(Debug, Default)]
pub struct BufPool {
    idle: Mutex<Option<Vec<u8>>>,
}

impl BufPool {
    /// A buffer of `len` bytes: the idle one when it has that length (its
    /// contents are stale: the caller overwrites every byte), else a new one
    /// of zeros. It comes back here when dropped.
    pub fn take(self: &Arc<Self>, len: usize) -> Pooled {
        let reused = self
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .filter(|b| b.len() == len);
        Pooled {
            buf: reused.unwrap_or_else(|| vec![0u8; len]),
            home: Arc::downgrade(self),
        }
    }

    /// Bytes held while idle.
    pub fn idle_bytes(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(0, Vec::len)
    }
}

/// A buffer out of a [`BufPool`], given back to it when dropped (or freed,
/// when its pool is gone).
#[derive(Debug)]
pub struct Pooled {
    buf: Vec<u8>,
    home: std::sync::Weak<BufPool>,
}

impl Pooled {
    /// The buffer, to fill or resize.
    pub fn vec_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// As a `Bytes` (no copy) that gives the buffer back once every clone
    /// of it has been dropped (a response body, once sent).
    pub fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl AsMut<[u8]> for Pooled {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(pool) = self.home.upgrade() {
            let buf = std::mem::take(&mut self.buf);
            *pool.idle.lock().unwrap_or_else(|e| e.into_inner()) = Some(buf);
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
}
