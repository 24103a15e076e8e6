// SPDX-License-Identifier: GPL-2.0

//! Queue pairs: create, modify, query, destroy, and posting (each
//! `ib_send_wr` converted to the driver's `SendWr`).

use super::{post_recv_chain, sges, CqObj, Obj, SrqObj, VerbsAdapter};
use crate::abstractions::{
    bindings,
    memory::KernelMemory,
    ops::{no_input, DeviceOps},
    types::{
        eopnotsupp, Access, AhAttr, IpAddr, QpCaps, QpCreate, QpId, QpModify, QpState, QpType,
        SendOp, SendWr, UdDest,
    },
};
use kernel::{
    error::{code::*, from_result},
    ffi::c_int,
    prelude::*,
};

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

// Each `unsafe extern "C"` function here is the `ib_device_ops` operation of its
// name (set in the table in `verbs_adapter.rs`): its contract is the RDMA
// core's for that operation, on a device of a `DeviceSet<T>`.
#[allow(clippy::missing_safety_doc)]
impl<T: DeviceOps> VerbsAdapter<T> {
    pub(super) unsafe extern "C" fn create_qp(
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

    pub(super) unsafe extern "C" fn modify_qp(
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

    pub(super) unsafe extern "C" fn query_qp(
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

    pub(super) unsafe extern "C" fn destroy_qp(
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

    pub(super) unsafe extern "C" fn post_send(
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

    pub(super) unsafe extern "C" fn post_recv(
        qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_recv_wr,
        bad: *mut *const bindings::ib_recv_wr,
    ) -> c_int {
        // SAFETY: Initialised by `create_qp`.
        let obj = unsafe { Obj::<bindings::ib_qp, T::Qp>::from_raw(qp) };
        // SAFETY: The core passes a valid chain and `bad`.
        unsafe { post_recv_chain(wr, bad, |w| T::post_recv(&obj.data, w)) }
    }
}
