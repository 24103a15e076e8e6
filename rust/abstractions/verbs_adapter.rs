// SPDX-License-Identifier: GPL-2.0

//! The verbs operations of `ib_device_ops`: user contexts, protection domains,
//! completion queues, memory regions and queue pairs, bridged to a
//! [`DeviceOps`] implementation.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! The RDMA core allocates contexts, PDs, CQs and QPs itself, with room for the
//! driver's data after the core's structure ([`Obj`]); the driver allocates
//! memory regions. The adapter functions here convert the C structures to the
//! plain Rust types of `types.rs` and back, so the driver never sees a raw
//! pointer.

use super::{
    bindings,
    memory::{KernelMemory, Translation, Umem},
    ops::{no_input, udata, CqEvents, Device, DeviceOps, SrqEvents, Target},
    types::{
        eopnotsupp, Access, AhAttr, IpAddr, MrKeys, QpCaps, QpCreate, QpId, QpModify, QpState,
        QpType, RecvWr, SendOp, SendWr, Sge, SrqAttr, SrqModify, UdDest, Wc, WcOpcode, WcStatus,
        MAX_SGE,
    },
};
use crate::new_spinlock_bh;
use core::{
    ops::Deref,
    sync::atomic::{AtomicBool, Ordering},
};
use kernel::{
    error::{code::*, from_result},
    ffi::{c_int, c_uint},
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
    types::Opaque,
};

/// A core verbs structure `I` with the driver's data `D` after it.
///
/// # Invariants
///
/// `data` is initialised from the create operation's success until the
/// destroy operation, and the object is only reachable in between.
#[repr(C)]
pub(crate) struct Obj<I, D> {
    ib: Opaque<I>,
    data: D,
}

impl<I, D> Deref for Obj<I, D> {
    type Target = D;

    fn deref(&self) -> &D {
        &self.data
    }
}

impl<I, D> Obj<I, D> {
    /// # Safety
    ///
    /// `ib` must be the start of an `Obj<I, D>` whose data is initialised for `'a`.
    pub(super) unsafe fn from_raw<'a>(ib: *mut I) -> &'a Self {
        // SAFETY: Per the safety requirements.
        unsafe { &*ib.cast::<Self>() }
    }

    /// Writes the data of the freshly allocated object at `ib`.
    ///
    /// # Safety
    ///
    /// `ib` must be the start of an allocation of `Obj<I, D>`'s size whose data
    /// is not initialised.
    unsafe fn init(ib: *mut I, data: D) {
        // SAFETY: Per the safety requirements.
        unsafe { (&raw mut (*ib.cast::<Self>()).data).write(data) }
    }

    /// Drops the data of the object at `ib`.
    ///
    /// # Safety
    ///
    /// The data must be initialised and never used again.
    unsafe fn drop_data(ib: *mut I) {
        // SAFETY: Per the safety requirements.
        unsafe { core::ptr::drop_in_place(&raw mut (*ib.cast::<Self>()).data) }
    }
}

/// Driver data of a completion queue, with the adapter's event target.
pub(crate) struct CqData<D> {
    events: Arc<CqEvents>,
    /// Held across a resize and the write of the size it granted, so that
    /// resizes of one CQ run one at a time and `cqe` is the ring's.
    resizing: Pin<KBox<Mutex<()>>>,
    data: D,
}

/// A memory region the driver allocated: the core's `ib_mr` and the data.
pub(crate) type MrObj<T> = Obj<bindings::ib_mr, MrData<<T as DeviceOps>::Mr>>;

/// Driver data of a memory region, with the page list `map_mr_sg` builds
/// (fast registrations; empty otherwise).
pub(crate) struct MrData<D> {
    stage: Stage,
    data: D,
}

impl<D> Deref for MrData<D> {
    type Target = D;

    fn deref(&self) -> &D {
        &self.data
    }
}

/// The pages `ib_sg_to_pages` hands to `set_page` during one `map_mr_sg`.
///
/// # Invariants
///
/// `pages` is only accessed by the holder of `busy` (set by `map_mr_sg`
/// for its whole run, `set_page` included), and its capacity, reserved at
/// `alloc_mr`, is never exceeded (no allocation in atomic context).
struct Stage {
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

/// The operations of the verbs objects, filled into `ib_device_ops`.
pub(crate) struct VerbsAdapter<T: DeviceOps>(core::marker::PhantomData<T>);

pub(super) type CqObj<T> = Obj<bindings::ib_cq, CqData<<T as DeviceOps>::Cq>>;

/// Driver data of a shared receive queue, with the adapter's event target.
pub(crate) struct SrqData<D> {
    events: Arc<SrqEvents>,
    data: D,
}

type SrqObj<T> = Obj<bindings::ib_srq, SrqData<<T as DeviceOps>::Srq>>;

impl<D> CqData<D> {
    /// The driver's data of the CQ.
    pub(super) fn data(&self) -> &D {
        &self.data
    }
}

// Each `unsafe extern "C"` function here is the `ib_device_ops` operation of its
// name: its contract is the RDMA core's for that operation, on a device of a
// `DeviceSet<T>` (what each relies on is in its SAFETY comments).
#[allow(clippy::missing_safety_doc)]
impl<T: DeviceOps> VerbsAdapter<T> {
    /// Fills the verbs part of `ops`.
    pub(crate) fn fill(ops: &mut bindings::ib_device_ops) {
        ops.uverbs_abi_ver = T::UVERBS_ABI_VERSION;
        ops.size_ib_ucontext = size_of::<Obj<bindings::ib_ucontext, T::Ucontext>>();
        ops.size_ib_pd = size_of::<Obj<bindings::ib_pd, T::Pd>>();
        ops.size_ib_cq = size_of::<CqObj<T>>();
        ops.size_ib_qp = size_of::<Obj<bindings::ib_qp, T::Qp>>();
        ops.size_ib_srq = size_of::<SrqObj<T>>();
        ops.size_ib_ah = size_of::<Obj<bindings::ib_ah, AhAttr>>();
        ops.alloc_ucontext = Some(Self::alloc_ucontext);
        ops.dealloc_ucontext = Some(Self::dealloc_ucontext);
        ops.alloc_pd = Some(Self::alloc_pd);
        ops.dealloc_pd = Some(Self::dealloc_pd);
        ops.create_cq = Some(Self::create_cq);
        ops.destroy_cq = Some(Self::destroy_cq);
        ops.resize_user_cq = Some(Self::resize_user_cq);
        ops.poll_cq = Some(Self::poll_cq);
        ops.req_notify_cq = Some(Self::req_notify_cq);
        ops.reg_user_mr = Some(Self::reg_user_mr);
        ops.get_dma_mr = Some(Self::get_dma_mr);
        ops.rereg_user_mr = Some(Self::rereg_user_mr);
        ops.alloc_mr = Some(Self::alloc_mr);
        ops.map_mr_sg = Some(Self::map_mr_sg);
        ops.dereg_mr = Some(Self::dereg_mr);
        ops.create_srq = Some(Self::create_srq);
        ops.modify_srq = Some(Self::modify_srq);
        ops.query_srq = Some(Self::query_srq);
        ops.destroy_srq = Some(Self::destroy_srq);
        ops.post_srq_recv = Some(Self::post_srq_recv);
        ops.create_qp = Some(Self::create_qp);
        ops.modify_qp = Some(Self::modify_qp);
        ops.query_qp = Some(Self::query_qp);
        ops.destroy_qp = Some(Self::destroy_qp);
        ops.post_send = Some(Self::post_send);
        ops.post_recv = Some(Self::post_recv);
        ops.create_ah = Some(Self::create_ah);
        ops.create_user_ah = Some(Self::create_ah);
        ops.destroy_ah = Some(Self::destroy_ah);
        ops.attach_mcast = Some(Self::attach_mcast);
        ops.detach_mcast = Some(Self::detach_mcast);
    }

    /// # Safety
    ///
    /// `ib` must be a device created by a `DeviceSet<T>` whose data is live.
    unsafe fn dev<'a>(ib: *mut bindings::ib_device) -> &'a Device<T> {
        // SAFETY: Per the safety requirements (see `Device::from_raw`).
        unsafe { Device::<T>::from_raw(ib) }
    }

    unsafe extern "C" fn alloc_ucontext(
        uctx: *mut bindings::ib_ucontext,
        ud: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            no_input(ud)?;
            // SAFETY: The core passes a context of a device with this table.
            let dev = unsafe { Self::dev((*uctx).device) };
            let mut u = udata(ud).ok_or(EINVAL)?;
            let data = T::alloc_ucontext(dev, &mut u)?;
            // SAFETY: The core allocated `size_ib_ucontext` bytes for it.
            unsafe { Obj::init(uctx, data) };
            Ok(0)
        })
    }

    unsafe extern "C" fn dealloc_ucontext(uctx: *mut bindings::ib_ucontext) {
        // SAFETY: Initialised by `alloc_ucontext`; this is the last use.
        unsafe { Obj::<bindings::ib_ucontext, T::Ucontext>::drop_data(uctx) }
    }

    unsafe extern "C" fn alloc_pd(pd: *mut bindings::ib_pd, ud: *mut bindings::ib_udata) -> c_int {
        from_result(|| {
            no_input(ud)?;
            // SAFETY: The core passes a PD of a device with this table.
            let dev = unsafe { Self::dev((*pd).device) };
            let data = T::alloc_pd(dev)?;
            // SAFETY: The core allocated `size_ib_pd` bytes for it.
            unsafe { Obj::init(pd, data) };
            Ok(0)
        })
    }

    unsafe extern "C" fn dealloc_pd(
        pd: *mut bindings::ib_pd,
        _ud: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: Initialised by `alloc_pd`; the core destroys a PD last.
        unsafe { Obj::<bindings::ib_pd, T::Pd>::drop_data(pd) };
        0
    }

    unsafe extern "C" fn create_cq(
        cq: *mut bindings::ib_cq,
        attr: *const bindings::ib_cq_init_attr,
        _attrs: *mut bindings::uverbs_attr_bundle,
    ) -> c_int {
        from_result(|| {
            // SAFETY: The core passes valid pointers.
            let (dev, cqe, flags) =
                unsafe { (Self::dev((*cq).device), (*attr).cqe, (*attr).flags) };
            if flags != 0 {
                return Err(eopnotsupp());
            }
            let granted = T::cq_size(dev, cqe)?;
            let events = Arc::new(
                CqEvents {
                    cq: KBox::pin_init(
                        new_spinlock_bh!(Target(cq), "metaroce_cq_events"),
                        GFP_KERNEL_ACCOUNT,
                    )?,
                },
                GFP_KERNEL_ACCOUNT,
            )?;
            let resizing =
                KBox::pin_init(new_mutex!((), "metaroce_cq_resize"), GFP_KERNEL_ACCOUNT)?;
            let data = T::create_cq(dev, granted, events.clone())?;
            // SAFETY: `cq` is valid; the core reads back the granted size.
            unsafe { (*cq).cqe = granted as c_int };
            // SAFETY: The core allocated `size_ib_cq` bytes for it.
            unsafe {
                Obj::init(
                    cq,
                    CqData {
                        events,
                        resizing,
                        data,
                    },
                )
            };
            Ok(0)
        })
    }

    unsafe extern "C" fn destroy_cq(
        cq: *mut bindings::ib_cq,
        _ud: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: Initialised by `create_cq`; the core destroys a CQ only when
        // no QP uses it.
        let obj = unsafe { CqObj::<T>::from_raw(cq) };
        obj.events.cq.lock().0 = core::ptr::null_mut();
        T::destroy_cq(&obj.data.data);
        // SAFETY: Not used after this.
        unsafe { CqObj::<T>::drop_data(cq) };
        0
    }

    unsafe extern "C" fn resize_user_cq(
        cq: *mut bindings::ib_cq,
        cqe: c_uint,
        ud: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            no_input(ud)?;
            // SAFETY: The core passes a CQ of a device with this table,
            // initialised by `create_cq` (uverbs holds its object for the
            // call; polls may run beside it, which the driver's lock orders).
            let (dev, obj) = unsafe { (Self::dev((*cq).device), CqObj::<T>::from_raw(cq)) };
            let granted = T::cq_size(dev, cqe)?;
            let _one_at_a_time = obj.data.resizing.lock();
            T::resize_cq(&obj.data.data, granted)?;
            // SAFETY: `cq` is valid; uverbs reads the new size back (after
            // this returns: a resize racing it may have written its own).
            unsafe { (*cq).cqe = granted as c_int };
            Ok(0)
        })
    }

    unsafe extern "C" fn poll_cq(
        cq: *mut bindings::ib_cq,
        n: c_int,
        wc: *mut bindings::ib_wc,
    ) -> c_int {
        // SAFETY: Initialised by `create_cq`.
        let obj = unsafe { CqObj::<T>::from_raw(cq) };
        let mut got = 0;
        while got < n {
            let Some(c) = T::poll_one(&obj.data.data) else {
                break;
            };
            // SAFETY: `wc` has room for `n` entries.
            let w = unsafe { &mut *wc.add(got as usize) };
            write_wc(w, &c);
            got += 1;
        }
        got
    }

    unsafe extern "C" fn req_notify_cq(
        cq: *mut bindings::ib_cq,
        flags: bindings::ib_cq_notify_flags,
    ) -> c_int {
        // SAFETY: Initialised by `create_cq`.
        let obj = unsafe { CqObj::<T>::from_raw(cq) };
        let solicited = flags & bindings::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK
            == bindings::ib_cq_notify_flags_IB_CQ_SOLICITED;
        let pending = T::req_notify(&obj.data.data, solicited);
        if pending && flags & bindings::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS != 0 {
            1
        } else {
            0
        }
    }

    unsafe extern "C" fn reg_user_mr(
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
    unsafe extern "C" fn get_dma_mr(
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
    unsafe extern "C" fn alloc_mr(
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
    unsafe extern "C" fn map_mr_sg(
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
    unsafe extern "C" fn set_page(mr: *mut bindings::ib_mr, addr: u64) -> c_int {
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
    unsafe extern "C" fn rereg_user_mr(
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

    unsafe extern "C" fn dereg_mr(mr: *mut bindings::ib_mr, _ud: *mut bindings::ib_udata) -> c_int {
        let obj = mr.cast::<MrObj<T>>();
        // SAFETY: Allocated by `reg_user_mr` with `KBox`; the core deregisters once.
        let obj = unsafe { KBox::from_raw(obj) };
        T::dereg_mr(&obj.data.data);
        drop(obj);
        0
    }

    /// `create_ah` and `create_user_ah`: RoCE address handles whose
    /// destination GID maps an IPv4 address.
    unsafe extern "C" fn create_ah(
        ah: *mut bindings::ib_ah,
        init: *mut bindings::rdma_ah_init_attr,
        ud: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            no_input(ud)?;
            // SAFETY: The core passes a new AH of a device with this table
            // and valid attributes.
            let (dev, a) = unsafe { (Self::dev((*ah).device), &*(*init).ah_attr) };
            if a.type_ != bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE
                || u32::from(a.ah_flags) & bindings::ib_ah_flags_IB_AH_GRH == 0
            {
                return Err(EINVAL);
            }
            // SAFETY: Reading the GID union's raw bytes.
            let gid = unsafe { a.grh.dgid.raw };
            let attr = AhAttr { ip: IpAddr(gid) };
            T::create_ah(dev, &attr)?;
            // SAFETY: The core allocated `size_ib_ah` bytes for it.
            unsafe { Obj::init(ah, attr) };
            Ok(0)
        })
    }

    unsafe extern "C" fn destroy_ah(ah: *mut bindings::ib_ah, _flags: u32) -> c_int {
        // SAFETY: Initialised by `create_ah`; this is the last use.
        unsafe { Obj::<bindings::ib_ah, AhAttr>::drop_data(ah) };
        0
    }

    /// `attach_mcast`: a UD QP joins the multicast group of `gid` (the LID
    /// means nothing on Ethernet). The core has checked that the QP is UD
    /// and the GID a multicast one.
    unsafe extern "C" fn attach_mcast(
        qp: *mut bindings::ib_qp,
        gid: *mut bindings::ib_gid,
        _lid: u16,
    ) -> c_int {
        // SAFETY: The core's arguments, passed on.
        unsafe { Self::mcast(qp, gid, T::attach_mcast) }
    }

    /// `detach_mcast`: the QP leaves the group of `gid`.
    unsafe extern "C" fn detach_mcast(
        qp: *mut bindings::ib_qp,
        gid: *mut bindings::ib_gid,
        _lid: u16,
    ) -> c_int {
        // SAFETY: The core's arguments, passed on.
        unsafe { Self::mcast(qp, gid, T::detach_mcast) }
    }

    /// # Safety
    ///
    /// `qp` was initialised by `create_qp`; `gid` is valid for reads.
    unsafe fn mcast(
        qp: *mut bindings::ib_qp,
        gid: *mut bindings::ib_gid,
        op: fn(&T::Qp, IpAddr) -> Result,
    ) -> c_int {
        // SAFETY: As the caller promises.
        let (obj, gid) = unsafe { (Obj::<bindings::ib_qp, T::Qp>::from_raw(qp), (*gid).raw) };
        from_result(|| op(&obj.data, IpAddr(gid)).map(|()| 0))
    }

    unsafe extern "C" fn create_qp(
        qp: *mut bindings::ib_qp,
        init: *mut bindings::ib_qp_init_attr,
        ud: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            no_input(ud)?;
            // SAFETY: The core passes valid pointers; `pd` and the CQs belong to
            // this device and outlive the QP (the core holds references).
            // An SRQ given is of this device too, and outlives the QP
            // (the core counts its users and refuses to destroy it first).
            let (dev, init_ref, pd, scq, rcq, srq, user) = unsafe {
                let i = &*init;
                if i.send_cq.is_null() || i.recv_cq.is_null() {
                    return Err(EINVAL);
                }
                (
                    Self::dev((*qp).device),
                    &mut *init,
                    &Obj::<bindings::ib_pd, T::Pd>::from_raw((*qp).pd).data,
                    &CqObj::<T>::from_raw(i.send_cq).data.data,
                    &CqObj::<T>::from_raw(i.recv_cq).data.data,
                    (!i.srq.is_null()).then(|| &SrqObj::<T>::from_raw(i.srq).data.data),
                    !(*qp).uobject.is_null() || !ud.is_null(),
                )
            };
            if init_ref.create_flags != 0 {
                return Err(eopnotsupp());
            }
            let c = &init_ref.cap;
            let mut req = QpCreate::<T::Pd, T::Cq, T::Srq> {
                qp_type: QpType::from_raw(init_ref.qp_type),
                caps: QpCaps {
                    max_send_wr: c.max_send_wr,
                    max_recv_wr: c.max_recv_wr,
                    max_send_sge: c.max_send_sge,
                    max_recv_sge: c.max_recv_sge,
                    max_inline_data: c.max_inline_data,
                },
                sig_all: init_ref.sq_sig_type == bindings::ib_sig_type_IB_SIGNAL_ALL_WR,
                pd,
                send_cq: scq,
                recv_cq: rcq,
                srq,
                user,
                kernel: (!user).then_some(KernelMemory(())),
                id: QpId(qp),
            };
            let (data, qpn) = T::create_qp(dev, &mut req)?;
            let c = &mut init_ref.cap;
            c.max_send_wr = req.caps.max_send_wr;
            c.max_recv_wr = req.caps.max_recv_wr;
            c.max_send_sge = req.caps.max_send_sge;
            c.max_recv_sge = req.caps.max_recv_sge;
            c.max_inline_data = req.caps.max_inline_data;
            // SAFETY: `qp` is valid; the core allocated `size_ib_qp` bytes.
            unsafe {
                (*qp).qp_num = qpn;
                Obj::init(qp, data);
            }
            Ok(0)
        })
    }

    unsafe extern "C" fn modify_qp(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        mask: c_int,
        ud: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            no_input(ud)?;
            // SAFETY: Initialised by `create_qp`; `attr` is valid.
            let (obj, a) = unsafe { (Obj::<bindings::ib_qp, T::Qp>::from_raw(qp), &*attr) };
            let m = mask as u32;
            let has = |bit: u32| m & bit != 0;
            let mut q = QpModify {
                mask: m,
                // SAFETY: `qp` is valid.
                qp_type: QpType::from_raw(unsafe { (*qp).qp_type }).ok_or(EINVAL)?,
                ..Default::default()
            };
            if has(bindings::ib_qp_attr_mask_IB_QP_QKEY) {
                q.qkey = Some(a.qkey);
            }
            if has(bindings::ib_qp_attr_mask_IB_QP_STATE) {
                q.state = Some(QpState::from_raw(a.qp_state).ok_or(EINVAL)?);
            }
            if has(bindings::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS) {
                q.access = Some(Access(a.qp_access_flags as u32));
            }
            if has(bindings::ib_qp_attr_mask_IB_QP_PATH_MTU) {
                q.path_mtu = Some(match a.path_mtu {
                    bindings::ib_mtu_IB_MTU_256 => 256,
                    bindings::ib_mtu_IB_MTU_512 => 512,
                    bindings::ib_mtu_IB_MTU_1024 => 1024,
                    bindings::ib_mtu_IB_MTU_2048 => 2048,
                    bindings::ib_mtu_IB_MTU_4096 => 4096,
                    _ => return Err(EINVAL),
                });
            }
            if has(bindings::ib_qp_attr_mask_IB_QP_DEST_QPN) {
                q.dest_qp = Some(a.dest_qp_num);
            }
            if has(bindings::ib_qp_attr_mask_IB_QP_RQ_PSN) {
                q.rq_psn = Some(a.rq_psn);
            }
            if has(bindings::ib_qp_attr_mask_IB_QP_SQ_PSN) {
                q.sq_psn = Some(a.sq_psn);
            }
            if has(bindings::ib_qp_attr_mask_IB_QP_MAX_QP_RD_ATOMIC) {
                q.max_rd_atomic = Some(a.max_rd_atomic);
            }
            if has(bindings::ib_qp_attr_mask_IB_QP_MAX_DEST_RD_ATOMIC) {
                q.max_dest_rd_atomic = Some(a.max_dest_rd_atomic);
            }
            if has(bindings::ib_qp_attr_mask_IB_QP_TIMEOUT) {
                q.timeout = Some(a.timeout);
            }
            if has(bindings::ib_qp_attr_mask_IB_QP_RETRY_CNT) {
                q.retry_cnt = Some(a.retry_cnt);
            }
            if has(bindings::ib_qp_attr_mask_IB_QP_RNR_RETRY) {
                q.rnr_retry = Some(a.rnr_retry);
            }
            if has(bindings::ib_qp_attr_mask_IB_QP_MIN_RNR_TIMER) {
                q.min_rnr_timer = Some(a.min_rnr_timer);
            }
            if has(bindings::ib_qp_attr_mask_IB_QP_AV) {
                // SAFETY: Reading the GID union's raw bytes.
                let gid = unsafe { a.ah_attr.grh.dgid.raw };
                q.dest_ip = Some(IpAddr(gid));
            }
            T::modify_qp(&obj.data, &q)?;
            Ok(0)
        })
    }

    unsafe extern "C" fn query_qp(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        _mask: c_int,
        init: *mut bindings::ib_qp_init_attr,
    ) -> c_int {
        from_result(|| {
            // SAFETY: Initialised by `create_qp`; `attr` and `init` are valid
            // for writes. uverbs allocates them without zeroing and copies
            // most fields back to user space, those this device has no value
            // for too (Q_Key, P_Key index, address vectors, ...): they are
            // zeroed here, or they would carry old kernel heap to the caller.
            let (obj, a, i) = unsafe {
                core::ptr::write_bytes(attr, 0, 1);
                core::ptr::write_bytes(init, 0, 1);
                (
                    Obj::<bindings::ib_qp, T::Qp>::from_raw(qp),
                    &mut *attr,
                    &mut *init,
                )
            };
            let q = T::query_qp(&obj.data);
            a.qp_state = q.state.to_raw();
            a.cur_qp_state = a.qp_state;
            a.qp_access_flags = q.access.0 as c_int;
            a.path_mtu = match q.path_mtu {
                256 => bindings::ib_mtu_IB_MTU_256,
                512 => bindings::ib_mtu_IB_MTU_512,
                1024 => bindings::ib_mtu_IB_MTU_1024,
                2048 => bindings::ib_mtu_IB_MTU_2048,
                _ => bindings::ib_mtu_IB_MTU_4096,
            };
            a.dest_qp_num = q.dest_qp;
            a.rq_psn = q.rq_psn;
            a.sq_psn = q.sq_psn;
            a.max_rd_atomic = q.max_rd_atomic;
            a.max_dest_rd_atomic = q.max_dest_rd_atomic;
            a.timeout = q.timeout;
            a.retry_cnt = q.retry_cnt;
            a.rnr_retry = q.rnr_retry;
            a.min_rnr_timer = q.min_rnr_timer;
            let caps = bindings::ib_qp_cap {
                max_send_wr: q.caps.max_send_wr,
                max_recv_wr: q.caps.max_recv_wr,
                max_send_sge: q.caps.max_send_sge,
                max_recv_sge: q.caps.max_recv_sge,
                max_inline_data: q.caps.max_inline_data,
                max_rdma_ctxs: 0,
            };
            a.cap = caps;
            i.cap = caps;
            i.qp_type = q.qp_type.to_raw();
            a.qkey = q.qkey;
            // IB_SIGNAL_ALL_WR is 0: a zeroed `init` would say "all".
            i.sq_sig_type = if q.sig_all {
                bindings::ib_sig_type_IB_SIGNAL_ALL_WR
            } else {
                bindings::ib_sig_type_IB_SIGNAL_REQ_WR
            };
            a.port_num = 1;
            i.port_num = 1;
            Ok(0)
        })
    }

    unsafe extern "C" fn destroy_qp(
        qp: *mut bindings::ib_qp,
        _ud: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: Initialised by `create_qp`.
        let obj = unsafe { Obj::<bindings::ib_qp, T::Qp>::from_raw(qp) };
        T::destroy_qp(&obj.data);
        // SAFETY: Not used after this.
        unsafe { Obj::<bindings::ib_qp, T::Qp>::drop_data(qp) };
        0
    }

    unsafe extern "C" fn post_send(
        qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_send_wr,
        bad: *mut *const bindings::ib_send_wr,
    ) -> c_int {
        // SAFETY: Initialised by `create_qp`; its type, PD, device and
        // user object (null for a kernel consumer's QP) are set.
        let (obj, ud, pd, kernel) = unsafe {
            (
                Obj::<bindings::ib_qp, T::Qp>::from_raw(qp),
                QpType::from_raw((*qp).qp_type).is_some_and(QpType::datagram),
                (*qp).pd,
                (*qp).uobject.is_null().then_some((*qp).device),
            )
        };
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: The chain is valid (the core or the ULP built it); on
            // a UD QP its requests are `ib_ud_wr`s.
            let r = unsafe { convert_send(cur, ud.then_some(pd), kernel) }
                .and_then(|w| T::post_send(&obj.data, &w));
            if let Err(e) = r {
                // SAFETY: `bad` is valid for writes.
                unsafe { *bad = cur };
                return e.to_errno();
            }
            // SAFETY: As above.
            cur = unsafe { (*cur).next };
        }
        0
    }

    unsafe extern "C" fn post_recv(
        qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_recv_wr,
        bad: *mut *const bindings::ib_recv_wr,
    ) -> c_int {
        // SAFETY: Initialised by `create_qp`.
        let obj = unsafe { Obj::<bindings::ib_qp, T::Qp>::from_raw(qp) };
        // SAFETY: The core passes a valid chain and `bad`.
        unsafe { post_recv_chain(wr, bad, |w| T::post_recv(&obj.data, w)) }
    }

    unsafe extern "C" fn create_srq(
        srq: *mut bindings::ib_srq,
        init: *mut bindings::ib_srq_init_attr,
        ud: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            no_input(ud)?;
            // SAFETY: The core passes valid pointers and set `device` and
            // `pd` (a PD of this device, which outlives the SRQ).
            let (dev, pd, init) = unsafe {
                (
                    Self::dev((*srq).device),
                    &Obj::<bindings::ib_pd, T::Pd>::from_raw((*srq).pd).data,
                    &mut *init,
                )
            };
            if init.srq_type != bindings::ib_srq_type_IB_SRQT_BASIC {
                return Err(eopnotsupp());
            }
            let mut attr = SrqAttr {
                max_wr: init.attr.max_wr,
                max_sge: init.attr.max_sge,
                limit: init.attr.srq_limit,
            };
            let events = Arc::new(
                SrqEvents {
                    srq: KBox::pin_init(
                        new_spinlock_bh!(Target(srq), "metaroce_srq_events"),
                        GFP_KERNEL_ACCOUNT,
                    )?,
                },
                GFP_KERNEL_ACCOUNT,
            )?;
            let data = T::create_srq(dev, pd, &mut attr, events.clone())?;
            // The core and uverbs read the granted sizes back.
            init.attr.max_wr = attr.max_wr;
            init.attr.max_sge = attr.max_sge;
            // SAFETY: The core allocated `size_ib_srq` bytes for it.
            unsafe { Obj::init(srq, SrqData { events, data }) };
            Ok(0)
        })
    }

    unsafe extern "C" fn modify_srq(
        srq: *mut bindings::ib_srq,
        attr: *mut bindings::ib_srq_attr,
        mask: bindings::ib_srq_attr_mask,
        ud: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            no_input(ud)?;
            let known =
                bindings::ib_srq_attr_mask_IB_SRQ_MAX_WR | bindings::ib_srq_attr_mask_IB_SRQ_LIMIT;
            if mask & !known != 0 {
                return Err(EINVAL);
            }
            // SAFETY: Initialised by `create_srq`; `attr` is valid.
            let (obj, a) = unsafe { (SrqObj::<T>::from_raw(srq), &*attr) };
            let m = SrqModify {
                max_wr: (mask & bindings::ib_srq_attr_mask_IB_SRQ_MAX_WR != 0).then_some(a.max_wr),
                limit: (mask & bindings::ib_srq_attr_mask_IB_SRQ_LIMIT != 0).then_some(a.srq_limit),
            };
            T::modify_srq(&obj.data.data, &m)?;
            Ok(0)
        })
    }

    unsafe extern "C" fn query_srq(
        srq: *mut bindings::ib_srq,
        attr: *mut bindings::ib_srq_attr,
    ) -> c_int {
        // SAFETY: Initialised by `create_srq`; `attr` is valid for writes.
        let (obj, out) = unsafe { (SrqObj::<T>::from_raw(srq), &mut *attr) };
        let a = T::query_srq(&obj.data.data);
        out.max_wr = a.max_wr;
        out.max_sge = a.max_sge;
        out.srq_limit = a.limit;
        0
    }

    unsafe extern "C" fn destroy_srq(
        srq: *mut bindings::ib_srq,
        _ud: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: Initialised by `create_srq`; the core destroys an SRQ only
        // when no QP uses it.
        let obj = unsafe { SrqObj::<T>::from_raw(srq) };
        obj.events.srq.lock().0 = core::ptr::null_mut();
        T::destroy_srq(&obj.data.data);
        // SAFETY: Not used after this.
        unsafe { SrqObj::<T>::drop_data(srq) };
        0
    }

    unsafe extern "C" fn post_srq_recv(
        srq: *mut bindings::ib_srq,
        wr: *const bindings::ib_recv_wr,
        bad: *mut *const bindings::ib_recv_wr,
    ) -> c_int {
        // SAFETY: Initialised by `create_srq`.
        let obj = unsafe { SrqObj::<T>::from_raw(srq) };
        // SAFETY: The core passes a valid chain and `bad`.
        unsafe { post_recv_chain(wr, bad, |w| T::post_srq_recv(&obj.data.data, w)) }
    }
}

/// Posts each receive of the chain `wr` with `post`; on the first failure
/// points `bad` at it and returns its error.
///
/// # Safety
///
/// `wr` must be a valid chain of receive work requests (null-terminated) and
/// `bad` valid for writes.
unsafe fn post_recv_chain(
    wr: *const bindings::ib_recv_wr,
    bad: *mut *const bindings::ib_recv_wr,
    post: impl Fn(&RecvWr) -> Result,
) -> c_int {
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: The chain is valid (per the safety requirements).
        let w = unsafe { &*cur };
        let r = sges(w.sg_list, w.num_sge).and_then(|(sge, num_sge)| {
            post(&RecvWr {
                // SAFETY: `wr_id` is the union member verbs users set.
                wr_id: unsafe { w.__bindgen_anon_1.wr_id },
                sge,
                num_sge,
            })
        });
        if let Err(e) = r {
            // SAFETY: `bad` is valid for writes.
            unsafe { *bad = cur };
            return e.to_errno();
        }
        cur = w.next;
    }
    0
}

fn sges(list: *const bindings::ib_sge, n: c_int) -> Result<([Sge; MAX_SGE], usize)> {
    let n = usize::try_from(n).map_err(|_| EINVAL)?;
    if n > MAX_SGE {
        return Err(EINVAL);
    }
    let mut out = [Sge::default(); MAX_SGE];
    for (i, o) in out.iter_mut().enumerate().take(n) {
        // SAFETY: The work request names `n` valid elements.
        let s = unsafe { &*list.add(i) };
        *o = Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
    }
    Ok((out, n))
}

/// # Safety
///
/// `wr` must be a valid send work request, inside the larger structure its
/// opcode implies (`ib_rdma_wr`, `ib_atomic_wr`, and from a kernel
/// consumer `ib_reg_wr`), or inside an `ib_ud_wr` when `ud_pd` is given
/// (the request is for a UD QP of that PD). `kernel` is the QP's device if
/// a kernel consumer posts it: only a kernel consumer's REG_MR is read as an
/// `ib_reg_wr` (uverbs refuses the opcode from users today; were it to pass
/// one on, it would be in a plain, shorter `ib_send_wr`).
unsafe fn convert_send(
    wr: *const bindings::ib_send_wr,
    ud_pd: Option<*mut bindings::ib_pd>,
    kernel: Option<*mut bindings::ib_device>,
) -> Result<SendWr> {
    // SAFETY: Valid per the safety requirements.
    let w = unsafe { &*wr };
    let ud = match ud_pd {
        None => None,
        // A UD QP sends datagrams, nothing else; only those are read as
        // an `ib_ud_wr` (a REG_MR's `ib_reg_wr` is shorter).
        Some(_)
            if w.opcode != bindings::ib_wr_opcode_IB_WR_SEND
                && w.opcode != bindings::ib_wr_opcode_IB_WR_SEND_WITH_IMM =>
        {
            return Err(EINVAL);
        }
        Some(pd) => {
            // SAFETY: Per the safety requirements, inside an `ib_ud_wr`.
            let u = unsafe { &*wr.cast::<bindings::ib_ud_wr>() };
            // An address handle of this device (uverbs looks it up among
            // the caller's; a kernel consumer passes its own), made in the
            // QP's PD, as verbs requires.
            // SAFETY: A non-null AH given with a request is live for the call.
            if u.ah.is_null() || unsafe { (*u.ah).pd } != pd {
                return Err(EINVAL);
            }
            // SAFETY: Initialised by `create_ah` (an AH of this device).
            let ah = unsafe { Obj::<bindings::ib_ah, AhAttr>::from_raw(u.ah).data };
            Some(UdDest {
                ah,
                qpn: u.remote_qpn,
                qkey: u.remote_qkey,
            })
        }
    };
    let (sge, num_sge) = sges(w.sg_list, w.num_sge)?;
    // SAFETY: `imm_data` is the union member for the immediate opcodes.
    let imm = unsafe { w.ex.imm_data };
    let rdma = || {
        // SAFETY: RDMA opcodes come inside an `ib_rdma_wr` (first field `wr`).
        let r = unsafe { &*wr.cast::<bindings::ib_rdma_wr>() };
        (r.remote_addr, r.rkey)
    };
    let atomic = || {
        // SAFETY: Atomic opcodes come inside an `ib_atomic_wr`.
        unsafe { &*wr.cast::<bindings::ib_atomic_wr>() }
    };
    let op = match w.opcode {
        bindings::ib_wr_opcode_IB_WR_SEND => SendOp::Send,
        bindings::ib_wr_opcode_IB_WR_SEND_WITH_IMM => SendOp::SendImm(imm),
        bindings::ib_wr_opcode_IB_WR_RDMA_WRITE => {
            let (addr, rkey) = rdma();
            SendOp::Write { addr, rkey }
        }
        bindings::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM => {
            let (addr, rkey) = rdma();
            SendOp::WriteImm { addr, rkey, imm }
        }
        bindings::ib_wr_opcode_IB_WR_RDMA_READ => {
            let (addr, rkey) = rdma();
            SendOp::Read { addr, rkey }
        }
        bindings::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP => {
            let a = atomic();
            SendOp::CmpSwap {
                addr: a.remote_addr,
                rkey: a.rkey,
                compare: a.compare_add,
                swap: a.swap,
            }
        }
        bindings::ib_wr_opcode_IB_WR_ATOMIC_FETCH_AND_ADD => {
            let a = atomic();
            SendOp::FetchAdd {
                addr: a.remote_addr,
                rkey: a.rkey,
                add: a.compare_add,
            }
        }
        bindings::ib_wr_opcode_IB_WR_SEND_WITH_INV => SendOp::SendInv {
            // SAFETY: `invalidate_rkey` is the union member for this opcode.
            rkey: unsafe { w.ex.invalidate_rkey },
        },
        bindings::ib_wr_opcode_IB_WR_LOCAL_INV if kernel.is_some() => SendOp::LocalInv {
            // SAFETY: As above.
            key: unsafe { w.ex.invalidate_rkey },
        },
        bindings::ib_wr_opcode_IB_WR_REG_MR if kernel.is_some() => {
            // SAFETY: A kernel consumer's REG_MR comes inside an `ib_reg_wr`.
            let r = unsafe { &*wr.cast::<bindings::ib_reg_wr>() };
            if r.mr.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: A non-null region given with a request is the
            // consumer's, live for the call; only its device, key, and the
            // address and length `map_mr_sg` set (or it set since) are read.
            let (dev, lkey, iova, length) =
                unsafe { ((*r.mr).device, (*r.mr).lkey, (*r.mr).iova, (*r.mr).length) };
            // A region of another device is not ours to register; the
            // driver finds ours by the key's block (which must be this
            // region's: the address and length are) and checks its domain.
            if Some(dev) != kernel || (lkey ^ r.key) & !0xff != 0 {
                return Err(EINVAL);
            }
            SendOp::RegMr {
                key: r.key,
                access: Access(r.access as u32),
                iova,
                length,
            }
        }
        _ => return Err(EINVAL),
    };
    let flags = w.send_flags as u32;
    Ok(SendWr {
        // SAFETY: `wr_id` is the union member verbs users set.
        wr_id: unsafe { w.__bindgen_anon_1.wr_id },
        op,
        sge,
        num_sge,
        signaled: flags & bindings::ib_send_flags_IB_SEND_SIGNALED as u32 != 0,
        inline: flags & bindings::ib_send_flags_IB_SEND_INLINE as u32 != 0,
        fence: flags & bindings::ib_send_flags_IB_SEND_FENCE as u32 != 0,
        solicited: flags & bindings::ib_send_flags_IB_SEND_SOLICITED as u32 != 0,
        ud,
    })
}

fn write_wc(w: &mut bindings::ib_wc, c: &Wc) {
    *w = bindings::ib_wc::default();
    w.__bindgen_anon_1.wr_id = c.wr_id;
    w.status = match c.status {
        WcStatus::Success => bindings::ib_wc_status_IB_WC_SUCCESS,
        WcStatus::LocLenErr => bindings::ib_wc_status_IB_WC_LOC_LEN_ERR,
        WcStatus::LocProtErr => bindings::ib_wc_status_IB_WC_LOC_PROT_ERR,
        WcStatus::WrFlushErr => bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR,
        WcStatus::RemAccessErr => bindings::ib_wc_status_IB_WC_REM_ACCESS_ERR,
        WcStatus::RemInvReqErr => bindings::ib_wc_status_IB_WC_REM_INV_REQ_ERR,
        WcStatus::RemOpErr => bindings::ib_wc_status_IB_WC_REM_OP_ERR,
        WcStatus::RetryExcErr => bindings::ib_wc_status_IB_WC_RETRY_EXC_ERR,
        WcStatus::LocQpOpErr => bindings::ib_wc_status_IB_WC_LOC_QP_OP_ERR,
    };
    w.opcode = match c.opcode {
        WcOpcode::Send => bindings::ib_wc_opcode_IB_WC_SEND,
        WcOpcode::RdmaWrite => bindings::ib_wc_opcode_IB_WC_RDMA_WRITE,
        WcOpcode::RdmaRead => bindings::ib_wc_opcode_IB_WC_RDMA_READ,
        WcOpcode::CompSwap => bindings::ib_wc_opcode_IB_WC_COMP_SWAP,
        WcOpcode::FetchAdd => bindings::ib_wc_opcode_IB_WC_FETCH_ADD,
        WcOpcode::Recv => bindings::ib_wc_opcode_IB_WC_RECV,
        WcOpcode::RecvRdmaWithImm => bindings::ib_wc_opcode_IB_WC_RECV_RDMA_WITH_IMM,
        WcOpcode::RegMr => bindings::ib_wc_opcode_IB_WC_REG_MR,
        WcOpcode::LocalInv => bindings::ib_wc_opcode_IB_WC_LOCAL_INV,
    };
    w.byte_len = c.byte_len;
    w.qp = c.qp.0;
    w.src_qp = c.src_qp;
    w.port_num = 1;
    w.network_hdr_type = bindings::rdma_network_type_RDMA_NETWORK_IPV4 as u8;
    if let Some(imm) = c.imm {
        w.ex.imm_data = imm;
        w.wc_flags |= bindings::ib_wc_flags_IB_WC_WITH_IMM as c_int;
    }
    if c.grh {
        w.wc_flags |= bindings::ib_wc_flags_IB_WC_GRH as c_int;
    }
    if let Some(key) = c.invalidated {
        w.ex.invalidate_rkey = key;
        w.wc_flags |= bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE as c_int;
    }
    // No IB_WC_WITH_NETWORK_HDR_TYPE: it matters for UD and GSI only, and
    // uverbs copies `wc_flags` as they are, where bit 6 means
    // IBV_WC_TM_DATA_VALID (tag matching) to libibverbs.
}
