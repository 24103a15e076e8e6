// SPDX-License-Identifier: GPL-2.0

//! The verbs operations of `ib_device_ops`, bridged to a [`DeviceOps`]
//! implementation: the operations table, user contexts, protection domains,
//! address handles and multicast here; completion queues (`cq`), memory
//! regions (`mr`), queue pairs (`qp`) and shared receive queues (`srq`) in
//! the files of their name below.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! The RDMA core allocates contexts, PDs, CQs and QPs itself, with room for the
//! driver's data after the core's structure ([`Obj`]); the driver allocates
//! memory regions. The adapter functions here convert the C structures to the
//! plain Rust types of `types.rs` and back, so the driver never sees a raw
//! pointer.

mod cq;
mod mr;
mod qp;
mod srq;

use super::{
    bindings,
    ops::{no_input, udata, CqEvents, Device, DeviceOps, SrqEvents},
    ring::{self, CqRingMapping},
    types::{AhAttr, IpAddr, RecvWr, Sge, MAX_SGE},
};
use core::ops::Deref;
use kernel::{
    error::{code::*, from_result},
    ffi::c_int,
    prelude::*,
    sync::{Arc, Mutex},
    types::Opaque,
};
use mr::Stage;

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
    /// The mapping of the ring shared with the process, if the CQ has one
    /// (dropped with the CQ, which removes its `mmap()` offset). Its lock is
    /// held across a resize and the write of the size it granted, so that
    /// resizes of one CQ run one at a time and `cqe` is the ring's.
    ring: Pin<KBox<Mutex<Option<CqRingMapping>>>>,
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
        ops.mmap = Some(ring::mmap);
        ops.mmap_free = Some(ring::mmap_free);
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
