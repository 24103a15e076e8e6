// SPDX-License-Identifier: GPL-2.0

//! Completion rings shared with user space (`struct metaroce_cq_ring_hdr`
//! and `struct metaroce_cqe` of `uapi/rdma/metaroce-abi.h`): the memory, its
//! `mmap()` entry in the process's user context, and the `mmap`/`mmap_free`
//! operations of the device.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//! (`rdma_user_mmap_entry_*`)
//!
//! The process may write any byte of its ring at any time, while the kernel
//! writes it too. So the kernel only ever touches the ring through raw
//! pointers, with single-copy atomic or volatile accesses (never a Rust
//! reference into it), and reads back one value, `cons`, which the driver
//! uses only as a count bounded by the CQ's size (`driver/cq.rs`); every slot
//! index is masked. Nothing read from the ring is an address or a length.
//!
//! The area starts with a page that is never mapped: `vfree` called where
//! it cannot sleep (the last reference to a ring may go in a softirq)
//! defers the free through a list node in the area's first bytes, which
//! must not be bytes the process can write.

use super::{bindings, types::Wc};
use core::mem::offset_of;
use core::ptr::NonNull;
use kernel::{
    error::{code::*, to_result},
    ffi::c_int,
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Release},
        Arc,
    },
    types::Opaque,
};

const PAGE: usize = kernel::page::PAGE_SIZE;
/// Bytes of a slot (`sizeof(struct metaroce_cqe)`).
const SLOT: usize = size_of::<bindings::metaroce_cqe>();
/// Where slot 0 starts in the mapping: after the header, which has `prod`
/// and `cons` on lines of their own.
const SLOTS_AT: usize = size_of::<bindings::metaroce_cq_ring_hdr>();
const PROD: usize = offset_of!(bindings::metaroce_cq_ring_hdr, prod);
const CONS: usize = offset_of!(bindings::metaroce_cq_ring_hdr, cons);
/// Bytes of `struct metaroce_cq_ring_resp`.
pub(super) const RESP: usize = size_of::<bindings::metaroce_cq_ring_resp>();

const _: () = assert!(SLOT == 64 && SLOTS_AT == 256 && PROD == 0 && CONS == 128 && RESP == 24);

/// The memory of one completion ring.
///
/// # Invariants
///
/// `area` is a zeroed-at-creation `vmalloc` area of `PAGE + size` bytes,
/// owned by this value and freed in `drop`; its first page is never mapped
/// to user space, the rest (the ring: `size` bytes, a whole number of pages,
/// at least `SLOTS_AT + nslots * SLOT`) is what the process maps; `nslots`
/// is a power of two.
pub(crate) struct CqRingMem {
    area: NonNull<u8>,
    size: usize,
    nslots: u32,
}

// SAFETY: The area may be used from any context; every access is a raw
// single-copy atomic or volatile access, so shared use is sound.
unsafe impl Send for CqRingMem {}
// SAFETY: As above.
unsafe impl Sync for CqRingMem {}

impl CqRingMem {
    /// A ring for a CQ of `cqe` entries (at most 65536): the next power of
    /// two slots. Its pages are charged to the calling process's memory
    /// cgroup.
    pub(crate) fn new(cqe: u32) -> Result<Arc<Self>> {
        let nslots = cqe.max(1).checked_next_power_of_two().ok_or(EINVAL)?;
        if nslots > 1 << 16 {
            return Err(EINVAL);
        }
        let size = (SLOTS_AT + nslots as usize * SLOT).next_multiple_of(PAGE);
        // SAFETY: Any size may be asked for; the helper zeroes the area.
        let area = unsafe { bindings::mr_vzalloc_account((PAGE + size) as kernel::ffi::c_ulong) };
        let area = NonNull::new(area).ok_or(ENOMEM)?.cast();
        Ok(Arc::new(Self { area, size, nslots }, GFP_KERNEL_ACCOUNT)?)
    }

    /// Slots of the ring.
    pub(crate) fn nslots(&self) -> u32 {
        self.nslots
    }

    /// The ring's byte `off` (< `size`).
    fn at(&self, off: usize) -> *mut u8 {
        // SAFETY: `PAGE + off` is inside the area (callers keep `off` below
        // `size`).
        unsafe { self.area.as_ptr().add(PAGE + off) }
    }

    fn word(&self, off: usize) -> *mut u32 {
        // Only the constant offsets of the header come here (< `SLOTS_AT`).
        self.at(off).cast()
    }

    /// What user space says it has read (load-acquire: its reads of the
    /// slots happened before).
    pub(crate) fn cons(&self) -> u32 {
        // SAFETY: The word is 4-aligned and in the area for its lifetime;
        // the kernel accesses it only atomically (user space may race it,
        // which an atomic load tolerates).
        unsafe { Atomic::<u32>::from_ptr(self.word(CONS)) }.load(Acquire)
    }

    /// Publishes that `prod` completions were written (store-release: the
    /// slots' writes happen before).
    pub(crate) fn publish(&self, prod: u32) {
        // SAFETY: As in `cons`.
        unsafe { Atomic::<u32>::from_ptr(self.word(PROD)) }.store(prod, Release)
    }

    fn slot(&self, idx: u32) -> *mut u64 {
        // The index is masked: `SLOTS_AT + (nslots - 1) * SLOT + SLOT <= size`.
        self.at(SLOTS_AT + (idx & (self.nslots - 1)) as usize * SLOT)
            .cast()
    }

    /// Writes completion number `idx` to its slot (not yet published).
    pub(crate) fn write(&self, idx: u32, wc: &Wc) {
        let cqe = cqe(wc);
        let words = (&raw const cqe).cast::<u64>();
        let to = self.slot(idx);
        for i in 0..SLOT / 8 {
            // SAFETY: `cqe` is `SLOT` bytes, 8-aligned (`wr_id` is a u64);
            // the slot is 64-aligned in the area. A volatile store is a
            // single-copy write that a racing user write cannot make unsound.
            unsafe { to.add(i).write_volatile(words.add(i).read()) };
        }
    }

    /// Copies slot `from_idx` of `from` to slot `to_idx` of this ring (a
    /// resize): bytes, whatever user space made of them.
    pub(crate) fn copy_from(&self, to_idx: u32, from: &CqRingMem, from_idx: u32) {
        let (src, dst) = (from.slot(from_idx), self.slot(to_idx));
        for i in 0..SLOT / 8 {
            // SAFETY: Both slots are in their areas; volatile accesses as in
            // `write`.
            unsafe { dst.add(i).write_volatile(src.add(i).read_volatile()) };
        }
    }

    /// The layout user space maps (`struct metaroce_cq_ring_resp`).
    fn resp(&self, offset: u64) -> bindings::metaroce_cq_ring_resp {
        bindings::metaroce_cq_ring_resp {
            flags: bindings::metaroce_cq_flags_METAROCE_CQ_RING,
            nslots: self.nslots,
            mmap_offset: offset,
            mmap_len: self.size as u32,
            entries_offset: SLOTS_AT as u32,
        }
    }

    /// Maps the ring into `vma`, which has exactly the ring's size.
    ///
    /// # Safety
    ///
    /// `vma` must be the mapping being set up by an `mmap` operation, with
    /// the mmap lock held for writing.
    unsafe fn map(&self, vma: *mut bindings::vm_area_struct) -> Result {
        // SAFETY: Per the safety requirements.
        let start = unsafe { bindings::mr_vma_start(vma) } as usize;
        for off in (0..self.size).step_by(PAGE) {
            // SAFETY: `at(off)` is inside the vmalloc area; `vmalloc_to_page`
            // only looks the page up.
            let page = unsafe { bindings::vmalloc_to_page(self.at(off).cast()) };
            // SAFETY: `vma` is valid (above) and `start + off` inside it
            // (its size is the ring's); the page is an order-0 page of a
            // vmalloc area, which `vm_insert_page` takes a reference on, so
            // it outlives `vfree` for as long as the mapping does.
            to_result(unsafe {
                bindings::vm_insert_page(vma, (start + off) as kernel::ffi::c_ulong, page)
            })?;
        }
        Ok(())
    }
}

impl Drop for CqRingMem {
    fn drop(&mut self) {
        // SAFETY: Allocated by `mr_vzalloc_account`, freed once; pages still
        // mapped by a process stay until it unmaps them (see `map`). Where
        // it cannot sleep, `vfree` defers through the area's first bytes,
        // in the page no process maps.
        unsafe { bindings::vfree(self.area.as_ptr().cast()) };
    }
}

/// A completion as a ring carries it, equal to what `POLL_CQ` would return
/// (`ib_uverbs_wc`).
fn cqe(wc: &Wc) -> bindings::metaroce_cqe {
    let (wc_flags, ex) = wc.flags_ex();
    bindings::metaroce_cqe {
        wr_id: wc.wr_id,
        status: wc.status.raw(),
        opcode: wc.opcode.raw(),
        byte_len: wc.byte_len,
        ex,
        qp_num: wc.qpn,
        src_qp: wc.src_qp,
        wc_flags,
        port_num: 1,
        ..Default::default()
    }
}

/// A ring's `mmap()` entry in the user context, as the core keeps it.
#[repr(C)]
struct MmapEntry {
    entry: Opaque<bindings::rdma_user_mmap_entry>,
    ring: Arc<CqRingMem>,
}

/// A ring that its process may map: its entry in the user context's table
/// of `mmap()` offsets, removed (so no new mapping can be made) on drop.
///
/// # Invariants
///
/// `entry` was inserted by `new` and is removed once, in `drop`; the core
/// frees it (`mmap_free`) once removed and no `mmap` holds it.
pub(crate) struct CqRingMapping {
    entry: NonNull<MmapEntry>,
    resp: bindings::metaroce_cq_ring_resp,
}

// SAFETY: The entry is the core's to look up and the driver's to remove,
// from any thread.
unsafe impl Send for CqRingMapping {}
// SAFETY: Shared access reads only `resp`.
unsafe impl Sync for CqRingMapping {}

impl CqRingMapping {
    /// A new ring of `cqe` slots, offered to the process of `udata`.
    ///
    /// # Safety
    ///
    /// `udata` must be the driver data of a user call in progress.
    pub(super) unsafe fn new(
        udata: *mut bindings::ib_udata,
        cqe: u32,
    ) -> Result<(Self, Arc<CqRingMem>)> {
        let ring = CqRingMem::new(cqe)?;
        // SAFETY: Per the safety requirements.
        let mapping = unsafe { Self::offer(udata, ring.clone()) }?;
        Ok((mapping, ring))
    }

    /// # Safety
    ///
    /// As for `new`.
    unsafe fn offer(udata: *mut bindings::ib_udata, ring: Arc<CqRingMem>) -> Result<Self> {
        let size = ring.size;
        let entry = KBox::new(
            MmapEntry {
                entry: Opaque::new(Default::default()),
                ring,
            },
            GFP_KERNEL_ACCOUNT,
        )?;
        let entry = NonNull::from(KBox::leak(entry));
        // SAFETY: `udata` is a user call's (the safety requirements), so it
        // has a user context.
        let uctx = unsafe { bindings::mr_udata_ucontext(udata) };
        // SAFETY: The entry is zeroed and ours; the core fills it in.
        let ret = unsafe {
            bindings::rdma_user_mmap_entry_insert(uctx, (*entry.as_ptr()).entry.get(), size)
        };
        if ret != 0 {
            // SAFETY: Not inserted: still only ours.
            drop(unsafe { KBox::from_raw(entry.as_ptr()) });
            return Err(Error::from_errno(ret));
        }
        // SAFETY: Inserted: the core set the offset.
        let offset = unsafe { bindings::mr_mmap_entry_offset((*entry.as_ptr()).entry.get()) };
        // SAFETY: The entry lives until removed (by us, in `drop`).
        let resp = unsafe { (*entry.as_ptr()).ring.resp(offset) };
        Ok(Self { entry, resp })
    }

    /// `struct metaroce_cq_ring_resp` as the process gets it.
    pub(super) fn resp_bytes(&self) -> [u8; RESP] {
        type R = bindings::metaroce_cq_ring_resp;
        let r = &self.resp;
        let mut out = [0u8; RESP];
        let fields: [(usize, &[u8]); 5] = [
            (offset_of!(R, flags), &r.flags.to_ne_bytes()),
            (offset_of!(R, nslots), &r.nslots.to_ne_bytes()),
            (offset_of!(R, mmap_offset), &r.mmap_offset.to_ne_bytes()),
            (offset_of!(R, mmap_len), &r.mmap_len.to_ne_bytes()),
            (
                offset_of!(R, entries_offset),
                &r.entries_offset.to_ne_bytes(),
            ),
        ];
        for (at, b) in fields {
            if let Some(d) = out.get_mut(at..at + b.len()) {
                d.copy_from_slice(b);
            }
        }
        out
    }
}

impl Drop for CqRingMapping {
    fn drop(&mut self) {
        // SAFETY: Inserted by `new`, removed only here.
        unsafe { bindings::rdma_user_mmap_entry_remove((*self.entry.as_ptr()).entry.get()) };
    }
}

/// The device's `mmap` operation: maps the ring at the mapping's offset.
///
/// # Safety
///
/// The RDMA core's contract for `ib_device_ops.mmap`.
pub(super) unsafe extern "C" fn mmap(
    uctx: *mut bindings::ib_ucontext,
    vma: *mut bindings::vm_area_struct,
) -> c_int {
    // SAFETY: Valid per the core's contract; the core checks `VM_SHARED`
    // and that the size is the entry's, and takes a reference on it.
    let entry = unsafe { bindings::rdma_user_mmap_entry_get(uctx, vma) };
    if entry.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: `vma` is valid (the core's contract).
    let ret = if unsafe { bindings::mr_vma_exec(vma) } {
        EPERM.to_errno()
    } else {
        // SAFETY: Every entry of this device is the first field of a
        // `MmapEntry` (`CqRingMapping::new`), live while referenced.
        let ring = unsafe { &(*entry.cast::<MmapEntry>()).ring };
        // SAFETY: `vma` is valid; the core holds the mmap lock for writing.
        unsafe { bindings::mr_vma_ring_flags(vma) };
        // SAFETY: As above.
        match unsafe { ring.map(vma) } {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        }
    };
    // SAFETY: The reference `rdma_user_mmap_entry_get` took.
    unsafe { bindings::rdma_user_mmap_entry_put(entry) };
    ret
}

/// The device's `mmap_free` operation: frees a removed, unused entry.
///
/// # Safety
///
/// The RDMA core's contract for `ib_device_ops.mmap_free`.
pub(super) unsafe extern "C" fn mmap_free(entry: *mut bindings::rdma_user_mmap_entry) {
    // SAFETY: Every entry of this device was leaked from a `KBox<MmapEntry>`
    // by `CqRingMapping::new`; the core calls this once, when no one holds it.
    drop(unsafe { KBox::from_raw(entry.cast::<MmapEntry>()) });
}
