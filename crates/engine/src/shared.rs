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
//!
//! A device with fine-grained buffer SVM (OpenCL 2.0; PoCL's CPU devices)
//! needs none of that: the memory comes from `clSVMAlloc`, host and kernels
//! share it with no map, and the launches take its pointer as their x and y
//! arguments ([`Target::Svm`]). A call is then its launches alone, with no
//! command before or after them: on PoCL the maps and unmaps cost
//! 0.05-0.06 ms of each call at 10M nonzeros, about a third of the device's
//! time beyond the kernel (2-core VM, medians of 25 calls).

use crate::engine::{Engine, Redirect, Timings};
use crate::error::{EngineError, Result};
use crate::host::{HostBytes, LeBytes};
use crate::kernels::DeviceScalar;
use crate::matrix::DeviceMatrix;
use crate::prepared::PreparedPlan;
use ocl::core::{self, MemMap};
use ocl::{Event, Queue};
use std::alloc::Layout;
use std::ffi::c_void;
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

/// The same for SVM, which a call uses in place with no command of its own
/// while the copies it saves are two commands: every size.
pub const IN_PLACE_MIN_BYTES_SVM: usize = 0;

/// Alignment of the memory (a page: past every device's base-address
/// alignment, so the runtime uses the memory itself rather than a copy).
const ALIGN: usize = 4096;

/// Alignment asked of `clSVMAlloc`: the widest base-address alignment
/// devices ask for (128 bytes on PoCL), a power of two any runtime accepts.
const SVM_ALIGN: u32 = 128;

// OpenCL 2.0 entry points, which `ocl` (built for OpenCL 1.2) leaves out.
// They are called only on a device that reports fine-grained buffer SVM.
#[link(name = "OpenCL")]
extern "system" {
    fn clSVMAlloc(
        context: core::ffi::cl_context,
        flags: core::ffi::cl_bitfield,
        size: usize,
        alignment: u32,
    ) -> *mut c_void;
    fn clSVMFree(context: core::ffi::cl_context, ptr: *mut c_void);
    fn clSetKernelArgSVMPointer(
        kernel: core::ffi::cl_kernel,
        index: u32,
        ptr: *const c_void,
    ) -> i32;
    fn clEnqueueSVMFree(
        queue: core::ffi::cl_command_queue,
        count: u32,
        ptrs: *const *mut c_void,
        free: Option<SvmFreeFn>,
        user_data: *mut c_void,
        wait_count: u32,
        wait_list: *const core::ffi::cl_event,
        event: *mut core::ffi::cl_event,
    ) -> i32;
}

type SvmFreeFn =
    extern "system" fn(core::ffi::cl_command_queue, u32, *mut *mut c_void, *mut c_void);

/// `CL_DEVICE_SVM_CAPABILITIES` and its fine-grained buffer bit.
const DEVICE_SVM_CAPABILITIES: u32 = 0x1053;
const SVM_FINE_GRAIN_BUFFER: u64 = 1 << 1;
/// `CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER`.
const SVM_FLAGS: u64 = 1 | (1 << 10);

/// Whether `device` offers fine-grained buffer SVM (`false` on an OpenCL
/// 1.x device, which does not know the query).
pub(crate) fn fine_grain_svm(device: &ocl::Device) -> bool {
    let mut caps: u64 = 0;
    // SAFETY: a live device; the answer is one cl_bitfield, written into `caps`.
    let rc = unsafe {
        core::ffi::clGetDeviceInfo(
            device.as_core().as_raw(),
            DEVICE_SVM_CAPABILITIES,
            std::mem::size_of::<u64>(),
            (&mut caps as *mut u64).cast(),
            std::ptr::null_mut(),
        )
    };
    rc == 0 && caps & SVM_FINE_GRAIN_BUFFER != 0
}

/// What a launch's x or y argument points at for one call.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// A buffer.
    Mem(&'a core::Mem),
    /// Fine-grained SVM ([`Shared`] from `clSVMAlloc`).
    Svm(NonNull<u8>),
}

impl Target<'_> {
    /// Sets argument `index` of `kernel` to this target.
    pub(crate) fn set(self, kernel: &core::Kernel, index: u32) -> Result<()> {
        match self {
            Target::Mem(m) => Ok(core::set_kernel_arg(kernel, index, core::ArgVal::mem(m))?),
            Target::Svm(p) => {
                // SAFETY: a live kernel; `p` is SVM memory of its context,
                // alive until the call that enqueues with it has finished.
                let rc =
                    unsafe { clSetKernelArgSVMPointer(kernel.as_ptr(), index, p.as_ptr().cast()) };
                if rc == 0 {
                    Ok(())
                } else {
                    Err(EngineError::OpenCl(format!(
                        "clSetKernelArgSVMPointer (argument {index}) failed: error {rc}"
                    )))
                }
            }
        }
    }
}

/// Host memory shared with the kernels: ours with a `CL_MEM_USE_HOST_PTR`
/// buffer over it, mapped (the host's) except while a call's launches run;
/// or fine-grained SVM, always both the host's and the kernels'.
#[derive(Debug)]
pub(crate) struct Shared {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
    queue: Queue,
    /// Whether the memory is the host's: a mapped buffer, or SVM.
    mapped: AtomicBool,
}

#[derive(Debug)]
enum Backing {
    /// Page-aligned memory of ours of `layout` and the buffer over it,
    /// released in `Drop` before the memory is freed.
    Buffer {
        layout: Layout,
        mem: ManuallyDrop<core::Mem>,
    },
    /// Memory from `clSVMAlloc`, freed by the queue in `Drop`.
    Svm,
}

// SAFETY: the memory is owned by this struct alone and freed only in its
// `Drop`; OpenCL objects may be used from any thread. Host access follows
// the map discipline above: the engine unmaps the memory only inside one
// call, under the matrix's lock, with x only read and y held exclusively.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    /// `len` zero bytes (at least one allocated) of `q`'s context: SVM when
    /// `svm` (the device has fine-grained buffer SVM) and the runtime gives
    /// it, else a buffer over memory of ours, mapped.
    pub(crate) fn new(q: &Queue, len: usize, svm: bool) -> Result<Shared> {
        let size = len.max(1).next_multiple_of(64);
        if svm {
            // SAFETY: a live context; fine-grained flags on a device that has them.
            let p = unsafe { clSVMAlloc(q.context().as_ptr(), SVM_FLAGS, size, SVM_ALIGN) };
            if let Some(ptr) = NonNull::new(p.cast::<u8>()) {
                // SAFETY: `size` bytes of fine-grained SVM, the host's to write.
                unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, size) };
                return Ok(Shared {
                    ptr,
                    len,
                    backing: Backing::Svm,
                    queue: q.clone(),
                    mapped: AtomicBool::new(true),
                });
            }
            // (None given, e.g. too big for the runtime: a buffer as below.)
        }
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
            len,
            backing: Backing::Buffer {
                layout,
                mem: ManuallyDrop::new(mem),
            },
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

    /// What the launches take as their argument for this memory.
    pub(crate) fn target(&self) -> Target<'_> {
        match &self.backing {
            Backing::Buffer { mem, .. } => Target::Mem(mem),
            Backing::Svm => Target::Svm(self.ptr),
        }
    }

    /// Whether the memory is SVM (no map or unmap ever enqueued).
    pub(crate) fn is_svm(&self) -> bool {
        matches!(self.backing, Backing::Svm)
    }

    /// Enqueues the map (read and write, not blocking: the memory is the
    /// host's once `ev` completes). SVM is always the host's: nothing is
    /// enqueued and `ev` stays empty.
    fn map(&self, ev: &mut Event) -> Result<()> {
        let Backing::Buffer { layout, mem } = &self.backing else {
            return Ok(());
        };
        let size = layout.size();
        // SAFETY: the whole buffer, unmapped; the caller waits for `ev`
        // before the host touches the memory.
        let map: MemMap<u8> = unsafe {
            core::enqueue_map_buffer(
                self.queue.as_core(),
                &**mem,
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
    /// until the next [`Shared::map`] completes. Nothing for SVM (`ev`
    /// stays empty).
    fn unmap(&self, ev: Option<&mut Event>) -> Result<()> {
        let Backing::Buffer { mem, .. } = &self.backing else {
            return Ok(());
        };
        // SAFETY: the pointer is the one the last map returned (checked there).
        let map = unsafe { MemMap::from_raw(self.ptr.as_ptr()) };
        core::enqueue_unmap_mem_object(
            self.queue.as_core(),
            &**mem,
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
        // No command may touch the memory once it is freed, and a drop never
        // waits for a kernel still running on the queue (a matrix evicted or
        // deleted while another call runs): the memory is freed by the
        // runtime once the commands enqueued before have completed.
        if self.is_svm() {
            self.free_svm_after_queue();
        } else {
            self.release_buffer();
        }
    }
}

impl Shared {
    /// The unmap is enqueued (when mapped) and the buffer released at once;
    /// the runtime deletes the buffer only once the commands that use it
    /// have completed, and then calls `free_memory`, which frees the memory.
    fn release_buffer(&mut self) {
        if self.is_mapped() && self.unmap(None).is_err() {
            // The queue is broken (the device is being rebuilt): the runtime
            // may still hold the memory, so the buffer and the memory are
            // leaked rather than freed under it.
            return;
        }
        let Backing::Buffer { layout, mem } = &mut self.backing else {
            return;
        };
        let memory = Box::into_raw(Box::new(Memory {
            ptr: self.ptr,
            layout: *layout,
        }));
        // SAFETY: a live buffer; the callback takes `memory` back exactly
        // once, when the runtime deletes the buffer.
        let rc = unsafe {
            core::ffi::clSetMemObjectDestructorCallback(
                mem.as_ptr(),
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
                ManuallyDrop::drop(mem);
                memory.free();
            }
            return;
        }
        // SAFETY: released once, never used again; the memory is freed by
        // the callback once the runtime is done with the buffer.
        unsafe { ManuallyDrop::drop(mem) };
    }

    /// The free is enqueued behind the queue's commands so far
    /// (`clEnqueueSVMFree`); `free_svm` frees the memory when it runs.
    fn free_svm_after_queue(&mut self) {
        let memory = Box::into_raw(Box::new(SvmMemory {
            context: self.queue.context(),
            ptr: self.ptr,
        }));
        let ptrs = [self.ptr.as_ptr().cast::<c_void>()];
        // SAFETY: a live queue and SVM memory of its context, never used
        // by the host again; the callback takes `memory` back exactly once.
        let rc = unsafe {
            clEnqueueSVMFree(
                self.queue.as_ptr(),
                1,
                ptrs.as_ptr(),
                Some(free_svm),
                memory.cast(),
                0,
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        if rc != 0 {
            // The queue is broken: commands may still use the memory, so it
            // is leaked rather than freed under them.
            // SAFETY: `memory` was not handed to the runtime.
            drop(unsafe { Box::from_raw(memory) });
        }
    }
}

/// SVM memory of a dropped [`Shared`], until its enqueued free runs.
struct SvmMemory {
    context: ocl::Context,
    ptr: NonNull<u8>,
}

/// Called by the OpenCL runtime when a dropped SVM [`Shared`]'s free
/// command runs, after every command enqueued before it: frees the memory.
extern "system" fn free_svm(
    _queue: core::ffi::cl_command_queue,
    _count: u32,
    _ptrs: *mut *mut c_void,
    user_data: *mut c_void,
) {
    // SAFETY: `user_data` is the `SvmMemory` boxed in `free_svm_after_queue`,
    // handed over once; no command uses the memory any more.
    let m = unsafe { Box::from_raw(user_data.cast::<SvmMemory>()) };
    // SAFETY: SVM memory of this context, freed once.
    unsafe { clSVMFree(m.context.as_ptr(), m.ptr.as_ptr().cast()) };
    #[cfg(test)]
    tests::FREED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(m.ptr.as_ptr() as usize);
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
        let view = SharedView(Arc::new(Shared::new(self.queue(), len, self.svm)?));
        Ok(crate::HostBytes::shared(view))
    }

    /// Whether [`Engine::shared_bytes`] gives fine-grained SVM (used with
    /// no map or unmap) rather than mapped buffers.
    pub fn shared_is_svm(&self) -> bool {
        self.svm
    }

    /// y = A x with x and y both in shared host memory of this engine's
    /// context: the plan's launches read x and write y where they are
    /// (buffers unmapped for them and mapped again after; SVM as it is).
    /// `check_x` runs first, while x is still the host's.
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
                x: Some(x.target()),
                y: Some(y.target()),
            };
            let read = |ev: &mut Event| {
                y.map(ev)?;
                x.map(&mut Event::empty())
            };
            // (SVM's unmap enqueues nothing: no upload to time.)
            let up = (!up.is_empty()).then(|| up.clone());
            self.run_and_read(m, pp, (t0, to), up, read, || {})
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

    /// The kinds of shared memory the test device has: mapped buffers,
    /// and SVM where it offers it (PoCL does).
    fn kinds(e: &Engine) -> Vec<bool> {
        if e.svm {
            vec![false, true]
        } else {
            eprintln!("the device has no fine-grained SVM: mapped buffers only");
            vec![false]
        }
    }

    /// Dropping shared memory while the queue is held up by an earlier
    /// command neither waits for it nor frees the memory under it: the
    /// memory is freed once the command has run, by the runtime (the
    /// buffer's destructor callback, or the enqueued SVM free).
    #[test]
    fn a_drop_behind_a_busy_queue_returns_at_once_and_frees_after_it() {
        let Some(e) = engine() else { return };
        for svm in kinds(&e) {
            drop_behind_a_busy_queue(&e, svm);
        }
    }

    fn drop_behind_a_busy_queue(e: &Engine, svm: bool) {
        let q = e.queue();
        let s = Shared::new(q, 1 << 16, svm).unwrap();
        assert_eq!(s.is_svm(), svm);
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
        assert!(returned, "svm {svm}: the drop waited for the queue");
        assert!(
            !early,
            "svm {svm}: freed while the queue still held a command"
        );
        q.finish().unwrap();
        assert!(
            wait_freed(since, addr),
            "svm {svm}: the runtime never freed the memory"
        );
    }

    /// Shared memory dropped on an idle queue (the host's, as between
    /// calls) is freed; the queue stays usable.
    #[test]
    fn a_drop_on_an_idle_queue_frees_the_memory() {
        let Some(e) = engine() else { return };
        for svm in kinds(&e) {
            let since = FREED.lock().unwrap().len();
            let s = Shared::new(e.queue(), 100, svm).unwrap();
            let addr = s.ptr.as_ptr() as usize;
            assert!(s.is_mapped() && s.bytes().iter().all(|&b| b == 0));
            drop(s);
            e.queue().finish().unwrap();
            assert!(
                wait_freed(since, addr),
                "svm {svm}: the runtime never freed the memory"
            );
            let again = Shared::new(e.queue(), 100, svm).unwrap();
            assert_eq!(again.len(), 100);
        }
    }
}
