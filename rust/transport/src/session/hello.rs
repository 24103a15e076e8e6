// SPDX-License-Identifier: GPL-2.0

//! Which hello a session sends when, and from which UDP source port: our
//! own while the handshake is incomplete (ever more rarely while the peer
//! does not answer), the replies and challenges hellos ask for, keepalive
//! challenges taking turns of the connection's paths, and answers from the
//! port of the challenge they answer, then once more from another (the
//! proven port, or each path's in turn).

use super::super::conn::{Connection, PORT_BASE};
use super::{Session, HELLO_FAST_TRIES, HELLO_MAX_NS, HELLO_SLOW_NS};

impl Session {
    /// The UDP source port the hello [`Self::poll_hello`] is about to give
    /// leaves from. A challenge (a keepalive, or a doubted restart claim) takes
    /// turns: the odd ones leave from the port of the path the peer
    /// acknowledged last among those not suspect (a route that worked both
    /// ways), the even ones from each other path's port in turn (that route
    /// may have failed since). An answer to a challenge leaves from the port
    /// the challenge came from (and then again: [`Self::poll_hello`]). Any
    /// other, and a challenge with no port to take: the proven port, else
    /// [`PORT_BASE`].
    pub(super) fn hello_port<const P: usize>(&self, conn: &Connection<P>) -> u16 {
        let proven = conn.proven_sport();
        if self.challenge {
            let k = self.keepalives;
            if k.is_multiple_of(2) && k > 0 {
                let turn = k / 2;
                let other = [turn, turn.wrapping_add(1)]
                    .into_iter()
                    .filter_map(|t| conn.path_sport(t))
                    .find(|&p| Some(p) != proven);
                if let Some(p) = other {
                    return p;
                }
            }
        } else if let Some(sport) = self.answer_port() {
            return sport;
        }
        proven.unwrap_or(PORT_BASE)
    }

    /// The port of the challenge the next hello answers, if it is one (no
    /// challenge of ours goes first) and that port is ours to use.
    fn answer_port(&self) -> Option<u16> {
        self.challenged_from
            .filter(|_| self.reply && !self.challenge)
    }

    /// The hello to send at `now`, if one is due, encoded into `out`: its
    /// length and the UDP source port it leaves from (chosen from `conn`'s
    /// paths: a challenge takes turns of them; an answer leaves from the
    /// port of the challenge it answers, then once more from another port:
    /// every other answer's copy from the proven port or [`PORT_BASE`], the
    /// others' from each path's port in turn, so that a flood of forged
    /// challenges sends copies over every route). A challenge or reply a
    /// hello asked for, or while the handshake is incomplete the next of our
    /// own. Call until it returns `None`. (The paths are looked at only when
    /// a hello is due: the caller polls on every pass.)
    pub fn poll_hello<const P: usize>(
        &mut self,
        now: u64,
        conn: &Connection<P>,
        out: &mut [u8],
    ) -> Option<(usize, u16)> {
        if let Some(sport) = self.answer_again.take() {
            self.sent += 1;
            return self.hs.hello(out).ok().map(|n| (n, sport));
        }
        if !self.hello_due(now) {
            return None;
        }
        let sport = self.hello_port(conn);
        let answer = self.answer_port().is_some();
        let n = self.next_hello_bytes(now, out)?;
        if answer {
            let k = self.answers;
            self.answers = k.wrapping_add(1);
            let home = conn.proven_sport().unwrap_or(PORT_BASE);
            let turn = (!k.is_multiple_of(2))
                .then(|| conn.path_sport(k / 2))
                .flatten();
            self.answer_again = [turn, Some(home)]
                .into_iter()
                .flatten()
                .find(|&p| p != sport);
        }
        Some((n, sport))
    }

    /// Whether [`Self::poll_hello`] has a hello to give at `now`.
    fn hello_due(&self, now: u64) -> bool {
        self.challenge || self.reply || (self.asking() && now >= self.next_hello)
    }

    /// [`Self::poll_hello`]'s hello, without its port. `out` takes a hello
    /// (32 bytes are enough).
    fn next_hello_bytes(&mut self, now: u64, out: &mut [u8]) -> Option<usize> {
        if self.challenge {
            self.challenge = false;
            self.sent += 1;
            return self.hs.challenge(out).ok();
        }
        if self.reply {
            self.reply = false;
            self.challenged_from = None;
            self.next_hello = now.saturating_add(self.hello_gap);
            self.sent += 1;
            return self.hs.hello(out).ok();
        }
        if !self.hello_due(now) {
            return None;
        }
        self.hellos = self.hellos.saturating_add(1);
        self.next_hello = now.saturating_add(self.hello_gap);
        let cap = if self.hellos < HELLO_FAST_TRIES {
            HELLO_MAX_NS
        } else {
            HELLO_SLOW_NS
        };
        self.hello_gap = self.hello_gap.saturating_mul(2).min(cap);
        self.sent += 1;
        self.hs.hello(out).ok()
    }

    /// Whether our own hellos are still going: the handshake is incomplete
    /// and the peer either is wanted or has not been asked often yet.
    pub(super) fn asking(&self) -> bool {
        !self.hs.ready() && (self.wanted || self.hellos < HELLO_FAST_TRIES)
    }
}
