// SPDX-License-Identifier: GPL-2.0

//! Fast registration (the memory management extensions kernel ULPs use:
//! `ib_alloc_mr`, `ib_map_mr_sg`, the REG_MR and LOCAL_INV work requests,
//! Send with Invalidate): a region's page lists, its keys and its state.
//! Safe Rust only; the table that holds such regions is mr.rs's.
//!
//! A fast region is made free (no access possible) with room for a page
//! list. `map_mr_sg` stages a list of kernel pages; a REG_MR work request,
//! when the send queue reaches it, makes the staged list the region's,
//! with the key, address, length and rights the request names, and the
//! region valid; LOCAL_INV, or a peer's Send with Invalidate, makes it free
//! again. Only a valid region is found by its key.
//!
//! Keys: the consumer picks the low 8 bits of a fast region's key
//! (`ib_update_fast_reg_key`) before each registration, so a region owns a
//! block of 256 keys. Fast keys have bit 31 set and ordinary keys have it
//! clear (mr.rs), so the two kinds never meet.

use crate::abstractions::memory::{page_pieces, KernelMemory};
use kernel::prelude::*;

/// The most pages of one fast registration (`max_fast_reg_page_list_len`).
pub(crate) const MAX_FAST_PAGES: usize = 512;

/// Bit 31 marks a fast registration's key.
pub(super) const FAST_KEY: u32 = 1 << 31;

/// The bits of a fast key the consumer chooses.
const VARIANT: u32 = 0xff;

/// Whether `key` is a fast registration's.
pub(super) fn is_fast_key(key: u32) -> bool {
    key & FAST_KEY != 0
}

/// The table key (the block) of fast key `key`.
pub(super) fn block_of(key: u32) -> u32 {
    key & !VARIANT
}

/// The next block after `last` that is not in use (`used`). Terminates as
/// long as fewer than 2^23 blocks are live (the table holds at most
/// `MAX_MRS`, 2^20, regions of both kinds).
pub(super) fn next_free_block(last: u32, used: impl Fn(u32) -> bool) -> u32 {
    let mut k = last;
    loop {
        k = block_of(k.wrapping_add(VARIANT + 1)) | FAST_KEY;
        if !used(k) {
            return k;
        }
    }
}

/// Why a fast-registration operation failed (the work request completes
/// with a local error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FastError {
    /// No fast region of the QP's domain has that key (block).
    NoRegion,
    /// Registered while valid, or invalidated while free, or by a key that
    /// is not the one it is registered with.
    State,
    /// The length or address does not match the staged page list.
    Length,
    /// The rights are not a valid combination.
    Access,
}

/// A list of kernel pages, `page_size` bytes each, of which the region's
/// bytes start `first` bytes into the first and run for `len` bytes.
/// Allocated once, at `alloc_mr`, for the region's most pages: staging and
/// registering copy within it and never allocate (`map_mr_sg` may be
/// called in atomic context).
struct Pages {
    addrs: KVec<u64>,
    page_size: u64,
    first: u64,
    len: u64,
}

impl Pages {
    fn with_capacity(max: usize) -> Result<Self> {
        Ok(Self {
            addrs: KVec::with_capacity(max, GFP_KERNEL)?,
            page_size: 0,
            first: 0,
            len: 0,
        })
    }

    /// Takes `addrs` and the layout (room was made for `max` pages).
    fn set(&mut self, addrs: &[u64], page_size: u64, first: u64, len: u64) -> Result {
        if addrs.len() > self.addrs.capacity() {
            return Err(EINVAL);
        }
        self.addrs.clear();
        // Within the capacity reserved at creation: no allocation.
        self.addrs.extend_from_slice(addrs, GFP_ATOMIC)?;
        self.page_size = page_size;
        self.first = first;
        self.len = len;
        Ok(())
    }

    /// Calls `f(kernel address, range in the caller's buffer)` for each
    /// page piece of bytes `[off, off + len)` of the region.
    fn pieces(
        &self,
        off: u64,
        len: usize,
        mut f: impl FnMut(u64, core::ops::Range<usize>) -> Result,
    ) -> Result {
        let end = off.checked_add(len as u64).ok_or(EINVAL)?;
        if end > self.len || self.page_size == 0 {
            return Err(EINVAL);
        }
        for (page, in_page, piece) in page_pieces(self.first, off, len, self.page_size) {
            let page = usize::try_from(page).map_err(|_| EINVAL)?;
            let base = *self.addrs.get(page).ok_or(EINVAL)?;
            f(base.checked_add(in_page).ok_or(EINVAL)?, piece)?;
        }
        Ok(())
    }
}

/// The memory of a fast registration.
pub(crate) struct FastMem {
    mem: KernelMemory,
    /// What `map_mr_sg` mapped last.
    staged: Pages,
    /// What the last REG_MR registered.
    active: Pages,
    valid: bool,
    /// The key it is registered with (valid) or was created with.
    key: u32,
}

impl FastMem {
    /// A free region with room for `max` pages.
    pub(crate) fn new(max: u32, mem: KernelMemory) -> Result<Self> {
        let max = max as usize;
        if max == 0 || max > MAX_FAST_PAGES {
            return Err(EINVAL);
        }
        Ok(Self {
            mem,
            staged: Pages::with_capacity(max)?,
            active: Pages::with_capacity(max)?,
            valid: false,
            key: 0,
        })
    }

    pub(super) fn set_key(&mut self, key: u32) {
        self.key = key;
    }

    /// Whether the region is valid under `key`.
    pub(super) fn valid_as(&self, key: u32) -> bool {
        self.valid && self.key == key
    }

    /// Whether it is registered (under any key).
    pub(super) fn is_valid(&self) -> bool {
        self.valid
    }

    /// Bytes registered (0 while free).
    pub(super) fn len(&self) -> u64 {
        if self.valid {
            self.active.len
        } else {
            0
        }
    }

    /// Stages page list `addrs` (kernel addresses of `page_size`-byte
    /// pages; the region's bytes start `first` bytes into the first) for
    /// the next registration. Staging while valid is allowed: it changes
    /// nothing registered.
    pub(crate) fn stage(&mut self, addrs: &[u64], page_size: u64, first: u64, len: u64) -> Result {
        if !page_size.is_power_of_two() || page_size < 4096 || first >= page_size {
            return Err(EINVAL);
        }
        let room = (addrs.len() as u64)
            .checked_mul(page_size)
            .and_then(|b| b.checked_sub(first))
            .ok_or(EINVAL)?;
        if len > room {
            return Err(EINVAL);
        }
        self.staged.set(addrs, page_size, first, len)
    }

    /// REG_MR: the staged list becomes the region's, under `key`, for
    /// `length` bytes. The caller checked the key's block and the domain.
    pub(super) fn register(&mut self, key: u32, length: u64) -> Result<(), FastError> {
        if self.valid {
            return Err(FastError::State);
        }
        if length != self.staged.len {
            return Err(FastError::Length);
        }
        let s = &self.staged;
        // Both lists were made with the same capacity: no allocation.
        let (addrs, size, first, len) = (&s.addrs[..], s.page_size, s.first, s.len);
        self.active
            .set(addrs, size, first, len)
            .map_err(|_| FastError::Length)?;
        self.key = key;
        self.valid = true;
        Ok(())
    }

    /// LOCAL_INV or a peer's Send with Invalidate by `key`.
    pub(super) fn invalidate(&mut self, key: u32) -> Result<(), FastError> {
        if !self.valid_as(key) {
            return Err(FastError::State);
        }
        self.valid = false;
        Ok(())
    }

    /// Copies `src` to byte `off` of the registered region.
    pub(super) fn write(&self, off: u64, src: &[u8]) -> Result {
        if !self.valid {
            return Err(EACCES);
        }
        self.active.pieces(off, src.len(), |addr, r| {
            self.mem.write(addr, src.get(r).ok_or(EINVAL)?)
        })
    }

    /// Copies byte `off` onwards of the registered region into `dst`.
    pub(super) fn read(&self, off: u64, dst: &mut [u8]) -> Result {
        if !self.valid {
            return Err(EACCES);
        }
        self.active.pieces(off, dst.len(), |addr, r| {
            self.mem.read(addr, dst.get_mut(r).ok_or(EINVAL)?)
        })
    }
}

#[kunit_tests(metaroce_frmr)]
mod tests {
    use super::*;

    fn region(buf: &mut [u8; 3 * 4096]) -> Result<FastMem> {
        let mut f = FastMem::new(4, KernelMemory::for_kunit())?;
        let a = buf.as_mut_ptr() as u64;
        // Three "pages" of the buffer, in the order 2, 0, 1, starting 100
        // bytes into the first.
        let pages = [a + 2 * 4096, a, a + 4096];
        f.stage(&pages, 4096, 100, 3 * 4096 - 100)?;
        Ok(f)
    }

    #[test]
    fn registration_follows_the_staged_pages_in_order() -> Result {
        let mut buf = [0u8; 3 * 4096];
        let mut f = region(&mut buf)?;
        // A free region takes no bytes.
        assert!(f.write(0, b"x").is_err());
        assert_eq!(f.register(0x8000_0107, 3 * 4096 - 100), Ok(()));
        assert!(f.valid_as(0x8000_0107));
        assert!(!f.valid_as(0x8000_0108));
        // The region starts 100 bytes into page 2 of the buffer.
        f.write(3896, b"abcd")?;
        assert_eq!(&buf[2 * 4096 + 3996..2 * 4096 + 4000], b"abcd");
        // Bytes 3994..3998 straddle its first two pages (2, then 0).
        f.write(3994, b"wxyz")?;
        assert_eq!(&buf[2 * 4096 + 4094..2 * 4096 + 4096], b"wx");
        assert_eq!(&buf[0..2], b"yz");
        let mut back = [0u8; 4];
        f.read(3994, &mut back)?;
        assert_eq!(&back, b"wxyz");
        // Nothing past the registered length, in or out of the last page.
        assert!(f.write(3 * 4096 - 100, b"z").is_err());
        assert!(f.read(3 * 4096 - 102, &mut back).is_err());
        Ok(())
    }

    #[test]
    fn state_and_keys_are_enforced() -> Result {
        let mut buf = [0u8; 3 * 4096];
        let mut f = region(&mut buf)?;
        assert_eq!(f.register(0x8000_0101, 5), Err(FastError::Length));
        assert_eq!(f.register(0x8000_0101, 3 * 4096 - 100), Ok(()));
        // Registered twice without an invalidation.
        assert_eq!(
            f.register(0x8000_0102, 3 * 4096 - 100),
            Err(FastError::State)
        );
        assert_eq!(f.invalidate(0x8000_0102), Err(FastError::State));
        assert_eq!(f.invalidate(0x8000_0101), Ok(()));
        assert_eq!(f.invalidate(0x8000_0101), Err(FastError::State));
        assert_eq!(f.len(), 0);
        let mut b = [0u8; 1];
        // Invalidated: no bytes.
        assert!(f.read(0, &mut b).is_err());
        Ok(())
    }

    #[test]
    fn page_lists_are_bounded() -> Result {
        assert!(FastMem::new(0, KernelMemory::for_kunit()).is_err());
        assert!(FastMem::new(MAX_FAST_PAGES as u32 + 1, KernelMemory::for_kunit()).is_err());
        let mut f = FastMem::new(2, KernelMemory::for_kunit())?;
        // More pages than made room for, a length past the pages, an odd
        // page size, an offset past the first page.
        assert!(f.stage(&[0x1000, 0x2000, 0x3000], 4096, 0, 1).is_err());
        assert!(f.stage(&[0x1000, 0x2000], 4096, 8, 8192).is_err());
        assert!(f.stage(&[0x1000], 3000, 0, 1).is_err());
        assert!(f.stage(&[0x1000], 4096, 4096, 1).is_err());
        assert!(f.stage(&[0x1000, 0x2000], 4096, 8, 8184).is_ok());
        Ok(())
    }

    #[test]
    fn fast_keys_have_their_own_blocks() {
        assert!(is_fast_key(0x8000_0000) && !is_fast_key(0x7fff_ffff));
        assert_eq!(block_of(0x8000_12ff), 0x8000_1200);
        let b = next_free_block(0x8000_0105, |_| false);
        assert_eq!(b, 0x8000_0200);
        // The last block wraps round to the first; live blocks are skipped.
        assert_eq!(
            next_free_block(0xffff_ff00, |k| k == 0x8000_0000),
            0x8000_0100
        );
    }
}
