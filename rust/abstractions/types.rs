// SPDX-License-Identifier: GPL-2.0

//! Plain values that pass between the RDMA core's adapters and the driver:
//! device and port attributes, access rights, work requests, completions and
//! queue pair attributes. Each is a Rust value with no pointer the driver
//! could follow; the adapters (`adapter.rs`, `verbs_adapter.rs`) convert them
//! from and to the C structures.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{bindings, memory::KernelMemory};
use kernel::prelude::*;

/// The name of one port counter (`rdma statistic show link`), as the RDMA
/// core keeps it (`struct rdma_stat_desc`): built at compile time from a
/// `'static` name, so a driver can list its counters in a constant.
#[repr(transparent)]
pub(crate) struct CounterDesc(pub(super) bindings::rdma_stat_desc);

// SAFETY: The descriptor holds a pointer to a `'static` string and a null
// private pointer; nothing is ever written through either.
unsafe impl Sync for CounterDesc {}

impl CounterDesc {
    /// A counter called `name` (shown as it is).
    // `CStrExt::as_char_ptr` is not `const`; the cast gives the same pointer.
    #[allow(clippy::disallowed_methods)]
    pub(crate) const fn new(name: &'static CStr) -> Self {
        Self(bindings::rdma_stat_desc {
            // CAST: C's `char`, signed in `core`, unsigned in the bindings.
            name: name.as_ptr().cast(),
            flags: 0,
            priv_: core::ptr::null(),
        })
    }

    /// Its name, without the terminating NUL (read by the KUnit tests).
    #[cfg_attr(not(CONFIG_KUNIT), allow(dead_code))]
    pub(crate) fn name(&self) -> &'static [u8] {
        // SAFETY: `new` took the pointer from a `&'static CStr`.
        unsafe { CStr::from_char_ptr(self.0.name.cast()) }.to_bytes()
    }
}

/// "Operation not supported" as user space knows it, `EOPNOTSUPP`. The
/// kernel crate names only `ENOTSUPP`, a kernel-internal code (524) that
/// uverbs hands to user space as it is, where it reads "Unknown error 524".
pub(crate) fn eopnotsupp() -> Error {
    // CAST: a small positive errno constant.
    Error::from_errno(-(kernel::bindings::EOPNOTSUPP as i32))
}

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

    pub(super) fn to_raw(self) -> bindings::ib_mtu {
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
    /// Most shared receive queues, receives per SRQ, elements per receive.
    pub(crate) max_srq: i32,
    pub(crate) max_srq_wr: i32,
    pub(crate) max_srq_sge: i32,
    /// Most pages of a fast registration (`alloc_mr`, REG_MR); 0: the
    /// memory management extensions are not offered.
    pub(crate) max_fast_reg_pages: u32,
    /// Most multicast groups, QPs per group, and attachments in all.
    pub(crate) max_mcast_grp: i32,
    pub(crate) max_mcast_qp_attach: i32,
    pub(crate) max_total_mcast_qp_attach: i32,
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

/// Which queue pair a completion belongs to (the core's `ib_qp`).
///
/// The driver must remove a QP's completions from its CQs before the QP's
/// destroy operation returns (so that no poll reports a freed QP).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct QpId(pub(super) *mut bindings::ib_qp);

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
    /// A fast registration (REG_MR work request).
    RegMr,
    /// A local invalidation.
    LocalInv,
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
    /// The peer's receiver had no receive posted, `rnr_retry` times.
    RnrRetryExcErr,
    /// A local operation (fast registration, invalidation) was not
    /// possible in the region's state or with its arguments.
    LocQpOpErr,
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
    /// Its number (`qp_num` of a ring's completion: `qp` may be destroyed
    /// before user space reads it).
    pub(crate) qpn: u32,
    /// The sender's QP number (receives).
    pub(crate) src_qp: u32,
    /// The receive buffer starts with a GRH (UD receives).
    pub(crate) grh: bool,
    /// The key a Send with Invalidate invalidated (receives).
    pub(crate) invalidated: Option<u32>,
}

impl WcStatus {
    /// `enum ib_wc_status` (the same numbers as `ib_uverbs_wc.status`).
    pub(super) fn raw(self) -> u32 {
        match self {
            WcStatus::Success => bindings::ib_wc_status_IB_WC_SUCCESS,
            WcStatus::LocLenErr => bindings::ib_wc_status_IB_WC_LOC_LEN_ERR,
            WcStatus::LocProtErr => bindings::ib_wc_status_IB_WC_LOC_PROT_ERR,
            WcStatus::WrFlushErr => bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR,
            WcStatus::RemAccessErr => bindings::ib_wc_status_IB_WC_REM_ACCESS_ERR,
            WcStatus::RemInvReqErr => bindings::ib_wc_status_IB_WC_REM_INV_REQ_ERR,
            WcStatus::RemOpErr => bindings::ib_wc_status_IB_WC_REM_OP_ERR,
            WcStatus::RetryExcErr => bindings::ib_wc_status_IB_WC_RETRY_EXC_ERR,
            WcStatus::RnrRetryExcErr => bindings::ib_wc_status_IB_WC_RNR_RETRY_EXC_ERR,
            WcStatus::LocQpOpErr => bindings::ib_wc_status_IB_WC_LOC_QP_OP_ERR,
        }
    }
}

impl WcOpcode {
    /// `enum ib_wc_opcode` (the same numbers as `ib_uverbs_wc.opcode`).
    pub(super) fn raw(self) -> u32 {
        match self {
            WcOpcode::Send => bindings::ib_wc_opcode_IB_WC_SEND,
            WcOpcode::RdmaWrite => bindings::ib_wc_opcode_IB_WC_RDMA_WRITE,
            WcOpcode::RdmaRead => bindings::ib_wc_opcode_IB_WC_RDMA_READ,
            WcOpcode::CompSwap => bindings::ib_wc_opcode_IB_WC_COMP_SWAP,
            WcOpcode::FetchAdd => bindings::ib_wc_opcode_IB_WC_FETCH_ADD,
            WcOpcode::Recv => bindings::ib_wc_opcode_IB_WC_RECV,
            WcOpcode::RecvRdmaWithImm => bindings::ib_wc_opcode_IB_WC_RECV_RDMA_WITH_IMM,
            WcOpcode::RegMr => bindings::ib_wc_opcode_IB_WC_REG_MR,
            WcOpcode::LocalInv => bindings::ib_wc_opcode_IB_WC_LOCAL_INV,
        }
    }
}

impl Wc {
    /// `ib_wc_flags` and the `ex` word (immediate data or invalidated key).
    /// No `IB_WC_WITH_NETWORK_HDR_TYPE`: it matters for UD and GSI only, and
    /// uverbs copies `wc_flags` as they are, where bit 6 means
    /// `IBV_WC_TM_DATA_VALID` (tag matching) to libibverbs.
    pub(super) fn flags_ex(&self) -> (u32, u32) {
        let mut flags = 0;
        let mut ex = 0;
        if let Some(imm) = self.imm {
            ex = imm;
            flags |= bindings::ib_wc_flags_IB_WC_WITH_IMM;
        }
        if self.grh {
            flags |= bindings::ib_wc_flags_IB_WC_GRH;
        }
        if let Some(key) = self.invalidated {
            ex = key;
            flags |= bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE;
        }
        (flags, ex)
    }
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

    /// Whether a right writes to the region's pages, locally or for a peer
    /// (the core's `ib_access_writable`): its pages must be pinned for
    /// writing.
    pub(crate) fn writes(self) -> bool {
        let w = Self::LOCAL_WRITE
            | Self::REMOTE_WRITE
            | Self::REMOTE_ATOMIC
            | bindings::ib_access_flags_IB_ACCESS_MW_BIND;
        self.0 & w != 0
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
    CmpSwap {
        addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    /// Fetch-and-add on the 8 bytes at `addr`.
    FetchAdd { addr: u64, rkey: u32, add: u64 },
    /// Send with Invalidate: the peer invalidates its key `rkey` when
    /// the receive completes.
    SendInv { rkey: u32 },
    /// Fast registration (kernel QPs only): region `key`'s block takes the
    /// page list last mapped into it (`map_mr_sg`), addressed from `iova`
    /// for `length` bytes, with `access` rights, under key `key`.
    RegMr {
        key: u32,
        access: Access,
        iova: u64,
        length: u64,
    },
    /// Local invalidation of key `key` (kernel QPs only).
    LocalInv { key: u32 },
}

impl SendOp {
    /// Whether it is carried out by the QP itself, touching no peer
    /// (fast registration and local invalidation).
    pub(crate) fn is_local(&self) -> bool {
        matches!(self, Self::RegMr { .. } | Self::LocalInv { .. })
    }
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
    /// Whether it waits for every Read and atomic posted before it to be
    /// answered (IB_SEND_FENCE).
    pub(crate) fence: bool,
    /// Whether the receive it completes at the peer is a solicited
    /// completion (IB_SEND_SOLICITED; Sends and Writes with Immediate).
    pub(crate) solicited: bool,
    /// A UD QP's destination (`struct ib_ud_wr`); `None` on other QPs.
    pub(crate) ud: Option<UdDest>,
}

/// Where a UD send goes: its address handle's address, the QP and Q_Key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UdDest {
    /// The address handle's address.
    pub(crate) ah: AhAttr,
    /// The receiving QP number.
    pub(crate) qpn: u32,
    /// The Q_Key the work request gives (the QP's own if the high bit is set).
    pub(crate) qkey: u32,
}

/// An address handle: the IP address its destination GID holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AhAttr {
    pub(crate) ip: IpAddr,
}

/// An IPv4 or IPv6 address in the form of a RoCE v2 GID: 16 bytes, network
/// order, an IPv4 address mapped (`::ffff:a.b.c.d`). The driver keys its
/// peers by it, so one host has one key whichever family reaches it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct IpAddr(pub(crate) [u8; 16]);

impl IpAddr {
    /// The IPv4-mapped form of `a`.
    pub(crate) const fn from_v4(a: [u8; 4]) -> Self {
        Self([
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a[0], a[1], a[2], a[3],
        ])
    }

    /// The address an IPv6 header carries, unless it is IPv4-mapped: that
    /// form is the driver's key for an IPv4 host and never a real IPv6
    /// address on the wire, so an IPv6 datagram that uses it (forged, to
    /// pass for an IPv4 peer) is not taken.
    pub(crate) fn from_ipv6_header(a: [u8; 16]) -> Option<Self> {
        let a = Self(a);
        a.v4().is_none().then_some(a)
    }

    /// The IPv4 address, if this is one.
    pub(crate) fn v4(&self) -> Option<[u8; 4]> {
        let g = &self.0;
        (g[..10].iter().all(|b| *b == 0) && g[10] == 0xff && g[11] == 0xff)
            .then(|| [g[12], g[13], g[14], g[15]])
    }

    /// Whether the address names one host a connection can be made with:
    /// IPv4 not 0.0.0.0/8, multicast, reserved or the limited broadcast;
    /// IPv6 not multicast (`ff00::/8`), unspecified, or another `::/96`
    /// form (IPv4-compatible, deprecated), while loopback `::1` is allowed
    /// as 127/8 is. (A subnet's broadcast address is not known here.)
    pub(crate) fn is_unicast(&self) -> bool {
        if let Some(v) = self.v4() {
            return v[0] != 0 && v[0] < 224;
        }
        let g = &self.0;
        if g[0] == 0xff {
            return false;
        }
        // ::1 is loopback; the rest of ::/96 is unspecified or deprecated.
        let loopback = g[..15].iter().all(|b| *b == 0) && g[15] == 1;
        loopback || !g[..12].iter().all(|b| *b == 0)
    }

    /// Whether it is a multicast address: IPv4 `224.0.0.0/4` (mapped) or
    /// IPv6 `ff00::/8`.
    pub(crate) fn is_multicast(&self) -> bool {
        match self.v4() {
            Some(v) => v[0] & 0xf0 == 0xe0,
            None => self.0[0] == 0xff,
        }
    }

    /// Whether it is an IPv6 link-local address (`fe80::/10`): its scope is
    /// the interface it is reached through.
    pub(crate) fn is_link_local(&self) -> bool {
        self.v4().is_none() && self.0[0] == 0xfe && self.0[1] & 0xc0 == 0x80
    }
}

/// Printed as the kernel log, telemetry and `rdma resource` show addresses:
/// dotted decimal for IPv4, RFC 5952 text for IPv6 (the longest run of two
/// or more zero groups as `::`, lower-case hex).
impl core::fmt::Display for IpAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if let Some([a, b, c, d]) = self.v4() {
            return write!(f, "{a}.{b}.{c}.{d}");
        }
        let mut g = [0u16; 8];
        for (i, w) in g.iter_mut().enumerate() {
            *w = u16::from_be_bytes([self.0[2 * i], self.0[2 * i + 1]]);
        }
        // The longest run of zero groups (the first of equals), if >= 2.
        let (mut best, mut best_len, mut run) = (8, 0, 0);
        for (i, w) in g.iter().enumerate() {
            run = if *w == 0 { run + 1 } else { 0 };
            if run > best_len {
                best_len = run;
                best = i + 1 - run;
            }
        }
        if best_len < 2 {
            best = 8;
        }
        let mut i = 0;
        while i < 8 {
            if i == best {
                f.write_str("::")?;
                i += best_len;
                continue;
            }
            if i > 0 && i != best + best_len {
                f.write_str(":")?;
            }
            write!(f, "{:x}", g[i])?;
            i += 1;
        }
        Ok(())
    }
}

// The kernel's formatting macros (`pr_info!`, `fmt!`) take their own trait.
impl kernel::fmt::Display for IpAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(self, f)
    }
}

/// The queue pair types the device serves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum QpType {
    /// Reliable connected.
    #[default]
    Rc,
    /// Unreliable connected: Sends and Writes only (no Reads, no
    /// atomics), carried over the peer connection exactly as RC's are, so
    /// delivered reliably (Documentation/verbs.md says what differs from
    /// hardware UC).
    Uc,
    /// Unreliable datagram.
    Ud,
    /// The general services QP (QP1) of the MAD layer: UD, for kernel
    /// consumers only.
    Gsi,
}

impl QpType {
    pub(super) fn from_raw(t: bindings::ib_qp_type) -> Option<Self> {
        match t {
            bindings::ib_qp_type_IB_QPT_RC => Some(Self::Rc),
            bindings::ib_qp_type_IB_QPT_UC => Some(Self::Uc),
            bindings::ib_qp_type_IB_QPT_UD => Some(Self::Ud),
            bindings::ib_qp_type_IB_QPT_GSI => Some(Self::Gsi),
            _ => None,
        }
    }

    pub(super) fn to_raw(self) -> bindings::ib_qp_type {
        match self {
            Self::Rc => bindings::ib_qp_type_IB_QPT_RC,
            Self::Uc => bindings::ib_qp_type_IB_QPT_UC,
            Self::Ud => bindings::ib_qp_type_IB_QPT_UD,
            Self::Gsi => bindings::ib_qp_type_IB_QPT_GSI,
        }
    }

    /// Whether its messages are datagrams (UD and GSI).
    pub(crate) fn datagram(self) -> bool {
        matches!(self, Self::Ud | Self::Gsi)
    }

    /// Whether it may ask for Reads and atomics, and answer them (RC only).
    pub(crate) fn has_reads_and_atomics(self) -> bool {
        self == Self::Rc
    }
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
    pub(super) fn from_raw(v: bindings::ib_qp_state) -> Option<Self> {
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

    pub(super) fn to_raw(self) -> bindings::ib_qp_state {
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
/// The core does not check the transition: the driver asks
/// [`QpModify::allowed_from`] with the QP's state, under its own
/// serialisation of the QP's verbs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct QpModify {
    /// The attribute mask as given (`enum ib_qp_attr_mask`).
    pub(super) mask: u32,
    /// The QP's type, whose transitions apply.
    pub(super) qp_type: QpType,
    /// The Q_Key (UD).
    pub(crate) qkey: Option<u32>,
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
    /// The peer's address (the destination GID).
    pub(crate) dest_ip: Option<IpAddr>,
    /// Outstanding RDMA Reads / atomics as initiator and as target.
    pub(crate) max_rd_atomic: Option<u8>,
    pub(crate) max_dest_rd_atomic: Option<u8>,
    /// Retry counts and timeouts, as verbs encode them.
    pub(crate) timeout: Option<u8>,
    pub(crate) retry_cnt: Option<u8>,
    pub(crate) rnr_retry: Option<u8>,
    pub(crate) min_rnr_timer: Option<u8>,
}

impl QpModify {
    /// Whether verbs allows a QP of its type in state `cur` to move to the new
    /// state (or stay in `cur`) with exactly these attributes given: the
    /// transition exists, and every attribute it requires and none it
    /// forbids is in the mask (the core's table, `ib_modify_qp_is_ok`).
    pub(crate) fn allowed_from(&self, cur: QpState) -> bool {
        let next = self.state.unwrap_or(cur);
        // SAFETY: A pure function of its arguments (a table lookup).
        unsafe {
            bindings::ib_modify_qp_is_ok(
                cur.to_raw(),
                next.to_raw(),
                self.qp_type.to_raw(),
                self.mask,
            )
        }
    }
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
    /// Every send completes (created with IB_SIGNAL_ALL_WR).
    pub(crate) sig_all: bool,
    /// Its type.
    pub(crate) qp_type: QpType,
    /// Its Q_Key (UD).
    pub(crate) qkey: u32,
}

/// What the driver is told when a QP is created. `Pd` and `Cq` are the
/// driver's data of protection domains and CQs (`DeviceOps::Pd`, `DeviceOps::Cq`).
pub(crate) struct QpCreate<'a, Pd, Cq, Srq> {
    /// Its type; `None` for a type the device does not serve.
    pub(crate) qp_type: Option<QpType>,
    /// Requested sizes; the driver writes back what it grants.
    pub(crate) caps: QpCaps,
    /// Every send completes (IB_SIGNAL_ALL_WR).
    pub(crate) sig_all: bool,
    /// The protection domain's data.
    pub(crate) pd: &'a Pd,
    /// The CQs' data.
    pub(crate) send_cq: &'a Cq,
    pub(crate) recv_cq: &'a Cq,
    /// The shared receive queue its receives come from, if any.
    pub(crate) srq: Option<&'a Srq>,
    /// Created by a user process.
    pub(crate) user: bool,
    /// Created by a kernel consumer: the memory its work requests name.
    pub(crate) kernel: Option<KernelMemory>,
    /// The identity to put in completions.
    pub(crate) id: QpId,
}

/// The sizes of a shared receive queue (`struct ib_srq_attr`): requested
/// at creation, granted back; `limit` is the armed limit (0: not armed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SrqAttr {
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    pub(crate) limit: u32,
}

/// A change to a shared receive queue (`modify_srq`): a new size, a limit
/// to arm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SrqModify {
    pub(crate) max_wr: Option<u32>,
    pub(crate) limit: Option<u32>,
}

/// What the driver says about a new memory region.
pub(crate) struct MrKeys {
    /// Local key.
    pub(crate) lkey: u32,
    /// Remote key.
    pub(crate) rkey: u32,
}
