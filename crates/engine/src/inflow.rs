//! x uploaded while it still arrives: an [`XInflow`] is a host buffer and a
//! device buffer of one matrix's x that a caller fills in order, chunk by
//! chunk (a request body); each completed slice is enqueued to the device
//! at once, so that when the last byte arrives only the last slice's copy
//! is left before the kernels ([`Engine::execute_inflow_into`]).
//!
//! Safety is kept here: a slice is enqueued only once all its bytes are
//! written, the caller can only write past what was enqueued, and every
//! enqueued write is waited for before the host buffer is written again
//! from its start, reused or dropped. The host buffer is only touched
//! through `Vec::as_ptr` / `as_mut_ptr`, which make no reference to the
//! whole of it, so writing past the slices in flight never claims them.

use crate::engine::{event_ns, Engine, Gate, Redirect, Timings};
use crate::error::{EngineError, Result};
use crate::host::HostBytes;
use crate::kernels::DeviceScalar;
use crate::prepared::PreparedPlan;
use crate::{AnyMatrix, AnyPlan, DeviceMatrix};
use ocl::enums::ProfilingInfo;
use ocl::{Buffer, Event, Queue};
use std::time::Instant;

/// Bytes of x enqueued together while x arrives: small enough that the
/// copy left after the last byte is short, large enough that the per-command
/// cost (about 0.02 ms on PoCL) stays small beside the copy.
pub const INFLOW_SLICE: usize = 512 * 1024;

/// x of one matrix (in one precision), received in order into a host
/// buffer and uploaded slice by slice into a device buffer of its own,
/// which the kernels then read in place of the matrix's x. Made by
/// [`Engine::x_inflow`]; reusable: after a call, or [`XInflow::restart`],
/// it takes a new x from its first byte.
#[derive(Debug)]
pub struct XInflow {
    /// Accessed only through its raw pointers (see the module's note).
    host: Vec<u8>,
    device: Buffer<u8>,
    queue: Queue,
    /// Bytes written into `host`.
    filled: usize,
    /// Bytes enqueued to `device` (a multiple of `slice`, at most `filled`).
    sent: usize,
    slice: usize,
    /// The enqueued writes not yet waited for or seen complete.
    parts: Vec<Event>,
    /// Profiled nanoseconds of the writes seen complete and let go while x
    /// arrived (their copy ended before the call, so none of it is after).
    settled_ns: u64,
}

impl XInflow {
    /// Bytes of x (`ncols` values).
    pub fn len(&self) -> usize {
        self.host.len()
    }

    /// Whether x has no bytes.
    pub fn is_empty(&self) -> bool {
        self.host.is_empty()
    }

    /// Bytes received so far.
    pub fn filled(&self) -> usize {
        self.filled
    }

    /// The bytes received so far, to check (reading them while the device
    /// copies them is fine).
    pub fn received(&self) -> &[u8] {
        // SAFETY: `filled <= host.len()`; the device only reads these bytes.
        unsafe { std::slice::from_raw_parts(self.host.as_ptr(), self.filled) }
    }

    /// Appends `chunk` after the bytes received so far and enqueues every
    /// slice it completes. An error when it does not fit (nothing written).
    pub fn put(&mut self, chunk: &[u8]) -> Result<()> {
        let end = self.filled + chunk.len();
        if end > self.host.len() {
            return Err(EngineError::XLength {
                expected: self.host.len(),
                got: end,
            });
        }
        // SAFETY: `filled..end` is within the buffer and past every byte
        // enqueued (`sent <= filled`), so no device command reads it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                chunk.as_ptr(),
                self.host.as_mut_ptr().add(self.filled),
                chunk.len(),
            );
        }
        self.filled = end;
        let mut enqueued = false;
        while self.filled - self.sent >= self.slice && self.filled < self.host.len() {
            let (from, to) = (self.sent, self.sent + self.slice);
            self.enqueue(from, to, None)?;
            self.sent = to;
            enqueued = true;
        }
        // (Also once x is all there, before the call takes it.)
        if enqueued || self.filled == self.host.len() {
            self.settle()?;
        }
        Ok(())
    }

    /// Lets go of the writes already complete, adding up their profiled
    /// time: done while x arrives, so that the call itself queries (and
    /// releases) only the few still running, not one event per slice.
    fn settle(&mut self) -> Result<()> {
        let mut done = 0;
        for ev in &self.parts {
            if !ev.is_complete()? {
                break;
            }
            self.settled_ns += event_ns(ev)?;
            done += 1;
        }
        self.parts.drain(..done);
        Ok(())
    }

    /// Waits for the enqueued writes and starts over from x's first byte.
    pub fn restart(&mut self) -> Result<()> {
        let waited = self.wait();
        self.filled = 0;
        self.sent = 0;
        self.settled_ns = 0;
        waited
    }

    /// Enqueues the write of `host[from..to]` (not blocking), after `gate` if given.
    fn enqueue(&mut self, from: usize, to: usize, gate: Option<&Gate>) -> Result<()> {
        let mut ev = Event::empty();
        // SAFETY: `host[from..to]` is never written again until this write
        // has been waited for (`wait`, on every path that goes back to the
        // start or drops the buffer), and `to <= host.len()`.
        unsafe {
            let bytes = std::slice::from_raw_parts(self.host.as_ptr().add(from), to - from);
            ocl::core::enqueue_write_buffer(
                self.queue.as_core(),
                self.device.as_core(),
                false,
                from,
                bytes,
                gate.map(|g| &g.0),
                Some(&mut ev),
            )?;
        }
        self.parts.push(ev);
        Ok(())
    }

    /// Waits for every enqueued write.
    fn wait(&mut self) -> Result<()> {
        // Every one is waited for, even after an error.
        let mut r = Ok(());
        for ev in &self.parts {
            let waited = ev.wait_for();
            if r.is_ok() {
                r = waited;
            }
        }
        self.parts.clear();
        r.map_err(EngineError::from)
    }
}

impl Drop for XInflow {
    fn drop(&mut self) {
        let _ = self.wait();
    }
}

impl Engine {
    /// An [`XInflow`] for `m`'s x (a host and a device buffer of its
    /// `ncols` values, made once and reused call after call); `None` when
    /// the host or the device is big-endian, whose bytes are not the wire's.
    pub fn x_inflow(&self, m: &AnyMatrix) -> Result<Option<XInflow>> {
        if cfg!(target_endian = "big") || !self.device_little_endian() {
            return Ok(None);
        }
        let bytes = m.ncols() * m.precision().bytes();
        let device = Buffer::<u8>::builder()
            .queue(self.queue().clone())
            .flags(ocl::flags::MEM_READ_ONLY)
            .len(bytes.max(1))
            .build()?;
        Ok(Some(XInflow {
            host: vec![0; bytes],
            device,
            queue: self.queue().clone(),
            filled: 0,
            sent: 0,
            slice: INFLOW_SLICE,
            parts: Vec::new(),
            settled_ns: 0,
        }))
    }

    /// y = A x with x all received in `x` ([`XInflow::filled`] equal to its
    /// length, else an error): its last slice is uploaded (the rest went
    /// while it arrived), the kernels read x from the inflow's device
    /// buffer, and y is read into `y` as little-endian bytes (made `nrows`
    /// values long, of its kind, when it has another length; pinned y is
    /// read at DMA speed). `upload_x_ns` counts every slice's copy,
    /// `upload_x_after_ns` what of it ran once this call had enqueued the
    /// last slice: that slice's copy, and the part of any earlier one still
    /// running then (on the device's clock). `x` is ready for the next x
    /// afterwards (also after an error).
    pub fn execute_inflow_into(
        &self,
        m: &AnyMatrix,
        pp: &AnyPlan,
        x: &mut XInflow,
        y: &mut HostBytes,
    ) -> Result<Timings> {
        if x.filled != x.len() || x.len() != m.ncols() * m.precision().bytes() {
            let got = x.filled / m.precision().bytes();
            x.restart()?;
            return Err(EngineError::XLength {
                expected: m.ncols(),
                got,
            });
        }
        let r = match (m, pp) {
            (AnyMatrix::F32(m), AnyPlan::F32(pp)) => self.run_inflow(m, pp, x, y),
            (AnyMatrix::F64(m), AnyPlan::F64(pp)) => self.run_inflow(m, pp, x, y),
            _ => Err(EngineError::WrongMatrix),
        };
        let restarted = x.restart();
        let t = r?;
        restarted?;
        Ok(t)
    }

    fn run_inflow<T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        x: &mut XInflow,
        y: &mut HostBytes,
    ) -> Result<Timings> {
        if pp.matrix_id != m.id {
            return Err(EngineError::WrongMatrix);
        }
        let _serial = m.staging.lock().unwrap_or_else(|e| e.into_inner());
        self.fit_host_bytes(y, m.nrows * T::BYTES)?;
        let t0 = Instant::now();
        let gate = Gate::new(self.context())?;
        let earlier = x.parts.len();
        let mut up = None;
        if x.sent < x.len() {
            x.enqueue(x.sent, x.len(), Some(&gate))?;
            x.sent = x.len();
            up = x.parts.pop();
        }
        let read = |ev: &mut Event| self.enqueue_read_y_le(m, y.as_mut(), ev);
        let device = x.device.as_core().clone();
        let tail = up.clone();
        let to = Redirect::x(&device);
        let mut t = self.run_and_read(m, pp, (t0, to), up, read, || drop(gate))?;
        t.upload_x_ns += x.settled_ns;
        let called = match &tail {
            Some(ev) => ev.profiling_info(ProfilingInfo::Queued)?.time()?,
            None => u64::MAX,
        };
        for ev in &x.parts[..earlier] {
            let start = ev.profiling_info(ProfilingInfo::Start)?.time()?;
            let end = ev.profiling_info(ProfilingInfo::End)?.time()?;
            t.upload_x_ns += end.saturating_sub(start);
            t.upload_x_after_ns += end.saturating_sub(start.max(called));
        }
        Ok(t)
    }
}
