//! Page-aligned buffers, which O_DIRECT requires for every read and write.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Alignment of direct I/O buffers, offsets and lengths.
pub(crate) const ALIGN: usize = 4096;

/// A zero-initialised heap buffer aligned to [`ALIGN`].
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes rounded up to [`ALIGN`].
    pub fn new(len: usize) -> AlignedBuf {
        let len = align_up(len.max(1), ALIGN);
        let layout = Self::layout(len);
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        match Layout::from_size_align(len, ALIGN) {
            Ok(l) => l,
            Err(_) => std::alloc::handle_alloc_error(Layout::new::<u8>()),
        }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with the same layout.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for len bytes and uniquely owned.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// Rounds `v` up to a multiple of `a` (a power of two).
pub(crate) const fn align_up(v: usize, a: usize) -> usize {
    (v + a - 1) & !(a - 1)
}

/// Rounds `v` down to a multiple of `a` (a power of two).
pub(crate) const fn align_down(v: usize, a: usize) -> usize {
    v & !(a - 1)
}
