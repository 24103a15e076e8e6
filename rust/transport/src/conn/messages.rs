// SPDX-License-Identifier: GPL-2.0

//! The message table: posting messages, cutting them in order (the
//! cursor), crediting their packets' fate, the receiver's rejections and
//! verdicts, and completions released in message order per stream.

use super::super::stream::MAX_OUTSTANDING;
use super::super::wire::{Common, NakCode, NakHeader, PacketType};
use super::{indexed, position, EMPTY_MSG, MAX_MESSAGES, RNR_FOREVER};
use super::{Completion, Connection, Message, MsgSlot, MsgState, PostError, RecvError};

fn packets_of(msg: &Message, max_payload: u16) -> u32 {
    if !msg.opcode.has_payload() || msg.len == 0 {
        return 1;
    }
    msg.len.div_ceil(u32::from(max_payload.max(1)))
}

impl<const P: usize> Connection<P> {
    /// Queues a message for sending, cut into packets of the connection's
    /// `max_payload` bytes.
    pub fn post(&mut self, msg: Message) -> Result<(), PostError> {
        self.post_sized(msg, self.cfg.max_payload)
    }

    /// Queues a message for sending, cut into packets of at most
    /// `max_payload` bytes (a stream's own path MTU; the connection's
    /// `max_payload` caps it), so one stream's small MTU does not set every
    /// other stream's.
    pub fn post_sized(&mut self, msg: Message, max_payload: u16) -> Result<(), PostError> {
        self.post_with(msg, max_payload, 0)
    }

    /// [`Self::post_sized`], for a message the receiver may refuse for want
    /// of a receive `rnr_retry` times before it fails ([`RNR_FOREVER`]: no
    /// limit; 0: the first refusal fails it).
    pub fn post_with(
        &mut self,
        msg: Message,
        max_payload: u16,
        rnr_retry: u8,
    ) -> Result<(), PostError> {
        let payload = max_payload.clamp(1, self.cfg.max_payload.max(1));
        let op = msg.opcode;
        let valid = msg.remote.is_some() == op.has_remote()
            && msg.imm.is_some() == op.has_imm()
            && msg.atomic.is_some() == op.is_atomic()
            && (!op.is_atomic() || msg.len == 8)
            && (op.consumes_receive() || (msg.rsn == 0 && !msg.solicited));
        if !valid {
            return Err(PostError::Invalid);
        }
        if self.messages_full() {
            return Err(PostError::Full);
        }
        let mut free = None;
        let mut in_stream = 0;
        for (i, m) in self.msgs.iter().enumerate() {
            if m.state == MsgState::Free {
                free = free.or(Some(i));
            } else if m.msg.stream == msg.stream {
                in_stream += 1;
            }
        }
        if in_stream >= MAX_OUTSTANDING {
            return Err(PostError::StreamBusy);
        }
        let i = free.ok_or(PostError::Full)?;
        let waits = self.stream_waits(msg.stream);
        let slot = self.msgs.get_mut(i).ok_or(PostError::Full)?;
        *slot = MsgSlot {
            state: MsgState::Active,
            gen: self.next_gen,
            msg,
            payload,
            packets: packets_of(&msg, payload),
            sent_packets: 0,
            acked: 0,
            error: None,
            cancelled: false,
            rnr_left: rnr_retry.min(RNR_FOREVER),
            // A stream that waits for its receiver waits whole.
            rnr_until: waits,
            voids: 0,
        };
        self.next_gen = self.next_gen.wrapping_add(1);
        self.held = self.held.saturating_add(1);
        if self.cursor.is_none() && self.msgs.get(i).is_some_and(|m| m.rnr_until == 0) {
            self.cursor = Some(i as u16);
        }
        Ok(())
    }

    /// Whether every message slot is held: a post would be refused
    /// ([`PostError::Full`]) until a completion is polled.
    pub fn messages_full(&self) -> bool {
        usize::from(self.held) >= MAX_MESSAGES
    }

    /// Cancels every message of `stream` that has not completed (its queue
    /// pair went away): nothing more of them is cut, their packets in flight
    /// are resent void until acknowledged, and they complete with `code`.
    /// Returns how many were cancelled.
    pub fn cancel_stream(&mut self, stream: u32, code: NakCode) -> u32 {
        let mut n = 0;
        for i in 0..MAX_MESSAGES {
            let Some(m) = self.msgs.get_mut(i) else { break };
            if m.state != MsgState::Active || m.msg.stream != stream {
                continue;
            }
            n += 1;
            m.cancelled = true;
            m.error = m.error.or(Some(code));
            m.packets = m.sent_packets;
            if m.settled() {
                m.state = MsgState::Done;
            }
            if self.cursor == Some(i as u16) {
                self.advance_cursor();
            }
        }
        // What they parked goes no more.
        self.sweep_parked();
        self.release_all();
        n
    }

    /// Whether `stream` has messages the connection still holds (in flight
    /// or completed and not yet polled).
    pub fn stream_busy(&self, stream: u32) -> bool {
        self.msgs
            .iter()
            .any(|m| m.state != MsgState::Free && m.msg.stream == stream)
    }

    /// The next completion, in message order per stream.
    pub fn poll_event(&mut self) -> Option<Completion> {
        if self.done_len == 0 {
            return None;
        }
        let i = usize::from(*self.done.get(usize::from(self.done_head))?);
        self.done_head = (self.done_head + 1) % MAX_MESSAGES as u16;
        self.done_len -= 1;
        let slot = self.msgs.get_mut(i)?;
        let c = Completion {
            stream: slot.msg.stream,
            msn: slot.msg.msn,
            error: slot.error,
        };
        *slot = EMPTY_MSG;
        self.held = self.held.saturating_sub(1);
        Some(c)
    }

    /// Rejects a message whose packet arrived on `path`: a NAK goes out
    /// before further acknowledgements. Returns false if the NAK queue is full.
    /// Not for [`NakCode::ReceiverNotReady`], which is [`Self::not_ready`]'s
    /// (its packet must not be acknowledged): refused, returns false.
    pub fn reject(&mut self, path: u16, stream: u32, msn: u32, code: NakCode) -> bool {
        if code == NakCode::ReceiverNotReady {
            return false;
        }
        // Every ACK from now on names the rejection, so no ACK of the
        // message's packets reaches the sender without it, even if every NAK
        // is lost.
        // A message's packets after the first refused one are refused too:
        // the message counts once.
        if self.rejected != Some((stream, msn, code)) {
            self.count_refusal(code);
        }
        self.rejected = Some((stream, msn, code));
        self.queue_nak(NakHeader {
            common: self.nak_common(path, 0, 0),
            code,
            rnr_timer: 0,
            stream,
            msn,
        })
    }

    /// Counts a refusal of ours with `code` (`stats.refused`).
    pub(super) fn count_refusal(&mut self, code: NakCode) {
        let i = usize::from(code as u8).wrapping_sub(1);
        if let Some(r) = self.stats.refused.get_mut(i) {
            *r += 1;
        }
    }

    /// The common header of a NAK to the peer on `path`, naming PSN `psn`
    /// and echoing `timestamp` (0, 0: a message's refusal, no packet's).
    pub(super) fn nak_common(&self, path: u16, psn: u32, timestamp: u32) -> Common {
        Common {
            ptype: PacketType::Nak,
            flags: 0,
            path,
            conn: self.cfg.remote_id,
            psn,
            timestamp,
        }
    }

    /// Queues `nak` to go out before further acknowledgements; false if the
    /// queue is full.
    pub(super) fn queue_nak(&mut self, nak: NakHeader) -> bool {
        let Some(slot) = self.naks.get_mut(usize::from(self.nak_len)) else {
            return false;
        };
        *slot = nak;
        self.nak_len += 1;
        true
    }

    /// Forgets the rejection of a message of `stream` that the ACKs carry:
    /// the stream starts again (its queue pair was reset and joined the
    /// connection anew, message numbers from 0), and a message that reuses
    /// the rejected number must not fail for it.
    pub fn forget_rejection(&mut self, stream: u32) {
        if self.rejected.is_some_and(|r| r.0 == stream) {
            self.rejected = None;
        }
    }

    /// Every message of `stream` below `msn` is complete at the receiver; the
    /// next ACKs report it.
    pub fn set_progress(&mut self, stream: u32, msn: u32) {
        self.progress = (stream, msn);
    }

    /// The receiver rejected message `msn` of `stream` with `code`.
    pub(super) fn fail_message(
        &mut self,
        stream: u32,
        msn: u32,
        code: NakCode,
    ) -> Result<(), RecvError> {
        let i = position(&self.msgs, |m| {
            matches!(m.state, MsgState::Active | MsgState::Done)
                && m.msg.stream == stream
                && m.msg.msn == msn
        })
        .ok_or(RecvError::Nak)?;
        let m = self.msgs.get_mut(i).ok_or(RecvError::Nak)?;
        m.error = Some(code);
        // Stop cutting it; it completes once what was sent is acknowledged.
        m.packets = m.sent_packets;
        if m.settled() {
            m.state = MsgState::Done;
        }
        if self.cursor == Some(i as u16) {
            self.advance_cursor();
        }
        // What it parked goes no more (and counts as done).
        self.sweep_parked();
        self.release(i as u16);
        Ok(())
    }

    /// Reports, in order, the finished messages of the stream of message `i`
    /// that no older message of that stream holds back.
    pub(super) fn release(&mut self, i: u16) {
        let Some(stream) = self.msgs.get(usize::from(i)).map(|m| m.msg.stream) else {
            return;
        };
        loop {
            let oldest = indexed(&self.msgs)
                .filter(|(_, m)| {
                    m.msg.stream == stream && matches!(m.state, MsgState::Active | MsgState::Done)
                })
                .min_by_key(|(_, m)| m.gen.wrapping_sub(self.next_gen))
                .map(|(j, m)| (j, m.state));
            match oldest {
                Some((j, MsgState::Done)) if usize::from(self.done_len) < MAX_MESSAGES => {
                    let tail =
                        (usize::from(self.done_head) + usize::from(self.done_len)) % MAX_MESSAGES;
                    if let Some(m) = self.msgs.get_mut(j) {
                        m.state = MsgState::Reported;
                    }
                    self.done[tail] = j as u16;
                    self.done_len += 1;
                }
                _ => return,
            }
        }
    }

    pub(super) fn release_all(&mut self) {
        for i in 0..MAX_MESSAGES {
            if self.msgs[i].state == MsgState::Done {
                self.release(i as u16);
            }
        }
    }

    pub(super) fn advance_cursor(&mut self) {
        let next_gen = self.next_gen;
        // A message of a stream that waits for its receiver is not cut
        // (`conn::rnr`: such messages carry the wait, from posting on).
        self.cursor = indexed(&self.msgs)
            .filter(|(_, m)| {
                m.state == MsgState::Active
                    && m.sent_packets < m.packets
                    && m.error.is_none()
                    && m.rnr_until == 0
            })
            .min_by_key(|(_, m)| m.gen.wrapping_sub(next_gen))
            .map(|(j, _)| j as u16);
    }
}
