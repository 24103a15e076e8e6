// SPDX-License-Identifier: GPL-2.0

//! The per-packet entry points of the transport core, exported with C names
//! so that their machine code can be inspected on its own.

#![no_std]
// The probes take Rust slices: they are never called from C.
#![allow(improper_ctypes_definitions)]

use metaroce_transport::conn::{Connection, Received};
use metaroce_transport::stream::{RecvStream, Target};
use metaroce_transport::wire;

/// The connection as the kernel module uses it.
pub type Conn = Connection<16>;

#[no_mangle]
pub extern "C" fn mr_probe_decode(buf: &[u8]) -> bool {
    wire::decode(buf).is_ok()
}

#[no_mangle]
pub extern "C" fn mr_probe_encode_datagram(h: &wire::DatagramHeader, out: &mut [u8]) -> usize {
    wire::encode_datagram(h, out).unwrap_or(0)
}

#[no_mangle]
pub extern "C" fn mr_probe_ipv4_grh(s: [u8; 4], d: [u8; 4], len: usize, out: &mut [u8; 40]) {
    *out = wire::ipv4_grh(s, d, len);
}

#[no_mangle]
pub extern "C" fn mr_probe_on_datagram(c: &mut Conn, now: u64, buf: &[u8], sport: u16) -> usize {
    match c.on_datagram(now, buf, sport, false) {
        Ok(Received::Data(_, p)) => p.len(),
        Ok(_) => 1,
        Err(_) => 0,
    }
}

#[no_mangle]
pub extern "C" fn mr_probe_poll_transmit(c: &mut Conn, now: u64, buf: &mut [u8]) -> usize {
    c.poll_transmit(now, buf).map_or(0, |t| t.len)
}

#[no_mangle]
pub extern "C" fn mr_probe_poll_control(c: &mut Conn, buf: &mut [u8]) -> usize {
    c.poll_control(buf).map_or(0, |t| t.len)
}

#[no_mangle]
pub extern "C" fn mr_probe_wants_to_send(c: &Conn) -> bool {
    c.wants_to_send()
}

#[no_mangle]
pub extern "C" fn mr_probe_on_timeout(c: &mut Conn, now: u64) {
    c.on_timeout(now)
}

#[no_mangle]
pub extern "C" fn mr_probe_poll_event(c: &mut Conn) -> u32 {
    c.poll_event().map_or(0, |e| e.msn)
}

/// A Write packet as the kernel's responder takes it: admitted, the pieces
/// it may place found, then recorded.
#[no_mangle]
pub extern "C" fn mr_probe_stream_write(
    s: &mut RecvStream,
    msn: u32,
    offset: u32,
    len: u32,
    msg_len: u32,
    target: &Target,
) -> u64 {
    let target = *target;
    if s.admits_write(msn, len, msg_len, Some(target)).is_err() {
        return 0;
    }
    let placed = s
        .pieces(msn, target, offset, len)
        .iter()
        .fold(0u64, |n, (a, b)| {
            n.saturating_add(u64::from(b.saturating_sub(a)))
        });
    match s.on_write(msn, len, msg_len, Some(target)) {
        Ok(()) => placed.saturating_add(u64::from(s.pop_completed().is_some())),
        Err(_) => 0,
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}
