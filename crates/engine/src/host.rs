//! Host bytes of x or y for the binary wire path: on the heap, or pinned
//! (`CL_MEM_ALLOC_HOST_PTR`, mapped once for the buffer's life).
//!
//! A GPU runtime copies pageable memory through a staging area of its own
//! before its DMA engine can move it, which costs more than the copy itself
//! on the H100 (window 4's request path: 0.16-0.43 ms per call beyond the
//! profiled transfers). A caller that receives x into pinned bytes and
//! answers y from pinned bytes (the service's x and y pools) gets the DMA
//! speed with no host copy: [`crate::Engine::execute_le_into`] moves them
//! straight when both are pinned.
//!
//! On a CPU device the bytes can be shared instead ([`crate::shared`]): the
//! kernels read x and write y where they are, with no copy at all.

use crate::error::Result;
use crate::shared::SharedView;
use ocl::{Buffer, MemMap, OclPrm, Queue};

/// x's or y's little-endian bytes, on the heap, pinned, or shared with a CPU
/// device's kernels; its length is fixed once made.
#[derive(Debug)]
pub struct HostBytes {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Heap(Vec<u8>),
    Pinned(Box<Pinned>),
    Shared(SharedView),
}

/// A mapped pinned buffer.
#[derive(Debug)]
struct Pinned {
    // Declared (so dropped, i.e. unmapped) before its buffer.
    map: MemMap<u8>,
    _buf: Buffer<u8>,
    len: usize,
}

impl HostBytes {
    /// `len` zero bytes on the heap.
    pub fn heap(len: usize) -> HostBytes {
        HostBytes::from(vec![0u8; len])
    }

    /// `len` bytes of pinned host memory of the context of `q`, mapped for
    /// reading and writing until dropped (contents unspecified).
    pub(crate) fn pinned(q: &Queue, len: usize) -> Result<HostBytes> {
        let (buf, map) = map_pinned::<u8>(q, len)?;
        Ok(HostBytes {
            inner: Inner::Pinned(Box::new(Pinned {
                map,
                _buf: buf,
                len,
            })),
        })
    }

    /// Shared bytes ([`crate::Engine::shared_bytes`]).
    pub(crate) fn shared(view: SharedView) -> HostBytes {
        HostBytes {
            inner: Inner::Shared(view),
        }
    }

    /// Whether the bytes are pinned host memory.
    pub fn is_pinned(&self) -> bool {
        matches!(self.inner, Inner::Pinned(_))
    }

    /// Whether the bytes are host memory shared with the device's kernels.
    pub fn is_shared(&self) -> bool {
        matches!(self.inner, Inner::Shared(_))
    }

    /// Whether the bytes were made by an engine for its device (pinned or
    /// shared), not plain heap memory: the kind a pool keeps.
    pub fn is_device_host(&self) -> bool {
        !matches!(self.inner, Inner::Heap(_))
    }

    /// The view of shared bytes (the engine's own use).
    pub(crate) fn shared_ref(&self) -> Option<&SharedView> {
        match &self.inner {
            Inner::Shared(v) => Some(v),
            _ => None,
        }
    }

    /// A handle on shared bytes, to keep beside them where only the bytes
    /// travel ([`LeBytes::shared`]); `None` for other kinds.
    pub fn shared_view(&self) -> Option<SharedView> {
        self.shared_ref().cloned()
    }

    /// The number of bytes.
    pub fn len(&self) -> usize {
        match &self.inner {
            Inner::Heap(v) => v.len(),
            Inner::Pinned(p) => p.len,
            Inner::Shared(v) => v.0.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The heap bytes as a `Vec` (pinned or shared bytes are copied out).
    pub fn into_vec(self) -> Vec<u8> {
        match self.inner {
            Inner::Heap(v) => v,
            _ => self.as_ref().to_vec(),
        }
    }
}

impl From<Vec<u8>> for HostBytes {
    fn from(v: Vec<u8>) -> HostBytes {
        HostBytes {
            inner: Inner::Heap(v),
        }
    }
}

impl AsRef<[u8]> for HostBytes {
    fn as_ref(&self) -> &[u8] {
        match &self.inner {
            Inner::Heap(v) => v,
            Inner::Pinned(p) => &p.map[..p.len],
            Inner::Shared(v) => v.0.bytes(),
        }
    }
}

impl AsMut<[u8]> for HostBytes {
    fn as_mut(&mut self) -> &mut [u8] {
        match &mut self.inner {
            Inner::Heap(v) => v,
            Inner::Pinned(p) => &mut p.map[..p.len],
            // SAFETY: borrowed exclusively through `&mut self`: views of the
            // bytes held elsewhere make no reference to them, and the engine
            // unmaps them only inside a call given them.
            Inner::Shared(v) => unsafe { v.0.bytes_mut() },
        }
    }
}

/// A pinned (`CL_MEM_ALLOC_HOST_PTR`) host buffer of `len` values of the
/// context of `q` (at least one), mapped for reading and writing: copies
/// from and to its map run at DMA speed on a GPU. The map must be dropped
/// (unmapped) before the buffer, and the buffer only ever touched through it.
pub(crate) fn map_pinned<T: OclPrm>(q: &Queue, len: usize) -> Result<(Buffer<T>, MemMap<T>)> {
    let buf = Buffer::<T>::builder()
        .queue(q.clone())
        .flags(ocl::flags::MEM_READ_WRITE | ocl::flags::MEM_ALLOC_HOST_PTR)
        .len(len.max(1))
        .build()?;
    // SAFETY: the map is blocking, and the caller touches the buffer only
    // through it (never as a kernel argument nor a command's target).
    let map = unsafe {
        buf.map()
            .flags(ocl::flags::MAP_READ | ocl::flags::MAP_WRITE)
            .enq()?
    };
    Ok((buf, map))
}

/// x's little-endian bytes given to [`crate::Engine::execute_le_into`],
/// with whether they lie in pinned host memory or shared memory.
#[derive(Debug, Clone, Copy)]
pub struct LeBytes<'a> {
    /// The bytes.
    pub bytes: &'a [u8],
    /// Whether they are pinned host memory ([`HostBytes::is_pinned`]).
    pub pinned: bool,
    /// The shared memory they are, when they are all of it
    /// ([`HostBytes::shared_view`]; other bytes given here are ignored).
    pub shared: Option<&'a SharedView>,
}

impl<'a> From<&'a [u8]> for LeBytes<'a> {
    /// Bytes of unknown kind: taken as pageable.
    fn from(bytes: &'a [u8]) -> LeBytes<'a> {
        LeBytes {
            bytes,
            pinned: false,
            shared: None,
        }
    }
}

impl<'a> From<&'a HostBytes> for LeBytes<'a> {
    fn from(h: &'a HostBytes) -> LeBytes<'a> {
        LeBytes {
            bytes: h.as_ref(),
            pinned: h.is_pinned(),
            shared: h.shared_ref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_bytes_keep_their_length_and_contents() {
        let mut h = HostBytes::heap(5);
        assert!(!h.is_pinned());
        assert_eq!(h.len(), 5);
        h.as_mut().copy_from_slice(b"abcde");
        assert_eq!(h.as_ref(), b"abcde");
        assert_eq!(h.into_vec(), b"abcde".to_vec());
        assert!(HostBytes::from(Vec::new()).is_empty());
    }

    fn assert_send<T: Send>() {}

    #[test]
    fn host_bytes_can_be_sent_to_another_thread() {
        // (An answer's body owns its y buffer until sent, on any thread.)
        assert_send::<HostBytes>();
    }
}
