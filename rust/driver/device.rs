// SPDX-License-Identifier: GPL-2.0

//! A MetaRoCE RDMA device: one port over one net device.

use super::{
    counters::PORT_COUNTERS,
    cq::{Cq, MAX_CQE},
    frmr::{FastMem, MAX_FAST_PAGES},
    incarnation::paths,
    mcast::{MAX_ATTACHED, MAX_GROUPS, MAX_PER_GROUP},
    mr::{check_mr_access, Mem, MAX_MRS},
    qp::{Qp, MAX_QP_WR, MAX_SGE},
    quota::Kind,
    rd_atomic::MAX_RD_ATOMIC,
    requester::MAX_INLINE,
    shared::{Mr, Pd, MAX_QPS},
    srq::{Srq, MAX_SRQ_WR},
    state::Shared,
    telemetry::{self, Telemetry},
};
use crate::abstractions::{
    memory::{KernelMemory, Translation, Umem},
    net::NetPorts,
    netdev::NetDevice,
    ops::{CqEvents, Device, DeviceOps, ResAttrs, SrqEvents, Udata},
    ring::CqRingMem,
    types::{
        Access, AhAttr, CounterDesc, DeviceAttr, IbMtu, IpAddr, LinkSpeed, MrKeys, PhysState,
        PortAttr, PortImmutable, PortState, QpCreate, QpModify, QpQuery, RecvWr, SendWr, SrqAttr,
        SrqModify, Wc,
    },
};
use crate::transport::framing::max_payload;
use kernel::{
    debugfs,
    prelude::*,
    sync::{
        atomic::{Atomic as KAtomic, Relaxed},
        Arc,
    },
};

/// The uverbs ABI version (`uapi/rdma/metaroce-abi.h`).
pub(crate) const ABI_VERSION: u32 = 1;
/// `METAROCE_UCTX_SYSCALL_QUEUES`.
const UCTX_SYSCALL_QUEUES: u32 = 1;
/// `METAROCE_UCTX_CQ_RING`.
const UCTX_CQ_RING: u32 = 1 << 1;

/// Whether CQs may have rings shared with user space: the `cq_ring` module
/// parameter, set at load (1, the default; 0: none).
fn cq_rings() -> bool {
    *crate::module_parameters::cq_ring.value() != 0
}

/// Entries in the port's GID table (RoCE v2 GIDs from the addresses of the
/// net device and of the devices stacked on it). The core makes three sysfs
/// files per entry, and, while RDMA devices are shared among network
/// namespaces (its default mode), it does so in every namespace: the length
/// is paid per device and per namespace, at creation and removal. In the
/// debug guest, beside eleven namespaces, `rdma link add` took 26 s with
/// 1024 entries (rdma_rxe's length) and 3.7 s with 128. 128 is far more than
/// a net device's addresses; an address past it gets no GID (the core keeps
/// no overflow), as past 1024 before.
pub(crate) const GID_TABLE_LEN: i32 = 128;

/// The only P_Key: the default, full-membership partition.
pub(crate) const DEFAULT_PKEY: u16 = 0xffff;

/// The one port of every MetaRoCE device.
pub(crate) const PORT: u32 = 1;

/// Per-device state: the objects' shared tables, attached to the MetaRoCE
/// UDP port of the net device's namespace.
pub(crate) struct MetaroceDevice {
    shared: Arc<Shared>,
    /// Whether the port was active at the last link event (`link_downed`).
    link_up: KAtomic<bool>,
    /// `/sys/kernel/debug/metaroce/<name>` (telemetry.rs), removed when
    /// the device goes.
    _telemetry: Pin<KBox<debugfs::File<Telemetry>>>,
}

impl MetaroceDevice {
    /// A device named `name` on `ndev`, attached to its namespace's port
    /// (opened if this is the namespace's first device), with its telemetry
    /// file in `dir`.
    pub(crate) fn new(
        name: &CStr,
        ndev: &NetDevice,
        ports: &NetPorts<Shared>,
        dir: &debugfs::Dir,
    ) -> Result<Self> {
        // `rdma link add` holds no RTNL: the link speed may be read here.
        let shared = Shared::new(
            name,
            max_payload(ndev.mtu()),
            ndev.speed_mbps(),
            ndev.ifindex(),
        )?;
        let data = Telemetry {
            dev: shared.clone(),
        };
        let file = KBox::pin_init(
            dir.read_callback_file(name, data, &telemetry::write),
            GFP_KERNEL,
        )?;
        let port = ports.attach(ndev, shared.clone())?;
        shared.set_port(port);
        Ok(Self {
            shared,
            link_up: KAtomic::new(ndev.is_active()),
            _telemetry: file,
        })
    }

    /// Every connection lets go of its cached routes (a net device is
    /// going away: netdevice notifier, RTNL held).
    pub(crate) fn forget_routes(&self) {
        self.shared.forget_routes();
    }

    /// The net device went up or down or its carrier changed (netdevice
    /// notifier, RTNL held): an active port that is no longer counts in
    /// `link_downed`; the capacity shared among senders follows a link
    /// speed `link_mbps` that changed.
    pub(crate) fn link_changed(&self, active: bool, link_mbps: Option<u32>) {
        if self.link_up.xchg(active, Relaxed) && !active {
            self.shared.link_down();
        }
        self.shared.set_capacity(link_mbps);
    }
}

impl Drop for MetaroceDevice {
    fn drop(&mut self) {
        self.shared.close();
    }
}

/// The modified EUI-64 of a MAC address (RFC 4291 appendix A): `ff:fe` in the
/// middle and the universal/local bit inverted. RoCE devices use it as node GUID.
pub(crate) fn node_guid(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

/// The RDMA MTU for a net device MTU: the largest IB MTU that still fits in one
/// frame with all headers, or `None` if the link is too small for MetaRoCE.
pub(crate) fn port_mtu(netdev_mtu: u32) -> Option<IbMtu> {
    IbMtu::largest_within(max_payload(netdev_mtu))
}

/// The port attributes for a net device with MTU `mtu`, carrier state `active`
/// and administrative state `admin_up`.
fn port_attr(mtu: u32, active: bool, admin_up: bool, link: LinkSpeed) -> PortAttr {
    // A link too small for any IB MTU cannot carry MetaRoCE: report it down.
    let (state, active_mtu) = match port_mtu(mtu) {
        Some(m) if active => (PortState::Active, m),
        Some(m) => (PortState::Down, m),
        None => (PortState::Down, IbMtu::Mtu256),
    };
    let phys_state = if active {
        PhysState::LinkUp
    } else if admin_up {
        PhysState::Polling
    } else {
        PhysState::Disabled
    };
    PortAttr {
        state,
        phys_state,
        max_mtu: IbMtu::Mtu4096,
        active_mtu,
        phys_mtu: mtu,
        gid_tbl_len: GID_TABLE_LEN,
        pkey_tbl_len: 1,
        max_msg_sz: 1 << 31,
        link,
    }
}

fn check_port(port: u32) -> Result {
    if port == PORT {
        Ok(())
    } else {
        Err(EINVAL)
    }
}

#[vtable]
impl DeviceOps for MetaroceDevice {
    fn query_device(dev: &Device<Self>) -> Result<DeviceAttr> {
        Ok(DeviceAttr {
            fw_ver: 0,
            sys_image_guid: dev.node_guid(),
            // No IEEE OUI is ours: the all-ones value software devices
            // report (rdma_rxe too); verbs programs read a 0 as no vendor.
            vendor_id: 0xff_ffff,
            vendor_part_id: 0,
            hw_ver: 0,
            max_mr_size: u64::MAX,
            page_size_cap: 0xffff_f000,
            max_qp: MAX_QPS as i32,
            max_qp_wr: MAX_QP_WR as i32,
            max_sge: MAX_SGE as i32,
            max_cq: Kind::Cq.max() as i32,
            max_cqe: MAX_CQE as i32,
            max_mr: MAX_MRS as i32,
            max_pd: Kind::Pd.max() as i32,
            max_rd_atom: MAX_RD_ATOMIC.into(),
            max_srq: Kind::Srq.max() as i32,
            max_srq_wr: MAX_SRQ_WR as i32,
            max_srq_sge: MAX_SGE as i32,
            max_fast_reg_pages: MAX_FAST_PAGES as u32,
            max_mcast_grp: MAX_GROUPS as i32,
            max_mcast_qp_attach: MAX_PER_GROUP as i32,
            max_total_mcast_qp_attach: MAX_ATTACHED as i32,
        })
    }

    fn query_port(dev: &Device<Self>, port: u32) -> Result<PortAttr> {
        check_port(port)?;
        // Between the net device's unregistration and this device's, the port has
        // no net device: it is down, not broken.
        let Some(ndev) = dev.netdev(port) else {
            return Ok(port_attr(0, false, false, LinkSpeed::SLOWEST));
        };
        let (mtu, active, admin_up) = (ndev.mtu(), ndev.is_active(), ndev.is_admin_up());
        drop(ndev);
        let link = dev.eth_speed(port).unwrap_or(LinkSpeed::SLOWEST);
        Ok(port_attr(mtu, active, admin_up, link))
    }

    fn port_immutable(_dev: &Device<Self>, port: u32) -> Result<PortImmutable> {
        check_port(port)?;
        Ok(PortImmutable {
            gid_tbl_len: GID_TABLE_LEN,
            pkey_tbl_len: 1,
        })
    }

    fn query_pkey(_dev: &Device<Self>, port: u32, index: u16) -> Result<u16> {
        check_port(port)?;
        match index {
            0 => Ok(DEFAULT_PKEY),
            _ => Err(EINVAL),
        }
    }

    const PORT_COUNTERS: &'static [CounterDesc] = PORT_COUNTERS;

    fn port_counters(dev: &Device<Self>, port: u32, values: &mut [u64]) -> Result {
        check_port(port)?;
        dev.shared.port_counters(values)
    }

    const UVERBS_ABI_VERSION: u32 = ABI_VERSION;
    const NODE_DESC: &'static [u8] = b"metaroce";

    type Ucontext = ();
    type Pd = Pd;
    type Cq = Cq;
    type Mr = Mr;
    type Qp = Qp;
    type Srq = Srq;

    fn alloc_ucontext(_dev: &Device<Self>, udata: &mut Udata) -> Result<()> {
        // struct metaroce_alloc_ucontext_resp, native byte order.
        let mut resp = [0u8; 16];
        let flags = if cq_rings() {
            UCTX_SYSCALL_QUEUES | UCTX_CQ_RING
        } else {
            UCTX_SYSCALL_QUEUES
        };
        for (i, v) in [ABI_VERSION, flags, MAX_INLINE, u32::from(paths())]
            .iter()
            .enumerate()
        {
            resp[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
        }
        udata.respond(&resp)
    }

    fn alloc_pd(dev: &Device<Self>) -> Result<Pd> {
        Pd::new(&dev.shared)
    }

    fn cq_size(_dev: &Device<Self>, cqe: u32) -> Result<u32> {
        if cqe == 0 || cqe > MAX_CQE {
            return Err(EINVAL);
        }
        Ok(cqe)
    }

    fn cq_rings(_dev: &Device<Self>) -> bool {
        cq_rings()
    }

    fn create_cq(
        dev: &Device<Self>,
        cqe: u32,
        events: Arc<CqEvents>,
        ring: Option<Arc<CqRingMem>>,
    ) -> Result<Cq> {
        Cq::new(cqe, events, &dev.shared.objects, ring)
    }

    fn resize_cq(cq: &Cq, cqe: u32, ring: Option<Arc<CqRingMem>>) -> Result {
        cq.resize(cqe, ring)
    }

    fn destroy_cq(cq: &Cq) {
        cq.detach();
    }

    fn poll_one(cq: &Cq) -> Option<Wc> {
        cq.poll_one()
    }

    fn req_notify(cq: &Cq, solicited: bool) -> bool {
        cq.req_notify(solicited)
    }

    fn reg_user_mr(
        dev: &Device<Self>,
        pd: &Pd,
        umem: Umem,
        iova: u64,
        access: Access,
    ) -> Result<(Mr, MrKeys)> {
        check_mr_access(access)?;
        let (key, keys) = dev.shared.reg_mr(pd.id, Mem::User(umem), iova, access)?;
        Ok((
            Mr {
                key,
                dev: dev.shared.clone(),
            },
            keys,
        ))
    }

    fn get_dma_mr(
        dev: &Device<Self>,
        pd: &Pd,
        access: Access,
        mem: KernelMemory,
    ) -> Result<(Mr, MrKeys)> {
        // No remote peer may reach kernel memory at large (a consumer asking
        // for IB_PD_UNSAFE_GLOBAL_RKEY is refused); local access only.
        let remote = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
        if access.0 & remote != 0 {
            return Err(EINVAL);
        }
        let (key, keys) = dev.shared.reg_mr(pd.id, Mem::Kernel(mem), 0, access)?;
        Ok((
            Mr {
                key,
                dev: dev.shared.clone(),
            },
            keys,
        ))
    }

    fn alloc_mr(
        dev: &Device<Self>,
        pd: &Pd,
        max_pages: u32,
        mem: KernelMemory,
    ) -> Result<(Mr, MrKeys)> {
        let key = dev.shared.reg_fast(pd.id, FastMem::new(max_pages, mem)?)?;
        Ok((
            Mr {
                key,
                dev: dev.shared.clone(),
            },
            MrKeys {
                lkey: key,
                rkey: key,
            },
        ))
    }

    fn map_mr_sg(mr: &Mr, pages: &[u64], page_size: u64, first: u64, len: u64) -> Result {
        mr.dev.stage_fast(mr.key, pages, page_size, first, len)
    }

    fn rereg_user_mr(
        dev: &Device<Self>,
        mr: &Mr,
        pd: Option<&Pd>,
        access: Option<Access>,
        trans: Option<Translation<'_>>,
    ) -> Result {
        if let Some(a) = access {
            check_mr_access(a)?;
        }
        dev.shared.rereg_mr(mr.key, pd.map(|p| p.id), access, trans)
    }

    fn dereg_mr(mr: &Mr) {
        mr.dev.dereg_mr(mr.key);
    }

    fn create_srq(
        dev: &Device<Self>,
        pd: &Pd,
        attr: &mut SrqAttr,
        events: Arc<SrqEvents>,
    ) -> Result<Srq> {
        Srq::new(pd.id, attr, events, &dev.shared.objects)
    }

    fn modify_srq(srq: &Srq, m: &SrqModify) -> Result {
        srq.modify(m)
    }

    fn query_srq(srq: &Srq) -> SrqAttr {
        srq.query()
    }

    fn destroy_srq(_srq: &Srq) {}

    fn post_srq_recv(srq: &Srq, wr: &RecvWr) -> Result {
        srq.post_recv(wr)
    }

    fn create_qp(dev: &Device<Self>, req: &mut QpCreate<'_, Pd, Cq, Srq>) -> Result<(Qp, u32)> {
        Qp::create(&dev.shared, req)
    }

    fn modify_qp(qp: &Qp, m: &QpModify) -> Result {
        qp.modify(m)
    }

    fn query_qp(qp: &Qp) -> QpQuery {
        qp.query()
    }

    fn destroy_qp(qp: &Qp) {
        qp.destroy()
    }

    fn qp_attrs(qp: &Qp, out: &mut ResAttrs<'_>) -> Result {
        qp.attrs(out)
    }

    fn cq_attrs(cq: &Cq, out: &mut ResAttrs<'_>) -> Result {
        cq.attrs(out)
    }

    fn mr_attrs(mr: &Mr, out: &mut ResAttrs<'_>) -> Result {
        mr.attrs(out)
    }

    fn post_send(qp: &Qp, wr: &SendWr) -> Result {
        qp.post_send(wr)
    }

    fn post_recv(qp: &Qp, wr: &RecvWr) -> Result {
        qp.post_recv(wr)
    }

    fn create_ah(_dev: &Device<Self>, ah: &AhAttr) -> Result {
        // A host, or a multicast group (UD sends to it: mcast.rs).
        if !ah.ip.is_unicast() && !ah.ip.is_multicast() {
            return Err(EINVAL);
        }
        Ok(())
    }

    fn attach_mcast(qp: &Qp, gid: IpAddr) -> Result {
        qp.attach_mcast(gid)
    }

    fn detach_mcast(qp: &Qp, gid: IpAddr) -> Result {
        qp.detach_mcast(gid)
    }
}

#[kunit_tests(metaroce_device)]
mod tests {
    use super::*;
    use crate::transport::framing::HEADER_OVERHEAD;

    #[test]
    fn port_mtu_leaves_room_for_headers() {
        // A standard 1500-byte Ethernet MTU carries 1024-byte RDMA payloads.
        assert_eq!(port_mtu(1500), Some(IbMtu::Mtu1024));
        // Exactly enough for 4096 plus headers, and one byte short of it.
        assert_eq!(port_mtu(4096 + HEADER_OVERHEAD), Some(IbMtu::Mtu4096));
        assert_eq!(port_mtu(4096 + HEADER_OVERHEAD - 1), Some(IbMtu::Mtu2048));
        // Jumbo frames are capped at the largest IB MTU.
        assert_eq!(port_mtu(9000), Some(IbMtu::Mtu4096));
    }

    #[test]
    fn port_mtu_rejects_tiny_links() {
        assert_eq!(port_mtu(256 + HEADER_OVERHEAD - 1), None);
        assert_eq!(port_mtu(0), None);
        assert_eq!(port_mtu(68), None);
    }

    #[test]
    fn node_guid_is_modified_eui64() {
        assert_eq!(
            node_guid([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
            0x5054_00ff_fe12_3456
        );
        // The universal/local bit is inverted both ways.
        assert_eq!(node_guid([0; 6]), 0x0200_00ff_fe00_0000);
    }

    #[test]
    fn port_state_follows_the_net_device() {
        let up = port_attr(1500, true, true, LinkSpeed::SLOWEST);
        assert_eq!(up.state, PortState::Active);
        assert_eq!(up.phys_state, PhysState::LinkUp);
        assert_eq!(up.active_mtu, IbMtu::Mtu1024);
        let no_carrier = port_attr(1500, false, true, LinkSpeed::SLOWEST);
        assert_eq!(no_carrier.state, PortState::Down);
        assert_eq!(no_carrier.phys_state, PhysState::Polling);
        let admin_down = port_attr(1500, false, false, LinkSpeed::SLOWEST);
        assert_eq!(admin_down.phys_state, PhysState::Disabled);
        // Carrier on a link too small for MetaRoCE still leaves the port down.
        assert_eq!(
            port_attr(200, true, true, LinkSpeed::SLOWEST).state,
            PortState::Down
        );
    }

    #[test]
    fn only_port_one_exists() {
        assert!(check_port(PORT).is_ok());
        assert_eq!(check_port(0), Err(EINVAL));
        assert_eq!(check_port(2), Err(EINVAL));
    }
}
