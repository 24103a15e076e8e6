// SPDX-License-Identifier: GPL-2.0

//! Completion queues: create, destroy, resize, poll (the `ib_wc` written
//! from the driver's `Wc`) and arming.

use super::{CqData, CqObj, Obj, VerbsAdapter};
use crate::{
    abstractions::{
        bindings,
        ops::{no_input, CqEvents, DeviceOps, Target},
        types::{eopnotsupp, Wc, WcOpcode, WcStatus},
    },
    new_spinlock_bh,
};
use kernel::{
    error::from_result,
    ffi::{c_int, c_uint},
    new_mutex,
    prelude::*,
    sync::Arc,
};

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
        WcStatus::RnrRetryExcErr => bindings::ib_wc_status_IB_WC_RNR_RETRY_EXC_ERR,
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

// Each `unsafe extern "C"` function here is the `ib_device_ops` operation of its
// name (set in the table in `verbs_adapter.rs`): its contract is the RDMA
// core's for that operation, on a device of a `DeviceSet<T>`.
#[allow(clippy::missing_safety_doc)]
impl<T: DeviceOps> VerbsAdapter<T> {
    pub(super) unsafe extern "C" fn create_cq(
        cq: *mut bindings::ib_cq,
        attr: *const bindings::ib_cq_init_attr,
        attrs: *mut bindings::uverbs_attr_bundle,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `attrs` is null (a kernel caller) or the call's valid
            // bundle; the helper only takes the address of its member.
            no_input(unsafe { bindings::mr_attrs_udata(attrs) })?;
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

    pub(super) unsafe extern "C" fn destroy_cq(
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

    pub(super) unsafe extern "C" fn resize_user_cq(
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

    pub(super) unsafe extern "C" fn poll_cq(
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

    pub(super) unsafe extern "C" fn req_notify_cq(
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
}
