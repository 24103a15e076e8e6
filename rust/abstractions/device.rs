// SPDX-License-Identifier: GPL-2.0

//! RDMA devices: allocation, registration and the device operations table.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A driver describes its devices with a [`DeviceOps`] implementation, whose value
//! is the per-device data. A [`DeviceSet`] creates, registers and owns the
//! devices of one driver: the RDMA core frees a device (and drops its data) through
//! the `dealloc_driver` operation, whichever path unregisters it (`rdma link
//! delete`, removal of the net device, or the set's own drop at module exit).

use super::{
    bindings,
    netdev::NetDevice,
    verbs::{
        Access, CqEvents, KernelMemory, MrKeys, QpCreate, QpModify, QpQuery, RecvWr, SendWr, Udata, Umem,
        VerbsAdapter, Wc,
    },
};
use core::{marker::PhantomData, mem::size_of};
use kernel::{
    alloc::KVec,
    error::{code::*, from_result, to_result},
    ffi::c_int,
    new_mutex,
    prelude::*,
    sync::{aref::ARef, Arc, Mutex},
    types::Opaque,
    ThisModule,
};

/// An InfiniBand MTU (`enum ib_mtu`): the payload size of one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum IbMtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes.
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
}

impl IbMtu {
    /// Every MTU, smallest first.
    pub(crate) const ALL: [IbMtu; 5] = [
        Self::Mtu256,
        Self::Mtu512,
        Self::Mtu1024,
        Self::Mtu2048,
        Self::Mtu4096,
    ];

    /// The MTU in bytes.
    pub(crate) const fn bytes(self) -> u32 {
        match self {
            Self::Mtu256 => 256,
            Self::Mtu512 => 512,
            Self::Mtu1024 => 1024,
            Self::Mtu2048 => 2048,
            Self::Mtu4096 => 4096,
        }
    }

    /// The largest MTU that fits in `bytes`, or `None` if not even 256 does.
    pub(crate) fn largest_within(bytes: u32) -> Option<Self> {
        Self::ALL.iter().rev().copied().find(|m| m.bytes() <= bytes)
    }

    fn to_raw(self) -> bindings::ib_mtu {
        match self {
            Self::Mtu256 => bindings::ib_mtu_IB_MTU_256,
            Self::Mtu512 => bindings::ib_mtu_IB_MTU_512,
            Self::Mtu1024 => bindings::ib_mtu_IB_MTU_1024,
            Self::Mtu2048 => bindings::ib_mtu_IB_MTU_2048,
            Self::Mtu4096 => bindings::ib_mtu_IB_MTU_4096,
        }
    }
}

/// Logical port state (`enum ib_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PortState {
    /// No link.
    Down,
    /// Link up, ready to carry traffic.
    Active,
}

/// Physical port state (`enum ib_port_phys_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PhysState {
    /// Administratively down.
    Disabled,
    /// Administratively up, waiting for carrier.
    Polling,
    /// Carrier present.
    LinkUp,
}

/// Device attributes reported by `query_device`. Limits left at zero mean "no
/// such object can be created".
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DeviceAttr {
    /// Firmware version (shown by `rdma dev` / `ibv_devinfo`).
    pub(crate) fw_ver: u64,
    /// System image GUID, in host order.
    pub(crate) sys_image_guid: u64,
    /// IEEE OUI of the vendor.
    pub(crate) vendor_id: u32,
    /// Vendor part number.
    pub(crate) vendor_part_id: u32,
    /// Hardware version.
    pub(crate) hw_ver: u32,
    /// Largest memory region, in bytes.
    pub(crate) max_mr_size: u64,
    /// Supported page sizes, as a bit mask.
    pub(crate) page_size_cap: u64,
    /// Most queue pairs, work requests per queue, elements per request.
    pub(crate) max_qp: i32,
    pub(crate) max_qp_wr: i32,
    pub(crate) max_sge: i32,
    /// Most completion queues and entries per queue.
    pub(crate) max_cq: i32,
    pub(crate) max_cqe: i32,
    /// Most memory regions and protection domains.
    pub(crate) max_mr: i32,
    pub(crate) max_pd: i32,
    /// Most outstanding RDMA Reads and atomics per QP.
    pub(crate) max_rd_atom: i32,
}

/// Link speed and width of a port, as `enum ib_port_speed` / `enum ib_port_width`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LinkSpeed {
    /// `enum ib_port_speed`.
    pub(crate) speed: u16,
    /// `enum ib_port_width`.
    pub(crate) width: u8,
}

impl LinkSpeed {
    /// The slowest link (SDR, 1X): what a port without a net device reports.
    pub(crate) const SLOWEST: Self = Self {
        speed: bindings::ib_port_speed_IB_SPEED_SDR as u16,
        width: bindings::ib_port_width_IB_WIDTH_1X as u8,
    };
}

/// Port attributes reported by `query_port`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PortAttr {
    /// Logical state.
    pub(crate) state: PortState,
    /// Physical state.
    pub(crate) phys_state: PhysState,
    /// Largest MTU the port supports.
    pub(crate) max_mtu: IbMtu,
    /// MTU in use.
    pub(crate) active_mtu: IbMtu,
    /// MTU of the underlying link, in bytes.
    pub(crate) phys_mtu: u32,
    /// Entries in the GID table.
    pub(crate) gid_tbl_len: i32,
    /// Entries in the P_Key table.
    pub(crate) pkey_tbl_len: u16,
    /// Largest message, in bytes.
    pub(crate) max_msg_sz: u32,
    /// Link speed and width.
    pub(crate) link: LinkSpeed,
}

/// Port properties that never change while the device is registered.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PortImmutable {
    /// Entries in the GID table.
    pub(crate) gid_tbl_len: i32,
    /// Entries in the P_Key table.
    pub(crate) pkey_tbl_len: i32,
}

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

    /// A process opened the device; `udata` takes the ABI's response.
    fn alloc_ucontext(dev: &Device<Self>, udata: &mut Udata) -> Result<Self::Ucontext>;
    /// Creates a protection domain.
    fn alloc_pd(dev: &Device<Self>) -> Result<Self::Pd>;
    /// The number of entries granted for a CQ of `cqe` requested entries.
    fn cq_size(dev: &Device<Self>, cqe: u32) -> Result<u32>;
    /// Creates a CQ of `cqe` entries whose completion event is `events`.
    fn create_cq(dev: &Device<Self>, cqe: u32, events: Arc<CqEvents>) -> Result<Self::Cq>;
    /// A CQ is about to be freed (no QP uses it any more).
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
    /// Deregisters a memory region; its data is dropped right after.
    fn dereg_mr(mr: &Self::Mr);
    /// Creates a QP; returns its data and its number.
    fn create_qp(dev: &Device<Self>, req: &mut QpCreate<'_, Self>) -> Result<(Self::Qp, u32)>;
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
}

/// An RDMA device (`struct ib_device`) with the driver's data `T` after it.
///
/// # Invariants
///
/// - `ib` was allocated by `_ib_alloc_device` with the size of `Self`, so the whole
///   object is one allocation owned by the RDMA core.
/// - `data` is initialised before the device operations are installed and is
///   dropped only by `dealloc_driver`, the last operation the core calls.
/// - `set` points to the [`DeviceSet`] that created the device, which outlives it.
#[repr(C)]
pub(crate) struct Device<T: DeviceOps> {
    ib: Opaque<bindings::ib_device>,
    set: *const DeviceSet<T>,
    data: T,
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

    /// The node GUID, in host order (as given to [`DeviceSet::add`]).
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

/// Bridges C's `ib_device_ops` to a [`DeviceOps`] implementation.
struct Adapter<T: DeviceOps>(PhantomData<T>);

impl<T: DeviceOps> Adapter<T> {
    fn ops(module: &'static ThisModule) -> bindings::ib_device_ops {
        let mut ops = bindings::ib_device_ops {
            // CAST: the kernel crate's and these bindings' `struct module` are the
            // same C type.
            owner: module.as_ptr().cast(),
            driver_id: bindings::rdma_driver_id_RDMA_DRIVER_UNKNOWN,
            query_device: Some(Self::query_device),
            query_port: Some(Self::query_port),
            get_port_immutable: Some(Self::get_port_immutable),
            query_pkey: Some(Self::query_pkey),
            get_link_layer: Some(Self::get_link_layer),
            dealloc_driver: Some(Self::dealloc_driver),
            ..Default::default()
        };
        VerbsAdapter::<T>::fill(&mut ops);
        ops
    }

    unsafe extern "C" fn query_device(
        ib: *mut bindings::ib_device,
        attr: *mut bindings::ib_device_attr,
        uhw: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `uhw` is null or valid for reads, as the core passes it.
            if let Some(uhw) = unsafe { uhw.as_ref() } {
                // No driver-specific input or output is defined.
                if uhw.inlen != 0 || uhw.outlen != 0 {
                    return Err(EINVAL);
                }
            }
            // SAFETY: The core calls operations only on devices created by a
            // `DeviceSet<T>` (they carry this table) and never after `dealloc_driver`.
            let dev = unsafe { Device::<T>::from_raw(ib) };
            let a = T::query_device(dev)?;
            // SAFETY: `attr` is valid for writes; the core zeroed it.
            let attr = unsafe { &mut *attr };
            attr.fw_ver = a.fw_ver;
            attr.sys_image_guid = a.sys_image_guid.to_be();
            attr.vendor_id = a.vendor_id;
            attr.vendor_part_id = a.vendor_part_id;
            attr.hw_ver = a.hw_ver;
            attr.max_mr_size = a.max_mr_size;
            attr.page_size_cap = a.page_size_cap;
            attr.max_qp = a.max_qp;
            attr.max_qp_wr = a.max_qp_wr;
            attr.max_send_sge = a.max_sge;
            attr.max_recv_sge = a.max_sge;
            attr.max_sge_rd = a.max_sge;
            attr.max_cq = a.max_cq;
            attr.max_cqe = a.max_cqe;
            attr.max_mr = a.max_mr;
            attr.max_pd = a.max_pd;
            attr.max_qp_rd_atom = a.max_rd_atom;
            attr.max_qp_init_rd_atom = a.max_rd_atom;
            attr.max_res_rd_atom = a.max_rd_atom * a.max_qp;
            attr.atomic_cap = bindings::ib_atomic_cap_IB_ATOMIC_HCA;
            attr.max_pkeys = 1;
            attr.local_ca_ack_delay = 15;
            // Devices created here are freed by `dealloc_driver`, so the core may
            // unregister them on the user's request (`rdma link delete`).
            attr.kernel_cap_flags |= bindings::ib_kernel_cap_flags_IBK_ALLOW_USER_UNREG as u64;
            Ok(0)
        })
    }

    unsafe extern "C" fn query_port(
        ib: *mut bindings::ib_device,
        port: u32,
        attr: *mut bindings::ib_port_attr,
    ) -> c_int {
        from_result(|| {
            // SAFETY: As in `query_device`.
            let dev = unsafe { Device::<T>::from_raw(ib) };
            let a = T::query_port(dev, port)?;
            // SAFETY: `attr` is valid for writes; the core zeroed it.
            let attr = unsafe { &mut *attr };
            attr.state = match a.state {
                PortState::Down => bindings::ib_port_state_IB_PORT_DOWN,
                PortState::Active => bindings::ib_port_state_IB_PORT_ACTIVE,
            };
            attr.phys_state = match a.phys_state {
                PhysState::Disabled => bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_DISABLED,
                PhysState::Polling => bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_POLLING,
                PhysState::LinkUp => bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_LINK_UP,
            } as u8;
            attr.max_mtu = a.max_mtu.to_raw();
            attr.active_mtu = a.active_mtu.to_raw();
            attr.phys_mtu = a.phys_mtu;
            attr.gid_tbl_len = a.gid_tbl_len;
            attr.pkey_tbl_len = a.pkey_tbl_len;
            attr.max_msg_sz = a.max_msg_sz;
            attr.active_speed = a.link.speed;
            attr.active_width = a.link.width;
            Ok(0)
        })
    }

    unsafe extern "C" fn get_port_immutable(
        ib: *mut bindings::ib_device,
        port: u32,
        imm: *mut bindings::ib_port_immutable,
    ) -> c_int {
        from_result(|| {
            // SAFETY: As in `query_device`.
            let dev = unsafe { Device::<T>::from_raw(ib) };
            let p = T::port_immutable(dev, port)?;
            // SAFETY: `imm` is valid for writes.
            let imm = unsafe { &mut *imm };
            // RoCE v2 framing of addresses (GIDs from IPv4, Ethernet address
            // handles), but no MAD or CM service: the kernel's MAD layer and
            // connection managers would need QP1, which MetaRoCE does not
            // carry yet, and skip the port instead of failing on it.
            imm.core_cap_flags =
                bindings::RDMA_CORE_CAP_PROT_ROCE_UDP_ENCAP | bindings::RDMA_CORE_CAP_ETH_AH;
            imm.gid_tbl_len = p.gid_tbl_len;
            imm.pkey_tbl_len = p.pkey_tbl_len;
            // No MADs (the core insists on 0 without the MAD capability).
            imm.max_mad_size = 0;
            Ok(0)
        })
    }

    /// Every port is Ethernet (see [`DeviceOps::port_immutable`]). Without this
    /// operation the core would derive InfiniBand from the node type.
    unsafe extern "C" fn get_link_layer(
        _ib: *mut bindings::ib_device,
        _port: u32,
    ) -> bindings::rdma_link_layer {
        bindings::rdma_link_layer_IB_LINK_LAYER_ETHERNET
    }

    unsafe extern "C" fn query_pkey(
        ib: *mut bindings::ib_device,
        port: u32,
        index: u16,
        pkey: *mut u16,
    ) -> c_int {
        from_result(|| {
            // SAFETY: As in `query_device`.
            let dev = unsafe { Device::<T>::from_raw(ib) };
            let value = T::query_pkey(dev, port, index)?;
            // SAFETY: `pkey` is valid for writes.
            unsafe { pkey.write(value) };
            Ok(0)
        })
    }

    unsafe extern "C" fn dealloc_driver(ib: *mut bindings::ib_device) {
        let dev = ib.cast::<Device<T>>();
        // SAFETY: `set` outlives its devices (type invariant of `Device`).
        let set = unsafe { &*(*dev).set };
        set.forget(ib);
        // SAFETY: `data` was initialised before this operation was installed and
        // the core calls `dealloc_driver` once, after every other operation.
        unsafe { core::ptr::drop_in_place(&raw mut (*dev).data) };
    }
}

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
        let ops = Adapter::<T>::ops(self.module);
        // SAFETY: The allocation is valid and not yet visible to anyone else.
        // INVARIANT: `set` points to `self`, `data` is initialised, ops follow.
        unsafe {
            (&raw mut (*dev).set).write(self);
            (*ib).phys_port_cnt = 1;
            (*ib).num_comp_vectors = 1;
            (*ib).node_type = bindings::RDMA_NODE_IB_CA as u8;
            (*ib).node_guid = node_guid.to_be();
            // The data path runs through these generic commands (no queue is
            // shared with user space); the core leaves them off by default.
            for cmd in [
                bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_SEND,
                bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_RECV,
                bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POLL_CQ,
                bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_REQ_NOTIFY_CQ,
            ] {
                (*ib).uverbs_cmd_mask |= 1u64 << cmd;
            }
            let desc = &mut (*ib).node_desc;
            let room = desc.len() - 1;
            for (d, s) in desc.iter_mut().zip(T::NODE_DESC.iter().take(room)) {
                *d = *s as _;
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
