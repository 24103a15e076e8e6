// SPDX-License-Identifier: GPL-2.0

//! The driver's attributes of its verbs objects in `rdma resource show
//! ... -dd` (the RDMA core's resource tracking, `fill_res_*_entry`): the
//! core writes its own attributes of the object, then the driver adds a
//! table of named values ([`ResAttrs`]) that the rdma tool prints after
//! them.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{
    bindings,
    ops::{DeviceOps, ResAttrs},
    verbs_adapter::{CqObj, MrObj, Obj},
};
use core::marker::PhantomData;
use kernel::{error::code::EMSGSIZE, ffi::c_int, prelude::*};

/// The resource-tracking operations, filled into `ib_device_ops`.
pub(super) struct ResAdapter<T: DeviceOps>(PhantomData<T>);

// Each `unsafe extern "C"` function here is the `ib_device_ops` operation of
// its name, called by the core's netlink handler in process context with a
// reference on the object held, on a device of a `DeviceSet<T>`.
#[allow(clippy::missing_safety_doc)]
impl<T: DeviceOps> ResAdapter<T> {
    /// Installs the operations the driver implements.
    pub(super) fn fill(ops: &mut bindings::ib_device_ops) {
        if T::HAS_QP_ATTRS {
            ops.fill_res_qp_entry = Some(Self::fill_res_qp_entry);
        }
        if T::HAS_CQ_ATTRS {
            ops.fill_res_cq_entry = Some(Self::fill_res_cq_entry);
        }
        if T::HAS_MR_ATTRS {
            ops.fill_res_mr_entry = Some(Self::fill_res_mr_entry);
        }
    }

    /// Writes the driver's table of attributes into `msg` with `fill`.
    ///
    /// # Safety
    ///
    /// `msg` is the reply the core is building, valid for the call.
    unsafe fn table(
        msg: *mut bindings::sk_buff,
        fill: impl FnOnce(&mut ResAttrs<'_>) -> Result,
    ) -> c_int {
        // SAFETY: `msg` is valid (the caller's contract). The driver's
        // attributes go in a nested table, as the rdma tool expects them.
        let table = unsafe {
            bindings::mr_nla_nest_start(
                msg,
                bindings::rdma_nldev_attr_RDMA_NLDEV_ATTR_DRIVER as c_int,
            )
        };
        if table.is_null() {
            return EMSGSIZE.to_errno();
        }
        let mut out = ResAttrs {
            skb: msg,
            _lent: PhantomData,
        };
        let r = fill(&mut out);
        // SAFETY: `table` was opened on `msg` above and is closed once,
        // kept (with all it holds) or dropped whole.
        unsafe {
            if r.is_ok() {
                bindings::mr_nla_nest_end(msg, table);
            } else {
                bindings::mr_nla_nest_cancel(msg, table);
            }
        }
        // `EMSGSIZE` (a full message): the core sends it and asks again
        // for the rest; any other error ends the request.
        match r {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        }
    }

    unsafe extern "C" fn fill_res_qp_entry(
        msg: *mut bindings::sk_buff,
        qp: *mut bindings::ib_qp,
    ) -> c_int {
        // SAFETY: The core passes a QP of this device that the resource
        // tracker holds: added after our create succeeded (its data
        // initialised), and taken out (every holder waited for) before our
        // destroy runs. Our destroy operations never fail, so an entry is
        // never put back after its data was dropped.
        let obj = unsafe { Obj::<bindings::ib_qp, T::Qp>::from_raw(qp) };
        // SAFETY: `msg` is the reply being built.
        unsafe { Self::table(msg, |out| T::qp_attrs(obj, out)) }
    }

    unsafe extern "C" fn fill_res_cq_entry(
        msg: *mut bindings::sk_buff,
        cq: *mut bindings::ib_cq,
    ) -> c_int {
        // SAFETY: As for a QP.
        let obj = unsafe { CqObj::<T>::from_raw(cq) };
        // SAFETY: `msg` is the reply being built.
        unsafe { Self::table(msg, |out| T::cq_attrs(obj.data(), out)) }
    }

    unsafe extern "C" fn fill_res_mr_entry(
        msg: *mut bindings::sk_buff,
        mr: *mut bindings::ib_mr,
    ) -> c_int {
        // SAFETY: As for a QP (an MR is tracked from its registration to
        // its deregistration).
        let obj = unsafe { MrObj::<T>::from_raw(mr) };
        // SAFETY: `msg` is the reply being built.
        unsafe { Self::table(msg, |out| T::mr_attrs(obj, out)) }
    }
}
