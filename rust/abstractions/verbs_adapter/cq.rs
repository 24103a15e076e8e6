// SPDX-License-Identifier: GPL-2.0

//! Completion queues: create, destroy, resize, poll (the `ib_wc` written
//! from the driver's `Wc`) and arming.

use super::{CqData, CqObj, Obj, VerbsAdapter};
use crate::{
    abstractions::{
        bindings,
        ops::{no_input, udata, CqEvents, DeviceOps, Target},
        ring::{CqRingMapping, RESP},
        types::{eopnotsupp, Wc},
    },
    new_spinlock_bh,
};
use kernel::{
    error::{from_result, to_result},
    ffi::{c_int, c_uint},
    new_mutex,
    prelude::*,
    sync::Arc,
};

fn write_wc(w: &mut bindings::ib_wc, c: &Wc) {
    *w = bindings::ib_wc::default();
    w.__bindgen_anon_1.wr_id = c.wr_id;
    w.status = c.status.raw();
    w.opcode = c.opcode.raw();
    w.byte_len = c.byte_len;
    w.qp = c.qp.0;
    w.src_qp = c.src_qp;
    w.port_num = 1;
    w.network_hdr_type = bindings::rdma_network_type_RDMA_NETWORK_IPV4 as u8;
    let (flags, ex) = c.flags_ex();
    w.wc_flags = flags as c_int;
    // `imm_data` and `invalidate_rkey` share the word.
    w.ex.imm_data = ex;
}

/// Whether a CREATE_CQ's driver data asks for a shared ring
/// (`struct metaroce_create_cq_cmd`: none, or all of it with known flags and
/// zeros after). A request for one needs room for the response.
fn ring_requested(ud: *mut bindings::ib_udata) -> Result<bool> {
    let Some(u) = udata(ud) else {
        return Ok(false);
    };
    let len = u.in_len();
    if len == 0 {
        return Ok(false);
    }
    let mut cmd = bindings::metaroce_create_cq_cmd::default();
    let need = size_of::<bindings::metaroce_create_cq_cmd>();
    if len < need {
        return Err(EINVAL);
    }
    // SAFETY: `ud` is the call's driver data; `cmd` has room for `need`
    // bytes, which the helper copies from the user's request.
    to_result(unsafe { bindings::mr_ib_copy_from_udata((&raw mut cmd).cast(), ud, need) })?;
    // SAFETY: As above; the helper reads the request's bytes past `need`.
    let rest_clear = unsafe { bindings::mr_ib_is_udata_cleared(ud, need, len - need) };
    let ring = bindings::metaroce_cq_flags_METAROCE_CQ_RING;
    if cmd.flags & !ring != 0 || cmd.reserved != 0 || !rest_clear {
        return Err(EINVAL);
    }
    if cmd.flags & ring != 0 && u.out_len() < RESP {
        return Err(EINVAL);
    }
    Ok(cmd.flags & ring != 0)
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
            let ud = unsafe { bindings::mr_attrs_udata(attrs) };
            let want_ring = ring_requested(ud)?;
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
            let (mapping, ring) = if want_ring && T::cq_rings(dev) {
                // SAFETY: A ring is asked for only in a user call's data.
                let (m, r) = unsafe { CqRingMapping::new(ud, granted) }?;
                (Some(m), Some(r))
            } else {
                (None, None)
            };
            let data = T::create_cq(dev, granted, events.clone(), ring)?;
            if want_ring {
                // Without a ring (turned off), flags 0: poll with POLL_CQ.
                let resp = mapping.as_ref().map_or([0; RESP], |m| m.resp_bytes());
                udata(ud).ok_or(EINVAL)?.respond(&resp)?;
            }
            let ring = KBox::pin_init(new_mutex!(mapping, "metaroce_cq_ring"), GFP_KERNEL_ACCOUNT)?;
            // SAFETY: `cq` is valid; the core reads back the granted size.
            unsafe { (*cq).cqe = granted as c_int };
            // SAFETY: The core allocated `size_ib_cq` bytes for it.
            unsafe { Obj::init(cq, CqData { events, ring, data }) };
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
            let mut mapping = obj.data.ring.lock();
            if mapping.is_none() {
                T::resize_cq(&obj.data.data, granted, None)?;
            } else {
                // A ring CQ moves to a new ring, which the process maps
                // instead (`struct metaroce_cq_ring_resp`).
                let mut u = udata(ud).ok_or(EINVAL)?;
                if u.out_len() < RESP {
                    return Err(EINVAL);
                }
                // SAFETY: A user call's data (a ring CQ is a user's).
                let (new, ring) = unsafe { CqRingMapping::new(ud, granted) }?;
                // Answered first: a process that cannot take the answer
                // keeps its CQ on the old ring. (A resize that then fails
                // fails the call, and the process ignores the answer.)
                u.respond(&new.resp_bytes())?;
                T::resize_cq(&obj.data.data, granted, Some(ring))?;
                // The old ring can no longer be mapped; pages mapped stay
                // the process's until it unmaps them.
                *mapping = Some(new);
            }
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
