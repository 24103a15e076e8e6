// SPDX-License-Identifier: GPL-2.0

//! The operations a driver implements (`DeviceOps`, the driver's side of
//! `ib_device_ops`), and what its operations are given besides plain values:
//! the device (`Device<T>`), a user call's private data (`Udata`) and a
//! CQ's completion event (`CqEvents`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{
    bindings,
    memory::{KernelMemory, Translation, Umem},
    netdev::NetDevice,
    ring::CqRingMem,
    sync::SpinLockBh,
    types::{
        Access, AhAttr, CounterDesc, DeviceAttr, IpAddr, LinkSpeed, MrKeys, PortAttr,
        PortImmutable, QpCreate, QpModify, QpQuery, RecvWr, SendWr, SrqAttr, SrqModify, Wc,
    },
};
use kernel::{
    error::{to_result, VTABLE_DEFAULT_ERROR},
    ffi::c_void,
    prelude::*,
    sync::{aref::ARef, Arc},
    types::Opaque,
};

/// The operations of an RDMA device driver. `Self` is the per-device data, which
/// lives inside the device's allocation and is dropped when the core frees it.
#[vtable]
pub(crate) trait DeviceOps: Sized + Send + Sync + 'static {
    /// Returns the device attributes.
    fn query_device(dev: &Device<Self>) -> Result<DeviceAttr>;

    /// Returns the attributes of `port` (1-based).
    fn query_port(dev: &Device<Self>, port: u32) -> Result<PortAttr>;

    /// Returns the immutable properties of `port`. Ports are Ethernet ports
    /// carrying RoCE-style (UDP-encapsulated) traffic; the core builds their
    /// GID tables from the net device's IP addresses.
    fn port_immutable(dev: &Device<Self>, port: u32) -> Result<PortImmutable>;

    /// Returns entry `index` of the P_Key table of `port`.
    fn query_pkey(dev: &Device<Self>, port: u32, index: u16) -> Result<u16>;

    /// The names of the port counters (`rdma statistic show link`), in the
    /// order [`DeviceOps::port_counters`] fills them. None: no counters.
    const PORT_COUNTERS: &'static [CounterDesc] = &[];

    /// Fills `values` (one per name in [`DeviceOps::PORT_COUNTERS`]) with
    /// the counters of `port`. Process context.
    fn port_counters(_dev: &Device<Self>, _port: u32, _values: &mut [u64]) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Adds a QP's driver attributes to `rdma resource show qp -dd`.
    /// Process context.
    fn qp_attrs(_qp: &Self::Qp, _out: &mut ResAttrs<'_>) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Adds a CQ's driver attributes to `rdma resource show cq -dd`.
    fn cq_attrs(_cq: &Self::Cq, _out: &mut ResAttrs<'_>) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Adds an MR's driver attributes to `rdma resource show mr -dd`.
    fn mr_attrs(_mr: &Self::Mr, _out: &mut ResAttrs<'_>) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// The uverbs ABI version user-space providers must support.
    const UVERBS_ABI_VERSION: u32;
    /// The node description (sysfs `node_desc`), fixed for the device's life.
    const NODE_DESC: &'static [u8];

    /// Data of a user context.
    type Ucontext: Send + Sync;
    /// Data of a protection domain.
    type Pd: Send + Sync;
    /// Data of a completion queue.
    type Cq: Send + Sync;
    /// Data of a memory region.
    type Mr: Send + Sync;
    /// Data of a queue pair.
    type Qp: Send + Sync;
    /// Data of a shared receive queue.
    type Srq: Send + Sync;

    /// A process opened the device; `udata` takes the ABI's response.
    fn alloc_ucontext(dev: &Device<Self>, udata: &mut Udata) -> Result<Self::Ucontext>;
    /// Creates a protection domain.
    fn alloc_pd(dev: &Device<Self>) -> Result<Self::Pd>;
    /// The number of entries granted for a CQ of `cqe` requested entries.
    fn cq_size(dev: &Device<Self>, cqe: u32) -> Result<u32>;
    /// Whether a process may ask for CQs whose completions are written to a
    /// ring it maps (`METAROCE_UCTX_CQ_RING`).
    fn cq_rings(dev: &Device<Self>) -> bool;
    /// Creates a CQ of `cqe` entries whose completion event is `events`,
    /// writing its completions to `ring` (shared with its process) if given.
    fn create_cq(
        dev: &Device<Self>,
        cqe: u32,
        events: Arc<CqEvents>,
        ring: Option<Arc<CqRingMem>>,
    ) -> Result<Self::Cq>;
    /// Gives a CQ room for `cqe` entries (granted by [`Self::cq_size`]),
    /// keeping the completions it holds; fails if they do not fit. A CQ
    /// created with a ring is given a new one, `ring`.
    fn resize_cq(cq: &Self::Cq, cqe: u32, ring: Option<Arc<CqRingMem>>) -> Result;
    /// A CQ is about to be freed (no QP uses it any more). Process
    /// context: the driver lets its shared ring go here (a QP's last
    /// reference to the CQ may otherwise go in a softirq).
    fn destroy_cq(cq: &Self::Cq);
    /// Takes the oldest completion.
    fn poll_one(cq: &Self::Cq) -> Option<Wc>;
    /// Arms the completion event (for solicited completions only if
    /// `solicited`); returns whether completions are already waiting.
    fn req_notify(cq: &Self::Cq, solicited: bool) -> bool;
    /// Registers pinned user memory at `iova` with `access` rights.
    fn reg_user_mr(
        dev: &Device<Self>,
        pd: &Self::Pd,
        umem: Umem,
        iova: u64,
        access: Access,
    ) -> Result<(Self::Mr, MrKeys)>;
    /// A region of kernel memory for a kernel consumer (`ib_alloc_pd`): its
    /// addresses are kernel virtual addresses, read and written with `mem`.
    fn get_dma_mr(
        dev: &Device<Self>,
        pd: &Self::Pd,
        access: Access,
        mem: KernelMemory,
    ) -> Result<(Self::Mr, MrKeys)>;
    /// A free fast-registration region of domain `pd` for a kernel
    /// consumer (`ib_alloc_mr`), with room for `max_pages` pages; its pages
    /// are kernel memory, read and written with `mem`.
    fn alloc_mr(
        dev: &Device<Self>,
        pd: &Self::Pd,
        max_pages: u32,
        mem: KernelMemory,
    ) -> Result<(Self::Mr, MrKeys)>;
    /// Stages the page list of a region made by [`Self::alloc_mr`]
    /// (`ib_map_mr_sg`): the kernel addresses of `page_size`-byte pages,
    /// the region's bytes starting `first` bytes into the first and running
    /// for `len`. A REG_MR work request registers it. May be called in
    /// atomic context.
    fn map_mr_sg(mr: &Self::Mr, pages: &[u64], page_size: u64, first: u64, len: u64) -> Result;
    /// Changes a user memory region in place (`ibv_rereg_mr`; the core has
    /// checked the flags and `access`, and lets no other rereg or dereg of
    /// it run meanwhile): each of its domain, its rights and its
    /// translation that is `Some`. The keys stay.
    fn rereg_user_mr(
        dev: &Device<Self>,
        mr: &Self::Mr,
        pd: Option<&Self::Pd>,
        access: Option<Access>,
        trans: Option<Translation<'_>>,
    ) -> Result;
    /// Deregisters a memory region; its data is dropped right after.
    fn dereg_mr(mr: &Self::Mr);
    /// Creates a shared receive queue in `pd` of the sizes in `attr` (the
    /// driver writes back what it grants) whose limit event is `events`.
    fn create_srq(
        dev: &Device<Self>,
        pd: &Self::Pd,
        attr: &mut SrqAttr,
        events: Arc<SrqEvents>,
    ) -> Result<Self::Srq>;
    /// Resizes an SRQ or arms its limit.
    fn modify_srq(srq: &Self::Srq, m: &SrqModify) -> Result;
    /// Reports an SRQ's sizes and armed limit.
    fn query_srq(srq: &Self::Srq) -> SrqAttr;
    /// An SRQ is about to be freed (no QP uses it any more).
    fn destroy_srq(srq: &Self::Srq);
    /// Posts one receive work request to an SRQ.
    fn post_srq_recv(srq: &Self::Srq, wr: &RecvWr) -> Result;
    /// Creates a QP; returns its data and its number.
    fn create_qp(
        dev: &Device<Self>,
        req: &mut QpCreate<'_, Self::Pd, Self::Cq, Self::Srq>,
    ) -> Result<(Self::Qp, u32)>;
    /// Changes a QP's attributes and state.
    fn modify_qp(qp: &Self::Qp, m: &QpModify) -> Result;
    /// Reports a QP's attributes.
    fn query_qp(qp: &Self::Qp) -> QpQuery;
    /// A QP is about to be freed: it must leave no completion in any CQ.
    fn destroy_qp(qp: &Self::Qp);
    /// Posts one send work request.
    fn post_send(qp: &Self::Qp, wr: &SendWr) -> Result;
    /// Posts one receive work request.
    fn post_recv(qp: &Self::Qp, wr: &RecvWr) -> Result;
    /// Checks the address of a new address handle (which the abstraction
    /// keeps: UD sends carry its address in [`SendWr`]). May be called in
    /// atomic context.
    fn create_ah(dev: &Device<Self>, ah: &AhAttr) -> Result;
    /// Attaches a UD queue pair to the multicast group of `gid` (a
    /// multicast IPv6 or IPv4-mapped address; the core checked both).
    fn attach_mcast(qp: &Self::Qp, gid: IpAddr) -> Result;
    /// Detaches a queue pair from the group of `gid`.
    fn detach_mcast(qp: &Self::Qp, gid: IpAddr) -> Result;
}

/// The driver's attributes of one object in an `rdma resource ... -dd`
/// reply being built: named values the rdma tool prints after the core's.
/// Only lent to [`DeviceOps::qp_attrs`], `cq_attrs` and `mr_attrs` for the call.
pub(crate) struct ResAttrs<'a> {
    /// The netlink message, inside the driver's attribute table.
    pub(super) skb: *mut bindings::sk_buff,
    pub(super) _lent: core::marker::PhantomData<&'a mut ()>,
}

impl ResAttrs<'_> {
    /// A number, printed in decimal.
    pub(crate) fn u32(&mut self, name: &'static CStr, value: u32) -> Result {
        // SAFETY: `skb` is the message being built, valid for the call;
        // `name` is a NUL-terminated string the call copies.
        to_result(unsafe { bindings::rdma_nl_put_driver_u32(self.skb, name.as_char_ptr(), value) })
    }

    /// A number, printed in hexadecimal.
    pub(crate) fn u32_hex(&mut self, name: &'static CStr, value: u32) -> Result {
        // SAFETY: As in `u32`.
        to_result(unsafe {
            bindings::rdma_nl_put_driver_u32_hex(self.skb, name.as_char_ptr(), value)
        })
    }

    /// A 64-bit number, printed in decimal.
    pub(crate) fn u64(&mut self, name: &'static CStr, value: u64) -> Result {
        // SAFETY: As in `u32`.
        to_result(unsafe { bindings::rdma_nl_put_driver_u64(self.skb, name.as_char_ptr(), value) })
    }

    /// A string.
    pub(crate) fn string(&mut self, name: &'static CStr, value: &CStr) -> Result {
        // SAFETY: As in `u32`; `value` is NUL-terminated and copied too.
        to_result(unsafe {
            bindings::rdma_nl_put_driver_string(self.skb, name.as_char_ptr(), value.as_char_ptr())
        })
    }
}

/// An RDMA device (`struct ib_device`) with the driver's data `T` after it.
///
/// # Invariants
///
/// - `ib` was allocated by `_ib_alloc_device` with the size of `Self`, so the whole
///   object is one allocation owned by the RDMA core.
/// - `data` is initialised before the device operations are installed and is
///   dropped only by `dealloc_driver`, the last operation the core calls.
/// - `set` points to the `DeviceSet<T>` that created the device, which outlives it
///   (`device.rs`; only its `dealloc_driver` follows the pointer).
#[repr(C)]
pub(crate) struct Device<T: DeviceOps> {
    pub(super) ib: Opaque<bindings::ib_device>,
    pub(super) set: *const c_void,
    pub(super) data: T,
}

// SAFETY: The core calls device operations from any thread; `T` is `Send + Sync`
// and `set` points to a `Sync` object that is never written through.
unsafe impl<T: DeviceOps> Send for Device<T> {}
// SAFETY: As above.
unsafe impl<T: DeviceOps> Sync for Device<T> {}

impl<T: DeviceOps> core::ops::Deref for Device<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.data
    }
}

impl<T: DeviceOps> Device<T> {
    /// Borrows the `Device<T>` around `ib`.
    ///
    /// # Safety
    ///
    /// `ib` must have been created by a `DeviceSet<T>` and its data must still be
    /// initialised (i.e. `dealloc_driver` has not run) for `'a`.
    pub(super) unsafe fn from_raw<'a>(ib: *mut bindings::ib_device) -> &'a Self {
        // CAST: `ib` is the first field of the `repr(C)` `Self` (type invariant).
        // SAFETY: Valid and initialised for `'a` per the safety requirements.
        unsafe { &*ib.cast::<Self>() }
    }

    fn as_raw(&self) -> *mut bindings::ib_device {
        self.ib.get()
    }

    /// The node GUID, in host order (as given to `DeviceSet::add`).
    pub(crate) fn node_guid(&self) -> u64 {
        // SAFETY: The device is valid; `node_guid` is written once before
        // registration and only read afterwards.
        u64::from_be(unsafe { (*self.as_raw()).node_guid })
    }

    /// The net device bound to `port`, if any, with a reference held.
    pub(crate) fn netdev(&self, port: u32) -> Option<ARef<NetDevice>> {
        // SAFETY: The device is valid; the function returns a held reference or null.
        unsafe { NetDevice::from_held(bindings::ib_device_get_netdev(self.as_raw(), port)) }
    }

    /// Speed and width of the Ethernet link under `port`, as the core derives them
    /// from ethtool. Takes RTNL: not for use in a netdevice notifier.
    pub(crate) fn eth_speed(&self, port: u32) -> Result<LinkSpeed> {
        let mut link = LinkSpeed::SLOWEST;
        // SAFETY: The device is valid; the out-pointers are valid for writes.
        to_result(unsafe {
            bindings::ib_get_eth_speed(self.as_raw(), port, &mut link.speed, &mut link.width)
        })?;
        Ok(link)
    }
}

/// The events of one CQ: its completion event (`cq->comp_handler`) and its
/// overrun (`cq->event_handler`, `IB_EVENT_CQ_ERR`), which the driver may
/// raise from any context until the CQ is destroyed; afterwards raising
/// does nothing.
pub(crate) struct CqEvents {
    pub(super) cq: Pin<KBox<SpinLockBh<Target<bindings::ib_cq>>>>,
}

/// The object (a CQ, an SRQ) whose handlers [`CqEvents`] or [`SrqEvents`]
/// call; null once the object is destroyed.
pub(super) struct Target<T>(pub(super) *mut T);

// SAFETY: The pointer is only used under the lock, and only while the object
// lives (`destroy_cq` and `destroy_srq` clear it first).
unsafe impl<T> Send for Target<T> {}

/// The limit event of one shared receive queue (`srq->event_handler`,
/// `IB_EVENT_SRQ_LIMIT_REACHED`), which the driver may raise from process
/// context until the SRQ is destroyed; afterwards raising does nothing.
pub(crate) struct SrqEvents {
    pub(super) srq: Pin<KBox<SpinLockBh<Target<bindings::ib_srq>>>>,
}

impl SrqEvents {
    /// Calls the SRQ's asynchronous event handler with
    /// `IB_EVENT_SRQ_LIMIT_REACHED`, unless the SRQ has been destroyed.
    pub(crate) fn limit_reached(&self) {
        let t = self.srq.lock();
        if t.0.is_null() {
            return;
        }
        // SAFETY: The SRQ is live while the pointer is set (cleared under
        // this lock before `destroy_srq` returns); the core set `device`,
        // `event_handler` and `srq_context` before the driver's create
        // operation ran.
        unsafe {
            raise(
                (*t.0).event_handler,
                (*t.0).device,
                bindings::ib_event__bindgen_ty_1 { srq: t.0 },
                bindings::ib_event_type_IB_EVENT_SRQ_LIMIT_REACHED,
                (*t.0).srq_context,
            )
        }
    }
}

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

    /// Calls the CQ's asynchronous event handler with `IB_EVENT_CQ_ERR` (a
    /// completion found the CQ full and was lost), unless the CQ has been
    /// destroyed. For user CQs the handler queues the event for
    /// `ibv_get_async_event`; a kernel consumer's may be absent.
    pub(crate) fn overrun(&self) {
        let t = self.cq.lock();
        if t.0.is_null() {
            return;
        }
        // SAFETY: The CQ is live while the pointer is set (as in `fire`);
        // the core set `device`, `event_handler` and `cq_context` when it
        // created the CQ, before the driver's create operation ran.
        unsafe {
            raise(
                (*t.0).event_handler,
                (*t.0).device,
                bindings::ib_event__bindgen_ty_1 { cq: t.0 },
                bindings::ib_event_type_IB_EVENT_CQ_ERR,
                (*t.0).cq_context,
            )
        }
    }
}

/// Calls an object's asynchronous event `handler`, if it has one, with an
/// event of `kind` on `element` of `device`. The event lives on this stack
/// for the call; handlers copy what they keep (uverbs queues the element's
/// user handle).
///
/// # Safety
///
/// `handler`, `device`, `element` and `context` must be those the core set
/// on a live object, which stays live for the call.
unsafe fn raise(
    handler: Option<unsafe extern "C" fn(*mut bindings::ib_event, *mut c_void)>,
    device: *mut bindings::ib_device,
    element: bindings::ib_event__bindgen_ty_1,
    kind: bindings::ib_event_type,
    context: *mut c_void,
) {
    if let Some(handler) = handler {
        let mut ev = bindings::ib_event {
            device,
            element,
            event: kind,
        };
        // SAFETY: Per the safety requirements; `ev` is valid for the call.
        unsafe { handler(&mut ev, context) };
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

    /// Room in the caller's response buffer.
    pub(crate) fn out_len(&self) -> usize {
        // SAFETY: As in `in_len`.
        unsafe { (*self.0).outlen }
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

/// The private data of a call, if the call has any (user calls).
pub(super) fn udata(p: *mut bindings::ib_udata) -> Option<Udata> {
    (!p.is_null()).then_some(Udata(p))
}

/// Refuses driver data the ABI does not define.
pub(super) fn no_input(p: *mut bindings::ib_udata) -> Result {
    match udata(p) {
        Some(u) if u.in_len() != 0 => Err(EINVAL),
        _ => Ok(()),
    }
}
