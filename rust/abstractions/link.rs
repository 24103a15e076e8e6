// SPDX-License-Identifier: GPL-2.0

//! RDMA link types: what `rdma link add NAME type TYPE netdev DEV` reaches.
//!
//! C header: [`include/rdma/rdma_netlink.h`](srctree/include/rdma/rdma_netlink.h)

use super::{bindings, netdev::NetDevice};
use core::{
    ptr::null_mut,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{
    error::{code::*, from_result},
    ffi::{c_char, c_int, c_void},
    prelude::*,
    sync::Arc,
    types::Opaque,
};

/// A link type handler.
pub(crate) trait LinkOps: Send + Sync + 'static {
    /// The type name users pass to `rdma link add ... type`.
    const TYPE: &'static CStr;

    /// Creates an RDMA device named `name` on `ndev`. Called in process context
    /// with a reference on `ndev` held for the duration of the call.
    fn newlink(&self, name: &CStr, ndev: &NetDevice) -> Result;
}

/// The handler of the one registered link type (see [`LinkRegistration`]).
///
/// `rdma_link_ops` callbacks receive no context pointer, so the handler is found
/// here. Only one registration may exist at a time, which makes the pointer's
/// type the `T` of the one registered `Adapter<T>`.
static HANDLER: AtomicPtr<c_void> = AtomicPtr::new(null_mut());

/// A registered link type; unregisters on drop.
///
/// # Invariants
///
/// While this object exists, `ops` is registered with `rdma_link_register` and
/// `HANDLER` points to the `T` inside `handler`.
#[pin_data(PinnedDrop)]
pub(crate) struct LinkRegistration<T: LinkOps> {
    handler: Arc<T>,
    #[pin]
    ops: Opaque<bindings::rdma_link_ops>,
}

// SAFETY: `ops` is only touched by the RDMA core under its lock; `T` is `Sync`.
unsafe impl<T: LinkOps> Send for LinkRegistration<T> {}
// SAFETY: As above.
unsafe impl<T: LinkOps> Sync for LinkRegistration<T> {}

impl<T: LinkOps> LinkRegistration<T> {
    /// Registers link type `T::TYPE`, served by `handler`. Fails with `EBUSY` if
    /// this module already registered a link type.
    pub(crate) fn new(handler: Arc<T>) -> impl PinInit<Self, Error> {
        let target = Arc::as_ptr(&handler).cast_mut().cast::<c_void>();
        try_pin_init!(Self {
            handler,
            ops <- Opaque::try_ffi_init(move |slot: *mut bindings::rdma_link_ops| {
                HANDLER
                    .compare_exchange(null_mut(), target, Ordering::AcqRel, Ordering::Acquire)
                    .map_err(|_| EBUSY)?;
                let ops = bindings::rdma_link_ops {
                    type_: T::TYPE.as_char_ptr(),
                    newlink: Some(Self::newlink),
                    ..Default::default()
                };
                // SAFETY: `slot` is valid for writes and pinned; it stays
                // registered until `drop` (type invariant).
                unsafe {
                    slot.write(ops);
                    bindings::rdma_link_register(slot);
                }
                Ok::<(), Error>(())
            }),
        })
    }

    /// # Safety
    ///
    /// Only as the `newlink` operation of this registration's `rdma_link_ops`.
    unsafe extern "C" fn newlink(name: *const c_char, ndev: *mut bindings::net_device) -> c_int {
        from_result(|| {
            let handler = HANDLER.load(Ordering::Acquire);
            if handler.is_null() {
                return Err(ENODEV);
            }
            // SAFETY: The core calls `newlink` only while `ops` is registered, and
            // then `HANDLER` points to the live `T` of this registration (type
            // invariant); `rdma_link_unregister` waits for running callbacks.
            let handler = unsafe { &*handler.cast::<T>() };
            // SAFETY: The core passes a NUL-terminated name valid for the call.
            let name = unsafe { CStr::from_char_ptr(name) };
            // SAFETY: The core holds a reference on `ndev` for the call.
            let ndev = unsafe { NetDevice::from_raw(ndev) };
            handler.newlink(name, ndev)?;
            Ok(0)
        })
    }
}

#[pinned_drop]
impl<T: LinkOps> PinnedDrop for LinkRegistration<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: Registered in `new` (type invariant). This takes the core's
        // link lock for writing, so no `newlink` is running once it returns.
        unsafe { bindings::rdma_link_unregister(self.ops.get()) };
        HANDLER.store(null_mut(), Ordering::Release);
    }
}
