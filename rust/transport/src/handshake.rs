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
//! Sans-IO like the rest of the core: the caller sends the hellos
//! ([`Handshake::hello`]) on a timer until [`Handshake::ready`], and when a
//! verdict asks for a reply.

use super::wire::{encode_hello, Common, EncodeError, HelloHeader, PacketType};

/// A hello whose sender epoch lies this little before the one we know is a
/// late copy from before the peer's last reset, not a new incarnation.
const STALE_WINDOW: u32 = 256;

/// What a hello asks of the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The peer is a new incarnation and data was exchanged with the old
    /// one: fail what is in flight and rebuild the connection as
    /// [`Handshake::epoch`] and [`Handshake::remote`] now say.
    pub reset: bool,
    /// Send a hello back (the peer does not know our epoch yet, or we
    /// learnt its new one).
    pub reply: bool,
}

/// One end's view of the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handshake {
    epoch: u32,
    remote: u32,
    confirmed: bool,
    used: bool,
}

fn next_epoch(e: u32) -> u32 {
    match e.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

impl Handshake {
    /// A fresh end whose epoch is `epoch` (0 is taken as 1); the caller draws
    /// it at random so that a restarted host does not reuse its old one.
    pub const fn new(epoch: u32) -> Self {
        Self {
            epoch: if epoch == 0 { 1 } else { epoch },
            remote: 0,
            confirmed: false,
            used: false,
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

    /// Whether data may flow: we know the peer's epoch and it knows ours.
    pub const fn ready(&self) -> bool {
        self.remote != 0 && self.confirmed
    }

    /// Data was sent or received in this incarnation.
    pub fn mark_used(&mut self) {
        self.used = true;
    }

    /// A packet addressed to our epoch arrived from the peer we know: it
    /// knows our epoch.
    pub fn on_traffic(&mut self) {
        if self.remote != 0 {
            self.confirmed = true;
        }
    }

    /// Handles a hello from epoch `from` that names `to` as our epoch.
    pub fn on_hello(&mut self, from: u32, to: u32) -> Verdict {
        let mut v = Verdict::default();
        if from == 0 {
            return v;
        }
        if from != self.remote {
            let behind = self.remote.wrapping_sub(from);
            if self.remote != 0 && behind < STALE_WINDOW {
                // A late hello of an incarnation the peer has left.
                return v;
            }
            if self.used {
                self.epoch = next_epoch(self.epoch);
                self.used = false;
                v.reset = true;
            }
            self.remote = from;
            self.confirmed = false;
            v.reply = true;
        }
        if to == self.epoch {
            self.confirmed = true;
        } else {
            v.reply = true;
        }
        v
    }

    /// Encodes our hello into `out`; returns its length.
    pub fn hello(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let h = HelloHeader {
            common: Common {
                ptype: PacketType::Hello,
                flags: 0,
                path: 0,
                conn: self.remote,
                psn: 0,
                timestamp: 0,
            },
            epoch: self.epoch,
        };
        encode_hello(&h, out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::wire::{decode, Packet};
    use super::*;

    /// Delivers `from`'s hello to `to`; returns the verdict.
    fn deliver(from: &Handshake, to: &mut Handshake) -> Verdict {
        let mut buf = [0u8; 64];
        let n = from.hello(&mut buf).unwrap();
        match decode(&buf[..n]) {
            Ok(Packet::Hello(h)) => to.on_hello(h.epoch, h.common.conn),
            other => panic!("not a hello: {other:?}"),
        }
    }

    /// Runs hellos until both are ready; returns the hellos exchanged.
    fn converge(a: &mut Handshake, b: &mut Handshake) -> usize {
        let mut sent = 1;
        let mut v = deliver(a, b);
        for _ in 0..8 {
            if !v.reply {
                break;
            }
            sent += 1;
            v = deliver(b, a);
            if !v.reply {
                break;
            }
            sent += 1;
            v = deliver(a, b);
        }
        sent
    }

    #[test]
    fn two_fresh_ends_meet_in_three_hellos() {
        let mut a = Handshake::new(100);
        let mut b = Handshake::new(900);
        assert!(!a.ready() && !b.ready());
        assert_eq!(converge(&mut a, &mut b), 3);
        assert!(a.ready() && b.ready());
        assert_eq!((a.remote(), b.remote()), (900, 100));
        // A duplicate of the first hello changes nothing and asks for one reply.
        let v = b.on_hello(100, 0);
        assert_eq!(v, Verdict { reset: false, reply: true });
        assert!(b.ready());
    }

    #[test]
    fn crossing_hellos_converge_without_reset() {
        let mut a = Handshake::new(5);
        let mut b = Handshake::new(7);
        let (ha, hb) = (a, b);
        let va = deliver(&hb, &mut a);
        let vb = deliver(&ha, &mut b);
        assert!(!va.reset && !vb.reset && va.reply && vb.reply);
        deliver(&a, &mut b);
        deliver(&b, &mut a);
        assert!(a.ready() && b.ready());
    }

    #[test]
    fn a_restarted_peer_resets_a_used_end_once() {
        let mut a = Handshake::new(100);
        let mut b = Handshake::new(900);
        converge(&mut a, &mut b);
        a.mark_used();
        b.mark_used();
        // B restarts with a new random epoch.
        let mut b2 = Handshake::new(31_337);
        let v = deliver(&b2, &mut a);
        assert!(v.reset && v.reply);
        assert_eq!(a.epoch(), 101);
        assert!(!a.ready());
        // The rest of the exchange resets nobody.
        let v = deliver(&a, &mut b2);
        assert!(!v.reset);
        let v = deliver(&b2, &mut a);
        assert!(!v.reset && !v.reply);
        assert!(a.ready() && b2.ready());
        assert_eq!((a.remote(), b2.remote()), (31_337, 101));
        // A late hello of A's incarnation before the reset is ignored.
        assert_eq!(b2.on_hello(100, 31_337), Verdict::default());
        assert!(b2.ready());
        assert_eq!(b2.remote(), 101);
    }

    #[test]
    fn an_unused_end_adopts_a_new_epoch_without_reset() {
        let mut a = Handshake::new(100);
        let mut b = Handshake::new(900);
        converge(&mut a, &mut b);
        let mut b2 = Handshake::new(4_000_000);
        let v = deliver(&b2, &mut a);
        assert!(!v.reset && v.reply);
        assert_eq!(a.epoch(), 100);
        converge(&mut b2, &mut a);
        assert!(a.ready() && b2.ready());
    }

    #[test]
    fn traffic_confirms_and_zero_is_no_epoch() {
        let mut a = Handshake::new(0);
        assert_eq!(a.epoch(), 1);
        a.on_traffic();
        assert!(!a.ready());
        assert_eq!(a.on_hello(0, 1), Verdict::default());
        let v = a.on_hello(9, 0);
        assert!(v.reply && !a.ready());
        a.on_traffic();
        assert!(a.ready());
        assert_eq!(next_epoch(u32::MAX), 1);
    }
}
