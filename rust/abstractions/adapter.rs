// SPDX-License-Identifier: GPL-2.0

//! The device's `ib_device_ops` table: the device-level operations (attributes,
//! ports, P_Keys, link layer) bridged to a [`DeviceOps`] implementation, and
//! the verbs part from `verbs_adapter.rs`. `DeviceSet` (`device.rs`) installs
//! the table with its own `dealloc_driver`.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{
    bindings,
    ops::{Device, DeviceOps},
    restrack::ResAdapter,
    types::{PhysState, PortState},
    verbs_adapter::VerbsAdapter,
};
use core::marker::PhantomData;
use kernel::{
    error::{code::*, from_result},
    ffi::c_int,
    ThisModule,
};

/// Bridges C's `ib_device_ops` to a [`DeviceOps`] implementation.
pub(super) struct Adapter<T: DeviceOps>(PhantomData<T>);

// Each `unsafe` function here is the `ib_device_ops` operation of its name: its
// contract is the RDMA core's for that operation, on a device of a
// `DeviceSet<T>` (what each relies on is in its SAFETY comments).
#[allow(clippy::missing_safety_doc)]
impl<T: DeviceOps> Adapter<T> {
    /// The operations table of a device of `module` whose driver data is freed
    /// by `dealloc_driver` (the device set's).
    pub(super) fn ops(
        module: &'static ThisModule,
        dealloc_driver: unsafe extern "C" fn(*mut bindings::ib_device),
    ) -> bindings::ib_device_ops {
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
            dealloc_driver: Some(dealloc_driver),
            ..Default::default()
        };
        if T::HAS_PORT_COUNTERS && !T::PORT_COUNTERS.is_empty() {
            ops.alloc_hw_port_stats = Some(Self::alloc_hw_port_stats);
            ops.get_hw_stats = Some(Self::get_hw_stats);
        }
        VerbsAdapter::<T>::fill(&mut ops);
        ResAdapter::<T>::fill(&mut ops);
        ops
    }

    unsafe extern "C" fn alloc_hw_port_stats(
        _ib: *mut bindings::ib_device,
        _port: u32,
    ) -> *mut bindings::rdma_hw_stats {
        let descs = T::PORT_COUNTERS;
        let Ok(n) = c_int::try_from(descs.len()) else {
            return core::ptr::null_mut();
        };
        // SAFETY: `descs` is `'static` and `n` long, and `CounterDesc` is a
        // transparent `rdma_stat_desc`; the core keeps the pointer and frees
        // what it is given back.
        unsafe {
            bindings::rdma_alloc_hw_stats_struct(
                descs.as_ptr().cast(),
                n,
                // Lossless: a `u32` in an `unsigned long`.
                bindings::RDMA_HW_STATS_DEFAULT_LIFESPAN as usize,
            )
        }
    }

    unsafe extern "C" fn get_hw_stats(
        ib: *mut bindings::ib_device,
        stats: *mut bindings::rdma_hw_stats,
        port: u32,
        _index: c_int,
    ) -> c_int {
        // SAFETY: As in `query_device`.
        let dev = unsafe { Device::<T>::from_raw(ib) };
        // SAFETY: `stats` came from `alloc_hw_port_stats`: its value array
        // has `num_counters` entries, and the core holds `stats->lock`, so
        // nothing else touches them while they are filled.
        let values = unsafe {
            let n = usize::try_from((*stats).num_counters).unwrap_or(0);
            core::slice::from_raw_parts_mut((*stats).value.as_mut_ptr(), n)
        };
        let n = values.len().min(T::PORT_COUNTERS.len());
        let Some(v) = values.get_mut(..n) else {
            return 0;
        };
        match T::port_counters(dev, port, v) {
            // At most the driver's count of names, an `i32` (checked when
            // the stats were allocated).
            Ok(()) => n as c_int,
            Err(e) => e.to_errno(),
        }
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
            attr.max_srq = a.max_srq;
            attr.max_srq_wr = a.max_srq_wr;
            attr.max_srq_sge = a.max_srq_sge;
            if a.max_srq > 0 {
                // `modify_srq` with IB_SRQ_MAX_WR resizes.
                attr.device_cap_flags |= bindings::ib_device_cap_flags_IB_DEVICE_SRQ_RESIZE as u64;
            }
            if a.max_fast_reg_pages > 0 {
                // `alloc_mr`, `map_mr_sg`, REG_MR, LOCAL_INV, SEND_WITH_INV.
                attr.device_cap_flags |=
                    bindings::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS as u64;
                attr.max_fast_reg_page_list_len = a.max_fast_reg_pages;
            }
            attr.max_mcast_grp = a.max_mcast_grp;
            attr.max_mcast_qp_attach = a.max_mcast_qp_attach;
            attr.max_total_mcast_qp_attach = a.max_total_mcast_qp_attach;
            attr.max_qp_rd_atom = a.max_rd_atom;
            attr.max_qp_init_rd_atom = a.max_rd_atom;
            attr.max_res_rd_atom = a.max_rd_atom * a.max_qp;
            attr.atomic_cap = bindings::ib_atomic_cap_IB_ATOMIC_HCA;
            attr.max_pkeys = 1;
            attr.local_ca_ack_delay = 15;
            // Devices created here are freed by `dealloc_driver`, so the core may
            // unregister them on the user's request (`rdma link delete`).
            attr.kernel_cap_flags |= u64::from(bindings::ib_kernel_cap_flags_IBK_ALLOW_USER_UNREG);
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
            // The connection manager serves the port (QP1 carries its MADs).
            attr.port_cap_flags = bindings::ib_port_capability_mask_bits_IB_PORT_CM_SUP;
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
            // A RoCE v2 port as the core knows one: GIDs from IP addresses,
            // Ethernet address handles, and the MAD and CM services, whose
            // MADs QP1 (a GSI QP, over MetaRoCE datagrams) carries, so that
            // the kernel's connection managers (RDMA-CM) serve the port.
            imm.core_cap_flags = bindings::RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
            imm.gid_tbl_len = p.gid_tbl_len;
            imm.pkey_tbl_len = p.pkey_tbl_len;
            imm.max_mad_size = bindings::IB_MGMT_MAD_SIZE;
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
}
