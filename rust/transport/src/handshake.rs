// SPDX-License-Identifier: GPL-2.0

//! The incarnation handshake of a connection between two hosts.
//!
//! A host keeps one connection per peer for as long as its device lives, and
//! every queue pair to that peer is a stream on it. Each end names its
//! incarnation of the connection with an *epoch*: a nonzero number that is
//! also the connection id it receives on. Before any data flows, each end
//! must learn the other's epoch and know that the other has learnt its own;
//! hellos carry both (`from`: the sender's epoch, `to`: the receiver's as the
//! sender knows it, 0 for none).
//!
//! When a peer comes back with a new epoch (its module was reloaded, its
//! device recreated), everything in flight between the old incarnations is
//! void: an end that had exchanged data resets its connection and moves to
//! the next epoch of its own, so that no late packet of the old incarnation
//! is taken for one of the new. An end that has exchanged nothing adopts the
//! new epoch as it is, so two fresh ends never reset each other in turn.
//!
//! A hello is one unauthenticated datagram that anybody on the peer's host
//! can send from an ordinary UDP socket. So once the handshake is complete, a
//! hello naming a new epoch is only a *claim* that the peer restarted: the
//! end challenges the incarnation it knows (a hello with
//! [`hello_flags::CHALLENGE`], which only that incarnation can answer, since
//! the answer must name both epochs) and believes the claim only when the
//! old incarnation stayed silent for [`RESTART_SILENCE_NS`] since it was
//! first made: no answer, no packet addressed to our epoch. A restarted peer
//! repeats its hello until it is answered, so its claim is taken at the first
//! hello after that silence; a forged one is disproved by the live peer's
//! answer within a round trip.
//!
//! Replies and challenges are rate-limited ([`REPLY_GAP_NS`]): a flood of
//! hellos makes at most one per gap towards the peer. An end that still
//! waits for the handshake repeats its own hellos, so a reply held back
//! costs it one repetition. Answers to challenges from the incarnation we
//! know (which name both epochs: only who sees the traffic can forge them)
//! have a gap of their own: a flood of claims, which anyone who can send
//! from the peer's address can make without seeing a packet, does not hold
//! back the answer a live peer's keepalive waits for. So at most two
//! verdicts ask for a datagram per gap, and the session sends an answer
//! twice (from two ports): three hellos per gap towards the peer at most.
//!
//! Sans-IO like the rest of the core: the caller sends the hellos
//! ([`Handshake::hello`]) on a timer until [`Handshake::ready`], and when a
//! verdict asks for a reply or a challenge; it reports every packet that
//! named our epoch ([`Handshake::on_traffic`]).

use super::wire::{encode_hello, hello_flags, Common, EncodeError, HelloHeader, PacketType};

/// A hello whose sender epoch lies this little before the one we know is a
/// late copy from before the peer's last reset, not a new incarnation.
const STALE_WINDOW: u32 = 256;

/// How long the incarnation we know must stay silent after a hello claimed a
/// new one before the claim is believed (nanoseconds). Long enough for
/// several challenges and their answers on a lossy fabric; a real restart is
/// recognised this much later.
pub const RESTART_SILENCE_NS: u64 = 1_000_000_000;

/// The least gap between two replies or challenges to hellos (nanoseconds).
pub const REPLY_GAP_NS: u64 = 10_000_000;

/// What a hello asks of the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The peer is a new incarnation and data was exchanged with the old
    /// one: fail what is in flight and rebuild the connection as
    /// [`Handshake::epoch`] and [`Handshake::remote`] now say.
    pub reset: bool,
    /// Send a hello back (the peer does not know our epoch yet, or we
    /// learnt its new one, or it challenged us).
    pub reply: bool,
    /// Send a challenge ([`Handshake::challenge`]): a hello claimed a new
    /// incarnation of the peer, and the one we know has to answer or stay
    /// silent.
    pub challenge: bool,
    /// The hello came from the incarnation we know and named our epoch: the
    /// peer is alive (an answer to a challenge, or a challenge of its own).
    pub known: bool,
}

/// One end's view of the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handshake {
    epoch: u32,
    /// Our initial PSN, sent in our hellos.
    isn: u32,
    remote: u32,
    /// The peer's initial PSN, learnt with its epoch.
    remote_isn: u32,
    confirmed: bool,
    used: bool,
    /// When a hello first claimed a new incarnation of the peer, while the
    /// one we know has not shown life since.
    claimed_at: Option<u64>,
    /// The last reply or challenge sent (rate limit; answers to the known
    /// incarnation's challenges have their own, `answer_sent_at`).
    replied_at: Option<u64>,
    /// The last answer to a challenge from the incarnation we know (its own
    /// rate limit).
    answer_sent_at: Option<u64>,
    /// Hello claims not (yet) believed, for statistics.
    doubted: u64,
}

/// Whether [`REPLY_GAP_NS`] passed since `last` (the last datagram of one
/// kind) at `now`; if so, `now` becomes the last.
fn gap_passed(last: &mut Option<u64>, now: u64) -> bool {
    if last.is_some_and(|t| now.wrapping_sub(t) < REPLY_GAP_NS) {
        return false;
    }
    *last = Some(now);
    true
}

fn next_epoch(e: u32) -> u32 {
    match e.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

impl Handshake {
    /// A fresh end whose epoch is `epoch` (0 is taken as 1) and whose
    /// packets start at PSN `isn`; the caller draws both at random, so that
    /// a restarted host does not reuse its old epoch and a sender who does
    /// not see the traffic knows neither.
    pub const fn new(epoch: u32, isn: u32) -> Self {
        Self {
            epoch: if epoch == 0 { 1 } else { epoch },
            isn,
            remote: 0,
            remote_isn: 0,
            confirmed: false,
            used: false,
            claimed_at: None,
            replied_at: None,
            answer_sent_at: None,
            doubted: 0,
        }
    }

    /// Our epoch: the connection id we receive on.
    pub const fn epoch(&self) -> u32 {
        self.epoch
    }

    /// The peer's epoch (0: not known yet): the connection id we send to.
    pub const fn remote(&self) -> u32 {
        self.remote
    }

    /// Our initial PSN (the connection's `tx_isn`).
    pub const fn isn(&self) -> u32 {
        self.isn
    }

    /// The peer's initial PSN, learnt with its epoch (the connection's
    /// `rx_isn`).
    pub const fn remote_isn(&self) -> u32 {
        self.remote_isn
    }

    /// Whether data may flow: we know the peer's epoch and it knows ours.
    pub const fn ready(&self) -> bool {
        self.remote != 0 && self.confirmed
    }

    /// Hellos that claimed a new incarnation of the peer and were not
    /// believed when they arrived (challenged instead).
    pub const fn doubted(&self) -> u64 {
        self.doubted
    }

    /// Data was sent or received in this incarnation.
    pub fn mark_used(&mut self) {
        self.used = true;
    }

    /// A packet addressed to our epoch arrived from the peer we know: it
    /// knows our epoch, and the incarnation we know is alive.
    pub fn on_traffic(&mut self) {
        if self.remote != 0 {
            self.confirmed = true;
            self.claimed_at = None;
        }
    }

    /// Whether a reply or challenge may go at `now`; if so, it is counted
    /// as sent.
    fn may_reply(&mut self, now: u64) -> bool {
        gap_passed(&mut self.replied_at, now)
    }

    /// Handles a hello from epoch `from` whose packets start at PSN
    /// `from_isn`, that names `to` as our epoch, with hello flags `flags`,
    /// arriving at `now` (nanoseconds, any origin).
    pub fn on_hello(&mut self, from: u32, from_isn: u32, to: u32, flags: u8, now: u64) -> Verdict {
        let mut v = Verdict::default();
        if from == 0 {
            return v;
        }
        if from == self.remote {
            if to == self.epoch {
                // Only the incarnation we know can name both epochs.
                self.confirmed = true;
                self.claimed_at = None;
                v.known = true;
                v.reply = flags & hello_flags::CHALLENGE != 0
                    && gap_passed(&mut self.answer_sent_at, now);
            } else {
                // It does not know our epoch (yet).
                v.reply = self.may_reply(now);
            }
            return v;
        }
        let behind = self.remote.wrapping_sub(from);
        if self.remote != 0 && behind < STALE_WINDOW {
            // A late hello of an incarnation the peer has left.
            return v;
        }
        if !self.ready() && self.remote != 0 && !self.may_reply(now) {
            // Before the handshake completes, the peer's epoch may change
            // once per reply gap: a flood of hellos with ever new epochs
            // cannot make the end rebuild its connection for each one (the
            // real peer repeats its hello).
            return v;
        }
        if self.ready() {
            // A claim that the peer restarted: believed only once the
            // incarnation we know has been silent long enough since the
            // claim was first made.
            let since = *self.claimed_at.get_or_insert(now);
            if now.wrapping_sub(since) < RESTART_SILENCE_NS {
                self.doubted += 1;
                v.challenge = self.may_reply(now);
                return v;
            }
            self.claimed_at = None;
        }
        if self.used {
            self.epoch = next_epoch(self.epoch);
            self.used = false;
            v.reset = true;
        }
        self.remote = from;
        self.remote_isn = from_isn;
        self.confirmed = to == self.epoch && !v.reset;
        // Whatever the rate limit: this changes what the peer must learn.
        self.replied_at = Some(now);
        v.reply = true;
        v
    }

    /// Encodes our hello into `out`; returns its length.
    pub fn hello(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        self.encode(0, out)
    }

    /// Encodes a challenge to the incarnation we know into `out`; returns
    /// its length.
    pub fn challenge(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        self.encode(hello_flags::CHALLENGE, out)
    }

    fn encode(&self, flags: u8, out: &mut [u8]) -> Result<usize, EncodeError> {
        let h = HelloHeader {
            common: Common {
                ptype: PacketType::Hello,
                flags,
                path: 0,
                conn: self.remote,
                psn: 0,
                timestamp: 0,
            },
            epoch: self.epoch,
            isn: self.isn,
        };
        encode_hello(&h, out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::wire::{decode, Packet};
    use super::*;

    const MS: u64 = 1_000_000;

    /// Delivers the hello or challenge encoded by `enc` to `to` at `now`;
    /// returns the verdict.
    fn deliver_with(
        enc: impl Fn(&mut [u8]) -> Result<usize, EncodeError>,
        to: &mut Handshake,
        now: u64,
    ) -> Verdict {
        let mut buf = [0u8; 64];
        let n = enc(&mut buf).unwrap();
        match decode(&buf[..n]) {
            Ok(Packet::Hello(h)) => to.on_hello(h.epoch, h.isn, h.common.conn, h.common.flags, now),
            other => panic!("not a hello: {other:?}"),
        }
    }

    /// Delivers `from`'s hello to `to` at `now`; returns the verdict.
    fn deliver(from: &Handshake, to: &mut Handshake, now: u64) -> Verdict {
        deliver_with(|b| from.hello(b), to, now)
    }

    /// Runs hellos (one every 20 ms from `now`) until both are ready;
    /// returns the hellos exchanged.
    fn converge(a: &mut Handshake, b: &mut Handshake, now: u64) -> usize {
        let mut t = now;
        let mut sent = 1;
        let mut v = deliver(a, b, t);
        for _ in 0..8 {
            if !v.reply {
                break;
            }
            t += 20 * MS;
            sent += 1;
            v = deliver(b, a, t);
            if !v.reply {
                break;
            }
            t += 20 * MS;
            sent += 1;
            v = deliver(a, b, t);
        }
        sent
    }

    /// Two ends that met and exchanged data, at time 0.
    fn used_pair() -> (Handshake, Handshake) {
        let mut a = Handshake::new(100, 100 ^ 0x5a5a);
        let mut b = Handshake::new(900, 900 ^ 0x5a5a);
        converge(&mut a, &mut b, 0);
        a.mark_used();
        b.mark_used();
        (a, b)
    }

    #[test]
    fn two_fresh_ends_meet_in_three_hellos() {
        let mut a = Handshake::new(100, 100 ^ 0x5a5a);
        let mut b = Handshake::new(900, 900 ^ 0x5a5a);
        assert!(!a.ready() && !b.ready());
        assert_eq!(converge(&mut a, &mut b, 0), 3);
        assert!(a.ready() && b.ready());
        assert_eq!((a.remote(), b.remote()), (900, 100));
        // Each learnt the other's initial PSN with its epoch.
        assert_eq!((a.remote_isn(), b.remote_isn()), (b.isn(), a.isn()));
        // A duplicate of the first hello changes nothing and asks for one reply.
        let v = b.on_hello(100, 0, 0, 0, 100 * MS);
        assert_eq!(
            v,
            Verdict {
                reply: true,
                ..Verdict::default()
            }
        );
        assert!(b.ready());
        // A second copy within the reply gap is not answered.
        assert_eq!(b.on_hello(100, 0, 0, 0, 101 * MS), Verdict::default());
    }

    #[test]
    fn crossing_hellos_converge_without_reset() {
        let mut a = Handshake::new(5, 5 ^ 0x5a5a);
        let mut b = Handshake::new(7, 7 ^ 0x5a5a);
        let (ha, hb) = (a, b);
        let va = deliver(&hb, &mut a, 0);
        let vb = deliver(&ha, &mut b, 0);
        assert!(!va.reset && !vb.reset && va.reply && vb.reply);
        deliver(&a, &mut b, 20 * MS);
        deliver(&b, &mut a, 20 * MS);
        assert!(a.ready() && b.ready());
    }

    #[test]
    fn a_restarted_peer_resets_a_used_end_once_its_old_self_stays_silent() {
        let (mut a, _b) = used_pair();
        // B restarts with a new random epoch; its hellos repeat.
        let mut b2 = Handshake::new(31_337, 31_337 ^ 0x5a5a);
        let t0 = 5_000 * MS;
        let v = deliver(&b2, &mut a, t0);
        assert_eq!(
            v,
            Verdict {
                challenge: true,
                ..Verdict::default()
            }
        );
        // Nobody answers the challenge (B's old incarnation is gone).
        let v = deliver(&b2, &mut a, t0 + 128 * MS);
        assert!(!v.reset && v.challenge);
        assert_eq!(a.doubted(), 2);
        let v = deliver(&b2, &mut a, t0 + RESTART_SILENCE_NS);
        assert!(v.reset && v.reply && !v.challenge);
        assert_eq!(a.epoch(), 101);
        assert!(!a.ready());
        // The rest of the exchange resets nobody.
        let v = deliver(&a, &mut b2, t0 + RESTART_SILENCE_NS + MS);
        assert!(!v.reset);
        let v = deliver(&b2, &mut a, t0 + RESTART_SILENCE_NS + 2 * MS);
        assert!(!v.reset && !v.reply);
        assert!(a.ready() && b2.ready());
        assert_eq!((a.remote(), b2.remote()), (31_337, 101));
        assert_eq!(a.remote_isn(), b2.isn());
        // A late hello of A's incarnation before the reset is ignored.
        assert_eq!(
            b2.on_hello(100, 0, 31_337, 0, t0 + 2 * RESTART_SILENCE_NS),
            Verdict::default()
        );
        assert!(b2.ready());
        assert_eq!(b2.remote(), 101);
    }

    #[test]
    fn a_forged_hello_is_disproved_by_the_live_peer() {
        let (mut a, mut b) = used_pair();
        let t0 = 5_000 * MS;
        for round in 0..20u64 {
            let t = t0 + round * 2 * RESTART_SILENCE_NS / 3;
            // Anybody on B's host claims B restarted.
            let v = a.on_hello(0xbad0_0000 + round as u32, 0, 0, 0, t);
            assert!(
                !v.reset,
                "round {round}: one hello tore the connection down"
            );
            assert!(v.challenge && !v.known, "a claim is no sign of life");
            // A challenges B's incarnation; B answers; A believes B, and
            // each knows the other alive.
            let v = deliver_with(|buf| a.challenge(buf), &mut b, t + MS);
            assert_eq!(
                v,
                Verdict {
                    reply: true,
                    known: true,
                    ..Verdict::default()
                }
            );
            let v = deliver(&b, &mut a, t + 2 * MS);
            assert!(!v.reply && v.known);
        }
        assert!(a.ready() && b.ready());
        assert_eq!((a.epoch(), a.remote()), (100, 900));
        // Traffic addressed to A's epoch disproves a claim as well.
        let t1 = t0 + 100 * RESTART_SILENCE_NS;
        assert!(a.on_hello(0xbad1, 0, 0, 0, t1).challenge);
        a.on_traffic();
        let v = a.on_hello(0xbad2, 0, 0, 0, t1 + RESTART_SILENCE_NS);
        assert!(!v.reset && v.challenge);
        assert_eq!(a.remote(), 900);
    }

    #[test]
    fn a_flood_of_hellos_gets_one_answer_per_gap() {
        let (mut a, _b) = used_pair();
        let t0 = 5_000 * MS;
        let mut answers = 0;
        // 1000 hellos in 100 ms: forged claims and copies of B's own.
        for i in 0..1000u64 {
            let t = t0 + i * 100_000;
            let v = if i % 2 == 0 {
                a.on_hello(0xbad0_0000 + i as u32, 0, 0, 0, t)
            } else {
                a.on_hello(900, 0, 7, 0, t)
            };
            assert!(!v.reset);
            // B's epoch naming another than A's is no sign of B's life.
            assert!(!v.known);
            answers += usize::from(v.reply) + usize::from(v.challenge);
        }
        assert!(
            answers <= (100 * MS / REPLY_GAP_NS) as usize + 1,
            "{answers} answers"
        );
        assert!(answers > 0);
    }

    #[test]
    fn a_flood_of_claims_does_not_hold_back_the_answer_to_our_peers_challenge() {
        let (mut a, b) = used_pair();
        let t0 = 5_000 * MS;
        // Claims of new incarnations every 100 us, which anyone can forge
        // blindly; B's own challenge lands just after one of them every
        // 0.5 s (each one shows B alive, so no claim is believed).
        let mut answered = 0;
        for i in 0..30_000u64 {
            let t = t0 + i * 100_000;
            let v = a.on_hello(0xbad0_0000 + i as u32, 0, 0, 0, t);
            assert!(!v.reset && !v.known);
            if i % 5_000 == 2_500 {
                let v = deliver_with(|o| b.challenge(o), &mut a, t + 1_000);
                assert!(v.known);
                answered += usize::from(v.reply);
            }
        }
        assert_eq!(answered, 6, "every challenge of B's answered");
        // Answers have their gap too: a flood of challenges naming both
        // epochs (which a sniffer can forge) gets one per gap.
        let t1 = t0 + 10_000 * MS;
        let answers = (0..1000u64)
            .filter(|i| deliver_with(|o| b.challenge(o), &mut a, t1 + i * 100_000).reply)
            .count();
        assert_eq!(answers, (100 * MS / REPLY_GAP_NS) as usize);
    }

    #[test]
    fn a_challenge_to_the_wrong_epochs_is_not_answered_as_proof() {
        let (mut a, mut b) = used_pair();
        // A new incarnation of B cannot answer a challenge to the old one
        // with a hello that names both old epochs.
        let mut b2 = Handshake::new(4_000, 4_000 ^ 0x5a5a);
        let t0 = 5_000 * MS;
        assert!(deliver(&b2, &mut a, t0).challenge);
        let v = deliver_with(|buf| a.challenge(buf), &mut b2, t0 + MS);
        assert!(v.reply);
        let v = deliver(&b2, &mut a, t0 + 2 * MS);
        assert!(!v.reset);
        assert!(!v.known, "b2's answer is no sign of B's life");
        assert_eq!(a.remote(), 900, "b2's answer names its own epoch, not B's");
        let _ = &mut b;
        assert!(deliver(&b2, &mut a, t0 + RESTART_SILENCE_NS).reset);
    }

    #[test]
    fn an_unused_end_adopts_a_new_epoch_without_reset() {
        let mut a = Handshake::new(100, 100 ^ 0x5a5a);
        let mut b = Handshake::new(900, 900 ^ 0x5a5a);
        converge(&mut a, &mut b, 0);
        let mut b2 = Handshake::new(4_000_000, 4_000_000 ^ 0x5a5a);
        let t0 = 5_000 * MS;
        assert!(deliver(&b2, &mut a, t0).challenge);
        let v = deliver(&b2, &mut a, t0 + RESTART_SILENCE_NS);
        assert!(!v.reset && v.reply);
        assert_eq!(a.epoch(), 100);
        converge(&mut b2, &mut a, t0 + 2 * RESTART_SILENCE_NS);
        assert!(a.ready() && b2.ready());
    }

    #[test]
    fn before_the_handshake_completes_the_epoch_changes_once_per_gap() {
        let mut a = Handshake::new(100, 1);
        assert!(a.on_hello(7, 70, 0, 0, 0).reply);
        // A flood of hellos with new epochs within the gap changes nothing.
        for i in 0..100u32 {
            let v = a.on_hello(1000 + i, 0, 0, 0, MS + u64::from(i) * 10_000);
            assert_eq!(v, Verdict::default());
        }
        assert_eq!((a.remote(), a.remote_isn()), (7, 70));
        // After the gap a new one is taken (the real peer repeats its hello).
        assert!(a.on_hello(9, 90, 100, 0, 2 * REPLY_GAP_NS).reply);
        assert_eq!((a.remote(), a.remote_isn()), (9, 90));
        assert!(a.ready());
    }

    #[test]
    fn traffic_confirms_and_zero_is_no_epoch() {
        let mut a = Handshake::new(0, 0x5a5a);
        assert_eq!(a.epoch(), 1);
        a.on_traffic();
        assert!(!a.ready());
        assert_eq!(a.on_hello(0, 0, 1, 0, 0), Verdict::default());
        let v = a.on_hello(9, 0, 0, 0, 0);
        assert!(v.reply && !a.ready());
        a.on_traffic();
        assert!(a.ready());
        assert_eq!(next_epoch(u32::MAX), 1);
    }
}
