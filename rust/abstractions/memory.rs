// SPDX-License-Identifier: GPL-2.0

//! The memory the driver reads and writes for its peers: user pages pinned
//! for a memory region (`Umem`), the kernel's own memory as kernel consumers
//! name it (`KernelMemory`), and a user process's inline data
//! (`copy_from_user`).
//!
//! C header: [`include/rdma/ib_umem.h`](srctree/include/rdma/ib_umem.h)

use super::bindings;
use kernel::{
    alloc::KVec,
    ffi::{c_int, c_ulong},
    prelude::*,
};

/// User memory pinned for a memory region (`struct ib_umem`), with its pages.
///
/// # Invariants
///
/// `umem` is a live pinned region of `len` bytes whose first byte is at
/// `first_offset` in `pages[0]`; `pages` are its pages in order; `writable`
/// is whether they were pinned for writing.
pub(crate) struct Umem {
    umem: *mut bindings::ib_umem,
    pages: KVec<*mut bindings::page>,
    first_offset: usize,
    len: u64,
    writable: bool,
}

// SAFETY: Pinned pages may be accessed from any context; the release happens
// once, in `drop`.
unsafe impl Send for Umem {}
// SAFETY: Shared access only copies bytes.
unsafe impl Sync for Umem {}

const PAGE: usize = kernel::page::PAGE_SIZE;

impl Umem {
    /// Pins the user range `[start, start + length)` of the calling process for
    /// device `ibdev` with `access` rights, and lists its pages.
    pub(super) fn pin_user(
        ibdev: *mut bindings::ib_device,
        start: u64,
        length: u64,
        access: c_int,
    ) -> Result<Umem> {
        // SAFETY: `ibdev` is valid; the core pins the user range or fails.
        let umem = unsafe {
            bindings::ib_umem_get_attr_or_va(
                ibdev,
                core::ptr::null(),
                0,
                start,
                length as usize,
                access,
            )
        };
        // SAFETY: Checking an error pointer.
        if unsafe { bindings::mr_is_err(umem.cast()) } {
            // SAFETY: As above.
            return Err(Error::from_errno(
                unsafe { bindings::mr_ptr_err(umem.cast()) } as i32,
            ));
        }
        let npages = ((start as usize % PAGE) + length as usize).div_ceil(PAGE);
        let mut pages = KVec::with_capacity(npages, GFP_KERNEL)?;
        let mut iter = bindings::sg_page_iter::default();
        // SAFETY: `umem` is a live region; the iterator walks its table.
        unsafe {
            bindings::__sg_page_iter_start(
                &mut iter,
                bindings::mr_umem_sgl(umem),
                bindings::mr_umem_nents(umem),
                0,
            );
            while bindings::__sg_page_iter_next(&mut iter) {
                if pages.len() == npages {
                    break;
                }
                if let Err(e) = pages.push(bindings::mr_sg_page_iter_page(&mut iter), GFP_KERNEL) {
                    bindings::ib_umem_release(umem);
                    return Err(e.into());
                }
            }
        }
        if pages.len() != npages {
            // SAFETY: Not yet owned by a `Umem`.
            unsafe { bindings::ib_umem_release(umem) };
            return Err(EFAULT);
        }
        // SAFETY: `umem` is live; the core set `writable` when it pinned it.
        let writable = unsafe { (*umem).writable() } != 0;
        // INVARIANT: pages in order; the range starts at `start`'s page offset.
        Ok(Umem {
            umem,
            pages,
            first_offset: start as usize % PAGE,
            len: length,
            writable,
        })
    }

    /// Bytes in the region.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Whether the pages were pinned for writing (the region was registered
    /// with a right that writes: `ib_access_writable`). Pages pinned only for
    /// reading may be shared with other mappings (a file's page cache, a
    /// copy-on-write page), so they are never written.
    pub(crate) fn writable(&self) -> bool {
        self.writable
    }

    /// Calls `f(page, offset in page, bytes)` for each page piece of
    /// `[off, off + len)`, which must lie within the region.
    fn for_pieces(
        &self,
        off: u64,
        len: usize,
        mut f: impl FnMut(*mut bindings::page, usize, usize, usize),
    ) -> Result {
        let end = off.checked_add(len as u64).ok_or(EINVAL)?;
        if end > self.len {
            return Err(EINVAL);
        }
        for (page, in_page, piece) in page_pieces(self.first_offset as u64, off, len, PAGE as u64) {
            let page = usize::try_from(page).map_err(|_| EINVAL)?;
            let page = *self.pages.get(page).ok_or(EINVAL)?;
            f(page, in_page as usize, piece.len(), piece.start);
        }
        Ok(())
    }

    /// Copies `src` into the region at byte `off`; EACCES if its pages were
    /// not pinned for writing (whatever the region's rights say now).
    pub(crate) fn write(&self, off: u64, src: &[u8]) -> Result {
        if !self.writable {
            return Err(EACCES);
        }
        self.for_pieces(off, src.len(), |page, in_page, n, done| {
            // SAFETY: `page` is a pinned page of the region (type invariant)
            // and `in_page + n <= PAGE`; `src[done..done + n]` is in bounds.
            unsafe { bindings::mr_memcpy_to_page(page, in_page, src.as_ptr().add(done).cast(), n) }
        })
    }

    /// Copies bytes at `off` of the region into `dst`.
    pub(crate) fn read(&self, off: u64, dst: &mut [u8]) -> Result {
        let p = dst.as_mut_ptr();
        self.for_pieces(off, dst.len(), |page, in_page, n, done| {
            // SAFETY: As in `write`, with `dst` valid for `n` writes at `done`.
            unsafe { bindings::mr_memcpy_from_page(p.add(done).cast(), page, in_page, n) }
        })
    }
}

/// The page pieces of bytes `[off, off + len)` of a region laid over pages
/// of `page_size` bytes whose first byte is `first` bytes into the first
/// page: for each piece, the page's index in the region, the offset in that
/// page, and the piece's range in the caller's buffer. The caller checks
/// that the range lies within the region; a `page_size` of 0 gives none.
pub(crate) fn page_pieces(
    first: u64,
    off: u64,
    len: usize,
    page_size: u64,
) -> impl Iterator<Item = (u64, u64, core::ops::Range<usize>)> {
    let mut done = 0usize;
    let mut pos = first.saturating_add(off);
    core::iter::from_fn(move || {
        if done >= len || page_size == 0 {
            return None;
        }
        let in_page = pos % page_size;
        let room = usize::try_from(page_size - in_page).unwrap_or(usize::MAX);
        let n = room.min(len - done);
        let piece = (pos / page_size, in_page, done..done + n);
        done += n;
        pos = pos.saturating_add(n as u64);
        Some(piece)
    })
}

/// A new translation for a memory region (`ibv_rereg_mr` with
/// `IBV_REREG_MR_CHANGE_TRANSLATION`): the calling process's range
/// `[start, start + length)`, reached at `iova`. Only good during the call
/// that hands it out (`'a`), in that process's thread: the raw pointer
/// keeps it from being sent to another thread (pinning reads the current
/// process's memory map), and [`Translation::pin`] consumes it.
pub(crate) struct Translation<'a> {
    ibdev: *mut bindings::ib_device,
    start: u64,
    length: u64,
    /// The address the region's users name its first byte by.
    pub(crate) iova: u64,
    _call: core::marker::PhantomData<&'a bindings::ib_device>,
}

impl<'a> Translation<'a> {
    /// # Safety
    ///
    /// `ibdev` is a registered device, valid for `'a`, and the caller runs
    /// in the process whose range this is.
    pub(super) unsafe fn new(
        ibdev: *mut bindings::ib_device,
        start: u64,
        length: u64,
        iova: u64,
    ) -> Self {
        Self {
            ibdev,
            start,
            length,
            iova,
            _call: core::marker::PhantomData,
        }
    }

    /// Pins the range for a region with `access` rights (may sleep).
    pub(crate) fn pin(self, access: super::types::Access) -> Result<Umem> {
        Umem::pin_user(self.ibdev, self.start, self.length, access.0 as c_int)
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: `umem` is live and released only here. Releasing may sleep:
        // drivers drop regions in process context.
        unsafe { bindings::ib_umem_release(self.umem) }
    }
}

/// The kernel's own memory, as kernel consumers name it in their work
/// requests: on a device without a DMA device (virtual DMA, like soft-RoCE's)
/// the "DMA address" a consumer maps with `ib_dma_map_*` is the kernel virtual
/// address of its buffer (`ib_virt_dma_to_ptr`).
///
/// Only this layer makes one: for a DMA memory region (`get_dma_mr`, which
/// only kernel consumers reach: `ib_alloc_pd`) and for a QP a kernel consumer
/// created. The driver uses it only for addresses taken from such a region or
/// QP's work requests, never for anything a user process or a remote peer
/// names (their regions are `Umem`s and PDs keep the two apart).
pub(crate) struct KernelMemory(pub(super) ());

impl KernelMemory {
    /// The token for KUnit tests of the driver, which read and write
    /// buffers of their own through it.
    #[cfg(CONFIG_KUNIT = "y")]
    pub(crate) fn for_kunit() -> Self {
        Self(())
    }

    fn range(addr: u64, len: usize) -> Result<*mut u8> {
        let end = addr.checked_add(len as u64).ok_or(EINVAL)?;
        if addr == 0 || end > usize::MAX as u64 {
            return Err(EINVAL);
        }
        Ok(addr as usize as *mut u8)
    }

    /// Copies `src` to kernel address `addr`.
    pub(crate) fn write(&self, addr: u64, src: &[u8]) -> Result {
        if src.is_empty() {
            return Ok(());
        }
        let dst = Self::range(addr, src.len())?;
        // SAFETY: A kernel consumer posted `[addr, addr + len)` in a work
        // request of its own (type invariant of the token) as memory it
        // mapped for the device and keeps until the request completes, which
        // is after this copy; it does not overlap `src` (driver memory).
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        Ok(())
    }

    /// Copies the bytes at kernel address `addr` into `dst`.
    pub(crate) fn read(&self, addr: u64, dst: &mut [u8]) -> Result {
        if dst.is_empty() {
            return Ok(());
        }
        let src = Self::range(addr, dst.len())?;
        // SAFETY: As in `write`.
        unsafe { core::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
}

/// Copies `n` bytes at user address `addr` of the current process into `dst`
/// (inline data of a user work request, in `post_send`'s process context).
pub(crate) fn copy_from_user(dst: &mut [u8], addr: u64) -> Result {
    // SAFETY: `dst` is valid for `dst.len()` writes; the user address is
    // checked by `copy_from_user`.
    let left =
        unsafe { bindings::mr_copy_from_user(dst.as_mut_ptr().cast(), addr, dst.len() as c_ulong) };
    if left == 0 {
        Ok(())
    } else {
        Err(EFAULT)
    }
}
