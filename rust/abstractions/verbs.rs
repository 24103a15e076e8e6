// SPDX-License-Identifier: GPL-2.0

//! Verbs objects: user contexts, protection domains, completion queues, memory
//! regions and queue pairs, and the work requests and completions that pass
//! between them and the driver.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! The RDMA core allocates contexts, PDs, CQs and QPs itself, with room for the
//! driver's data after the core's structure ([`Obj`]); the driver allocates
//! memory regions. The adapter functions here convert the C structures to the
//! plain Rust types of this module and back, so the driver never sees a raw
//! pointer.

use super::{
    bindings,
    device::{Device, DeviceOps},
};
use crate::new_spinlock_bh;
use core::ops::Deref;
use kernel::{
    alloc::KVec,
    error::{code::*, from_result, to_result},
    ffi::c_int,
    prelude::*,
    sync::Arc,
    types::Opaque,
};

use super::sync::SpinLockBh;

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
    unsafe fn from_raw<'a>(ib: *mut I) -> &'a Self {
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
    data: D,
}

/// The completion event of one CQ (`cq->comp_handler`), which the driver may
/// fire from any context until the CQ is destroyed; afterwards firing does
/// nothing.
pub(crate) struct CqEvents {
    cq: Pin<KBox<SpinLockBh<Target>>>,
}

struct Target(*mut bindings::ib_cq);

// SAFETY: The pointer is only used under the lock, and only while the CQ lives
// (`destroy_cq` clears it first).
unsafe impl Send for Target {}

impl CqEvents {
    /// Calls the CQ's completion handler, unless the CQ has been destroyed.
    pub(crate) fn fire(&self) {
        let t = self.cq.lock();
        if t.0.is_null() {
            return;
        }
        // SAFETY: The CQ is live while the pointer is set (cleared under this
        // lock before `destroy_cq` returns); the handler is set by the core
        // before any work can be posted.
        unsafe {
            if let Some(handler) = (*t.0).comp_handler {
                handler(t.0, (*t.0).cq_context);
            }
        }
    }
}

/// Which queue pair a completion belongs to (the core's `ib_qp`).
///
/// The driver must remove a QP's completions from its CQs before the QP's
/// destroy operation returns (so that no poll reports a freed QP).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct QpId(*mut bindings::ib_qp);

// SAFETY: An identity; dereferenced only by `poll_cq` while the QP lives.
unsafe impl Send for QpId {}
// SAFETY: As above.
unsafe impl Sync for QpId {}

/// The opcode of a completion (`enum ib_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WcOpcode {
    /// Send (with or without immediate).
    Send,
    /// RDMA Write.
    RdmaWrite,
    /// RDMA Read.
    RdmaRead,
    /// Compare-and-swap.
    CompSwap,
    /// Fetch-and-add.
    FetchAdd,
    /// A receive.
    Recv,
    /// A receive consumed by RDMA Write with Immediate.
    RecvRdmaWithImm,
}

/// The status of a completion (`enum ib_wc_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WcStatus {
    /// Success.
    Success,
    /// A local length error (the message does not fit the receive buffers).
    LocLenErr,
    /// A local protection error (bad lkey or access).
    LocProtErr,
    /// Flushed: the QP is in the error state.
    WrFlushErr,
    /// The remote side refused access (rkey, bounds, rights).
    RemAccessErr,
    /// The remote side found the request invalid.
    RemInvReqErr,
    /// The remote side could not perform the operation.
    RemOpErr,
    /// The peer stopped answering or came back as a new incarnation.
    RetryExcErr,
}

/// A work completion.
#[derive(Clone, Copy)]
pub(crate) struct Wc {
    /// The work request's identifier.
    pub(crate) wr_id: u64,
    /// Outcome.
    pub(crate) status: WcStatus,
    /// What completed.
    pub(crate) opcode: WcOpcode,
    /// Bytes received (receives) or transferred.
    pub(crate) byte_len: u32,
    /// Immediate data, network order as the wire carried it.
    pub(crate) imm: Option<u32>,
    /// The queue pair.
    pub(crate) qp: QpId,
    /// The sender's QP number (receives).
    pub(crate) src_qp: u32,
}

/// Access rights of a memory region or QP (`enum ib_access_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Access(pub(crate) u32);

impl Access {
    /// The local side may write.
    pub(crate) const LOCAL_WRITE: u32 = bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE;
    /// Peers may write.
    pub(crate) const REMOTE_WRITE: u32 = bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE;
    /// Peers may read.
    pub(crate) const REMOTE_READ: u32 = bindings::ib_access_flags_IB_ACCESS_REMOTE_READ;
    /// Peers may perform atomics.
    pub(crate) const REMOTE_ATOMIC: u32 = bindings::ib_access_flags_IB_ACCESS_REMOTE_ATOMIC;

    /// Whether every right in `mask` is granted.
    pub(crate) fn has(self, mask: u32) -> bool {
        self.0 & mask == mask
    }
}

/// A scatter/gather element (`struct ib_sge`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sge {
    /// Address in the region's address space.
    pub(crate) addr: u64,
    /// Bytes.
    pub(crate) length: u32,
    /// Local key of the region.
    pub(crate) lkey: u32,
}

/// The most scatter/gather elements of one work request.
pub(crate) const MAX_SGE: usize = 8;

/// Operation of a send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendOp {
    /// Send.
    Send,
    /// Send with Immediate.
    SendImm(u32),
    /// RDMA Write.
    Write { addr: u64, rkey: u32 },
    /// RDMA Write with Immediate.
    WriteImm { addr: u64, rkey: u32, imm: u32 },
    /// RDMA Read.
    Read { addr: u64, rkey: u32 },
    /// Compare-and-swap of the 8 bytes at `addr`.
    CmpSwap { addr: u64, rkey: u32, compare: u64, swap: u64 },
    /// Fetch-and-add on the 8 bytes at `addr`.
    FetchAdd { addr: u64, rkey: u32, add: u64 },
}

/// A send work request (`struct ib_send_wr` and the structures around it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendWr {
    /// Identifier reported in the completion.
    pub(crate) wr_id: u64,
    /// The operation.
    pub(crate) op: SendOp,
    /// Local buffers (`num_sge` of them are used).
    pub(crate) sge: [Sge; MAX_SGE],
    /// How many of `sge` are used.
    pub(crate) num_sge: usize,
    /// Whether a completion is wanted (IB_SEND_SIGNALED).
    pub(crate) signaled: bool,
    /// Whether the data is inline: `sge` then names bytes to copy now
    /// (user addresses for user QPs), not registered memory.
    pub(crate) inline: bool,
}

impl SendWr {
    /// The scatter/gather elements in use.
    pub(crate) fn sges(&self) -> &[Sge] {
        self.sge.get(..self.num_sge).unwrap_or(&[])
    }

    /// Total bytes of the local buffers.
    pub(crate) fn len(&self) -> u64 {
        self.sges().iter().map(|s| u64::from(s.length)).sum()
    }
}

/// A receive work request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecvWr {
    /// Identifier reported in the completion.
    pub(crate) wr_id: u64,
    /// Buffers.
    pub(crate) sge: [Sge; MAX_SGE],
    /// How many of `sge` are used.
    pub(crate) num_sge: usize,
}

impl RecvWr {
    /// The scatter/gather elements in use.
    pub(crate) fn sges(&self) -> &[Sge] {
        self.sge.get(..self.num_sge).unwrap_or(&[])
    }
}

/// Queue pair states (`enum ib_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QpState {
    /// Reset.
    Reset,
    /// Initialised.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error.
    Err,
}

impl QpState {
    fn from_raw(v: bindings::ib_qp_state) -> Option<Self> {
        Some(match v {
            bindings::ib_qp_state_IB_QPS_RESET => Self::Reset,
            bindings::ib_qp_state_IB_QPS_INIT => Self::Init,
            bindings::ib_qp_state_IB_QPS_RTR => Self::Rtr,
            bindings::ib_qp_state_IB_QPS_RTS => Self::Rts,
            bindings::ib_qp_state_IB_QPS_SQD => Self::Sqd,
            bindings::ib_qp_state_IB_QPS_SQE => Self::Sqe,
            bindings::ib_qp_state_IB_QPS_ERR => Self::Err,
            _ => return None,
        })
    }

    fn to_raw(self) -> bindings::ib_qp_state {
        match self {
            Self::Reset => bindings::ib_qp_state_IB_QPS_RESET,
            Self::Init => bindings::ib_qp_state_IB_QPS_INIT,
            Self::Rtr => bindings::ib_qp_state_IB_QPS_RTR,
            Self::Rts => bindings::ib_qp_state_IB_QPS_RTS,
            Self::Sqd => bindings::ib_qp_state_IB_QPS_SQD,
            Self::Sqe => bindings::ib_qp_state_IB_QPS_SQE,
            Self::Err => bindings::ib_qp_state_IB_QPS_ERR,
        }
    }
}

/// Queue sizes of a QP (`struct ib_qp_cap`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct QpCaps {
    /// Send queue depth.
    pub(crate) max_send_wr: u32,
    /// Receive queue depth.
    pub(crate) max_recv_wr: u32,
    /// Elements per send request.
    pub(crate) max_send_sge: u32,
    /// Elements per receive request.
    pub(crate) max_recv_sge: u32,
    /// Inline bytes per send.
    pub(crate) max_inline_data: u32,
}

/// Attributes given to `modify_qp`: `None` where the mask leaves them out.
/// The core has checked the transition and the mask against the QP type.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct QpModify {
    /// New state.
    pub(crate) state: Option<QpState>,
    /// Access rights for incoming requests.
    pub(crate) access: Option<Access>,
    /// Path MTU in bytes.
    pub(crate) path_mtu: Option<u32>,
    /// The peer's QP number.
    pub(crate) dest_qp: Option<u32>,
    /// First PSN expected from the peer.
    pub(crate) rq_psn: Option<u32>,
    /// First PSN sent.
    pub(crate) sq_psn: Option<u32>,
    /// The peer's IPv4 address (from the destination GID), network order.
    pub(crate) dest_ip4: Option<[u8; 4]>,
    /// The destination GID is not an IPv4 one: not supported.
    pub(crate) dest_unsupported: bool,
    /// Outstanding RDMA Reads / atomics as initiator and as target.
    pub(crate) max_rd_atomic: Option<u8>,
    pub(crate) max_dest_rd_atomic: Option<u8>,
    /// Retry counts and timeouts, as verbs encode them.
    pub(crate) timeout: Option<u8>,
    pub(crate) retry_cnt: Option<u8>,
    pub(crate) rnr_retry: Option<u8>,
    pub(crate) min_rnr_timer: Option<u8>,
}

/// What `query_qp` reports.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpQuery {
    /// Current state.
    pub(crate) state: QpState,
    /// Access rights.
    pub(crate) access: Access,
    /// Path MTU in bytes.
    pub(crate) path_mtu: u32,
    /// Peer QP number.
    pub(crate) dest_qp: u32,
    /// PSNs.
    pub(crate) rq_psn: u32,
    pub(crate) sq_psn: u32,
    /// Queue sizes.
    pub(crate) caps: QpCaps,
    /// Reads/atomics.
    pub(crate) max_rd_atomic: u8,
    pub(crate) max_dest_rd_atomic: u8,
    /// Timers.
    pub(crate) timeout: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
    pub(crate) min_rnr_timer: u8,
}

/// What the driver is told when a QP is created.
pub(crate) struct QpCreate<'a, T: DeviceOps> {
    /// Reliable connected (the only type so far).
    pub(crate) rc: bool,
    /// Requested sizes; the driver writes back what it grants.
    pub(crate) caps: QpCaps,
    /// Every send completes (IB_SIGNAL_ALL_WR).
    pub(crate) sig_all: bool,
    /// The protection domain's data.
    pub(crate) pd: &'a T::Pd,
    /// The CQs' data.
    pub(crate) send_cq: &'a T::Cq,
    pub(crate) recv_cq: &'a T::Cq,
    /// Created by a user process.
    pub(crate) user: bool,
    /// Created by a kernel consumer: the memory its work requests name.
    pub(crate) kernel: Option<KernelMemory>,
    /// The identity to put in completions.
    pub(crate) id: QpId,
}

/// User memory pinned for a memory region (`struct ib_umem`), with its pages.
///
/// # Invariants
///
/// `umem` is a live pinned region of `len` bytes whose first byte is at
/// `first_offset` in `pages[0]`; `pages` are its pages in order.
pub(crate) struct Umem {
    umem: *mut bindings::ib_umem,
    pages: KVec<*mut bindings::page>,
    first_offset: usize,
    len: u64,
}

// SAFETY: Pinned pages may be accessed from any context; the release happens
// once, in `drop`.
unsafe impl Send for Umem {}
// SAFETY: Shared access only copies bytes.
unsafe impl Sync for Umem {}

const PAGE: usize = kernel::page::PAGE_SIZE;

impl Umem {
    /// Bytes in the region.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Calls `f(page, offset in page, bytes)` for each page piece of
    /// `[off, off + len)`, which must lie within the region.
    fn for_pieces(
        &self,
        off: u64,
        len: usize,
        mut f: impl FnMut(*mut bindings::page, usize, usize, usize),
    ) -> Result {
        let end = off.checked_add(len as u64).ok_or(EINVAL)?;
        if end > self.len {
            return Err(EINVAL);
        }
        let mut done = 0usize;
        let mut pos = self.first_offset + off as usize;
        while done < len {
            let page = *self.pages.get(pos / PAGE).ok_or(EINVAL)?;
            let in_page = pos % PAGE;
            let n = (PAGE - in_page).min(len - done);
            f(page, in_page, n, done);
            done += n;
            pos += n;
        }
        Ok(())
    }

    /// Copies `src` into the region at byte `off`.
    pub(crate) fn write(&self, off: u64, src: &[u8]) -> Result {
        self.for_pieces(off, src.len(), |page, in_page, n, done| {
            // SAFETY: `page` is a pinned page of the region (type invariant)
            // and `in_page + n <= PAGE`; `src[done..done + n]` is in bounds.
            unsafe {
                bindings::mr_memcpy_to_page(page, in_page, src.as_ptr().add(done).cast(), n)
            }
        })
    }

    /// Copies bytes at `off` of the region into `dst`.
    pub(crate) fn read(&self, off: u64, dst: &mut [u8]) -> Result {
        let p = dst.as_mut_ptr();
        self.for_pieces(off, dst.len(), |page, in_page, n, done| {
            // SAFETY: As in `write`, with `dst` valid for `n` writes at `done`.
            unsafe { bindings::mr_memcpy_from_page(p.add(done).cast(), page, in_page, n) }
        })
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: `umem` is live and released only here. Releasing may sleep:
        // drivers drop regions in process context.
        unsafe { bindings::ib_umem_release(self.umem) }
    }
}

/// The kernel's own memory, as kernel consumers name it in their work
/// requests: on a device without a DMA device (virtual DMA, like soft-RoCE's)
/// the "DMA address" a consumer maps with `ib_dma_map_*` is the kernel virtual
/// address of its buffer (`ib_virt_dma_to_ptr`).
///
/// Only this layer makes one: for a DMA memory region (`get_dma_mr`, which
/// only kernel consumers reach: `ib_alloc_pd`) and for a QP a kernel consumer
/// created. The driver uses it only for addresses taken from such a region or
/// QP's work requests, never for anything a user process or a remote peer
/// names (their regions are `Umem`s and PDs keep the two apart).
pub(crate) struct KernelMemory(());

impl KernelMemory {
    fn range(addr: u64, len: usize) -> Result<*mut u8> {
        let end = addr.checked_add(len as u64).ok_or(EINVAL)?;
        if addr == 0 || end > usize::MAX as u64 {
            return Err(EINVAL);
        }
        Ok(addr as usize as *mut u8)
    }

    /// Copies `src` to kernel address `addr`.
    pub(crate) fn write(&self, addr: u64, src: &[u8]) -> Result {
        if src.is_empty() {
            return Ok(());
        }
        let dst = Self::range(addr, src.len())?;
        // SAFETY: A kernel consumer posted `[addr, addr + len)` in a work
        // request of its own (type invariant of the token) as memory it
        // mapped for the device and keeps until the request completes, which
        // is after this copy; it does not overlap `src` (driver memory).
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        Ok(())
    }

    /// Copies the bytes at kernel address `addr` into `dst`.
    pub(crate) fn read(&self, addr: u64, dst: &mut [u8]) -> Result {
        if dst.is_empty() {
            return Ok(());
        }
        let src = Self::range(addr, dst.len())?;
        // SAFETY: As in `write`.
        unsafe { core::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
}

/// Copies `n` bytes at user address `addr` of the current process into `dst`
/// (inline data of a user work request, in `post_send`'s process context).
pub(crate) fn copy_from_user(dst: &mut [u8], addr: u64) -> Result {
    // SAFETY: `dst` is valid for `dst.len()` writes; the user address is
    // checked by `copy_from_user`.
    let left = unsafe { bindings::mr_copy_from_user(dst.as_mut_ptr().cast(), addr, dst.len() as _) };
    if left == 0 {
        Ok(())
    } else {
        Err(EFAULT)
    }
}

/// Driver-private data passed with a user call (`struct ib_udata`).
pub(crate) struct Udata(*mut bindings::ib_udata);

impl Udata {
    /// Bytes the caller sent.
    pub(crate) fn in_len(&self) -> usize {
        // SAFETY: The pointer is valid for the call (the core passes it).
        unsafe { (*self.0).inlen }
    }

    /// Copies `bytes` to the caller's response buffer (at most its length).
    pub(crate) fn respond(&mut self, bytes: &[u8]) -> Result {
        // SAFETY: As above.
        let n = bytes.len().min(unsafe { (*self.0).outlen });
        // SAFETY: `udata` is valid; `bytes` is valid for `n` reads; the helper
        // copies to the user buffer with `copy_to_user`.
        to_result(unsafe {
            bindings::mr_ib_copy_to_udata(self.0, bytes.as_ptr().cast_mut().cast(), n)
        })
    }
}

fn udata(p: *mut bindings::ib_udata) -> Option<Udata> {
    (!p.is_null()).then_some(Udata(p))
}

/// Refuses driver data the ABI does not define.
fn no_input(p: *mut bindings::ib_udata) -> Result {
    match udata(p) {
        Some(u) if u.in_len() != 0 => Err(EINVAL),
        _ => Ok(()),
    }
}

/// A memory region the driver allocated: the core's `ib_mr` and the data.
pub(crate) type MrObj<T> = Obj<bindings::ib_mr, <T as DeviceOps>::Mr>;

/// What the driver says about a new memory region.
pub(crate) struct MrKeys {
    /// Local key.
    pub(crate) lkey: u32,
    /// Remote key.
    pub(crate) rkey: u32,
}

/// The operations of the verbs objects, filled into `ib_device_ops`.
pub(crate) struct VerbsAdapter<T: DeviceOps>(core::marker::PhantomData<T>);

type CqObj<T> = Obj<bindings::ib_cq, CqData<<T as DeviceOps>::Cq>>;

impl<T: DeviceOps> VerbsAdapter<T> {
    /// Fills the verbs part of `ops`.
    pub(crate) fn fill(ops: &mut bindings::ib_device_ops) {
        ops.uverbs_abi_ver = T::UVERBS_ABI_VERSION;
        ops.size_ib_ucontext = size_of::<Obj<bindings::ib_ucontext, T::Ucontext>>();
        ops.size_ib_pd = size_of::<Obj<bindings::ib_pd, T::Pd>>();
        ops.size_ib_cq = size_of::<CqObj<T>>();
        ops.size_ib_qp = size_of::<Obj<bindings::ib_qp, T::Qp>>();
        ops.alloc_ucontext = Some(Self::alloc_ucontext);
        ops.dealloc_ucontext = Some(Self::dealloc_ucontext);
        ops.alloc_pd = Some(Self::alloc_pd);
        ops.dealloc_pd = Some(Self::dealloc_pd);
        ops.create_cq = Some(Self::create_cq);
        ops.destroy_cq = Some(Self::destroy_cq);
        ops.poll_cq = Some(Self::poll_cq);
        ops.req_notify_cq = Some(Self::req_notify_cq);
        ops.reg_user_mr = Some(Self::reg_user_mr);
        ops.get_dma_mr = Some(Self::get_dma_mr);
        ops.dereg_mr = Some(Self::dereg_mr);
        ops.create_qp = Some(Self::create_qp);
        ops.modify_qp = Some(Self::modify_qp);
        ops.query_qp = Some(Self::query_qp);
        ops.destroy_qp = Some(Self::destroy_qp);
        ops.post_send = Some(Self::post_send);
        ops.post_recv = Some(Self::post_recv);
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

    unsafe extern "C" fn dealloc_pd(pd: *mut bindings::ib_pd, _ud: *mut bindings::ib_udata) -> c_int {
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
            let (dev, cqe, flags) = unsafe { (Self::dev((*cq).device), (*attr).cqe, (*attr).flags) };
            if flags != 0 {
                return Err(ENOTSUPP);
            }
            let granted = T::cq_size(dev, cqe)?;
            let events = Arc::new(
                CqEvents {
                    cq: KBox::pin_init(new_spinlock_bh!(Target(cq), "metaroce_cq_events"), GFP_KERNEL)?,
                },
                GFP_KERNEL,
            )?;
            let data = T::create_cq(dev, granted, events.clone())?;
            // SAFETY: `cq` is valid; the core reads back the granted size.
            unsafe { (*cq).cqe = granted as c_int };
            // SAFETY: The core allocated `size_ib_cq` bytes for it.
            unsafe { Obj::init(cq, CqData { events, data }) };
            Ok(0)
        })
    }

    unsafe extern "C" fn destroy_cq(cq: *mut bindings::ib_cq, _ud: *mut bindings::ib_udata) -> c_int {
        // SAFETY: Initialised by `create_cq`; the core destroys a CQ only when
        // no QP uses it.
        let obj = unsafe { CqObj::<T>::from_raw(cq) };
        obj.events.cq.lock().0 = core::ptr::null_mut();
        T::destroy_cq(&obj.data.data);
        // SAFETY: Not used after this.
        unsafe { CqObj::<T>::drop_data(cq) };
        0
    }

    unsafe extern "C" fn poll_cq(cq: *mut bindings::ib_cq, n: c_int, wc: *mut bindings::ib_wc) -> c_int {
        // SAFETY: Initialised by `create_cq`.
        let obj = unsafe { CqObj::<T>::from_raw(cq) };
        let mut got = 0;
        while got < n {
            let Some(c) = T::poll_one(&obj.data.data) else { break };
            // SAFETY: `wc` has room for `n` entries.
            let w = unsafe { &mut *wc.add(got as usize) };
            write_wc(w, &c);
            got += 1;
        }
        got
    }

    unsafe extern "C" fn req_notify_cq(cq: *mut bindings::ib_cq, flags: bindings::ib_cq_notify_flags) -> c_int {
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
                return Err(ENOTSUPP);
            }
            // SAFETY: The core passes a PD of a device with this table.
            let (ibdev, pd_data) = unsafe {
                ((*pd).device, &Obj::<bindings::ib_pd, T::Pd>::from_raw(pd).data)
            };
            // SAFETY: As above.
            let dev = unsafe { Self::dev(ibdev) };
            let umem = Self::pin_user(ibdev, start, length, access)?;
            let (data, keys) = T::reg_user_mr(dev, pd_data, umem, iova, Access(access as u32))?;
            Self::new_mr(data, keys, iova, length)
        })();
        match r {
            Ok(p) => p,
            Err(e) => e.to_ptr(),
        }
    }

    /// The core's `ib_mr` around a new region's data.
    fn new_mr(data: T::Mr, keys: MrKeys, iova: u64, length: u64) -> Result<*mut bindings::ib_mr> {
        let obj = KBox::new(
            Obj {
                ib: Opaque::new(bindings::ib_mr::default()),
                data,
            },
            GFP_KERNEL,
        )?;
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
    unsafe extern "C" fn get_dma_mr(pd: *mut bindings::ib_pd, access: c_int) -> *mut bindings::ib_mr {
        let r = (|| -> Result<*mut bindings::ib_mr> {
            // SAFETY: The core passes a PD of a device with this table.
            let (ibdev, pd_data) = unsafe {
                ((*pd).device, &Obj::<bindings::ib_pd, T::Pd>::from_raw(pd).data)
            };
            // SAFETY: As above.
            let dev = unsafe { Self::dev(ibdev) };
            // INVARIANT: the core calls this for `ib_alloc_pd` (kernel
            // consumers) only; uverbs has no command for it.
            let (data, keys) = T::get_dma_mr(dev, pd_data, Access(access as u32), KernelMemory(()))?;
            Self::new_mr(data, keys, 0, u64::MAX)
        })();
        match r {
            Ok(p) => p,
            Err(e) => e.to_ptr(),
        }
    }

    fn pin_user(ibdev: *mut bindings::ib_device, start: u64, length: u64, access: c_int) -> Result<Umem> {
        // SAFETY: `ibdev` is valid; the core pins the user range or fails.
        let umem = unsafe { bindings::ib_umem_get_attr_or_va(ibdev, core::ptr::null(), 0, start, length as usize, access) };
        // SAFETY: Checking an error pointer.
        if unsafe { bindings::mr_is_err(umem.cast()) } {
            // SAFETY: As above.
            return Err(Error::from_errno(unsafe { bindings::mr_ptr_err(umem.cast()) } as i32));
        }
        let npages = ((start as usize % PAGE) + length as usize).div_ceil(PAGE);
        let mut pages = KVec::with_capacity(npages, GFP_KERNEL)?;
        let mut iter = bindings::sg_page_iter::default();
        // SAFETY: `umem` is a live region; the iterator walks its table.
        unsafe {
            bindings::__sg_page_iter_start(
                &mut iter,
                bindings::mr_umem_sgl(umem),
                bindings::mr_umem_nents(umem),
                0,
            );
            while bindings::__sg_page_iter_next(&mut iter) {
                if pages.len() == npages {
                    break;
                }
                if let Err(e) = pages.push(bindings::mr_sg_page_iter_page(&mut iter), GFP_KERNEL) {
                    bindings::ib_umem_release(umem);
                    return Err(e.into());
                }
            }
        }
        if pages.len() != npages {
            // SAFETY: Not yet owned by a `Umem`.
            unsafe { bindings::ib_umem_release(umem) };
            return Err(EFAULT);
        }
        // INVARIANT: pages in order; the range starts at `start`'s page offset.
        Ok(Umem {
            umem,
            pages,
            first_offset: start as usize % PAGE,
            len: length,
        })
    }

    unsafe extern "C" fn dereg_mr(mr: *mut bindings::ib_mr, _ud: *mut bindings::ib_udata) -> c_int {
        let obj = mr.cast::<MrObj<T>>();
        // SAFETY: Allocated by `reg_user_mr` with `KBox`; the core deregisters once.
        let obj = unsafe { KBox::from_raw(obj) };
        T::dereg_mr(&obj.data);
        drop(obj);
        0
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
            let (dev, init_ref, pd, scq, rcq, user) = unsafe {
                let i = &*init;
                if i.send_cq.is_null() || i.recv_cq.is_null() || !i.srq.is_null() {
                    return Err(EINVAL);
                }
                (
                    Self::dev((*qp).device),
                    &mut *init,
                    &Obj::<bindings::ib_pd, T::Pd>::from_raw((*qp).pd).data,
                    &CqObj::<T>::from_raw(i.send_cq).data.data,
                    &CqObj::<T>::from_raw(i.recv_cq).data.data,
                    !(*qp).uobject.is_null() || !ud.is_null(),
                )
            };
            if init_ref.create_flags != 0 {
                return Err(ENOTSUPP);
            }
            let c = &init_ref.cap;
            let mut req = QpCreate::<T> {
                rc: init_ref.qp_type == bindings::ib_qp_type_IB_QPT_RC,
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
            let mut q = QpModify::default();
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
                // An IPv4-mapped IPv6 address: ::ffff:a.b.c.d.
                if gid[..10].iter().all(|b| *b == 0) && gid[10] == 0xff && gid[11] == 0xff {
                    q.dest_ip4 = Some([gid[12], gid[13], gid[14], gid[15]]);
                } else {
                    q.dest_unsupported = true;
                }
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
            // SAFETY: Initialised by `create_qp`; `attr`/`init` are valid and
            // zeroed by the core.
            let (obj, a, i) = unsafe { (Obj::<bindings::ib_qp, T::Qp>::from_raw(qp), &mut *attr, &mut *init) };
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
            i.qp_type = bindings::ib_qp_type_IB_QPT_RC;
            Ok(0)
        })
    }

    unsafe extern "C" fn destroy_qp(qp: *mut bindings::ib_qp, _ud: *mut bindings::ib_udata) -> c_int {
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
        // SAFETY: Initialised by `create_qp`.
        let obj = unsafe { Obj::<bindings::ib_qp, T::Qp>::from_raw(qp) };
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: The chain is valid (the core or the ULP built it).
            let r = unsafe { convert_send(cur) }.and_then(|w| T::post_send(&obj.data, &w));
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
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: The chain is valid.
            let w = unsafe { &*cur };
            let r = sges(w.sg_list, w.num_sge).and_then(|(sge, num_sge)| {
                T::post_recv(
                    &obj.data,
                    &RecvWr {
                        // SAFETY: `wr_id` is the union member verbs users set.
                        wr_id: unsafe { w.__bindgen_anon_1.wr_id },
                        sge,
                        num_sge,
                    },
                )
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
/// opcode implies (`ib_rdma_wr`, `ib_atomic_wr`).
unsafe fn convert_send(wr: *const bindings::ib_send_wr) -> Result<SendWr> {
    // SAFETY: Valid per the safety requirements.
    let w = unsafe { &*wr };
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
    };
    w.opcode = match c.opcode {
        WcOpcode::Send => bindings::ib_wc_opcode_IB_WC_SEND,
        WcOpcode::RdmaWrite => bindings::ib_wc_opcode_IB_WC_RDMA_WRITE,
        WcOpcode::RdmaRead => bindings::ib_wc_opcode_IB_WC_RDMA_READ,
        WcOpcode::CompSwap => bindings::ib_wc_opcode_IB_WC_COMP_SWAP,
        WcOpcode::FetchAdd => bindings::ib_wc_opcode_IB_WC_FETCH_ADD,
        WcOpcode::Recv => bindings::ib_wc_opcode_IB_WC_RECV,
        WcOpcode::RecvRdmaWithImm => bindings::ib_wc_opcode_IB_WC_RECV_RDMA_WITH_IMM,
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
    w.wc_flags |= bindings::ib_wc_flags_IB_WC_WITH_NETWORK_HDR_TYPE as c_int;
}
