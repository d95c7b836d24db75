//! A matrix resident on the device: its CSR arrays plus x and y buffers,
//! uploaded once and reused by every plan and call.

use crate::kernels::DeviceScalar;
use crate::launch::KernelPool;
use ocl::{Buffer, MemMap};
use std::sync::{Arc, Mutex};

/// Device buffers of one CSR matrix (made by [`crate::Engine::upload`]).
///
/// x and y live with the matrix (on the device, and in pinned host staging
/// buffers), so calls on the same matrix are serialised by an internal lock;
/// calls on different matrices may run from different threads.
#[derive(Debug)]
pub struct DeviceMatrix<T: DeviceScalar> {
    pub(crate) id: u64,
    pub(crate) nrows: usize,
    pub(crate) ncols: usize,
    pub(crate) nnz: usize,
    /// Host copy of the row pointers: plans are prepared from it without a download.
    pub(crate) row_ptr_host: Vec<u32>,
    pub(crate) row_ptr: Buffer<u32>,
    pub(crate) col_idx: Buffer<u32>,
    pub(crate) vals: Buffer<T>,
    pub(crate) x: Buffer<T>,
    pub(crate) y: Buffer<T>,
    /// A one-element buffer bound where a kernel's row list is unused.
    pub(crate) dummy: Buffer<u32>,
    /// The kernel objects of the program it was uploaded for (shared with the engine).
    pub(crate) kernels: Arc<KernelPool>,
    /// Pinned host copies of x and y; the lock serialises calls on this matrix.
    pub(crate) staging: Mutex<Staging<T>>,
}

/// Pinned (`CL_MEM_ALLOC_HOST_PTR`) host buffers for x and y, mapped once for the
/// life of the matrix; x is copied in and uploaded from there, y is downloaded
/// there and copied out (the DMA-friendly transfer path on discrete GPUs).
#[derive(Debug)]
pub(crate) struct Staging<T: DeviceScalar> {
    // The maps are declared (so dropped, i.e. unmapped) before their buffers.
    pub(crate) x: MemMap<T>,
    pub(crate) y: MemMap<T>,
    pub(crate) _x_buf: Buffer<T>,
    pub(crate) _y_buf: Buffer<T>,
}

impl<T: DeviceScalar> DeviceMatrix<T> {
    /// Rows.
    pub fn nrows(&self) -> usize {
        self.nrows
    }

    /// Columns.
    pub fn ncols(&self) -> usize {
        self.ncols
    }

    /// Stored nonzeros.
    pub fn nnz(&self) -> usize {
        self.nnz
    }

    /// The row pointers (host copy).
    pub fn row_ptr(&self) -> &[u32] {
        &self.row_ptr_host
    }

    /// Bytes of one SpMV under the minimum-bytes model (see [`min_bytes`]).
    pub fn min_bytes(&self) -> u64 {
        min_bytes(self.nrows, self.ncols, self.nnz, T::BYTES)
    }
}

/// Minimum bytes moved by one SpMV (DESIGN.md, "The bandwidth bound"):
/// `(m+1)*I + nnz*(I+V) + n*V + m*V` with 4-byte indices and `value_bytes` values:
/// every matrix and vector entry read or written once.
pub fn min_bytes(nrows: usize, ncols: usize, nnz: usize, value_bytes: usize) -> u64 {
    let (m, n, z, i, v) = (
        nrows as u64,
        ncols as u64,
        nnz as u64,
        4u64,
        value_bytes as u64,
    );
    (m + 1) * i + z * (i + v) + n * v + m * v
}
