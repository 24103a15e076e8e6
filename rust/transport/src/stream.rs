// SPDX-License-Identifier: GPL-2.0

//! The receive side of one stream (a queue pair on a connection): packets of
//! up to [`MAX_OUTSTANDING`] messages arrive in any order and are placed at
//! once by the caller; this tracks how much of each message has arrived and
//! releases completions strictly in message order, as verbs require.
//!
//! Duplicate packets never reach this layer: the path layer delivers each
//! packet once (see `path::RecvPath`), so bytes are counted, not mapped.
//!
//! Writes that change the same bytes keep their order although their
//! packets do not: a packet of a Write is not placed over bytes that a
//! newer Write of the stream, already begun, also changes
//! ([`RecvStream::pieces`]). The newer one writes them in full before
//! it completes, so the bytes end as the later Write left them, as verbs
//! promises (and until it completes verbs calls them undefined).

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

/// The memory a Write changes: its rkey and the address of its first byte,
/// as its packets name them (it changes `msg_len` bytes from there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub key: u32,
    pub addr: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    used: bool,
    msn: u32,
    msg_len: u32,
    received: u32,
    /// Whether the message is a Write of bytes (its packets name a target),
    /// from its first packet: a packet of another kind with its number is
    /// refused.
    write: bool,
    /// A Write's target, from its first packet placed that carried bytes.
    target: Option<Target>,
}

/// Receive-side message tracking of one stream.
#[derive(Clone, Debug)]
pub struct RecvStream {
    /// The oldest message not yet completed.
    next: u32,
    /// The newest message of which a packet was recorded (`next - 1` if
    /// none is in progress).
    newest: u32,
    slots: [Slot; MAX_OUTSTANDING as usize],
}

impl RecvStream {
    /// A stream whose first message is `first_msn`.
    pub fn new(first_msn: u32) -> Self {
        Self {
            next: first_msn,
            newest: first_msn.wrapping_sub(1),
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

    /// [`Self::admits`] for a packet of a Write whose message changes the
    /// bytes at `target` (`None`: not a Write, or a Write of no bytes): every
    /// packet of a Write must name the target its first one named, and
    /// every packet of a message must be of its first packet's kind (a
    /// Write's or not).
    pub fn admits_write(
        &self,
        msn: u32,
        len: u32,
        msg_len: u32,
        target: Option<Target>,
    ) -> Result<(), StreamError> {
        self.admits(msn, len, msg_len)?;
        let slot = &self.slots[(msn % MAX_OUTSTANDING) as usize];
        match (slot.used, slot.target, target) {
            (true, _, _) if slot.write != target.is_some() => Err(StreamError::Inconsistent),
            (true, Some(was), Some(now)) if was != now => Err(StreamError::Inconsistent),
            _ => Ok(()),
        }
    }

    /// Records `len` bytes of message `msn` (total `msg_len` bytes). The caller
    /// has checked `offset + len <= msg_len` (the decoder does) and places the
    /// bytes only if this returns `Ok`.
    pub fn on_packet(&mut self, msn: u32, len: u32, msg_len: u32) -> Result<(), StreamError> {
        self.on_write(msn, len, msg_len, None)
    }

    /// [`Self::on_packet`] with the target of a Write (`None`: any other
    /// message, or a Write of no bytes), checked with [`Self::admits_write`]
    /// before its bytes were placed. The first packet recorded that carried
    /// bytes names the target.
    pub fn on_write(
        &mut self,
        msn: u32,
        len: u32,
        msg_len: u32,
        target: Option<Target>,
    ) -> Result<(), StreamError> {
        self.admits_write(msn, len, msg_len, target)?;
        let slot = &mut self.slots[(msn % MAX_OUTSTANDING) as usize];
        if !slot.used {
            *slot = Slot {
                used: true,
                msn,
                msg_len,
                received: 0,
                write: target.is_some(),
                target: None,
            };
        }
        if slot.target.is_none() && len > 0 && msg_len > 0 {
            slot.target = target;
        }
        // `admits` checked that the sum fits in `msg_len`.
        slot.received = slot.received.saturating_add(len);
        if before(self.newest, msn) {
            self.newest = msn;
        }
        Ok(())
    }

    /// The parts of a packet of Write `msn` (to `target`, `len` bytes at
    /// `offset` in the message) that it may place, as (start, end) offsets
    /// in the packet, in order: those that no newer Write of this stream
    /// under the same key, of which a packet with bytes was placed, changes
    /// too (the newest Write over a byte places it itself before it
    /// completes, and completions come in order). Found before the caller
    /// touches memory, so that it holds no other lock meanwhile.
    ///
    /// Nothing is looked at when `msn` is the newest message of which a
    /// packet was recorded (when packets come in order). Otherwise the
    /// newer slots (at most 63) are read once, the parts of the packet
    /// they cover sorted (at most 63, by insertion) and the gaps between
    /// them kept: at most 63 slot reads and about 1,950 compare-and-swaps
    /// (63 parts begun in descending order), whatever a peer sends.
    ///
    /// The requester's response stream uses the same rule for Read
    /// answers, with the lkey and first address of the Read's one local
    /// buffer as the target.
    pub fn pieces(&self, msn: u32, target: Target, offset: u32, len: u32) -> Pieces {
        let Some(from) = target.addr.checked_add(u64::from(offset)) else {
            // (A region never ends there: the caller's check refuses it.)
            return Pieces::whole(len);
        };
        let mut p = Pieces::EMPTY;
        let to = from.saturating_add(u64::from(len));
        for (start, end) in self.newer_writes(msn, target.key) {
            let (s, e) = (start.max(from), end.min(to));
            // Within [from, to), so both fit in `len`. (There are at most
            // 63; one more would be dropped: its bytes placed, not lost.)
            let n = p.n;
            if s < e && n < p.at.len() {
                p.at[n] = ((s - from) as u32, (e - from) as u32);
                p.n = n + 1;
            }
        }
        p.sort();
        p.invert(len);
        p
    }

    /// The targets of the Writes newer than `msn` that have begun, as
    /// (first byte, byte past the last), under key `key`.
    fn newer_writes(&self, msn: u32, key: u32) -> impl Iterator<Item = (u64, u64)> + '_ {
        let ahead = if before(msn, self.newest) {
            self.newest.wrapping_sub(msn).min(MAX_OUTSTANDING)
        } else {
            0
        };
        (1..=ahead).filter_map(move |d| {
            let m = msn.wrapping_add(d);
            let slot = &self.slots[(m % MAX_OUTSTANDING) as usize];
            let t = slot
                .target
                .filter(|t| slot.used && slot.msn == m && t.key == key)?;
            Some((t.addr, t.addr.saturating_add(u64::from(slot.msg_len))))
        })
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

/// The parts of a Write's packet it may place ([`RecvStream::pieces`]), as
/// (start, end) offsets in the packet, in order.
pub struct Pieces {
    n: usize,
    at: [(u32, u32); MAX_OUTSTANDING as usize],
}

impl Pieces {
    const EMPTY: Self = Self {
        n: 0,
        at: [(0, 0); MAX_OUTSTANDING as usize],
    };

    /// All of a packet of `len` bytes, as one piece (a packet whose message
    /// has no target to keep off: placed whole).
    pub fn whole(len: u32) -> Self {
        let mut p = Self::EMPTY;
        p.push(0, len);
        p
    }

    /// Adds a free part. There are at most 64: one more than the newer
    /// Writes that split the packet, of which there are at most 63. Were
    /// there more, the last one would take in the rest (placed, as before
    /// Writes kept their order, rather than any byte be lost).
    fn push(&mut self, start: u32, end: u32) {
        if let Some(last) = self.n.checked_sub(1).filter(|_| self.n == self.at.len()) {
            if let Some(p) = self.at.get_mut(last) {
                p.1 = end;
            }
            return;
        }
        let n = self.n;
        if n < self.at.len() {
            self.at[n] = (start, end);
            self.n = n + 1;
        }
    }

    /// Sorts the parts by their start (insertion: at most 63 of them).
    fn sort(&mut self) {
        let Some(parts) = self.at.get_mut(..self.n) else {
            return;
        };
        for i in 1..parts.len() {
            let mut j = i;
            while j > 0 && parts[j - 1].0 > parts[j].0 {
                parts.swap(j - 1, j);
                j -= 1;
            }
        }
    }

    /// Turns sorted covered parts of a packet of `len` bytes into the parts
    /// between them, in place: the gap before the i-th covered part is
    /// written at an index no greater than i, after it was read.
    fn invert(&mut self, len: u32) {
        let covered = self.n;
        self.n = 0;
        let mut at = 0;
        for i in 0..covered {
            let Some(&(s, e)) = self.at.get(i) else {
                break;
            };
            if at < s {
                self.push(at, s);
            }
            at = at.max(e);
        }
        if at < len {
            self.push(at, len);
        }
    }

    /// The pieces, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.at.iter().take(self.n).copied()
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

    extern crate std;
    use std::vec::Vec;

    /// The pieces of a packet of `msn` over `[from, to)`, as addresses.
    fn pieces(s: &RecvStream, msn: u32, key: u32, from: u64, to: u64) -> Vec<(u64, u64)> {
        let t = Target { key, addr: from };
        let p = s.pieces(msn, t, 0, (to - from) as u32);
        p.iter()
            .map(|(a, b)| (from + u64::from(a), from + u64::from(b)))
            .collect()
    }

    #[test]
    fn late_write_packets_keep_off_newer_writes_bytes() {
        let t = |addr| Some(Target { key: 1, addr });
        let mut s = RecvStream::new(0);
        // Nothing newer: the whole packet.
        assert_eq!(pieces(&s, 0, 1, 0, 1000), [(0, 1000)]);
        // Write 0 = [0, 4000) begins; Write 2 = [1000, 2000) and Write 3
        // = [1500, 2500) begin too; Write 1 has no packet yet.
        s.on_write(0, 1000, 4000, t(0)).unwrap();
        s.on_write(2, 10, 1000, t(1000)).unwrap();
        s.on_write(3, 10, 1000, t(1500)).unwrap();
        // A late packet of Write 0 lands around them.
        assert_eq!(pieces(&s, 0, 1, 0, 4000), [(0, 1000), (2500, 4000)]);
        assert_eq!(pieces(&s, 0, 1, 1200, 1300), []);
        assert_eq!(pieces(&s, 0, 1, 900, 1100), [(900, 1000)]);
        // Write 2's late packets keep off Write 3's bytes only.
        assert_eq!(pieces(&s, 2, 1, 1000, 2000), [(1000, 1500)]);
        // The newest places everything, and another key is not looked at.
        assert_eq!(pieces(&s, 3, 1, 1500, 2500), [(1500, 2500)]);
        assert_eq!(pieces(&s, 0, 2, 0, 4000), [(0, 4000)]);
        // A Send (no target) and a Write of no bytes shadow nothing.
        s.on_write(4, 10, 100, None).unwrap();
        s.on_write(5, 0, 0, t(0)).unwrap();
        assert_eq!(pieces(&s, 1, 1, 3000, 3100), [(3000, 3100)]);
    }

    #[test]
    fn pieces_are_offsets_in_the_packet() {
        let t = |addr| Target { key: 3, addr };
        let mut s = RecvStream::new(0);
        s.on_write(0, 100, 1000, Some(t(0x1000))).unwrap();
        s.on_write(1, 10, 100, Some(t(0x1100))).unwrap();
        // Write 0's bytes 200..400 are 0x10c8..0x1190; Write 1 has
        // 0x1100..0x1164.
        let p: Vec<_> = s.pieces(0, t(0x1000), 200, 200).iter().collect();
        assert_eq!(p, [(0, 56), (156, 200)]);
        let p: Vec<_> = s.pieces(1, t(0x1100), 10, 90).iter().collect();
        assert_eq!(p, [(0, 90)]);
        // An address the region cannot have: the whole packet (the
        // region's check refuses it).
        let p: Vec<_> = s.pieces(0, t(u64::MAX), 10, 5).iter().collect();
        assert_eq!(p, [(0, 5)]);
    }

    #[test]
    fn a_writes_packets_name_one_target() {
        let t = |addr| Some(Target { key: 3, addr });
        let mut s = RecvStream::new(0);
        // A first packet of no bytes names nothing; the next one does.
        s.on_write(0, 0, 100, t(0x10)).unwrap();
        s.on_write(0, 50, 100, t(0x20)).unwrap();
        assert_eq!(
            s.admits_write(0, 50, 100, t(0x30)),
            Err(StreamError::Inconsistent)
        );
        assert_eq!(
            s.admits_write(0, 50, 100, Some(Target { key: 4, addr: 0x20 })),
            Err(StreamError::Inconsistent)
        );
        assert_eq!(
            s.on_write(0, 50, 100, t(0x30)),
            Err(StreamError::Inconsistent)
        );
        s.on_write(0, 50, 100, t(0x20)).unwrap();
        assert_eq!(s.pop_completed(), Some(0));
    }

    #[test]
    fn shadows_end_with_the_newer_message() {
        let t = |addr| Some(Target { key: 9, addr });
        let mut s = RecvStream::new(u32::MAX - 1);
        // Across the wrap of message numbers.
        s.on_write(u32::MAX - 1, 50, 100, t(0)).unwrap();
        s.on_write(u32::MAX, 100, 100, t(0)).unwrap();
        s.on_write(0, 100, 100, t(50)).unwrap();
        assert_eq!(pieces(&s, u32::MAX - 1, 9, 50, 100), []);
        s.on_write(u32::MAX - 1, 50, 100, t(0)).unwrap();
        assert_eq!(s.pop_completed(), Some(u32::MAX - 1));
        assert_eq!(s.pop_completed(), Some(u32::MAX));
        assert_eq!(s.pop_completed(), Some(0));
        // Completed messages shadow nothing (a new message in their slot
        // is another message).
        assert_eq!(pieces(&s, 1, 9, 0, 100), [(0, 100)]);
    }

    #[test]
    fn a_messages_packets_are_of_one_kind() {
        let t = Some(Target { key: 1, addr: 0 });
        let mut s = RecvStream::new(0);
        // A Send's number on a Write's packet, and a Write's on a Send's.
        s.on_write(0, 10, 100, t).unwrap();
        assert_eq!(
            s.admits_write(0, 10, 100, None),
            Err(StreamError::Inconsistent)
        );
        assert_eq!(s.on_packet(0, 10, 100), Err(StreamError::Inconsistent));
        s.on_packet(1, 10, 100).unwrap();
        assert_eq!(s.on_write(1, 10, 100, t), Err(StreamError::Inconsistent));
        // Each completes with its own kind.
        s.on_write(0, 90, 100, t).unwrap();
        s.on_packet(1, 90, 100).unwrap();
        assert_eq!(s.pop_completed(), Some(0));
        assert_eq!(s.pop_completed(), Some(1));
    }

    /// The pieces a byte-by-byte model gives: the bytes of `[from, to)` that
    /// no Write in `newer` (message, key, first byte, length) newer than
    /// `msn` under `key` changes, as runs.
    fn model(
        newer: &[(u32, u32, u64, u32)],
        msn: u32,
        key: u32,
        from: u64,
        to: u64,
    ) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for b in from..to {
            let covered = newer
                .iter()
                .any(|&(m, k, a, l)| m > msn && k == key && a <= b && b < a + u64::from(l));
            if covered {
                continue;
            }
            match runs.last_mut() {
                Some(r) if r.1 == b => r.1 = b + 1,
                _ => runs.push((b, b + 1)),
            }
        }
        runs
    }

    #[test]
    fn pieces_agree_with_a_byte_model_under_many_newer_writes() {
        // A fixed pseudo-random sequence (an LCG): Writes 1..63 begun after
        // Write 0, of any length and place, some overlapping, some under
        // another key; packets of Write 0 and of a middle one (older
        // Writes must not count) checked against the model.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |m: u64| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (x >> 33) % m
        };
        for _ in 0..50 {
            let mut s = RecvStream::new(0);
            let mut begun = Vec::new();
            for m in 0..MAX_OUTSTANDING {
                let key = if m > 0 && next(8) == 0 { 2 } else { 1 };
                let len = if m == 0 { 4096 } else { 1 + next(300) as u32 };
                let addr = if m == 0 { 0 } else { next(4400) };
                s.on_write(m, 1, len, Some(Target { key, addr })).unwrap();
                begun.push((m, key, addr, len));
            }
            for msn in [0, 31] {
                for _ in 0..20 {
                    let from = next(4096);
                    let to = from + 1 + next(4096 - from);
                    let got = pieces(&s, msn, 1, from, to);
                    assert_eq!(
                        got,
                        model(&begun, msn, 1, from, to),
                        "{msn}: [{from}, {to})"
                    );
                }
            }
        }
    }

    #[test]
    fn a_packet_split_by_63_newer_writes_has_64_pieces() {
        // Newer Writes of one byte each at 125, 123, ..., 1 (begun in
        // descending order: the sort's worst case) leave 64 pieces.
        let mut s = RecvStream::new(0);
        s.on_write(0, 1, 200, Some(Target { key: 1, addr: 0 }))
            .unwrap();
        for m in 1..MAX_OUTSTANDING {
            let addr = u64::from(2 * (MAX_OUTSTANDING - m) - 1);
            s.on_write(m, 1, 1, Some(Target { key: 1, addr })).unwrap();
        }
        let got = pieces(&s, 0, 1, 0, 200);
        let mut want: Vec<(u64, u64)> = (0..63).map(|i| (2 * i, 2 * i + 1)).collect();
        want.push((126, 200));
        assert_eq!(got, want);
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
