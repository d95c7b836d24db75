//! Host memory a CPU device's kernels read and write in place: x and y of
//! the binary wire path with no copy at all.
//!
//! On a CPU device "device memory" is host memory, so writing x into the
//! matrix's x buffer and reading y out of its y buffer are two plain memcpys:
//! at 10M nonzeros (16 MB each way in f64) 2.5 ms of a 14 ms request on
//! PoCL. Here x and y live in page-aligned memory of ours wrapped in
//! `CL_MEM_USE_HOST_PTR` buffers, and one call runs the plan's launches on
//! those buffers ([`crate::engine::Redirect`]). OpenCL lets the host touch
//! such memory only while the buffer is mapped, and a kernel use it only
//! while it is not, so the buffer is kept mapped (the host receives x and
//! sends y) and each call unmaps it for its launches and maps it again after:
//! four commands with no copy on a CPU device. For `CL_MEM_USE_HOST_PTR` the
//! specification makes a map return a pointer derived from the host pointer,
//! so the memory never moves and slices of it stay valid; the mapping is
//! checked all the same.

use crate::engine::{Engine, Redirect, Timings};
use crate::error::{EngineError, Result};
use crate::host::{HostBytes, LeBytes};
use crate::kernels::DeviceScalar;
use crate::matrix::DeviceMatrix;
use crate::prepared::PreparedPlan;
use ocl::core::{self, MemMap};
use ocl::{Event, Queue};
use std::alloc::Layout;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The fewest bytes of x and y together that go in place by default
/// ([`crate::EngineConfig::in_place_min_bytes`]). The unmaps and maps are
/// four more commands, about 0.05 ms on PoCL, which the copies they save
/// outweigh from about 1 MiB on (on this 2-core VM, server time in place
/// against heap pools, 3 rotated rounds, f64: 0.05 ms slower at 100K
/// nonzeros, x and y 160 KB each; 0.33-0.59 ms faster at 1M, 1.6 MB each;
/// 3.1-4.3 ms faster at 10M, 16 MB each).
pub const IN_PLACE_MIN_BYTES: usize = 1 << 20;

/// Alignment of the memory (a page: past every device's base-address
/// alignment, so the runtime uses the memory itself rather than a copy).
const ALIGN: usize = 4096;

/// Page-aligned host memory of ours and the `CL_MEM_USE_HOST_PTR` buffer
/// over it, mapped (the host's) except while a call's launches run.
#[derive(Debug)]
pub(crate) struct Shared {
    ptr: NonNull<u8>,
    layout: Layout,
    len: usize,
    /// Released in `Drop` before the memory is freed.
    mem: ManuallyDrop<core::Mem>,
    queue: Queue,
    /// Whether the buffer is mapped, i.e. the host may touch the memory.
    mapped: AtomicBool,
}

// SAFETY: the memory is owned by this struct alone and freed only in its
// `Drop`; OpenCL objects may be used from any thread. Host access follows
// the map discipline above: the engine unmaps the memory only inside one
// call, under the matrix's lock, with x only read and y held exclusively.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    /// `len` zero bytes (at least one allocated) in a buffer of `q`'s context, mapped.
    pub(crate) fn new(q: &Queue, len: usize) -> Result<Shared> {
        let size = len.max(1).next_multiple_of(64);
        let layout = Layout::from_size_align(size, ALIGN)
            .map_err(|e| EngineError::InvalidPlan(format!("host buffer of {len} bytes: {e}")))?;
        // SAFETY: the layout's size is not zero.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
            .ok_or_else(|| EngineError::InvalidPlan(format!("no {len} bytes of host memory")))?;
        let free = |e: EngineError| {
            // SAFETY: allocated just above with this layout, no buffer over it.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
            e
        };
        // SAFETY: the slice is the allocation above, which outlives the
        // buffer (freed in `Drop` only once the buffer is released).
        let mem = unsafe {
            core::create_buffer(
                &q.context(),
                ocl::flags::MEM_READ_WRITE | ocl::flags::MEM_USE_HOST_PTR,
                size,
                Some(std::slice::from_raw_parts(ptr.as_ptr(), size)),
            )
        }
        .map_err(|e| free(e.into()))?;
        let s = Shared {
            ptr,
            layout,
            len,
            mem: ManuallyDrop::new(mem),
            queue: q.clone(),
            mapped: AtomicBool::new(false),
        };
        // (On an error `s` is dropped: the buffer released, the memory freed.)
        let mut ev = Event::empty();
        s.map(&mut ev)?;
        ev.wait_for()?;
        Ok(s)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes of ours (zeroed at allocation).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, to write.
    ///
    /// # Safety
    /// No other reference to the bytes may be alive while the slice is (a
    /// [`SharedView`] makes none), and the memory must be mapped.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: `len` initialised bytes of ours; exclusivity is the caller's.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Enqueues the map (read and write, not blocking: the memory is the
    /// host's once `ev` completes).
    fn map(&self, ev: &mut Event) -> Result<()> {
        let size = self.layout.size();
        // SAFETY: the whole buffer, unmapped; the caller waits for `ev`
        // before the host touches the memory.
        let map: MemMap<u8> = unsafe {
            core::enqueue_map_buffer(
                self.queue.as_core(),
                &*self.mem,
                false,
                ocl::flags::MAP_READ | ocl::flags::MAP_WRITE,
                0,
                size,
                None::<core::Event>,
                Some(ev),
            )?
        };
        if !std::ptr::eq(map.as_ptr(), self.ptr.as_ptr()) {
            // Never by the specification; the buffer stays unmapped and unused.
            return Err(EngineError::InvalidPlan(
                "the OpenCL runtime mapped a host-pointer buffer elsewhere".into(),
            ));
        }
        self.mapped.store(true, Ordering::Release);
        Ok(())
    }

    /// Enqueues the unmap: from then on only commands touch the memory,
    /// until the next [`Shared::map`] completes.
    fn unmap(&self, ev: Option<&mut Event>) -> Result<()> {
        // SAFETY: the pointer is the one the last map returned (checked there).
        let map = unsafe { MemMap::from_raw(self.ptr.as_ptr()) };
        core::enqueue_unmap_mem_object(
            self.queue.as_core(),
            &*self.mem,
            &map,
            None::<core::Event>,
            ev,
        )?;
        self.mapped.store(false, Ordering::Release);
        Ok(())
    }

    fn is_mapped(&self) -> bool {
        self.mapped.load(Ordering::Acquire)
    }

    /// Whether the buffer belongs to the context of `q`.
    fn of_context(&self, q: &Queue) -> bool {
        self.queue.context().as_ptr() == q.context().as_ptr()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // No command may touch the memory once it is freed. The unmap is
        // enqueued (when mapped) and the buffer released at once; the
        // runtime deletes the buffer only once the commands that use it
        // have completed, and then calls `free_memory`, which frees the
        // memory. So a drop never waits for a kernel still running on the
        // queue (a matrix evicted or deleted while another call runs).
        if self.is_mapped() && self.unmap(None).is_err() {
            // The queue is broken (the device is being rebuilt): the runtime
            // may still hold the memory, so the buffer and the memory are
            // leaked rather than freed under it.
            return;
        }
        let memory = Box::into_raw(Box::new(Memory {
            ptr: self.ptr,
            layout: self.layout,
        }));
        // SAFETY: a live buffer; the callback takes `memory` back exactly
        // once, when the runtime deletes the buffer.
        let rc = unsafe {
            core::ffi::clSetMemObjectDestructorCallback(
                self.mem.as_ptr(),
                Some(free_memory),
                memory.cast(),
            )
        };
        if rc != 0 {
            // No callback registered: wait for the queue's commands so far,
            // then release the buffer and free the memory here.
            // SAFETY: `memory` was not handed to the runtime.
            let memory = unsafe { Box::from_raw(memory) };
            if self.queue.finish().is_err() {
                return; // leaked, as above
            }
            // SAFETY: no command touches the memory any more; the buffer
            // is released first (and never used again).
            unsafe {
                ManuallyDrop::drop(&mut self.mem);
                memory.free();
            }
            return;
        }
        // SAFETY: released once, never used again; the memory is freed by
        // the callback once the runtime is done with the buffer.
        unsafe { ManuallyDrop::drop(&mut self.mem) };
    }
}

/// The allocation behind a released [`Shared`], until the runtime deletes
/// its buffer.
struct Memory {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Memory {
    /// Frees the allocation.
    ///
    /// # Safety
    /// No buffer over the memory may exist any more, nor any reference to it.
    unsafe fn free(self) {
        // SAFETY: allocated in `Shared::new` with this layout; unused (caller).
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
        #[cfg(test)]
        tests::FREED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.ptr.as_ptr() as usize);
    }
}

/// Called by the OpenCL runtime when a released [`Shared`]'s buffer is
/// deleted, after every command that used it: frees its memory.
extern "C" fn free_memory(_mem: core::ffi::cl_mem, user_data: *mut std::ffi::c_void) {
    // SAFETY: `user_data` is the `Memory` boxed in `Shared::drop`, handed
    // over once; the buffer over it is being deleted, so nothing uses it.
    unsafe { Box::from_raw(user_data.cast::<Memory>()).free() };
}

/// A handle on bytes in shared host memory ([`crate::HostBytes::shared_view`]),
/// kept beside them where only the bytes travel (the service's x, received
/// into such memory and held as a `Bytes`), so that
/// [`Engine::execute_le_into`] can run the kernels on it in place.
#[derive(Debug, Clone)]
pub struct SharedView(pub(crate) Arc<Shared>);

impl SharedView {
    /// Whether `bytes` are exactly the memory of this view.
    pub(crate) fn is(&self, bytes: &[u8]) -> bool {
        std::ptr::eq(bytes.as_ptr(), self.0.ptr.as_ptr()) && bytes.len() == self.0.len
    }
}

impl Engine {
    /// The fewest bytes of x and y together that go in place
    /// ([`crate::EngineConfig::in_place_min_bytes`], resolved).
    pub fn in_place_min_bytes(&self) -> usize {
        self.in_place_min_bytes
    }

    /// `len` bytes (zeros) of host memory the device's kernels can use in
    /// place, for x or y of the binary wire path: when both are such bytes,
    /// [`Engine::execute_le_into`] copies neither. Meant for a CPU device,
    /// whose kernels then read and write the host's own memory; a GPU
    /// would reach it over the bus at every access (use
    /// [`Engine::pinned_bytes`] there).
    pub fn shared_bytes(&self, len: usize) -> Result<crate::HostBytes> {
        let view = SharedView(Arc::new(Shared::new(self.queue(), len)?));
        Ok(crate::HostBytes::shared(view))
    }

    /// y = A x with x and y both in shared host memory of this engine's
    /// context: the plan's launches read x and write y where they are
    /// (unmapped for them, mapped again after). `check_x` runs first, while
    /// x is still the host's.
    pub(crate) fn execute_in_place<T, E>(
        &self,
        m: &DeviceMatrix<T>,
        pp: &PreparedPlan<T>,
        (x, y): (&Shared, &Shared),
        check_x: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<Timings, E>
    where
        T: DeviceScalar,
        E: From<EngineError>,
    {
        check_x()?;
        let _serial = m.staging.lock().unwrap_or_else(|e| e.into_inner());
        let t0 = Instant::now();
        let mut up = Event::empty();
        let mut run = || -> Result<Timings> {
            x.unmap(Some(&mut up))?;
            y.unmap(None)?;
            let to = Redirect {
                x: Some(&*x.mem),
                y: Some(&*y.mem),
            };
            let read = |ev: &mut Event| {
                y.map(ev)?;
                x.map(&mut Event::empty())
            };
            self.run_and_read(m, pp, (t0, to), Some(up.clone()), read, || {})
        };
        let r = run();
        // Whatever failed, the host gets both back before it touches them.
        for s in [x, y] {
            if !s.is_mapped() {
                let mut ev = Event::empty();
                s.map(&mut ev)?;
                ev.wait_for().map_err(EngineError::from)?;
            }
        }
        Ok(r?)
    }

    /// Whether `x` and `y` can go in place for `m`: both shared memory of
    /// this engine's context (x's bytes all of its view), distinct, of x's
    /// and y's lengths, neither empty, together at least
    /// [`EngineConfig::in_place_min_bytes`](crate::EngineConfig).
    pub(crate) fn in_place<'a, T: DeviceScalar>(
        &self,
        m: &DeviceMatrix<T>,
        x: LeBytes<'a>,
        y: &'a HostBytes,
    ) -> Option<(&'a Shared, &'a Shared)> {
        let xv = x.shared.filter(|v| v.is(x.bytes))?;
        let (x, y) = (&xv.0, &y.shared_ref()?.0);
        let fits = x.len == m.ncols * T::BYTES && y.len == m.nrows * T::BYTES;
        let ok = fits
            && x.len + y.len >= self.in_place_min_bytes
            && m.nrows > 0
            && m.ncols > 0
            && !Arc::ptr_eq(x, y)
            && x.of_context(self.queue())
            && y.of_context(self.queue());
        ok.then_some((x, y))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::tests::engine;
    use std::sync::Mutex;
    use std::time::Duration;

    /// The addresses of the allocations freed so far, in order.
    pub(super) static FREED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

    /// Whether the allocation at `addr` was freed after the first `since` frees.
    fn freed_since(since: usize, addr: usize) -> bool {
        FREED.lock().unwrap()[since..].contains(&addr)
    }

    /// Waits up to 5 s for the runtime to free the allocation at `addr`.
    fn wait_freed(since: usize, addr: usize) -> bool {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if freed_since(since, addr) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    /// Dropping shared memory while the queue is held up by an earlier
    /// command neither waits for it nor frees the memory under it: the
    /// memory is freed once the command has run, by the runtime's callback.
    #[test]
    fn a_drop_behind_a_busy_queue_returns_at_once_and_frees_after_it() {
        let Some(e) = engine() else { return };
        let q = e.queue();
        let s = Shared::new(q, 1 << 16).unwrap();
        let addr = s.ptr.as_ptr() as usize;
        // An in-order queue held by a marker that waits on a user event.
        let gate = core::create_user_event(&q.context()).unwrap();
        core::enqueue_marker_with_wait_list(
            q.as_core(),
            Some(&gate),
            None::<&mut core::Event>,
            None,
        )
        .unwrap();
        let since = FREED.lock().unwrap().len();
        let (done, dropped) = std::sync::mpsc::channel();
        let dropper = std::thread::spawn(move || {
            drop(s);
            done.send(()).unwrap();
        });
        let returned = dropped.recv_timeout(Duration::from_secs(2)).is_ok();
        let early = freed_since(since, addr);
        // Open the gate whatever happened, so that a waiting drop ends too.
        core::set_user_event_status(&gate, core::CommandExecutionStatus::Complete).unwrap();
        dropper.join().unwrap();
        assert!(returned, "the drop waited for the queue");
        assert!(!early, "freed while the queue still held its unmap");
        q.finish().unwrap();
        assert!(
            wait_freed(since, addr),
            "the runtime never freed the memory"
        );
    }

    /// Shared memory dropped on an idle queue (mapped, as between calls)
    /// is freed; the queue stays usable.
    #[test]
    fn a_drop_on_an_idle_queue_frees_the_memory() {
        let Some(e) = engine() else { return };
        let since = FREED.lock().unwrap().len();
        let s = Shared::new(e.queue(), 100).unwrap();
        let addr = s.ptr.as_ptr() as usize;
        assert!(s.is_mapped() && s.bytes().iter().all(|&b| b == 0));
        drop(s);
        e.queue().finish().unwrap();
        assert!(
            wait_freed(since, addr),
            "the runtime never freed the memory"
        );
        let again = Shared::new(e.queue(), 100).unwrap();
        assert_eq!(again.len(), 100);
    }
}
