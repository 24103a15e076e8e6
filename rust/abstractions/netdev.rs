// SPDX-License-Identifier: GPL-2.0

//! Network devices and the netdevice notifier chain.
//!
//! C header: [`include/linux/netdevice.h`](srctree/include/linux/netdevice.h)

use super::bindings;
use core::ptr::NonNull;
use kernel::{
    error::to_result,
    ffi::{c_int, c_ulong, c_void},
    prelude::*,
    sync::{
        aref::{ARef, AlwaysRefCounted},
        Arc,
    },
    types::Opaque,
};

/// A network device (`struct net_device`).
///
/// # Invariants
///
/// The wrapped `net_device` is valid for the lifetime of every `&NetDevice`: whoever
/// hands one out holds a reference on the device for at least that long.
#[repr(transparent)]
pub(crate) struct NetDevice(Opaque<bindings::net_device>);

// SAFETY: `net_device` is meant to be used from any thread; every accessor below
// reads fields the way the C code does without locks, or calls functions that
// do their own locking.
unsafe impl Send for NetDevice {}
// SAFETY: As above; shared references only read or call thread-safe functions.
unsafe impl Sync for NetDevice {}

// SAFETY: `dev_hold`/`dev_put` manage the device's reference count; the device is
// not freed while a reference is held.
unsafe impl AlwaysRefCounted for NetDevice {
    fn inc_ref(&self) {
        // SAFETY: By the type invariant the device is valid.
        unsafe { bindings::mr_dev_hold(self.as_raw()) };
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: The caller owns a reference taken by `inc_ref` (or handed over
        // by C with `from_held`). CAST: `Self` is transparent over `net_device`.
        unsafe { bindings::mr_dev_put(obj.as_ptr().cast()) };
    }
}

impl NetDevice {
    /// Borrows a `net_device` for `'a`.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a valid `net_device` on which the caller holds a reference
    /// (or which the caller otherwise keeps alive) for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::net_device) -> &'a Self {
        // CAST: `Self` is `repr(transparent)` over `net_device`.
        // SAFETY: Valid for `'a` per the function's safety requirements.
        unsafe { &*ptr.cast() }
    }

    /// Takes ownership of a reference that C code already took (e.g. the result of
    /// `ib_device_get_netdev`). Returns `None` for a null pointer.
    ///
    /// # Safety
    ///
    /// A non-null `ptr` must point to a valid `net_device` whose reference the
    /// caller transfers to the returned `ARef`.
    pub(crate) unsafe fn from_held(ptr: *mut bindings::net_device) -> Option<ARef<Self>> {
        // CAST: `Self` is `repr(transparent)` over `net_device`.
        let ptr = NonNull::new(ptr)?.cast::<Self>();
        // SAFETY: The caller transfers its reference to the `ARef`.
        Some(unsafe { ARef::from_raw(ptr) })
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::net_device {
        self.0.get()
    }

    /// The link's speed in Mbit/s as ethtool reports it (`None`: unknown or
    /// no link). The caller holds RTNL (a netdevice notifier does); see
    /// [`Self::speed_mbps`] otherwise.
    pub(crate) fn speed_mbps_rtnl_held(&self) -> Option<u32> {
        let mut ks = core::mem::MaybeUninit::<bindings::ethtool_link_ksettings>::zeroed();
        // SAFETY: The device is valid and the caller holds RTNL, which the
        // driver's `get_link_ksettings` expects (a missing lock is a WARN,
        // not memory unsafety); `ks` is valid for writes.
        let r = unsafe { bindings::__ethtool_get_link_ksettings(self.as_raw(), ks.as_mut_ptr()) };
        if r != 0 {
            return None;
        }
        // SAFETY: Zero is a valid value of this plain-data struct, which the
        // call filled in.
        let speed = unsafe { ks.assume_init() }.base.speed;
        // SPEED_UNKNOWN is -1 in a u32.
        (speed != 0 && speed != u32::MAX).then_some(speed)
    }

    /// [`Self::speed_mbps_rtnl_held`] from process context without RTNL
    /// (it is taken here: may sleep).
    pub(crate) fn speed_mbps(&self) -> Option<u32> {
        // SAFETY: Process context without RTNL, as documented.
        unsafe { bindings::rtnl_lock() };
        let s = self.speed_mbps_rtnl_held();
        // SAFETY: Taken above.
        unsafe { bindings::rtnl_unlock() };
        s
    }

    /// The interface index (`ifindex`).
    pub(crate) fn ifindex(&self) -> i32 {
        // SAFETY: The device is valid; `ifindex` is fixed while it is registered.
        unsafe { (*self.as_raw()).ifindex }
    }

    /// The hardware address, when it is a 6-byte Ethernet address.
    pub(crate) fn mac(&self) -> Option<[u8; 6]> {
        // SAFETY: The device is valid; `dev_addr` holds `addr_len` bytes and is
        // changed by C only under RTNL, as a whole, like this read expects.
        unsafe {
            let dev = self.as_raw();
            if (*dev).addr_len != 6 || (*dev).dev_addr.is_null() {
                return None;
            }
            Some(core::ptr::read((*dev).dev_addr.cast::<[u8; 6]>()))
        }
    }

    /// The MTU in bytes. It can change at any time; the value is a snapshot.
    pub(crate) fn mtu(&self) -> u32 {
        // SAFETY: The device is valid; the MTU is read without a lock as C's
        // `READ_ONCE(dev->mtu)` does.
        unsafe { core::ptr::read_volatile(&raw const (*self.as_raw()).mtu) }
    }

    /// Whether the device is running and has carrier (the RDMA port is active).
    pub(crate) fn is_active(&self) -> bool {
        // SAFETY: The device is valid.
        let state = unsafe { bindings::mr_ib_get_curr_port_state(self.as_raw()) };
        state == bindings::ib_port_state_IB_PORT_ACTIVE
    }

    /// Whether the administrator set the device up (`IFF_UP`).
    pub(crate) fn is_admin_up(&self) -> bool {
        // SAFETY: The device is valid.
        let flags = unsafe { bindings::netif_get_flags(self.as_raw()) };
        flags & bindings::net_device_flags_IFF_UP != 0
    }
}

/// Events of the netdevice notifier chain that drivers here react to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NetdevEvent {
    /// The device is being unregistered: drop everything that refers to it.
    Unregister,
    /// The MTU changed.
    ChangeMtu,
    /// The device went up, down, or its carrier changed: the port's state
    /// may have changed.
    LinkChange,
    /// Any other event, with its `NETDEV_*` number.
    Other(u64),
}

impl NetdevEvent {
    fn from_raw(event: c_ulong) -> Self {
        match event as u32 {
            bindings::netdev_cmd_NETDEV_UNREGISTER => Self::Unregister,
            bindings::netdev_cmd_NETDEV_CHANGEMTU => Self::ChangeMtu,
            bindings::netdev_cmd_NETDEV_UP
            | bindings::netdev_cmd_NETDEV_DOWN
            | bindings::netdev_cmd_NETDEV_CHANGE => Self::LinkChange,
            _ => Self::Other(event as u64),
        }
    }
}

/// Receives netdevice notifier events. Called in process context with RTNL held:
/// implementations must not take RTNL or wait for anything that does.
pub(crate) trait NetdevEvents: Send + Sync + 'static {
    /// Handles `event` for `ndev`.
    fn event(&self, event: NetdevEvent, ndev: &NetDevice);
}

/// A registration on the netdevice notifier chain; unregisters on drop.
///
/// # Invariants
///
/// `nb` is registered with `register_netdevice_notifier` for the whole life of the
/// pinned object, and its callback is `Self::notifier_call`.
#[pin_data(PinnedDrop)]
pub(crate) struct NetdevNotifier<T: NetdevEvents> {
    handler: Arc<T>,
    #[pin]
    nb: Opaque<bindings::notifier_block>,
}

// SAFETY: The notifier block is only touched by the notifier core under its lock;
// the handler is `Send + Sync`.
unsafe impl<T: NetdevEvents> Send for NetdevNotifier<T> {}
// SAFETY: As above.
unsafe impl<T: NetdevEvents> Sync for NetdevNotifier<T> {}

impl<T: NetdevEvents> NetdevNotifier<T> {
    /// Registers `handler` on the netdevice notifier chain. The kernel replays
    /// `NETDEV_REGISTER`/`NETDEV_UP` for existing devices during this call.
    pub(crate) fn new(handler: Arc<T>) -> impl PinInit<Self, Error> {
        // `handler` is initialised before `nb`, so it is in place when the first
        // (replayed) event arrives.
        try_pin_init!(Self {
            handler,
            nb <- Opaque::try_ffi_init(|slot: *mut bindings::notifier_block| {
                let nb = bindings::notifier_block {
                    notifier_call: Some(Self::notifier_call),
                    ..Default::default()
                };
                // SAFETY: `slot` is valid for writes and pinned; it stays
                // registered until `drop` (type invariant).
                unsafe {
                    slot.write(nb);
                    to_result(bindings::register_netdevice_notifier(slot))
                }
            }),
        })
    }

    /// # Safety
    ///
    /// Only as the `notifier_call` of this notifier's `notifier_block`, while
    /// it is registered.
    unsafe extern "C" fn notifier_call(
        nb: *mut bindings::notifier_block,
        event: c_ulong,
        info: *mut c_void,
    ) -> c_int {
        // CAST: `nb` is the `nb` field of a `NetdevNotifier<T>` (type invariant);
        // `Opaque<notifier_block>` is transparent over `notifier_block`.
        // SAFETY: The containing object is pinned and alive while registered.
        let this = unsafe { &*kernel::container_of!(nb.cast::<Opaque<_>>(), Self, nb) };
        // SAFETY: The notifier chain passes a `netdev_notifier_info`, and the device
        // is valid for the duration of the call.
        let ndev = unsafe { NetDevice::from_raw(bindings::mr_netdev_notifier_info_to_dev(info)) };
        this.handler.event(NetdevEvent::from_raw(event), ndev);
        bindings::NOTIFY_DONE as c_int
    }
}

#[pinned_drop]
impl<T: NetdevEvents> PinnedDrop for NetdevNotifier<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: Registered in `new` (type invariant). This waits for running
        // callbacks, so none can use `self` afterwards.
        unsafe { bindings::unregister_netdevice_notifier(self.nb.get()) };
    }
}
