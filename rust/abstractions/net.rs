// SPDX-License-Identifier: GPL-2.0

//! The data path's network services: UDP tunnel sockets (IPv4 and IPv6)
//! whose receive callback runs in softirq, and transmission of UDP datagrams
//! built here over either family. Timers and the clock are in `timer`.
//!
//! C headers: [`include/net/udp_tunnel.h`](srctree/include/net/udp_tunnel.h)

use super::sync::{RcuBh, SpinLockBh};
use super::{bindings, netdev::NetDevice, timer::now_ns, types::IpAddr};
use crate::transport::wire;
use core::{
    marker::PhantomData,
    ptr::null_mut,
    sync::atomic::{AtomicPtr, AtomicUsize, Ordering},
};
use kernel::{alloc::KVec, error::to_result, ffi::c_int, prelude::*, sync::Arc};

/// A datagram that arrived on the tunnel port.
pub(crate) struct RxPacket<'a> {
    /// Source address (IPv4-mapped for an IPv4 datagram).
    pub(crate) saddr: IpAddr,
    /// Destination address.
    pub(crate) daddr: IpAddr,
    /// For a UD datagram (which names a QP number, not a connection): the
    /// index of the namespace's net device that has the destination
    /// address (for a link-local one, the device it arrived on), so that
    /// the device on it takes the datagram (0: none, or not a datagram).
    pub(crate) dst_ifindex: i32,
    /// The index of the net device it arrived on (a link-local address
    /// names a host only on its link).
    pub(crate) iif: i32,
    /// UDP source port (host order).
    pub(crate) sport: u16,
    /// Marked ECN Congestion Experienced.
    pub(crate) ce: bool,
    /// The UDP payload.
    pub(crate) payload: &'a [u8],
}

/// A user of a namespace's [`NetPort`] (one RDMA device), to which the port
/// hands the datagrams that are its business.
pub(crate) trait UdpHandler: Send + Sync + 'static {
    /// Whether `pkt` is for this handler, in softirq context. The port's lock
    /// is not held; the port may ask several handlers in turn.
    fn owns(&self, pkt: &RxPacket<'_>) -> bool;
    /// Handles one datagram, in softirq context; it is freed afterwards.
    fn receive(&self, pkt: &RxPacket<'_>);
    /// The port closed (its namespace is going away) and nothing is being
    /// sent through it any more: the handler lets go of the namespace's
    /// routes it caches ([`RouteCache::clear`]), which must not outlive the
    /// namespace. Process context.
    fn port_closed(&self);
}

/// The MetaRoCE UDP port of one network namespace, shared by the devices in
/// it: kernel UDP tunnel sockets, one per address family, whose receive
/// callback runs in softirq.
/// It is opened by the first device of the namespace and closed when the
/// namespace goes away (or the module does), like soft-RoCE's.
///
/// Transmission takes no lock of the port: a sender loads a socket pointer
/// inside an RCU read-side critical section ([`RcuBh`]) and uses it until
/// the section ends; the lock guards the list of devices alone.
///
/// # Invariants
///
/// `sk` and `sk6` are each null or a socket `NetPorts::open` created for
/// this port. Each is set at most once, by `open` (under RTNL, before the
/// port is published in its namespace's slot), and afterwards only cleared,
/// by `close`, never replaced. Whoever clears a pointer owns its socket, and
/// releases it only after an RCU grace period (`synchronize_rcu`) that began
/// after the clearing (`NetPorts::pre_exit`). So a non-null pointer loaded
/// inside an RCU read-side critical section stays a live, open socket, of a
/// live namespace, until that section ends.
pub(crate) struct NetPort<H: UdpHandler> {
    /// The IPv4 socket; null once the namespace is going away.
    sk: AtomicPtr<bindings::sock>,
    /// The IPv6 socket (IPv6 only); null in a kernel or namespace without
    /// IPv6, and once the namespace is going away.
    sk6: AtomicPtr<bindings::sock>,
    /// The devices of the namespace, which `dispatch` asks in turn.
    devs: Pin<KBox<SpinLockBh<KVec<Arc<H>>>>>,
    /// The routes of this namespace that [`RouteCache`]s hold: none may be
    /// left once the devices were told the port closed (`pre_exit`).
    routes: Arc<AtomicUsize>,
}

/// One of a port's sockets, loaded inside the RCU read-side critical
/// section `'a`: open until the section ends (`NetPort`'s invariant), and
/// usable only while it lasts (the borrow of the section's guard).
#[derive(Clone, Copy)]
struct OpenSock<'a>(*mut bindings::sock, PhantomData<&'a RcuBh>);

/// The IP TOS byte of every MetaRoCE datagram: ECN-capable transport
/// (ECT(0)), so that a congested queue marks it (CE) instead of dropping it;
/// the transport's congestion control answers the marks.
const ECT0: u8 = 0x02;

/// Why a datagram was not sent.
#[derive(Debug)]
pub(crate) enum TxError {
    /// The namespace's port is closed.
    Closed,
    /// No route to the destination.
    NoRoute,
    /// No memory for the packet.
    NoMem,
    /// The payload could not be read.
    Fill,
}

/// A held route of one datagram, with its addresses; released when dropped
/// unless [`Route::xmit`] passed it on with the datagram.
enum Route {
    V4 {
        rt: *mut bindings::rtable,
        saddr: u32,
        daddr: u32,
    },
    V6 {
        dst: *mut bindings::dst_entry,
        saddr: bindings::in6_addr,
        daddr: bindings::in6_addr,
    },
}

impl Route {
    /// Room for the link-layer header in front of the datagram.
    fn headroom(&self) -> usize {
        // SAFETY: The route is held; its device is valid while it is.
        (unsafe {
            match self {
                Route::V4 { rt, .. } => bindings::mr_rt_headroom(*rt),
                Route::V6 { dst, .. } => bindings::mr_dst_headroom(*dst),
            }
        }) as usize
    }

    /// Sends `skb` (the UDP payload) on `sk`, the socket the route was
    /// looked up for (of its family); the route goes with it. Inside `sk`'s
    /// section, whose bottom halves are disabled as the IP tunnel output
    /// expects (it counts its nesting in a per-CPU variable).
    fn xmit(self, sk: OpenSock<'_>, skb: *mut bindings::sk_buff, sport: u16, dport: u16) {
        let this = core::mem::ManuallyDrop::new(self);
        let sk = sk.0;
        // SAFETY: The route is held and its reference passes to the call
        // with the skb (ours); `sk` is open until its RCU section ends
        // (`OpenSock`), after this call returns.
        unsafe {
            match &*this {
                Route::V4 { rt, saddr, daddr } => bindings::udp_tunnel_xmit_skb(
                    *rt,
                    sk,
                    skb,
                    *saddr,
                    *daddr,
                    ECT0,
                    64,
                    0,
                    sport.to_be(),
                    dport.to_be(),
                    false,
                    false,
                    0,
                ),
                Route::V6 { dst, saddr, daddr } => bindings::mr_udp6_xmit(
                    *dst,
                    sk,
                    skb,
                    saddr,
                    daddr,
                    ECT0,
                    sport.to_be(),
                    dport.to_be(),
                ),
            }
        }
    }
}

impl Drop for Route {
    fn drop(&mut self) {
        // SAFETY: Held, and not passed on (`xmit` does not drop).
        unsafe {
            match self {
                Route::V4 { rt, .. } => bindings::mr_ip_rt_put(*rt),
                Route::V6 { dst, .. } => bindings::mr_dst_release(*dst),
            }
        }
    }
}

/// The longest a cached route is used before it is looked up again
/// ([`RouteCache`]).
pub(crate) const ROUTE_MAX_AGE_NS: u64 = 100_000_000;

/// Routes held by the module's [`RouteCache`]s. Each port counts its own
/// (`NetPort::routes`), checked when its namespace goes (`pre_exit`); this
/// count is checked when the module unloads (`NetPorts`' drop). Both catch
/// a route still held, not one let go after its namespace was freed (which
/// only KASAN sees, if the release comes while it watches).
static ROUTES_HELD: AtomicUsize = AtomicUsize::new(0);

/// A kernel warning (`WARN_ON`, which the test runs fail on) if `left`
/// cached routes are still held, `when` saying when that is.
fn warn_routes_left(left: usize, when: &str) {
    if left != 0 {
        pr_err!("{left} cached routes {when}\n");
        kernel::warn_on!(true);
    }
}

/// A flow of datagrams, whose route a [`RouteCache`] holds: a destination,
/// a UDP source port (under a multipath route each may take its own link)
/// and the device a link-scoped destination is reached through.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Flow {
    daddr: IpAddr,
    sport: u16,
    oif: Option<i32>,
}

/// The source address a cached route was looked up with.
#[derive(Clone, Copy)]
enum Source {
    V4(u32),
    V6(bindings::in6_addr),
}

/// The route of one flow, held between datagrams so that a packet is not
/// routed afresh while the routing tables stay the same. Each use checks
/// it as the kernel's own route caches do (`dst_check`): a change of the
/// routing tables makes a cached route obsolete (its generation, or for
/// IPv6 its tree's serial number, no longer matches), and so does its
/// device going away; the datagram is then routed afresh and the new route
/// cached. Another flow (a path that moved to a new source port) lets go of
/// the route first.
///
/// No check sees everything a fresh lookup would: IPv6 passes over a route
/// through a router whose neighbour entry is being resolved (or failed) and
/// takes a less specific one, IPv4 with `fib_multipath_use_neigh` passes
/// over a multipath next hop whose neighbour failed, and the neighbour
/// answering changes no generation or serial number. A route is therefore
/// also used for at most [`ROUTE_MAX_AGE_NS`] (100 ms), and then looked up
/// again: a flow that was given such a fallback moves to the route meant
/// for it within that time. That is at most ten lookups per flow a second.
///
/// A cache serves the flows of one [`NetPort`] (the
/// namespace its routes belong to), and is used by one sender at a time
/// (`&mut`): one entry, no per-CPU memory.
///
/// # Invariants
///
/// `dst` is null or a route of `flow` looked up through the port's socket of
/// its family (`source` says which), of which the cache holds one reference,
/// released only by `forget`; `cookie` is the value to check it with,
/// `since` the clock ([`now_ns`]) when it was looked up, and `port_routes`
/// the count of held routes of that port, which the route is counted in
/// (and in `ROUTES_HELD`) while it is held; it is `None` when `dst` is null.
pub(crate) struct RouteCache {
    dst: *mut bindings::dst_entry,
    cookie: u32,
    since: u64,
    port_routes: Option<Arc<AtomicUsize>>,
    source: Source,
    flow: Option<Flow>,
}

// SAFETY: A held route may be used and released from any thread.
unsafe impl Send for RouteCache {}

impl RouteCache {
    /// An empty cache.
    pub(crate) const fn new() -> Self {
        // INVARIANT: No route held.
        Self {
            dst: null_mut(),
            cookie: 0,
            since: 0,
            port_routes: None,
            source: Source::V4(0),
            flow: None,
        }
    }

    /// Releases the route it holds, if any.
    fn forget(&mut self) {
        if !self.dst.is_null() {
            // SAFETY: Held by the cache (type invariant), released once: the
            // pointer is cleared with it.
            unsafe { bindings::mr_dst_release(self.dst) };
            self.dst = null_mut();
            ROUTES_HELD.fetch_sub(1, Ordering::Relaxed);
            if let Some(port) = self.port_routes.take() {
                port.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Releases the route it holds now, and forgets its flow. The caller
    /// makes sure the cache outlives no namespace it holds a route of
    /// ([`UdpHandler::port_closed`]).
    pub(crate) fn clear(&mut self) {
        self.forget();
        self.flow = None;
    }

    /// Makes the cache `flow`'s, letting go of another flow's route.
    fn select(&mut self, flow: Flow) {
        if self.flow != Some(flow) {
            self.forget();
            self.flow = Some(flow);
        }
    }

    /// The cached route if it is still valid, younger than
    /// [`ROUTE_MAX_AGE_NS`] and of the IPv6 family (`v6`) or the IPv4 one,
    /// with a reference for the caller, and its source address; an obsolete
    /// or old one, or one of the other family, is let go.
    fn get(&mut self, v6: bool) -> Option<(*mut bindings::dst_entry, Source)> {
        if self.dst.is_null() {
            return None;
        }
        if matches!(self.source, Source::V6(_)) != v6
            || now_ns().wrapping_sub(self.since) >= ROUTE_MAX_AGE_NS
        {
            self.forget();
            return None;
        }
        // SAFETY: Held (type invariant), so alive; the checks only read it
        // (and its family's routing state). A route whose device went away
        // points at the blackhole device, whose namespace's route generation
        // an IPv4 check would compare with: it is refused first.
        let valid = unsafe {
            !bindings::mr_dst_on_blackhole(self.dst)
                && bindings::mr_dst_check(self.dst, self.cookie) == self.dst
        };
        if !valid {
            self.forget();
            return None;
        }
        // SAFETY: Held by the cache, so its count is not zero: another
        // reference, for the caller.
        unsafe { bindings::mr_dst_hold(self.dst) };
        Some((self.dst, self.source))
    }

    /// Caches `dst`, a route of the selected flow held by the caller (the
    /// cache takes its own reference), looked up with source `source`.
    ///
    /// # Safety
    ///
    /// `dst` is a valid route of the flow selected, of `source`'s family,
    /// looked up through the port whose count of held routes is `held`.
    unsafe fn set(
        &mut self,
        dst: *mut bindings::dst_entry,
        source: Source,
        held: &Arc<AtomicUsize>,
    ) {
        self.forget();
        // SAFETY: `dst` is valid and held by the caller (the function's
        // safety requirements): another reference, for the cache. An IPv6
        // route's cookie is read from the route.
        unsafe {
            bindings::mr_dst_hold(dst);
            self.cookie = match source {
                Source::V4(_) => 0,
                Source::V6(_) => bindings::mr_rt6_cookie(dst),
            };
        }
        // INVARIANT: Held just above, of the selected flow (the safety
        // requirements), with its cookie, looked up now.
        self.dst = dst;
        self.since = now_ns();
        ROUTES_HELD.fetch_add(1, Ordering::Relaxed);
        held.fetch_add(1, Ordering::Relaxed);
        self.port_routes = Some(held.clone());
        self.source = source;
    }
}

impl Drop for RouteCache {
    fn drop(&mut self) {
        self.forget();
    }
}

impl<H: UdpHandler> NetPort<H> {
    /// Stops sending and receiving: the namespace is going away. Returns
    /// the sockets (null: none), now the caller's: no new sender can load
    /// them, but one already inside an RCU read-side critical section may
    /// still use them until a grace period has passed. And the devices that
    /// were attached, to be told once it has ([`UdpHandler::port_closed`]).
    fn close(&self) -> ([*mut bindings::sock; 2], KVec<Arc<H>>) {
        let devs = core::mem::take(&mut *self.devs.lock());
        // INVARIANT: Cleared, not replaced; the caller, which owns the
        // sockets from here on, waits for a grace period before releasing
        // them (`NetPorts::pre_exit`).
        let socks = [
            self.sk.swap(null_mut(), Ordering::AcqRel),
            self.sk6.swap(null_mut(), Ordering::AcqRel),
        ];
        (socks, devs)
    }

    /// The IPv6 socket (`v6`) or the IPv4 one, if the port has it, for use
    /// inside the RCU read-side critical section of `_rcu`.
    fn sock<'a>(&self, v6: bool, _rcu: &'a RcuBh) -> Option<OpenSock<'a>> {
        // Acquire: pairs with `open`'s release, so the socket is seen set up.
        let sk = if v6 { &self.sk6 } else { &self.sk }.load(Ordering::Acquire);
        // Loaded inside the section: open until it ends (type invariant).
        (!sk.is_null()).then_some(OpenSock(sk, PhantomData))
    }

    /// Removes a device from the port (it stays open for the namespace).
    pub(crate) fn detach(&self, dev: &Arc<H>) {
        self.devs.lock().retain(|d| !Arc::ptr_eq(d, dev));
    }

    /// Sends a UDP datagram from `sport` to the MetaRoCE port of `daddr`:
    /// `header`
    /// followed by `payload_len` bytes written by `fill`. `oif` is the index
    /// of the net device a link-local IPv6 destination or a multicast group
    /// is reached through (its scope); other destinations are routed. Runs in
    /// process or softirq context, not with interrupts disabled (atomic
    /// allocation). No lock of the port is taken: the whole of it (route
    /// lookup, `fill`, transmission) is one RCU read-side critical section
    /// with bottom halves disabled, in which the socket loaded at its start
    /// stays open (see [`NetPort`]); so `fill` must not sleep (it may take
    /// the caller's spinlocks). With `cache`, the route is taken from it
    /// when it holds a valid one for this flow, and cached there otherwise.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send(
        &self,
        daddr: IpAddr,
        oif: i32,
        sport: u16,
        header: &[u8],
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result,
        mut cache: Option<&mut RouteCache>,
    ) -> Result<(), TxError> {
        let dport = crate::transport::framing::UDP_PORT;
        // Only these are scoped to the device's link; the rest is routed.
        let oif = (daddr.is_link_local() || daddr.is_multicast()).then_some(oif);
        let rcu = RcuBh::new();
        if let Some(c) = cache.as_deref_mut() {
            c.select(Flow { daddr, sport, oif });
        }
        // The socket is loaded once: the route is looked up for it and the
        // datagram sent on it.
        let (sk, route) = match daddr.v4() {
            Some(v4) => {
                let sk = self.sock(false, &rcu).ok_or(TxError::Closed)?;
                (
                    sk,
                    Self::route4(sk, v4, oif, sport, dport, cache, &self.routes)?,
                )
            }
            None => {
                let Some(sk) = self.sock(true, &rcu) else {
                    // No IPv6 socket: closed, or a namespace without IPv6.
                    return Err(match self.sock(false, &rcu) {
                        None => TxError::Closed,
                        Some(_) => TxError::NoRoute,
                    });
                };
                (
                    sk,
                    Self::route6(sk, &daddr, oif, sport, dport, cache, &self.routes)?,
                )
            }
        };
        let total = header.len() + payload_len;
        // IP and UDP headers: 40 + 8 at most.
        let head = route.headroom() + 48;
        // SAFETY: Plain allocation.
        let skb = unsafe { bindings::mr_alloc_skb((head + total) as u32) };
        if skb.is_null() {
            return Err(TxError::NoMem);
        }
        // SAFETY: `skb` is new with `head + total` bytes of room.
        let buf = unsafe {
            bindings::mr_skb_reserve(skb, head as c_int);
            let p = bindings::mr_skb_put(skb, total as u32).cast::<u8>();
            core::slice::from_raw_parts_mut(p, total)
        };
        buf[..header.len()].copy_from_slice(header);
        if fill(&mut buf[header.len()..]).is_err() {
            // SAFETY: Ours.
            unsafe { bindings::mr_kfree_skb(skb) };
            return Err(TxError::Fill);
        }
        // Still open, even if the port was closed since: `rcu` lasts until
        // the datagram is handed on.
        route.xmit(sk, skb, sport, dport);
        drop(rcu);
        Ok(())
    }

    /// The IPv4 route to `daddr` for a datagram between the two ports, from
    /// the namespace of `sk` (the IPv4 socket), through net device `oif` if
    /// given: `cache`'s if it holds a valid one (`cache` is this flow's).
    // Its C structures are filled field by field, as their C users fill them.
    #[allow(clippy::field_reassign_with_default)]
    fn route4(
        sk: OpenSock<'_>,
        daddr: [u8; 4],
        oif: Option<i32>,
        sport: u16,
        dport: u16,
        mut cache: Option<&mut RouteCache>,
        held: &Arc<AtomicUsize>,
    ) -> Result<Route, TxError> {
        if let Some((dst, Source::V4(saddr))) = cache.as_deref_mut().and_then(|c| c.get(false)) {
            return Ok(Route::V4 {
                // SAFETY: An IPv4 route (its source is one), so an `rtable`.
                rt: unsafe { bindings::mr_dst_rtable(dst) },
                saddr,
                daddr: u32::from_ne_bytes(daddr),
            });
        }
        let mut fl = bindings::flowi4::default();
        fl.daddr = u32::from_ne_bytes(daddr);
        (fl.__fl_common.flowic_proto, fl.uli.ports) = udp_flow(sport, dport);
        if let Some(oif) = oif {
            fl.__fl_common.flowic_oif = oif;
        }
        // SAFETY: `sk` is open (`OpenSock`) and so is its namespace; `fl` is
        // valid for the call.
        let rt = unsafe { bindings::mr_ip_route_output_key(bindings::mr_sock_net(sk.0), &mut fl) };
        // SAFETY: Checking an error pointer.
        if unsafe { bindings::mr_is_err(rt.cast()) } {
            return Err(TxError::NoRoute);
        }
        if let Some(c) = cache {
            // SAFETY: A valid IPv4 route of the flow `send` selected, held
            // (`Route`'s until it is sent or dropped).
            unsafe { c.set(bindings::mr_rt_dst(rt), Source::V4(fl.saddr), held) };
        }
        Ok(Route::V4 {
            rt,
            saddr: fl.saddr,
            daddr: fl.daddr,
        })
    }

    /// The IPv6 route to `daddr` for a datagram between the two ports, from
    /// `sk` (the IPv6 socket), through net device `oif` if given, with the
    /// source address the stack chose: `cache`'s if it holds a valid one
    /// (`cache` is this flow's).
    // Its C structures are filled field by field, as their C users fill them.
    #[allow(clippy::field_reassign_with_default)]
    fn route6(
        sk: OpenSock<'_>,
        daddr: &IpAddr,
        oif: Option<i32>,
        sport: u16,
        dport: u16,
        mut cache: Option<&mut RouteCache>,
        held: &Arc<AtomicUsize>,
    ) -> Result<Route, TxError> {
        if let Some((dst, Source::V6(saddr))) = cache.as_deref_mut().and_then(|c| c.get(true)) {
            let mut d = bindings::in6_addr::default();
            d.in6_u.u6_addr8 = daddr.0;
            return Ok(Route::V6 {
                dst,
                saddr,
                daddr: d,
            });
        }
        let mut fl = bindings::flowi6::default();
        fl.daddr.in6_u.u6_addr8 = daddr.0;
        (fl.__fl_common.flowic_proto, fl.uli.ports) = udp_flow(sport, dport);
        if let Some(oif) = oif {
            fl.__fl_common.flowic_oif = oif;
        }
        // SAFETY: `sk` is open (`OpenSock`) and so is its namespace; `fl` is
        // valid for the call.
        let dst =
            unsafe { bindings::mr_ip6_dst_lookup_flow(bindings::mr_sock_net(sk.0), sk.0, &mut fl) };
        // SAFETY: Checking an error pointer.
        if unsafe { bindings::mr_is_err(dst.cast()) } {
            return Err(TxError::NoRoute);
        }
        if let Some(c) = cache {
            // SAFETY: A valid IPv6 route of the flow `send` selected, held
            // (`Route`'s until it is sent or dropped).
            unsafe { c.set(dst, Source::V6(fl.saddr), held) };
        }
        Ok(Route::V6 {
            dst,
            saddr: fl.saddr,
            daddr: fl.daddr,
        })
    }

    /// # Safety
    ///
    /// Only as the `encap_rcv` of a socket `open` set up for a port.
    unsafe extern "C" fn encap_rcv(sk: *mut bindings::sock, skb: *mut bindings::sk_buff) -> c_int {
        // SAFETY: The UDP receive path calls this under RCU with a live socket
        // and an skb we now own; `sk_user_data` is the port, which outlives
        // the socket by an RCU grace period (see `NetPorts`).
        unsafe {
            let port = bindings::mr_rcu_sk_user_data(sk).cast::<Self>();
            if !port.is_null() && bindings::mr_skb_linearize(skb) == 0 {
                let data = bindings::mr_skb_data(skb);
                let len = bindings::mr_skb_len(skb) as usize;
                // The data starts at the UDP header.
                if len >= 8 {
                    let bytes = core::slice::from_raw_parts(data, len);
                    if let Some(pkt) = Self::packet(sk, skb, bytes) {
                        (*port).dispatch(&pkt);
                    }
                }
            }
            bindings::consume_skb(skb);
        }
        0
    }

    /// The datagram `bytes` (from its UDP header on) of `skb`, which arrived
    /// on `sk`; `None` for an IPv6 one from an IPv4-mapped address.
    ///
    /// # Safety
    ///
    /// As in `encap_rcv`: under the receive path's RCU read lock (the
    /// device that has the destination address is looked up under it),
    /// with `skb`'s headers set.
    unsafe fn packet<'a>(
        sk: *mut bindings::sock,
        skb: *mut bindings::sk_buff,
        bytes: &'a [u8],
    ) -> Option<RxPacket<'a>> {
        let payload = bytes.get(8..)?;
        let datagram = wire::peek(payload).is_some_and(|(t, _)| t == wire::PacketType::Datagram);
        // SAFETY: The caller's guarantees.
        let (saddr, daddr, dst_ifindex, iif, ce) = unsafe {
            if bindings::mr_skb_is_ip6(skb) {
                let d = bindings::mr_skb_daddr6(skb);
                let daddr = IpAddr(d.in6_u.u6_addr8);
                let iif = bindings::mr_inet6_iif(skb);
                (
                    IpAddr::from_ipv6_header(bindings::mr_skb_saddr6(skb).in6_u.u6_addr8)?,
                    daddr,
                    match datagram {
                        false => 0,
                        // The same link-local address may be on several
                        // links (VLANs share their parent's).
                        true if daddr.is_link_local() => iif,
                        true => bindings::mr_addr_ifindex6(sk, &d),
                    },
                    iif,
                    bindings::mr_skb_ce6(skb),
                )
            } else {
                let d = bindings::mr_skb_daddr4(skb);
                (
                    IpAddr::from_v4(bindings::mr_skb_saddr4(skb).to_ne_bytes()),
                    IpAddr::from_v4(d.to_ne_bytes()),
                    if datagram {
                        bindings::mr_addr_ifindex(sk, d)
                    } else {
                        0
                    },
                    bindings::mr_inet_iif(skb),
                    bindings::mr_skb_ce4(skb),
                )
            }
        };
        Some(RxPacket {
            saddr,
            daddr,
            dst_ifindex,
            iif,
            sport: u16::from_be_bytes([bytes[0], bytes[1]]),
            ce,
            payload,
        })
    }

    /// Hands `pkt` to the first device that owns it. The port's lock is not
    /// held while a device looks at the packet (`owns` takes the device's
    /// own locks): the devices are taken one at a time.
    fn dispatch(&self, pkt: &RxPacket<'_>) {
        let mut k = 0;
        let dev = loop {
            let d = self.devs.lock().get(k).cloned();
            match d {
                Some(d) if d.owns(pkt) => break Some(d),
                Some(_) => k += 1,
                None => break None,
            }
        };
        if let Some(d) = dev {
            d.receive(pkt);
        }
    }
}

/// The per-namespace MetaRoCE ports of a module: a `pernet_operations`
/// registration whose per-namespace slot holds the namespace's [`NetPort`].
/// Dropping it closes every port.
///
/// # Invariants
///
/// While registered, the slot of each namespace is null or
/// `Arc::into_raw` of its port, whose sockets' `sk_user_data` is the same
/// pointer; the slot and the port's socket pointers are changed under RTNL
/// (a socket taken from its port by `close` is released without it).
pub(crate) struct NetPorts<H: UdpHandler> {
    _p: PhantomData<H>,
}

struct PernetStatic(
    core::cell::UnsafeCell<bindings::pernet_operations>,
    core::cell::UnsafeCell<u32>,
);

// SAFETY: Written once before registration (under the module's init) and then
// owned by the kernel's pernet machinery.
unsafe impl Sync for PernetStatic {}

static PERNET: PernetStatic = PernetStatic(
    // SAFETY: An all-zero `pernet_operations` is a valid, empty one.
    core::cell::UnsafeCell::new(unsafe { core::mem::zeroed() }),
    core::cell::UnsafeCell::new(0),
);

impl<H: UdpHandler> NetPorts<H> {
    /// Registers the per-namespace slots. Only one `NetPorts` may exist.
    pub(crate) fn register() -> Result<Self> {
        // SAFETY: Nothing else uses the static before registration; the slot
        // is one pointer, zeroed (null) by the kernel for every namespace.
        unsafe {
            let ops = &mut *PERNET.0.get();
            ops.id = PERNET.1.get();
            ops.size = size_of::<*const NetPort<H>>();
            ops.pre_exit = Some(Self::pre_exit);
            ops.exit = Some(Self::exit);
            to_result(bindings::register_pernet_subsys(ops))?;
        }
        Ok(Self { _p: PhantomData })
    }

    fn slot(net: *mut bindings::net) -> *mut *const NetPort<H> {
        // SAFETY: Registered (type invariant): the id is assigned and every
        // live namespace has the slot.
        unsafe { bindings::mr_net_generic(net, *PERNET.1.get()).cast() }
    }

    /// Adds `dev` to the port of `ndev`'s namespace, opening the port if it
    /// is the namespace's first device.
    pub(crate) fn attach(&self, ndev: &NetDevice, dev: Arc<H>) -> Result<Arc<NetPort<H>>> {
        // SAFETY: `ndev` is valid; so is its namespace while it is.
        let net = unsafe { bindings::mr_dev_net(ndev.as_raw()) };
        // SAFETY: RTNL guards the slots (type invariant).
        unsafe { bindings::rtnl_lock() };
        let r = (|| {
            let slot = Self::slot(net);
            // SAFETY: The slot is valid; RTNL is held.
            let mut raw = unsafe { *slot };
            if raw.is_null() {
                raw = Self::open(net)?;
                // SAFETY: As above.
                unsafe { *slot = raw };
            }
            // SAFETY: `raw` is a live port: the slot holds a reference.
            let port = unsafe { Arc::from_raw(raw) };
            let ours = port.clone();
            core::mem::forget(port);
            ours.devs.lock().push(dev, GFP_ATOMIC)?;
            Ok(ours)
        })();
        // SAFETY: Taken above.
        unsafe { bindings::rtnl_unlock() };
        r
    }

    /// Opens the port of `net` (RTNL held) and returns the slot's reference.
    // Its C structures are filled field by field, as their C users fill them.
    #[allow(clippy::field_reassign_with_default)]
    fn open(net: *mut bindings::net) -> Result<*const NetPort<H>> {
        let port = Arc::new(
            NetPort {
                sk: AtomicPtr::new(null_mut()),
                sk6: AtomicPtr::new(null_mut()),
                devs: KBox::pin_init(
                    crate::new_spinlock_bh!(KVec::new(), "metaroce_port"),
                    GFP_KERNEL,
                )?,
                routes: Arc::new(AtomicUsize::new(0), GFP_KERNEL)?,
            },
            GFP_KERNEL,
        )?;
        let sk = Self::socket(net, false)?;
        let sk6 = match Self::socket(net, true) {
            Ok(s) => s,
            // A kernel or namespace without IPv6 (ipv6.disable=1) serves
            // IPv4 only.
            Err(e) if no_ipv6(e) => {
                pr_info!("metaroce: no IPv6 in this namespace: the port serves IPv4 only\n");
                core::ptr::null_mut()
            }
            // Any other error (the port taken by another socket) fails the
            // device: another socket would receive its IPv6 traffic.
            Err(e) => {
                // SAFETY: Just created; nothing else has it.
                unsafe { bindings::udp_tunnel_sock_release(sk) };
                return Err(e);
            }
        };
        // The slot's reference.
        let raw = Arc::into_raw(port.clone());
        for s in [sk, sk6] {
            if s.is_null() {
                continue;
            }
            let mut tcfg = bindings::udp_tunnel_sock_cfg::default();
            tcfg.sk_user_data = raw.cast_mut().cast();
            tcfg.encap_type = 1;
            tcfg.encap_rcv = Some(NetPort::<H>::encap_rcv);
            // SAFETY: `s` was just created; the configuration is complete;
            // `raw` is live.
            unsafe { bindings::setup_udp_tunnel_sock(net, s, &mut tcfg) };
        }
        // INVARIANT: Set once, set up, before the port is published (the
        // caller puts it in the slot, under the RTNL we hold). Release: pairs
        // with the senders' acquire (`NetPort::sock`).
        port.sk.store(sk, Ordering::Release);
        port.sk6.store(sk6, Ordering::Release);
        Ok(raw)
    }

    /// A kernel UDP socket on the MetaRoCE port of `net`: IPv4, or IPv6
    /// only (`v6`), so that the two bind the same port side by side.
    // Its C structures are filled field by field, as their C users fill them.
    #[allow(clippy::field_reassign_with_default)]
    fn socket(net: *mut bindings::net, v6: bool) -> Result<*mut bindings::sock> {
        let mut cfg = bindings::udp_port_cfg::default();
        cfg.local_udp_port = crate::transport::framing::UDP_PORT.to_be();
        let mut sock: *mut bindings::socket = core::ptr::null_mut();
        // SAFETY: `net` is live (a device of it is being added); `cfg` and
        // `sock` are valid for the call.
        to_result(unsafe {
            if v6 {
                cfg.family = bindings::AF_INET6 as u8;
                cfg.set_ipv6_v6only(1);
                bindings::mr_udp_sock_create6(net, &mut cfg, &mut sock)
            } else {
                cfg.family = bindings::AF_INET as u8;
                bindings::udp_sock_create4(net, &mut cfg, &mut sock)
            }
        })?;
        // SAFETY: Just created.
        Ok(unsafe { bindings::mr_socket_sk(sock) })
    }

    /// The namespace is going away: close its port. Its sockets are released
    /// once no sender can be using them any more: an RCU grace period after
    /// they were taken from the port (`NetPort`'s invariant).
    ///
    /// # Safety
    ///
    /// Only as the `pre_exit` of the registered `pernet_operations`.
    unsafe extern "C" fn pre_exit(net: *mut bindings::net) {
        // SAFETY: RTNL guards the slot (type invariant).
        unsafe { bindings::rtnl_lock() };
        // SAFETY: The namespace still has its slot.
        let raw = unsafe { *Self::slot(net) };
        let (socks, devs) = if raw.is_null() {
            ([null_mut(); 2], KVec::new())
        } else {
            // SAFETY: The slot's reference keeps the port live.
            unsafe { (*raw).close() }
        };
        // SAFETY: Taken above.
        unsafe { bindings::rtnl_unlock() };
        // The sockets are ours alone now (`close`): the wait for the
        // senders and the release need no lock, and RTNL is not held across
        // the grace period. Without a socket there is no sender to wait for.
        if socks.iter().any(|sk| !sk.is_null()) {
            Self::release(socks);
        }
        // No sender is inside the port any more, and none gets past its
        // closed sockets to a route cache: the devices' cached routes of
        // this namespace can go, before the namespace does.
        for dev in devs.iter() {
            dev.port_closed();
        }
        if !raw.is_null() {
            // SAFETY: The slot's reference keeps the port live until `exit`.
            let left = unsafe { (*raw).routes.load(Ordering::Relaxed) };
            warn_routes_left(left, "outlive the closing of their namespace's port");
        }
    }

    /// Waits until no sender can still be using `socks` (closed, and ours
    /// alone: `NetPort::close`), then releases them.
    fn release(socks: [*mut bindings::sock; 2]) {
        // SAFETY: Process context (the namespace's cleanup work, or the
        // unregistration of the `pernet_operations`), holding no spinlock and
        // no RCU read lock (only the pernet semaphore, a sleeping lock): the
        // call may sleep. (It costs a grace period per namespace with a port,
        // on top of the one the namespace cleanup waits for after every
        // `pre_exit`.)
        unsafe { bindings::synchronize_rcu() };
        for sk in socks.into_iter().filter(|sk| !sk.is_null()) {
            // SAFETY: Open until now, and ours (`close`). A sender loads a
            // socket pointer only inside an RCU read-side critical section
            // and uses it only until that section ends (`OpenSock`); the
            // pointer was cleared before the grace period above began, so a
            // section that loaded it began before the grace period, and has
            // ended, since `synchronize_rcu` returned: nothing uses the
            // socket any more, and no sender can load it again.
            unsafe { bindings::udp_tunnel_sock_release(sk) };
        }
    }

    /// The namespace is gone: the slot's reference to its port is dropped.
    ///
    /// # Safety
    ///
    /// Only as the `exit` of the registered `pernet_operations`.
    // Raw pointers are `Default` (so `mem::take` would do) only from Rust 1.88 on.
    #[allow(clippy::mem_replace_with_default)]
    unsafe extern "C" fn exit(net: *mut bindings::net) {
        let slot = Self::slot(net);
        // SAFETY: The namespace's last use of the slot: no device can attach
        // to a namespace that is being destroyed, and `pre_exit` closed the
        // sockets a grace period ago.
        unsafe {
            let raw = core::mem::replace(&mut *slot, core::ptr::null());
            if !raw.is_null() {
                drop(Arc::from_raw(raw));
            }
        }
    }
}

impl<H: UdpHandler> Drop for NetPorts<H> {
    fn drop(&mut self) {
        // SAFETY: Registered by `register`; this runs `pre_exit` and `exit`
        // for every namespace.
        unsafe { bindings::unregister_pernet_subsys(PERNET.0.get()) };
        // Every connection was killed (its device closed) and every port
        // closed: a route still held is a leak that may outlive its
        // namespace.
        warn_routes_left(
            ROUTES_HELD.load(Ordering::Relaxed),
            "still held as the module unloads",
        );
    }
}

/// The protocol (IPPROTO_UDP) and ports of a flow key, either family's. The
/// ports take part in the route choice: a multipath route that hashes
/// layer 4 (fib_multipath_hash_policy 1) spreads the paths.
fn udp_flow(sport: u16, dport: u16) -> (u8, bindings::flowi_uli__bindgen_ty_1) {
    (
        17,
        bindings::flowi_uli__bindgen_ty_1 {
            dport: dport.to_be(),
            sport: sport.to_be(),
        },
    )
}

/// Whether socket creation failed because IPv6 is not there (not built,
/// or disabled at boot).
fn no_ipv6(e: Error) -> bool {
    let n = -e.to_errno();
    n == bindings::EAFNOSUPPORT as i32 || n == bindings::EPFNOSUPPORT as i32
}

/// A random number (the kernel's CRNG).
pub(crate) fn random_u32() -> u32 {
    // SAFETY: No preconditions; callable from any context.
    unsafe { bindings::get_random_u32() }
}
