// SPDX-License-Identifier: GPL-2.0

//! The data path's kernel services: a UDP tunnel socket whose receive callback
//! runs in softirq, IPv4 transmission of UDP datagrams built here, and a
//! high-resolution timer that fires in softirq context.
//!
//! C headers: [`include/net/udp_tunnel.h`](srctree/include/net/udp_tunnel.h),
//! [`include/linux/hrtimer.h`](srctree/include/linux/hrtimer.h)

use super::{bindings, netdev::NetDevice};
use core::marker::PhantomData;
use kernel::{
    error::to_result,
    ffi::c_int,
    prelude::*,
    sync::Arc,
    types::Opaque,
};

/// A datagram that arrived on the tunnel port.
pub(crate) struct RxPacket<'a> {
    /// Source and destination IPv4 addresses, network order.
    pub(crate) saddr: [u8; 4],
    pub(crate) daddr: [u8; 4],
    /// UDP source port (host order).
    pub(crate) sport: u16,
    /// Marked ECN Congestion Experienced.
    pub(crate) ce: bool,
    /// The UDP payload.
    pub(crate) payload: &'a [u8],
}

/// Receives the datagrams of a [`UdpPort`], in softirq context.
pub(crate) trait UdpHandler: Send + Sync + 'static {
    /// Handles one datagram; it is freed afterwards.
    fn receive(&self, pkt: &RxPacket<'_>);
}

/// A kernel UDP socket bound to a port in one network namespace, whose
/// datagrams go to `H` (an encapsulation socket, as tunnels use).
///
/// # Invariants
///
/// `sk` is a live socket whose `sk_user_data` is `Arc::into_raw(handler)`;
/// both are released by `drop`, after an RCU grace period.
pub(crate) struct UdpPort<H: UdpHandler> {
    sk: *mut bindings::sock,
    handler: *const H,
}

// SAFETY: The socket is used only through thread-safe kernel calls.
unsafe impl<H: UdpHandler> Send for UdpPort<H> {}
// SAFETY: As above.
unsafe impl<H: UdpHandler> Sync for UdpPort<H> {}

impl<H: UdpHandler> UdpPort<H> {
    /// Opens UDP port `port` (IPv4, any address) in `ndev`'s namespace.
    pub(crate) fn open(ndev: &NetDevice, port: u16, handler: Arc<H>) -> Result<(Self, TxSock)> {
        let mut cfg = bindings::udp_port_cfg::default();
        cfg.family = bindings::AF_INET as u8;
        cfg.local_udp_port = port.to_be();
        let mut sock: *mut bindings::socket = core::ptr::null_mut();
        // SAFETY: `ndev` is valid, so is its namespace; `cfg` and `sock` are
        // valid for the call.
        to_result(unsafe {
            bindings::udp_sock_create4(bindings::mr_dev_net(ndev.as_raw()), &mut cfg, &mut sock)
        })?;
        let raw = Arc::into_raw(handler);
        let mut tcfg = bindings::udp_tunnel_sock_cfg::default();
        tcfg.sk_user_data = raw.cast_mut().cast();
        tcfg.encap_type = 1;
        tcfg.encap_rcv = Some(Self::encap_rcv);
        // SAFETY: `sock` was just created; the configuration is complete.
        let sk = unsafe {
            let sk = bindings::mr_socket_sk(sock);
            bindings::setup_udp_tunnel_sock(bindings::mr_dev_net(ndev.as_raw()), sk, &mut tcfg);
            sk
        };
        // SAFETY: `sk` is live; the reference is dropped by `TxSock`.
        unsafe { bindings::mr_sock_hold(sk) };
        // INVARIANT: set up as described.
        Ok((Self { sk, handler: raw }, TxSock { sk }))
    }

    unsafe extern "C" fn encap_rcv(sk: *mut bindings::sock, skb: *mut bindings::sk_buff) -> c_int {
        // SAFETY: The UDP receive path calls this under RCU with a live socket
        // and an skb we now own; `sk_user_data` is ours until `drop` clears it
        // and waits for a grace period.
        unsafe {
            let h = bindings::mr_rcu_sk_user_data(sk).cast::<H>();
            if !h.is_null() && bindings::mr_skb_linearize(skb) == 0 {
                let data = bindings::mr_skb_data(skb);
                let len = bindings::mr_skb_len(skb) as usize;
                // The data starts at the UDP header.
                if len >= 8 {
                    let bytes = core::slice::from_raw_parts(data, len);
                    let pkt = RxPacket {
                        saddr: bindings::mr_skb_saddr4(skb).to_ne_bytes(),
                        daddr: bindings::mr_skb_daddr4(skb).to_ne_bytes(),
                        sport: u16::from_be_bytes([bytes[0], bytes[1]]),
                        ce: bindings::mr_skb_ce4(skb),
                        payload: &bytes[8..],
                    };
                    (*h).receive(&pkt);
                }
            }
            bindings::consume_skb(skb);
        }
        0
    }
}

impl<H: UdpHandler> Drop for UdpPort<H> {
    fn drop(&mut self) {
        // SAFETY: `sk` is live (type invariant); after the release and a
        // grace period no receive callback can still see the handler.
        unsafe {
            bindings::udp_tunnel_sock_release(self.sk);
            bindings::synchronize_rcu();
            drop(Arc::from_raw(self.handler));
        }
    }
}

/// A reference to a tunnel socket for transmission.
///
/// # Invariants
///
/// `sk` is a socket with a reference held by this object.
pub(crate) struct TxSock {
    sk: *mut bindings::sock,
}

// SAFETY: Transmission through a referenced socket works from any context.
unsafe impl Send for TxSock {}
// SAFETY: As above.
unsafe impl Sync for TxSock {}

impl Drop for TxSock {
    fn drop(&mut self) {
        // SAFETY: The reference is ours (type invariant).
        unsafe { bindings::mr_sock_put(self.sk) }
    }
}

/// Why a datagram was not sent.
#[derive(Debug)]
pub(crate) enum TxError {
    /// No route to the destination.
    NoRoute,
    /// No memory for the packet.
    NoMem,
    /// The payload could not be read.
    Fill,
}

impl TxSock {
    /// Sends a UDP datagram from `sport` to `daddr:dport` (IPv4, network
    /// order): `header` followed by `payload_len` bytes written by `fill`.
    /// Runs in any context (atomic allocation).
    pub(crate) fn send(
        &self,
        net_of: &NetDevice,
        daddr: [u8; 4],
        sport: u16,
        dport: u16,
        header: &[u8],
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result,
    ) -> Result<(), TxError> {
        let mut fl = bindings::flowi4::default();
        fl.daddr = u32::from_ne_bytes(daddr);
        fl.__fl_common.flowic_proto = 17; // IPPROTO_UDP
        // SAFETY: `net_of` is valid; `fl` is valid for the call.
        let rt = unsafe {
            bindings::mr_ip_route_output_key(bindings::mr_dev_net(net_of.as_raw()), &mut fl)
        };
        // SAFETY: Checking an error pointer.
        if unsafe { bindings::mr_is_err(rt.cast()) } {
            return Err(TxError::NoRoute);
        }
        let total = header.len() + payload_len;
        // SAFETY: `rt` is a held route; its device is valid while held.
        let head = unsafe { bindings::mr_rt_headroom(rt) } as usize + 28;
        // SAFETY: Plain allocation.
        let skb = unsafe { bindings::mr_alloc_skb((head + total) as u32) };
        if skb.is_null() {
            // SAFETY: `rt` is held.
            unsafe { bindings::mr_ip_rt_put(rt) };
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
            // SAFETY: Both are ours.
            unsafe {
                bindings::mr_kfree_skb(skb);
                bindings::mr_ip_rt_put(rt);
            }
            return Err(TxError::Fill);
        }
        // SAFETY: `rt` is held and its reference passes to the call with the
        // skb; `sk` is a referenced socket (type invariant).
        unsafe {
            bindings::udp_tunnel_xmit_skb(
                rt,
                self.sk,
                skb,
                fl.saddr,
                fl.daddr,
                0,
                64,
                0,
                sport.to_be(),
                dport.to_be(),
                false,
                false,
                0,
            );
        }
        Ok(())
    }
}

/// The clock of the data path, in nanoseconds (monotonic).
pub(crate) fn now_ns() -> u64 {
    // SAFETY: Reads the clock.
    unsafe { bindings::mr_ktime_get_ns() }
}

/// Called when a [`Timer`] expires, in softirq context.
pub(crate) trait TimerHandler: Send + Sync + 'static {
    /// The timer expired.
    fn expired(&self);
}

/// A high-resolution timer with data `T` (`struct hrtimer`, soft mode).
///
/// # Invariants
///
/// `timer` was set up with `Self::expired` as its function; it is cancelled
/// before the memory goes away.
#[pin_data(PinnedDrop)]
#[repr(C)]
pub(crate) struct Timer<T: TimerHandler> {
    #[pin]
    timer: Opaque<bindings::hrtimer>,
    data: T,
    _p: PhantomData<T>,
}

// SAFETY: The hrtimer is only touched through the kernel's thread-safe timer
// calls; `T` is `Send + Sync`.
unsafe impl<T: TimerHandler> Send for Timer<T> {}
// SAFETY: As above.
unsafe impl<T: TimerHandler> Sync for Timer<T> {}

impl<T: TimerHandler> core::ops::Deref for Timer<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.data
    }
}

impl<T: TimerHandler> Timer<T> {
    /// A stopped timer around `data`.
    pub(crate) fn new(data: T) -> impl PinInit<Self> {
        pin_init!(Self {
            // SAFETY: `slot` is valid for the call; the timer is set up in place
            // and never moves (pinned).
            timer <- Opaque::ffi_init(|slot: *mut bindings::hrtimer| unsafe {
                bindings::hrtimer_setup(
                    slot,
                    Some(Self::expired),
                    bindings::CLOCK_MONOTONIC as _,
                    bindings::hrtimer_mode_HRTIMER_MODE_REL_SOFT,
                )
            }),
            data,
            _p: PhantomData,
        })
    }

    /// (Re)arms the timer to fire in `ns` nanoseconds.
    pub(crate) fn start(&self, ns: u64) {
        // SAFETY: The timer was set up (type invariant).
        unsafe { bindings::mr_hrtimer_start_ns(self.timer.get(), ns) }
    }

    /// Stops the timer, waiting for a running expiry to finish. Must not be
    /// called from the timer's own function.
    pub(crate) fn cancel(&self) {
        // SAFETY: The timer was set up.
        unsafe { bindings::hrtimer_cancel(self.timer.get()) };
    }

    unsafe extern "C" fn expired(t: *mut bindings::hrtimer) -> bindings::hrtimer_restart {
        // CAST: `timer` is the first field of the `repr(C)` `Self`.
        // SAFETY: The timer is cancelled before the memory is freed, which
        // waits for this function to return.
        let this = unsafe { &*t.cast::<Self>() };
        this.data.expired();
        bindings::hrtimer_restart_HRTIMER_NORESTART
    }
}

#[pinned_drop]
impl<T: TimerHandler> PinnedDrop for Timer<T> {
    fn drop(self: Pin<&mut Self>) {
        self.cancel();
    }
}
