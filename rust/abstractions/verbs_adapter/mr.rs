// SPDX-License-Identifier: GPL-2.0

//! Memory regions: user registrations, the DMA region, fast registrations
//! (`alloc_mr`, `map_mr_sg` and the page list it builds), re-registration and
//! deregistration.

use super::{MrData, MrObj, Obj, VerbsAdapter};
use crate::abstractions::{
    bindings,
    memory::{KernelMemory, Translation, Umem},
    ops::{no_input, DeviceOps},
    types::{eopnotsupp, Access, MrKeys},
};
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::{
    error::code::*,
    ffi::{c_int, c_uint},
    prelude::*,
    types::Opaque,
};

/// The pages `ib_sg_to_pages` hands to `set_page` during one `map_mr_sg`.
///
/// # Invariants
///
/// `pages` is only accessed by the holder of `busy` (set by `map_mr_sg`
/// for its whole run, `set_page` included), and its capacity, reserved at
/// `alloc_mr`, is never exceeded (no allocation in atomic context).
pub(super) struct Stage {
    busy: AtomicBool,
    pages: core::cell::UnsafeCell<KVec<u64>>,
}

// SAFETY: `pages` is accessed only under `busy` (type invariant).
unsafe impl Sync for Stage {}
// SAFETY: A `KVec<u64>` may move between threads.
unsafe impl Send for Stage {}

impl Stage {
    fn new(max: usize) -> Result<Self> {
        Ok(Self {
            busy: AtomicBool::new(false),
            pages: core::cell::UnsafeCell::new(KVec::with_capacity(max, GFP_KERNEL)?),
        })
    }
}

// Each `unsafe extern "C"` function here is the `ib_device_ops` operation of its
// name (set in the table in `verbs_adapter.rs`): its contract is the RDMA
// core's for that operation, on a device of a `DeviceSet<T>`.
#[allow(clippy::missing_safety_doc)]
impl<T: DeviceOps> VerbsAdapter<T> {
    pub(super) unsafe extern "C" fn reg_user_mr(
        pd: *mut bindings::ib_pd,
        start: u64,
        length: u64,
        iova: u64,
        access: c_int,
        dmah: *mut bindings::ib_dmah,
        ud: *mut bindings::ib_udata,
    ) -> *mut bindings::ib_mr {
        let r = (|| -> Result<*mut bindings::ib_mr> {
            no_input(ud)?;
            if !dmah.is_null() {
                return Err(eopnotsupp());
            }
            // SAFETY: The core passes a PD of a device with this table.
            let (ibdev, pd_data) = unsafe {
                (
                    (*pd).device,
                    &Obj::<bindings::ib_pd, T::Pd>::from_raw(pd).data,
                )
            };
            // SAFETY: As above.
            let dev = unsafe { Self::dev(ibdev) };
            let umem = Umem::pin_user(ibdev, start, length, access)?;
            let (data, keys) = T::reg_user_mr(dev, pd_data, umem, iova, Access(access as u32))?;
            Self::new_mr(data, keys, iova, length, 0)
        })();
        match r {
            Ok(p) => p,
            Err(e) => e.to_ptr(),
        }
    }

    /// The core's `ib_mr` around a new region's data.
    fn new_mr(
        data: T::Mr,
        keys: MrKeys,
        iova: u64,
        length: u64,
        max_pages: usize,
    ) -> Result<*mut bindings::ib_mr> {
        // Everything that may fail first: the region is deregistered if
        // it cannot be handed to the core (it would stay in the driver's
        // table, its pages pinned, until the device went).
        let (stage, uninit) = match (
            Stage::new(max_pages),
            KBox::<MrObj<T>>::new_uninit(GFP_KERNEL),
        ) {
            (Ok(s), Ok(b)) => (s, b),
            _ => {
                T::dereg_mr(&data);
                return Err(ENOMEM);
            }
        };
        let obj = KBox::write(
            uninit,
            Obj {
                ib: Opaque::new(bindings::ib_mr::default()),
                data: MrData { stage, data },
            },
        );
        let raw = KBox::into_raw(obj);
        let ib = raw.cast::<bindings::ib_mr>();
        // SAFETY: `ib` is the fresh `ib_mr` at the start of `raw`; the core
        // fills in the rest after this returns.
        unsafe {
            (*ib).lkey = keys.lkey;
            (*ib).rkey = keys.rkey;
            (*ib).iova = iova;
            (*ib).length = length;
        }
        Ok(ib)
    }

    /// A region of all kernel memory for a kernel consumer's PD.
    pub(super) unsafe extern "C" fn get_dma_mr(
        pd: *mut bindings::ib_pd,
        access: c_int,
    ) -> *mut bindings::ib_mr {
        let r = (|| -> Result<*mut bindings::ib_mr> {
            // SAFETY: The core passes a PD of a device with this table.
            let (ibdev, pd_data) = unsafe {
                (
                    (*pd).device,
                    &Obj::<bindings::ib_pd, T::Pd>::from_raw(pd).data,
                )
            };
            // SAFETY: As above.
            let dev = unsafe { Self::dev(ibdev) };
            // INVARIANT: the core calls this for `ib_alloc_pd` (kernel
            // consumers) only; uverbs has no command for it.
            let (data, keys) =
                T::get_dma_mr(dev, pd_data, Access(access as u32), KernelMemory(()))?;
            Self::new_mr(data, keys, 0, u64::MAX, 0)
        })();
        match r {
            Ok(p) => p,
            Err(e) => e.to_ptr(),
        }
    }

    /// A fast-registration region (`ib_alloc_mr`, kernel consumers only:
    /// uverbs has no command for it).
    pub(super) unsafe extern "C" fn alloc_mr(
        pd: *mut bindings::ib_pd,
        mr_type: bindings::ib_mr_type,
        max_num_sg: u32,
    ) -> *mut bindings::ib_mr {
        let r = (|| -> Result<*mut bindings::ib_mr> {
            if mr_type != bindings::ib_mr_type_IB_MR_TYPE_MEM_REG {
                return Err(EINVAL);
            }
            // SAFETY: The core passes a PD of a device with this table.
            let (ibdev, pd_data) = unsafe {
                (
                    (*pd).device,
                    &Obj::<bindings::ib_pd, T::Pd>::from_raw(pd).data,
                )
            };
            // SAFETY: As above.
            let dev = unsafe { Self::dev(ibdev) };
            // INVARIANT: only kernel consumers reach `alloc_mr`; the pages
            // they map are kernel memory they keep while it is registered.
            let (data, keys) = T::alloc_mr(dev, pd_data, max_num_sg, KernelMemory(()))?;
            Self::new_mr(data, keys, 0, 0, max_num_sg as usize)
        })();
        match r {
            Ok(p) => p,
            Err(e) => e.to_ptr(),
        }
    }

    /// `ib_map_mr_sg`: the pages of a DMA-mapped scatterlist (kernel
    /// addresses: the device uses virtual DMA) staged for the next REG_MR.
    pub(super) unsafe extern "C" fn map_mr_sg(
        mr: *mut bindings::ib_mr,
        sg: *mut bindings::scatterlist,
        sg_nents: c_int,
        sg_offset: *mut c_uint,
    ) -> c_int {
        // SAFETY: The core passes a region of this device, live for the
        // call. Every region has a stage; one not made by `alloc_mr` has
        // room for no page, so nothing is staged for it.
        let obj = unsafe { MrObj::<T>::from_raw(mr) };
        let stage = &obj.data.stage;
        if stage.busy.swap(true, Ordering::Acquire) {
            // A consumer mapping one region twice at once.
            return EBUSY.to_errno();
        }
        // SAFETY: We hold `busy` (type invariant of `Stage`).
        unsafe { (*stage.pages.get()).clear() };
        // SAFETY: `mr` is live with `page_size` set by `ib_map_mr_sg`; the
        // scatterlist is the caller's; `set_page` is called synchronously
        // and finds the stage through `mr` while we hold `busy`.
        let n =
            unsafe { bindings::ib_sg_to_pages(mr, sg, sg_nents, sg_offset, Some(Self::set_page)) };
        let r = if n < 0 {
            n
        } else {
            // SAFETY: `ib_sg_to_pages` set `iova` and `length`; the core
            // set `page_size` (a power of two) before calling us.
            let (iova, length, page_size) =
                unsafe { ((*mr).iova, (*mr).length, u64::from((*mr).page_size)) };
            // SAFETY: We hold `busy`.
            let pages = unsafe { &*stage.pages.get() };
            let first = iova & page_size.wrapping_sub(1);
            match T::map_mr_sg(&obj.data.data, pages, page_size, first, length) {
                Ok(()) => n,
                Err(e) => e.to_errno(),
            }
        };
        stage.busy.store(false, Ordering::Release);
        r
    }

    /// Called by `ib_sg_to_pages` for each page of a `map_mr_sg`.
    pub(super) unsafe extern "C" fn set_page(mr: *mut bindings::ib_mr, addr: u64) -> c_int {
        // SAFETY: Only `map_mr_sg` passes this function, for its live region.
        let obj = unsafe { MrObj::<T>::from_raw(mr) };
        // SAFETY: `map_mr_sg` holds `busy` while `ib_sg_to_pages` runs.
        let pages = unsafe { &mut *obj.data.stage.pages.get() };
        if pages.len() >= pages.capacity() {
            // More pages than the region was made for: the mapping stops
            // here and `map_mr_sg` reports fewer elements mapped.
            return ENOMEM.to_errno();
        }
        // Within the capacity (INVARIANT): this does not allocate.
        match pages.push(addr, GFP_ATOMIC) {
            Ok(()) => 0,
            Err(_) => ENOMEM.to_errno(),
        }
    }

    /// `ibv_rereg_mr`: always in place (NULL), so the core keeps the
    /// `ib_mr` and its keys.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe extern "C" fn rereg_user_mr(
        mr: *mut bindings::ib_mr,
        flags: c_int,
        start: u64,
        length: u64,
        iova: u64,
        access: c_int,
        pd: *mut bindings::ib_pd,
        ud: *mut bindings::ib_udata,
    ) -> *mut bindings::ib_mr {
        let r = (|| -> Result {
            no_input(ud)?;
            let flags = flags as u32;
            let has = |f: u32| flags & f != 0;
            // SAFETY: The core passes a user region of a device with this
            // table (made by `reg_user_mr`; the core refuses device-memory
            // regions) and keeps it alive for the call; its data is only
            // read (a key and the device, never changed).
            let (ibdev, data) = unsafe { ((*mr).device, &MrObj::<T>::from_raw(mr).data.data) };
            // SAFETY: As above.
            let dev = unsafe { Self::dev(ibdev) };
            let pd = if has(bindings::ib_mr_rereg_flags_IB_MR_REREG_PD) {
                // SAFETY: With this flag the core passes the new PD, a live
                // PD of this device that it holds for the call.
                Some(unsafe { &Obj::<bindings::ib_pd, T::Pd>::from_raw(pd).data })
            } else {
                None
            };
            let access = has(bindings::ib_mr_rereg_flags_IB_MR_REREG_ACCESS)
                .then_some(Access(access as u32));
            let trans = if has(bindings::ib_mr_rereg_flags_IB_MR_REREG_TRANS) {
                // SAFETY: `ibdev` is registered for the call, which runs in
                // the process whose range this is (a uverbs command); the
                // value is handed to the driver for the call only.
                Some(unsafe { Translation::new(ibdev, start, length, iova) })
            } else {
                None
            };
            T::rereg_user_mr(dev, data, pd, access, trans)
        })();
        match r {
            Ok(()) => core::ptr::null_mut(),
            Err(e) => e.to_ptr(),
        }
    }

    pub(super) unsafe extern "C" fn dereg_mr(
        mr: *mut bindings::ib_mr,
        _ud: *mut bindings::ib_udata,
    ) -> c_int {
        let obj = mr.cast::<MrObj<T>>();
        // SAFETY: Allocated by `reg_user_mr` with `KBox`; the core deregisters once.
        let obj = unsafe { KBox::from_raw(obj) };
        T::dereg_mr(&obj.data.data);
        drop(obj);
        0
    }
}
