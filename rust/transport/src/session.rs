// SPDX-License-Identifier: GPL-2.0

//! What drives one host's connection to a peer host, above the connection
//! itself: the incarnation handshake and when its hellos go, whether the
//! peer is alive and how long requests may wait on it, and the receiver's
//! fair share handed to the peer in every ACK. The kernel driver, the
//! simulator and the tests all drive a [`Connection`] through this one type,
//! so that none of them has a handshake, a liveness rule or a rate-hint rule
//! of its own. Which hello goes when, and from which port, is
//! `session/hello.rs`; the unit tests are `session/tests.rs`.
//!
//! Sans-IO and without allocation like the rest of the core. The caller owns
//! a `Session` and its `Connection` side by side (under one lock in the
//! kernel) and, whenever it handles the connection (a datagram, its timer,
//! a request posted), calls in this order:
//!
//! 1. [`Session::on_hello`] for a hello (it never reaches the connection),
//!    else the connection's `on_datagram` and, for what it accepted,
//!    [`Session::on_received`] (when it says the peer became a sender, the
//!    caller counts one more and, once done with this connection, drives
//!    the other sending peers' connections soon, so that they announce
//!    their smaller share); [`Session::on_posted`] when a request went in.
//! 2. [`Session::poll_liveness`]: when it says a look is due, the caller
//!    measures each waiting request against its patience ([`patience_ns`])
//!    and reports with [`Session::set_waiting`]. A look may also ask for a
//!    keepalive ([`KEEPALIVE_NS`]).
//! 3. [`Session::poll_quiet`]: the peer stopped sending to us; the caller
//!    counts one active sender less.
//! 4. [`Session::share`] with the receiver's capacity and its active
//!    senders now (every connection of the receiver, this one included).
//! 5. [`Session::poll_hello`] until it returns nothing, sending each hello
//!    from the UDP source port it names.
//! 6. If [`Session::ready`], the connection's own polls.
//! 7. [`Session::next_deadline`] with the connection's next timeout: when
//!    to come back.
//!
//! ## The receiver's fair share
//!
//! A receiver with a known capacity (its link's speed, or what its operator
//! set) divides it equally among the peers that sent it data in the last
//! [`SessionConfig::active_ns`]: each connection's ACKs carry its share
//! (`Connection::share_capacity`) and its sender paces new data at it. When
//! the number of senders changes, each connection announces its new share
//! (`Connection::announce`) the next time it is driven: when a sender
//! joins, its caller drives the others at once; when one leaves, the others
//! learn their larger share at their next packet. The count itself is the
//! caller's (it spans connections): [`Session::on_received`] and
//! [`Session::poll_quiet`] say when it moves, [`Session::close`] when a
//! connection that counted goes away.

use super::cc::fair_share;
use super::conn::{Config, Connection, Received, PORT_BASE};
use super::framing::HEADER_OVERHEAD;
use super::handshake::Handshake;

mod hello;

/// The gap between the first two hellos while the handshake is incomplete
/// in the kernel (nanoseconds; [`SessionConfig::hello_first_ns`]); it
/// doubles with each hello.
pub const HELLO_FIRST_NS: u64 = 1_000_000;
/// The longest gap between hellos while the peer is asked often.
pub const HELLO_MAX_NS: u64 = 128_000_000;
/// After this many unanswered hellos the peer is asked ever more rarely (up
/// to [`HELLO_SLOW_NS`] apart), and not at all once nothing wants it.
pub const HELLO_FAST_TRIES: u32 = 16;
/// The longest gap between hellos to a peer that does not answer.
pub const HELLO_SLOW_NS: u64 = 8_000_000_000;

/// How often the patience of what waits on the peer is looked at.
pub const ALIVE_CHECK_NS: u64 = 100_000_000;

/// How long a peer may stay silent while requests wait on it before it is
/// asked whether it is alive: a challenge hello (which only the incarnation
/// we know can answer), then again every as long while the silence lasts;
/// its answer counts as life (for [`KEEPALIVE_SPAN_NS`]). A live peer
/// answers even when every packet in flight to it sits on routes that
/// failed: a path with nothing else acknowledged meanwhile moves only after
/// its probe timer, then three of twice that, have expired (up to about
/// 7 s), and a packet moved onto another failed route waits as long again;
/// its silence is then no verdict on it (CI, 2026-12-07: a plane failed
/// under a transfer, and a live peer was taken for dead after 10 s).
pub const KEEPALIVE_NS: u64 = 1_000_000_000;

/// How long answers to keepalives alone keep a peer alive: once its
/// connection has carried nothing from it (no ACK, NAK or data) for this
/// long while requests waited, the peer is as silent as that, whatever it
/// answers; no keepalive goes after that. A peer that answers hellos while
/// its data never arrives (a route that drops large datagrams, a wedged
/// connection) thus still fails its requests, a minute late at most.
pub const KEEPALIVE_SPAN_NS: u64 = 60_000_000_000;

/// The least time a peer may stay silent while requests wait on it before
/// they fail, whatever their own timeout says: a path's probe timer backs
/// off to 2 s, and at 10% loss each way all paths were seen waiting on
/// probes for 4.7 s together (Debian's kernel, a TCG guest), with a live
/// peer.
pub const MIN_DEAD_NS: u64 = 10_000_000_000;

/// How long a request with verbs attributes `timeout` and `retry_cnt` lets
/// its peer stay silent: the local ACK timeout (4.096 us << `timeout`) times
/// the tries (`retry_cnt` + 1), at least [`MIN_DEAD_NS`]; `None` for
/// timeout 0 (wait for ever).
pub fn patience_ns(timeout: u8, retry_cnt: u8) -> Option<u64> {
    if timeout == 0 {
        return None;
    }
    let one = 4096u64 << timeout.min(31);
    Some((one * (u64::from(retry_cnt.min(7)) + 1)).max(MIN_DEAD_NS))
}

/// How a session is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionConfig {
    /// A peer counts as an active sender for this long after its last new
    /// data (nanoseconds), or for [`QUIET_PACKETS`] packets at its share if
    /// that is longer (at most [`MAX_QUIET_NS`]): long enough to span the
    /// gaps of a paced sender and of a sender between two requests, short
    /// enough that a sender that stopped gives its share back quickly. A
    /// peer that sends a packet this often holds a full share: the sharing
    /// is equal among those counted, not max-min.
    pub active_ns: u64,
    /// The gap after the first hello while the handshake is incomplete
    /// (nanoseconds); it doubles with each hello up to [`HELLO_MAX_NS`]. A
    /// lost hello costs this much: a few round trips of the fabric.
    pub hello_first_ns: u64,
}

impl SessionConfig {
    /// What the kernel uses: 50 ms spans the scheduling hiccups of a busy
    /// guest (hundreds of ms were seen under emulation with KASAN, which the
    /// packets at a small share then cover).
    pub const DEFAULT: Self = Self {
        active_ns: 50_000_000,
        hello_first_ns: HELLO_FIRST_NS,
    };
}

/// A sender paced at its share keeps counting for this many of its packets
/// without new data.
pub const QUIET_PACKETS: u64 = 16;

/// The longest a sender that went quiet keeps its share.
pub const MAX_QUIET_NS: u64 = 2_000_000_000;

/// What a hello did to the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloOutcome {
    /// Nothing the connection needs to know.
    Nothing,
    /// The peer's epoch or initial PSN became known (or changed before any
    /// data flowed): nothing is in the connection yet, so setting its ids
    /// anew ([`Session::configure`]) is enough.
    Rekey,
    /// The peer is a new incarnation and data flowed with the old one:
    /// everything in flight is void. The caller fails what the old
    /// incarnation answered and rebuilds the connection from
    /// [`Session::configure`] (our epoch moved on).
    Reset,
}

/// One host's session with one peer host.
#[derive(Clone, Debug)]
pub struct Session {
    hs: Handshake,
    cfg: SessionConfig,
    /// Something (a queue pair, a flow) wants the peer: hellos go on.
    wanted: bool,
    /// Hellos sent since the handshake last started or something last
    /// wanted the peer.
    hellos: u32,
    hello_gap: u64,
    next_hello: u64,
    /// A reply or challenge the last hello asked for, not sent yet.
    reply: bool,
    challenge: bool,
    /// The last time the connection carried something from the peer, or
    /// nothing waited on it.
    alive_at: u64,
    /// The last answer to a keepalive (0: none).
    answered_at: u64,
    /// The source port the last challenge from the peer came from, if it is
    /// [`PORT_BASE`] or above (`None` after any other hello that asked for
    /// an answer): the answer leaves from it (its route worked one way, and
    /// the peer's ACKs of that path leave from it too).
    challenged_from: Option<u16>,
    /// The port the answer just sent from a challenge's port goes from once
    /// more ([`Self::poll_hello`]). Anyone who sees the traffic can forge a
    /// challenge from a port of their choosing (a route that failed, say),
    /// and each one uses up the answers' rate slot, so the copies take the
    /// route the connection proved last and every other route in turn.
    answer_again: Option<u16>,
    /// Answers sent from a challenge's port (the copies' turns).
    answers: u64,
    /// Requests waited on the peer at the last look.
    waiting: bool,
    next_check: u64,
    /// The earliest time the next keepalive challenge may go.
    next_keepalive: u64,
    /// Keepalive challenges sent, for statistics.
    keepalives: u64,
    /// The longest silence a look measured while requests waited.
    longest_silence: u64,
    /// The longest a look found the connection carrying nothing from the
    /// peer while requests waited (keepalive answers aside).
    longest_quiet: u64,
    /// When the peer last sent new data, while it counts as a sender.
    sending_at: Option<u64>,
    /// The (capacity, senders) the connection's hint was last set from.
    shared: Option<(u32, u32)>,
    /// How long without new data ends the peer's turn as a sender: the
    /// configured time, or [`QUIET_PACKETS`] packets at its share if that is
    /// longer (a sender paced at a small share sends rarely).
    quiet_ns: u64,
    /// Hellos and challenges sent, for statistics.
    sent: u64,
}

impl Session {
    /// A session whose epoch is `epoch` and whose packets start at PSN
    /// `isn` (the caller draws both at random), made at `now`.
    pub const fn new(epoch: u32, isn: u32, now: u64, cfg: SessionConfig) -> Self {
        Self {
            hs: Handshake::new(epoch, isn),
            cfg,
            wanted: false,
            hellos: 0,
            hello_gap: cfg.hello_first_ns,
            next_hello: now,
            reply: false,
            challenge: false,
            alive_at: now,
            answered_at: 0,
            challenged_from: None,
            answer_again: None,
            answers: 0,
            waiting: false,
            next_check: now,
            next_keepalive: now,
            keepalives: 0,
            longest_silence: 0,
            longest_quiet: 0,
            sending_at: None,
            shared: None,
            quiet_ns: cfg.active_ns,
            sent: 0,
        }
    }

    /// The handshake (our epoch, the peer's, and whether data may flow).
    pub const fn handshake(&self) -> &Handshake {
        &self.hs
    }

    /// Our epoch: the connection id we receive on.
    pub const fn epoch(&self) -> u32 {
        self.hs.epoch()
    }

    /// Whether data may flow: each end knows the other's epoch.
    pub const fn ready(&self) -> bool {
        self.hs.ready()
    }

    /// The peer has not answered [`HELLO_FAST_TRIES`] hellos: it is asked
    /// rarely now, and its connection may make room for another.
    pub const fn unanswered(&self) -> bool {
        !self.hs.ready() && self.hellos >= HELLO_FAST_TRIES
    }

    /// Hellos and challenges sent.
    pub const fn hellos_sent(&self) -> u64 {
        self.sent
    }

    /// Keepalive challenges sent (a peer silent for [`KEEPALIVE_NS`] while
    /// requests waited on it).
    pub const fn keepalives_sent(&self) -> u64 {
        self.keepalives
    }

    /// The longest the peer was silent while requests waited on it, as the
    /// looks every [`ALIVE_CHECK_NS`] measured it (nanoseconds).
    pub const fn longest_silence(&self) -> u64 {
        self.longest_silence
    }

    /// The longest the connection carried nothing from the peer while
    /// requests waited (keepalive answers aside), as the looks measured it
    /// (nanoseconds): how close a live peer came to its patience without
    /// keepalives.
    pub const fn longest_quiet(&self) -> u64 {
        self.longest_quiet
    }

    /// When the peer last answered a keepalive, if that answer still counts
    /// as life (the connection has been quiet for less than
    /// [`KEEPALIVE_SPAN_NS`] since it last carried something from the
    /// peer); 0 otherwise.
    const fn keepalive_answered_at(&self, now: u64) -> u64 {
        if self.answered_at > self.alive_at && now.saturating_sub(self.alive_at) < KEEPALIVE_SPAN_NS
        {
            self.answered_at
        } else {
            0
        }
    }

    /// Whether the peer counts as a sender to us now.
    pub const fn sending(&self) -> bool {
        self.sending_at.is_some()
    }

    /// Sets the ids and initial PSNs of `cfg` from the handshake.
    pub fn configure(&self, cfg: &mut Config) {
        cfg.local_id = self.hs.epoch();
        cfg.remote_id = self.hs.remote();
        cfg.tx_isn = self.hs.isn();
        cfg.rx_isn = self.hs.remote_isn();
    }

    /// Whether something wants the peer (`true` each time a queue pair
    /// attaches, `false` when the last one left). Each new want while the
    /// handshake is incomplete asks again from the start.
    pub fn set_wanted(&mut self, now: u64, wanted: bool) {
        if wanted && !self.hs.ready() {
            self.hellos = 0;
            self.hello_gap = self.cfg.hello_first_ns;
            self.next_hello = now;
        }
        self.wanted = wanted;
    }

    /// Handles a hello from epoch `from` whose packets start at PSN
    /// `from_isn`, naming `to` as our epoch, with hello flags `flags`, that
    /// came from UDP source port `sport`.
    pub fn on_hello(
        &mut self,
        from: u32,
        from_isn: u32,
        to: u32,
        flags: u8,
        sport: u16,
        now: u64,
    ) -> HelloOutcome {
        let before = (self.hs.remote(), self.hs.remote_isn());
        let v = self.hs.on_hello(from, from_isn, to, flags, now);
        self.challenge |= v.challenge;
        self.reply |= v.reply;
        if v.known {
            // The incarnation we know: alive, whatever its data does (for
            // a while: `poll_liveness`).
            self.answered_at = now;
        }
        if v.reply {
            // Only a challenge from the incarnation we know names the
            // answer's port, and only from PORT_BASE or above where ours
            // come from (a forged one from another port gets its answer from
            // ours; so does any other hello that asks for one).
            self.challenged_from = (v.known && sport >= PORT_BASE).then_some(sport);
        }
        if v.reset {
            // A new connection: its hint is set afresh, and the peer's
            // new incarnation is asked promptly should our reply be lost.
            self.shared = None;
            self.hellos = 0;
            self.hello_gap = self.cfg.hello_first_ns;
            return HelloOutcome::Reset;
        }
        if before != (self.hs.remote(), self.hs.remote_isn()) {
            return HelloOutcome::Rekey;
        }
        HelloOutcome::Nothing
    }

    /// The connection accepted a packet from the peer at `now` (it named our
    /// epoch): the peer knows our epoch and is alive. Returns whether the
    /// peer just became an active sender (the caller counts one more).
    pub fn on_received(&mut self, now: u64, r: &Received<'_>) -> bool {
        self.hs.on_traffic();
        self.alive_at = now;
        match r {
            Received::Data(..) => {
                self.hs.mark_used();
                self.sending_at.replace(now).is_none()
            }
            Received::Void => {
                self.hs.mark_used();
                false
            }
            Received::Duplicate | Received::Refused(_) | Received::Control => false,
        }
    }

    /// A request went into the connection: data is exchanged in this
    /// incarnation, and something waits on the peer (its patience is looked
    /// at on time even if the connection then goes quiet).
    pub fn on_posted(&mut self) {
        self.hs.mark_used();
        self.waiting = true;
    }

    /// Whether a look at the patience of what waits on the peer is due at
    /// `now`; if so, how long the peer has been silent (nanoseconds). The
    /// caller fails what has waited longer than it allows and reports with
    /// [`Self::set_waiting`].
    pub fn poll_liveness(&mut self, now: u64) -> Option<u64> {
        if now < self.next_check {
            return None;
        }
        // Nothing waited since the last look (an idle connection has no
        // timer, so that look may be long ago): no silence to measure.
        if !self.waiting {
            self.alive_at = now;
        }
        self.next_check = now.saturating_add(ALIVE_CHECK_NS);
        let quiet = now.saturating_sub(self.alive_at);
        let answered = self.keepalive_answered_at(now);
        let silent = if answered != 0 {
            now.saturating_sub(answered)
        } else {
            quiet
        };
        self.longest_silence = self.longest_silence.max(silent);
        self.longest_quiet = self.longest_quiet.max(quiet);
        if self.waiting
            && self.hs.ready()
            && silent >= KEEPALIVE_NS
            && quiet < KEEPALIVE_SPAN_NS
            && now >= self.next_keepalive
        {
            self.challenge = true;
            self.keepalives = self.keepalives.saturating_add(1);
            self.next_keepalive = now.saturating_add(KEEPALIVE_NS);
        }
        Some(silent)
    }

    /// Whether anything still waits on the peer after a look. With nothing
    /// waiting, the silence clock starts again when something does.
    pub fn set_waiting(&mut self, now: u64, waiting: bool) {
        self.waiting = waiting;
        if !waiting {
            self.alive_at = now;
        }
    }

    /// Whether the peer stopped being an active sender by `now` (the caller
    /// counts one less); says so once.
    pub fn poll_quiet(&mut self, now: u64) -> bool {
        match self.sending_at {
            Some(t) if now.saturating_sub(t) >= self.quiet_ns => {
                self.sending_at = None;
                true
            }
            _ => false,
        }
    }

    /// The session ends (the connection is dropped): whether the peer
    /// counted as an active sender (the caller counts one less).
    pub fn close(&mut self) -> bool {
        self.sending_at.take().is_some()
    }

    /// Sets the hint the connection's ACKs carry to an equal share of
    /// `capacity_kbps` (kbit/s; 0: unknown, no hint) among `senders` active
    /// senders, and announces it at once to a peer that sends to us when it
    /// changed.
    pub fn share<const P: usize>(
        &mut self,
        conn: &mut Connection<P>,
        capacity_kbps: u32,
        senders: u32,
    ) {
        let now = (capacity_kbps, senders.max(1));
        if self.shared == Some(now) {
            return;
        }
        let old = self.shared.map_or(0, |(c, n)| fair_share(c, n));
        self.shared = Some(now);
        conn.share_capacity(now.0, now.1);
        // QUIET_PACKETS packets at the share: bits * 1,000,000 / (kbit/s) =
        // ns (a packet's bits are below 2^20: no overflow).
        let share = u64::from(fair_share(now.0, now.1));
        let packet_bits = (u64::from(conn.config().max_payload) + u64::from(HEADER_OVERHEAD)) * 8;
        let packets = (QUIET_PACKETS * packet_bits * 1_000_000)
            .checked_div(share)
            .unwrap_or(0);
        self.quiet_ns = self.cfg.active_ns.max(packets.min(MAX_QUIET_NS));
        if self.sending() && fair_share(now.0, now.1) != old {
            conn.announce();
        }
    }

    /// When the caller must come back after `now`, given the connection's
    /// own next timeout `conn_next` (only looked at once data may flow):
    /// the next hello, the next look at what waits, the moment the peer
    /// stops counting as a sender, whichever is first.
    pub fn next_deadline(&self, now: u64, conn_next: Option<u64>) -> Option<u64> {
        let mut next = if self.hs.ready() {
            conn_next
        } else if self.asking() {
            Some(self.next_hello)
        } else {
            None
        };
        let mut at = |t: u64| next = Some(next.map_or(t, |n: u64| n.min(t)));
        if self.reply || self.challenge || self.answer_again.is_some() {
            at(now);
        }
        if self.waiting {
            at(self.next_check);
        }
        if let Some(t) = self.sending_at {
            // Never before now (`share` may have shortened the time since
            // `poll_quiet` looked).
            at(t.saturating_add(self.quiet_ns).max(now.saturating_add(1)));
        }
        next
    }
}

#[cfg(test)]
mod tests;
