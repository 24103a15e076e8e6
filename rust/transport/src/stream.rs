// SPDX-License-Identifier: GPL-2.0

//! The receive side of one stream (a queue pair on a connection): packets of
//! up to [`MAX_OUTSTANDING`] messages arrive in any order and are placed at
//! once by the caller; this tracks how much of each message has arrived and
//! releases completions strictly in message order, as verbs require.
//!
//! Duplicate packets never reach this layer: the path layer delivers each
//! packet once (see `path::RecvPath`), so bytes are counted, not mapped.

use super::seq::before;

/// Messages of one stream that can be in progress at once.
pub const MAX_OUTSTANDING: u32 = 64;

/// Why a data packet does not fit the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamError {
    /// The message was already completed.
    Completed,
    /// The message is more than [`MAX_OUTSTANDING`] ahead of the oldest one
    /// not yet complete: the sender overran the stream's window.
    TooFarAhead,
    /// The packet disagrees with earlier packets of its message (another
    /// message length) or carries more bytes than the message has.
    Inconsistent,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    used: bool,
    msn: u32,
    msg_len: u32,
    received: u32,
}

/// Receive-side message tracking of one stream.
#[derive(Clone, Debug)]
pub struct RecvStream {
    /// The oldest message not yet completed.
    next: u32,
    slots: [Slot; MAX_OUTSTANDING as usize],
}

impl RecvStream {
    /// A stream whose first message is `first_msn`.
    pub fn new(first_msn: u32) -> Self {
        Self {
            next: first_msn,
            slots: [Slot::default(); MAX_OUTSTANDING as usize],
        }
    }

    /// Whether `len` bytes of message `msn` (total `msg_len` bytes) would be
    /// recorded, without recording them: the caller checks the packet, places
    /// its bytes, and only then counts them with [`Self::on_packet`], so that
    /// bytes refused are never counted as arrived (a message whose packets
    /// were refused then cannot complete).
    pub fn admits(&self, msn: u32, len: u32, msg_len: u32) -> Result<(), StreamError> {
        if before(msn, self.next) {
            return Err(StreamError::Completed);
        }
        if msn.wrapping_sub(self.next) >= MAX_OUTSTANDING {
            return Err(StreamError::TooFarAhead);
        }
        let slot = &self.slots[(msn % MAX_OUTSTANDING) as usize];
        let received = if slot.used {
            if slot.msn != msn || slot.msg_len != msg_len {
                return Err(StreamError::Inconsistent);
            }
            slot.received
        } else {
            0
        };
        match received.checked_add(len) {
            Some(r) if r <= msg_len => Ok(()),
            _ => Err(StreamError::Inconsistent),
        }
    }

    /// Records `len` bytes of message `msn` (total `msg_len` bytes). The caller
    /// has checked `offset + len <= msg_len` (the decoder does) and places the
    /// bytes only if this returns `Ok`.
    pub fn on_packet(&mut self, msn: u32, len: u32, msg_len: u32) -> Result<(), StreamError> {
        self.admits(msn, len, msg_len)?;
        let slot = &mut self.slots[(msn % MAX_OUTSTANDING) as usize];
        if !slot.used {
            *slot = Slot {
                used: true,
                msn,
                msg_len,
                received: 0,
            };
        }
        // `admits` checked that the sum fits in `msg_len`.
        slot.received = slot.received.saturating_add(len);
        Ok(())
    }

    /// The next message to complete, in order, if all of it has arrived.
    pub fn pop_completed(&mut self) -> Option<u32> {
        let slot = &mut self.slots[(self.next % MAX_OUTSTANDING) as usize];
        if !(slot.used && slot.msn == self.next && slot.received == slot.msg_len) {
            return None;
        }
        *slot = Slot::default();
        let msn = self.next;
        self.next = msn.wrapping_add(1);
        Some(msn)
    }

    /// The oldest message not yet completed (every one before it is): what an
    /// ACK reports as the stream's progress.
    pub const fn progress(&self) -> u32 {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_are_released_in_order() {
        let mut s = RecvStream::new(0);
        // Message 1 (one packet) completes before message 0 (two packets).
        s.on_packet(1, 100, 100).unwrap();
        assert_eq!(s.pop_completed(), None, "message 0 is not complete");
        s.on_packet(0, 600, 1000).unwrap();
        assert_eq!(s.pop_completed(), None);
        s.on_packet(0, 400, 1000).unwrap();
        assert_eq!(s.pop_completed(), Some(0));
        assert_eq!(s.pop_completed(), Some(1));
        assert_eq!(s.pop_completed(), None);
        assert_eq!(s.progress(), 2);
    }

    #[test]
    fn zero_length_messages_complete() {
        let mut s = RecvStream::new(7);
        s.on_packet(7, 0, 0).unwrap();
        assert_eq!(s.pop_completed(), Some(7));
    }

    #[test]
    fn late_and_far_packets_are_refused() {
        let mut s = RecvStream::new(u32::MAX);
        s.on_packet(u32::MAX, 1, 1).unwrap();
        assert_eq!(s.pop_completed(), Some(u32::MAX));
        assert_eq!(s.on_packet(u32::MAX, 1, 1), Err(StreamError::Completed));
        assert_eq!(
            s.on_packet(MAX_OUTSTANDING, 1, 1),
            Err(StreamError::TooFarAhead)
        );
        assert!(s.on_packet(MAX_OUTSTANDING - 1, 1, 1).is_ok());
    }

    #[test]
    fn inconsistent_packets_are_refused() {
        let mut s = RecvStream::new(0);
        s.on_packet(0, 10, 20).unwrap();
        assert_eq!(s.on_packet(0, 10, 30), Err(StreamError::Inconsistent));
        assert_eq!(s.on_packet(0, 11, 20), Err(StreamError::Inconsistent));
        s.on_packet(0, 10, 20).unwrap();
        assert_eq!(s.pop_completed(), Some(0));
    }

    #[test]
    fn admitting_a_packet_records_nothing() {
        let mut s = RecvStream::new(0);
        // Two packets of a 20-byte message: both admitted, only the first
        // counted (the second was refused after the check): not complete.
        assert_eq!(s.admits(0, 10, 20), Ok(()));
        s.on_packet(0, 10, 20).unwrap();
        assert_eq!(s.admits(0, 10, 20), Ok(()));
        assert_eq!(s.pop_completed(), None);
        assert_eq!(s.admits(0, 11, 20), Err(StreamError::Inconsistent));
        assert_eq!(s.admits(0, 10, 30), Err(StreamError::Inconsistent));
        assert_eq!(
            s.admits(MAX_OUTSTANDING, 1, 1),
            Err(StreamError::TooFarAhead)
        );
        s.on_packet(0, 10, 20).unwrap();
        assert_eq!(s.pop_completed(), Some(0));
        assert_eq!(s.admits(0, 10, 20), Err(StreamError::Completed));
    }
}
