// SPDX-License-Identifier: GPL-2.0

//! The events of a connection worth tracing one by one (a loss repaired, a
//! packet moved off a failed path, a path moved to a new route, an ECN
//! response, a new rate hint from the peer), kept in a small ring that the
//! connection's owner drains when it likes: the kernel hands them to its
//! tracepoints, the simulator may log them. When nobody drains, the oldest
//! are overwritten (and counted): recording never allocates or fails.

/// One event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceEvent {
    /// A packet found lost (a hole in the selective ACK, or a probe) was
    /// resent on its path, with its PSN, from source port `sport`.
    Resend { path: u16, psn: u32, sport: u16 },
    /// A packet of failed path `from` was moved to path `to`.
    Relocate { from: u16, psn: u32, to: u16 },
    /// Path `path` moved from source port `from` to `to` (its probes went
    /// unanswered).
    PathMoved { path: u16, from: u16, to: u16 },
    /// An ACK on `path` echoed `marks` CE marks; the path's and the
    /// connection's windows after the response, in packets.
    Ecn {
        path: u16,
        marks: u16,
        path_window: u32,
        conn_window: u32,
    },
    /// The peer's rate hint changed (kbit/s, 0: none).
    RateHint { from: u32, to: u32 },
}

/// Events kept before the oldest is overwritten.
pub const TRACE_RING: usize = 32;

/// The ring.
#[derive(Clone, Copy, Debug)]
pub struct TraceRing {
    ev: [Option<TraceEvent>; TRACE_RING],
    head: usize,
    len: usize,
    overwritten: u64,
}

impl TraceRing {
    /// An empty ring.
    pub const EMPTY: Self = Self {
        ev: [None; TRACE_RING],
        head: 0,
        len: 0,
        overwritten: 0,
    };

    /// Records `e`, overwriting the oldest event if the ring is full.
    pub fn push(&mut self, e: TraceEvent) {
        // (`head` and `len` are below the ring's size.)
        let at = self.head.wrapping_add(self.len) % TRACE_RING;
        if let Some(slot) = self.ev.get_mut(at) {
            *slot = Some(e);
        }
        if self.len == TRACE_RING {
            self.head = self.head.wrapping_add(1) % TRACE_RING;
            self.overwritten = self.overwritten.wrapping_add(1);
        } else {
            self.len = self.len.wrapping_add(1);
        }
    }

    /// The oldest event not yet taken.
    pub fn pop(&mut self) -> Option<TraceEvent> {
        if self.len == 0 {
            return None;
        }
        let e = self.ev.get_mut(self.head).and_then(Option::take);
        self.head = (self.head + 1) % TRACE_RING;
        self.len -= 1;
        e
    }

    /// Events overwritten before they were taken.
    pub const fn overwritten(&self) -> u64 {
        self.overwritten
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(i: u32) -> TraceEvent {
        TraceEvent::RateHint { from: i, to: i + 1 }
    }

    #[test]
    fn keeps_order_and_overwrites_the_oldest() {
        let mut r = TraceRing::EMPTY;
        assert_eq!(r.pop(), None);
        for i in 0..3 {
            r.push(ev(i));
        }
        assert_eq!(r.pop(), Some(ev(0)));
        for i in 3..(3 + TRACE_RING as u32) {
            r.push(ev(i));
        }
        // 1 and 2 were overwritten; 3.. remain, in order.
        assert_eq!(r.overwritten(), 2);
        for i in 3..(3 + TRACE_RING as u32) {
            assert_eq!(r.pop(), Some(ev(i)));
        }
        assert_eq!(r.pop(), None);
    }
}
