// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues: create, modify, query, destroy and posting.

use super::{post_recv_chain, Obj, SrqData, SrqObj, VerbsAdapter};
use crate::{
    abstractions::{
        bindings,
        ops::{no_input, DeviceOps, SrqEvents, Target},
        types::{eopnotsupp, SrqAttr, SrqModify},
    },
    new_spinlock_bh,
};
use kernel::{
    error::{code::*, from_result},
    ffi::c_int,
    prelude::*,
    sync::Arc,
};

// Each `unsafe extern "C"` function here is the `ib_device_ops` operation of its
// name (set in the table in `verbs_adapter.rs`): its contract is the RDMA
// core's for that operation, on a device of a `DeviceSet<T>`.
#[allow(clippy::missing_safety_doc)]
impl<T: DeviceOps> VerbsAdapter<T> {
    pub(super) unsafe extern "C" fn create_srq(
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

    pub(super) unsafe extern "C" fn modify_srq(
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

    pub(super) unsafe extern "C" fn query_srq(
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

    pub(super) unsafe extern "C" fn destroy_srq(
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

    pub(super) unsafe extern "C" fn post_srq_recv(
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
