// SPDX-License-Identifier: GPL-2.0

//! RDMA devices: allocation, registration and release.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A driver describes its devices with a [`DeviceOps`] implementation, whose value
//! is the per-device data. A [`DeviceSet`] creates, registers and owns the
//! devices of one driver: the RDMA core frees a device (and drops its data) through
//! the `dealloc_driver` operation, whichever path unregisters it (`rdma link
//! delete`, removal of the net device, or the set's own drop at module exit).

use super::{
    adapter::Adapter,
    bindings,
    netdev::NetDevice,
    ops::{Device, DeviceOps},
};
use core::{marker::PhantomData, mem::size_of};
use kernel::{
    alloc::KVec,
    error::code::*,
    ffi::{c_char, c_void},
    new_mutex,
    prelude::*,
    sync::Mutex,
    ThisModule,
};

/// Why [`DeviceSet::add`] did not create a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AddError {
    /// The set already has a device on this net device.
    NetdevBusy,
    /// Another RDMA device already has this name.
    NameTaken,
    /// Anything else, as the kernel reported it.
    Other(Error),
}

impl From<AddError> for Error {
    fn from(e: AddError) -> Self {
        match e {
            AddError::NetdevBusy | AddError::NameTaken => EEXIST,
            AddError::Other(e) => e,
        }
    }
}

impl From<Error> for AddError {
    fn from(e: Error) -> Self {
        Self::Other(e)
    }
}

impl From<kernel::alloc::AllocError> for AddError {
    fn from(_: kernel::alloc::AllocError) -> Self {
        Self::Other(ENOMEM)
    }
}

struct Entry {
    ib: *mut bindings::ib_device,
    /// Identity of the bound net device; compared, never dereferenced.
    ndev: *const bindings::net_device,
    /// The net device went away before the device could be referenced: whoever
    /// finishes registering it must unregister it again.
    doomed: bool,
}

impl Entry {
    fn is_on(&self, ndev: &NetDevice) -> bool {
        self.ndev == ndev.as_raw().cast_const()
    }
}

// SAFETY: The pointers are identities used under the set's mutex; the devices
// they point to are kept alive by the protocol described on `DeviceSet`.
unsafe impl Send for Entry {}

/// The devices of one driver.
///
/// Every device it created is listed until the core frees it (`dealloc_driver`
/// removes the entry), and dropping the set unregisters the ones left, so no
/// device outlives the driver's module.
///
/// # Invariants
///
/// Each `entries[i].ib` points to a live `Device<T>` allocation created by `add`.
#[pin_data(PinnedDrop)]
pub(crate) struct DeviceSet<T: DeviceOps> {
    #[pin]
    entries: Mutex<KVec<Entry>>,
    module: &'static ThisModule,
    _p: PhantomData<T>,
}

impl<T: DeviceOps> DeviceSet<T> {
    /// Creates an empty set for devices owned by `module`.
    pub(crate) fn new(module: &'static ThisModule) -> impl PinInit<Self> {
        pin_init!(Self {
            entries <- new_mutex!(KVec::new(), "DeviceSet::entries"),
            module,
            _p: PhantomData,
        })
    }

    /// Creates a device named `name` on `ndev` with node GUID `node_guid` (host
    /// order) and data `data`, and registers it.
    ///
    /// Says which clash stopped it: a device of the set already on `ndev`, or
    /// another RDMA device with that name (both are `EEXIST` as an [`Error`]).
    pub(crate) fn add(
        &self,
        name: &CStr,
        ndev: &NetDevice,
        node_guid: u64,
        data: impl PinInit<T, Error>,
    ) -> Result<(), AddError> {
        const { assert!(core::mem::align_of::<Device<T>>() <= kernel::bindings::ARCH_KMALLOC_MINALIGN) };
        let mut entries = self.entries.lock();
        if entries.iter().any(|e| e.is_on(ndev)) {
            return Err(AddError::NetdevBusy);
        }
        entries.reserve(1, GFP_KERNEL)?;

        // SAFETY: `ndev` is valid; the core zero-fills and initialises the
        // `ib_device` at the start of an allocation of the requested size.
        let ib = unsafe {
            bindings::_ib_alloc_device(size_of::<Device<T>>(), bindings::mr_dev_net(ndev.as_raw()))
        };
        if ib.is_null() {
            return Err(ENOMEM.into());
        }
        let dev = ib.cast::<Device<T>>();
        // SAFETY: `dev` is a fresh allocation of `Device<T>`'s size and alignment
        // that nothing else uses yet; `data` is written in place and never moved.
        if let Err(e) = unsafe { data.__pinned_init(&raw mut (*dev).data) } {
            // SAFETY: No operations are installed, so this only frees the memory.
            unsafe { bindings::ib_dealloc_device(ib) };
            return Err(e.into());
        }
        let ops = Adapter::<T>::ops(self.module, Self::dealloc_driver);
        // SAFETY: The allocation is valid and not yet visible to anyone else.
        // INVARIANT: `set` points to `self`, `data` is initialised, ops follow.
        unsafe {
            (&raw mut (*dev).set).write(core::ptr::from_ref(self).cast::<c_void>());
            (*ib).phys_port_cnt = 1;
            (*ib).num_comp_vectors = 1;
            (*ib).node_type = bindings::RDMA_NODE_IB_CA as u8;
            (*ib).node_guid = node_guid.to_be();
            // The data path runs through these generic commands (no queue is
            // shared with user space); the core leaves them off by default.
            for cmd in [
                bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_SEND,
                bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_RECV,
                bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_SRQ_RECV,
                bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POLL_CQ,
                bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_REQ_NOTIFY_CQ,
            ] {
                (*ib).uverbs_cmd_mask |= 1u64 << cmd;
            }
            let desc = &mut (*ib).node_desc;
            let room = desc.len() - 1;
            for (d, s) in desc.iter_mut().zip(T::NODE_DESC.iter().take(room)) {
                *d = *s as c_char;
            }
            bindings::mr_ib_mark_name_assigned_by_user(ib);
            bindings::ib_set_device_ops(ib, &ops);
        }
        // From here on `ib_dealloc_device` calls `dealloc_driver`, which drops the
        // data and removes the entry pushed here.
        if entries
            .push_within_capacity(Entry {
                ib,
                ndev: ndev.as_raw(),
                doomed: false,
            })
            .is_err()
        {
            // Unreachable after `reserve(1)`; fail cleanly all the same.
            drop(entries);
            // SAFETY: `ib` is unregistered and owned here.
            unsafe { bindings::ib_dealloc_device(ib) };
            return Err(ENOMEM.into());
        }
        // Registration calls back into the core, which takes RTNL; the netdevice
        // notifier takes this lock under RTNL, so it must not be held here.
        drop(entries);

        // SAFETY: `ib` is valid and not registered; `ndev` is valid.
        let mut ret = unsafe { bindings::ib_device_set_netdev(ib, ndev.as_raw(), 1) };
        if ret == 0 {
            // SAFETY: `ib` is fully set up; `name` is NUL-terminated; no DMA device.
            ret = unsafe {
                bindings::ib_register_device(ib, name.as_char_ptr(), core::ptr::null_mut())
            };
        }
        if ret != 0 {
            // SAFETY: Registration failed, so the caller still owns `ib` and must
            // free it; this calls `dealloc_driver`.
            unsafe { bindings::ib_dealloc_device(ib) };
            // The core reports a name clash as ENFILE; it is nothing else.
            return Err(if ret == ENFILE.to_errno() {
                AddError::NameTaken
            } else {
                AddError::Other(Error::from_errno(ret))
            });
        }

        // The net device may have been unregistered while this one was being
        // registered; its notifier could not take a reference then.
        let entries = self.entries.lock();
        if entries.iter().any(|e| e.ib == ib && e.doomed) {
            // SAFETY: `ib` is live: it is listed and registered.
            unsafe { Self::unregister_queued(ib) };
        }
        Ok(())
    }

    /// Starts the unregistration of every device bound to `ndev`. Safe to call
    /// from a netdevice notifier (it only queues work).
    pub(crate) fn unregister_by_netdev(&self, ndev: &NetDevice) {
        let mut entries = self.entries.lock();
        for e in entries.iter_mut().filter(|e| e.is_on(ndev)) {
            // SAFETY: Listed devices are live (type invariant).
            if !unsafe { Self::unregister_queued(e.ib) } {
                e.doomed = true;
            }
        }
    }

    /// Calls `f` with the data of every device bound to `ndev`, under the
    /// set's lock (`f` must not add or remove devices). Safe to call from a
    /// netdevice notifier.
    pub(crate) fn for_each_on(&self, ndev: &NetDevice, f: impl FnMut(&T)) {
        self.for_each_where(|e| e.is_on(ndev), f);
    }

    /// Calls `f` with the data of every device, as [`Self::for_each_on`].
    pub(crate) fn for_each(&self, f: impl FnMut(&T)) {
        self.for_each_where(|_| true, f);
    }

    fn for_each_where(&self, which: impl Fn(&Entry) -> bool, mut f: impl FnMut(&T)) {
        let entries = self.entries.lock();
        for e in entries.iter().filter(|e| which(e)) {
            // SAFETY: A listed device is live and its data initialised: `add`
            // lists it after initialising the data, and `dealloc_driver`
            // removes the entry, under this lock, before dropping the data.
            let dev = unsafe { Device::<T>::from_raw(e.ib) };
            f(dev);
        }
    }

    /// Queues the unregistration of `ib` if it is registered and not already
    /// going away. Returns whether a reference could be taken.
    ///
    /// # Safety
    ///
    /// `ib` must point to a live device of this set.
    unsafe fn unregister_queued(ib: *mut bindings::ib_device) -> bool {
        // SAFETY: `ib` is live per the safety requirements.
        unsafe {
            if !bindings::mr_ib_device_try_get(ib) {
                return false;
            }
            bindings::ib_unregister_device_queued(ib);
            bindings::ib_device_put(ib);
        }
        true
    }

    fn forget(&self, ib: *mut bindings::ib_device) {
        self.entries.lock().retain(|e| e.ib != ib);
    }

    /// The core frees device `ib`: the set forgets it and its data is dropped.
    ///
    /// # Safety
    ///
    /// Only as the `dealloc_driver` operation of a device this set created,
    /// which the core calls once, after every other operation.
    unsafe extern "C" fn dealloc_driver(ib: *mut bindings::ib_device) {
        let dev = ib.cast::<Device<T>>();
        // SAFETY: `set` is the `DeviceSet<T>` that created the device (written
        // by `add`), which outlives its devices (type invariant of `Device`).
        let set = unsafe { &*(*dev).set.cast::<Self>() };
        set.forget(ib);
        // SAFETY: `data` was initialised before this operation was installed and
        // the core calls `dealloc_driver` once, after every other operation.
        unsafe { core::ptr::drop_in_place(&raw mut (*dev).data) };
    }
}

#[pinned_drop]
impl<T: DeviceOps> PinnedDrop for DeviceSet<T> {
    fn drop(self: Pin<&mut Self>) {
        loop {
            let ib = {
                let entries = self.entries.lock();
                let Some(e) = entries.first() else { break };
                // SAFETY: Listed devices are live; the extra reference on the
                // embedded `struct device` keeps the memory valid until the
                // `put_device` below, whoever completes the unregistration.
                unsafe { bindings::get_device(&raw mut (*e.ib).__bindgen_anon_1.dev) };
                e.ib
            };
            // SAFETY: `ib` is valid (reference held above). If another thread is
            // already unregistering it, this waits for that to finish; either way
            // `dealloc_driver` has removed the entry when it returns.
            unsafe {
                bindings::ib_unregister_device(ib);
                bindings::put_device(&raw mut (*ib).__bindgen_anon_1.dev);
            }
        }
    }
}
