// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues: receives posted once for any number of QPs, which
//! take them as their Sends arrive, and the limit event armed by
//! `modify_srq`. Safe Rust only.
//!
//! A QP created with an SRQ keeps no receives of its own: when a packet
//! names a receive the QP has not taken yet (by its receive number, in any
//! order), the QP takes the SRQ's oldest receives into its own queue, in
//! order, up to that one (responder.rs `take_shared`). From there they are
//! the QP's: completed in its order, flushed with it. The SRQ's ring is a
//! leaf lock (Documentation/verbs.md): taken with a QP's lock held, never
//! with another leaf, and the limit event is raised from a work item with
//! no driver lock held.

use super::{
    cq::ring_slots,
    mr::PdId,
    quota::{Kind, ObjectCounts, Quota},
};
use crate::abstractions::{
    ops::SrqEvents,
    sync::SpinLockBh,
    timer::{Timer, TimerHandler},
    types::{RecvWr, SrqAttr, SrqModify, MAX_SGE as SGE_SLOTS},
};
use crate::new_spinlock_bh;
use kernel::{alloc::KVVec, prelude::*, sync::Arc};

/// Scatter/gather elements per receive.
const MAX_SGE: u32 = SGE_SLOTS as u32;

/// The most receives an SRQ holds (reported by `query_device`).
pub(crate) const MAX_SRQ_WR: u32 = 16384;

/// A shared receive queue.
pub(crate) struct Srq {
    pub(super) inner: Arc<SrqShared>,
    /// Its place among the device's SRQs.
    _quota: Quota,
}

pub(super) struct SrqShared {
    /// The PD its receives' buffers belong to (not the QPs').
    pub(super) pd: PdId,
    notify: Arc<Timer<SrqNotify>>,
    ring: Pin<KBox<SpinLockBh<SrqRing>>>,
}

/// The limit event, raised on a worker thread (the timer is unused).
pub(crate) struct SrqNotify {
    events: Arc<SrqEvents>,
}

impl TimerHandler for SrqNotify {
    fn expired(_: &Timer<Self>) {}

    fn kicked(t: &Timer<Self>) {
        t.events.limit_reached();
    }
}

/// The receives posted and not yet taken, oldest first.
struct SrqRing {
    slots: KVVec<Option<RecvWr>>,
    head: usize,
    len: usize,
    /// The armed limit (0: not armed): when fewer receives than this are
    /// left, the event fires once and the limit is disarmed.
    limit: u32,
}

impl SrqRing {
    fn push(&mut self, wr: RecvWr) -> Result {
        let cap = self.slots.len();
        if self.len == cap {
            return Err(ENOMEM);
        }
        // `head < cap` and `len < cap`: one wrap at most, and no division
        // (no panic path on a ring of any size).
        let at = wrap(self.head + self.len, cap);
        if let Some(s) = self.slots.get_mut(at) {
            *s = Some(wr);
        }
        self.len += 1;
        Ok(())
    }

    /// Puts a receive back before the oldest.
    fn unshift(&mut self, wr: RecvWr) -> Result {
        let cap = self.slots.len();
        if self.len == cap {
            return Err(ENOMEM);
        }
        // `cap > 0` here (`len < cap`).
        self.head = self.head.checked_sub(1).unwrap_or(cap.saturating_sub(1));
        if let Some(s) = self.slots.get_mut(self.head) {
            *s = Some(wr);
        }
        self.len += 1;
        Ok(())
    }

    fn first(&self) -> Option<&RecvWr> {
        if self.len == 0 {
            return None;
        }
        self.slots.get(self.head)?.as_ref()
    }

    fn pop(&mut self) -> Option<RecvWr> {
        if self.len == 0 {
            return None;
        }
        let wr = self.slots.get_mut(self.head).and_then(|s| s.take());
        self.head = wrap(self.head + 1, self.slots.len());
        self.len -= 1;
        wr
    }
}

/// Index `i` of a ring of `cap` slots, for `i < 2 * cap`.
fn wrap(i: usize, cap: usize) -> usize {
    if i >= cap {
        i - cap
    } else {
        i
    }
}

impl SrqShared {
    /// Takes the oldest receive, for a QP whose message needs it. Fires the
    /// limit event if this leaves fewer than the armed limit.
    pub(super) fn take(&self) -> Option<RecvWr> {
        self.take_if(|_| true).ok()
    }

    /// Takes the oldest receive if `ok` accepts it: `Err(true)` if it does
    /// not (the receive stays), `Err(false)` if there is none. Fires the
    /// limit event as [`Self::take`].
    pub(super) fn take_if(&self, ok: impl Fn(&RecvWr) -> bool) -> Result<RecvWr, bool> {
        let (wr, fire) = {
            let mut r = self.ring.lock();
            match r.first() {
                None => return Err(false),
                Some(wr) if !ok(wr) => return Err(true),
                Some(_) => {}
            }
            let wr = r.pop();
            let fire = r.limit != 0 && (r.len as u32) < r.limit;
            if fire {
                r.limit = 0;
            }
            (wr, fire)
        };
        if fire {
            self.notify.kick();
        }
        wr.ok_or(false)
    }
}

impl SrqShared {
    /// Gives back the receives a QP took and will not complete (it was
    /// reset, destroyed or failed), oldest first in `wrs`: they go back
    /// before the SRQ's oldest, in the same order, for other QPs to take.
    /// Those that no longer fit (receives were posted meanwhile) are
    /// dropped; their number is returned.
    pub(super) fn give_back(&self, wrs: &[RecvWr]) -> usize {
        let mut r = self.ring.lock();
        wrs.iter()
            .rev()
            .filter(|wr| r.unshift(**wr).is_err())
            .count()
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        // destroy_srq, process context: no event runs after this (and one
        // kicked later, which no QP of this SRQ can do any more, would find
        // the SRQ gone in `SrqEvents`). Receives never taken are dropped,
        // as verbs says.
        self.inner.notify.stop();
    }
}

impl Srq {
    /// An SRQ of `attr.max_wr` receives of up to `attr.max_sge` elements
    /// (1..=16384, at most 8); grants exactly the receives asked and 8
    /// elements. The limit given at creation is ignored, as verbs says.
    pub(crate) fn new(
        pd: PdId,
        attr: &mut SrqAttr,
        events: Arc<SrqEvents>,
        counts: &Arc<ObjectCounts>,
    ) -> Result<Self> {
        if attr.max_wr == 0 || attr.max_wr > MAX_SRQ_WR || attr.max_sge > MAX_SGE {
            return Err(EINVAL);
        }
        let quota = Quota::take(counts, Kind::Srq)?;
        attr.max_sge = MAX_SGE;
        attr.limit = 0;
        let slots = ring_slots(attr.max_wr)?;
        let notify = Timer::new_arc(SrqNotify { events }, GFP_KERNEL_ACCOUNT)?;
        Ok(Self {
            inner: Arc::new(
                SrqShared {
                    pd,
                    notify,
                    ring: KBox::pin_init(
                        new_spinlock_bh!(
                            SrqRing {
                                slots,
                                head: 0,
                                len: 0,
                                limit: 0,
                            },
                            "metaroce_srq"
                        ),
                        GFP_KERNEL_ACCOUNT,
                    )?,
                },
                GFP_KERNEL_ACCOUNT,
            )?,
            _quota: quota,
        })
    }

    /// Resizes (keeping the receives posted, in order: EINVAL if more are
    /// posted than the new size holds) and arms the limit (at most the
    /// size; 0 disarms). Either both happen or neither.
    pub(crate) fn modify(&self, m: &SrqModify) -> Result {
        if m.max_wr.is_some_and(|n| n == 0 || n > MAX_SRQ_WR) {
            return Err(EINVAL);
        }
        // The new ring is allocated before the lock, the old one freed after.
        let mut slots = match m.max_wr {
            Some(n) => Some(ring_slots(n)?),
            None => None,
        };
        let _old = {
            let mut r = self.inner.ring.lock();
            let size = slots.as_ref().map_or(r.slots.len(), |s| s.len());
            if m.limit.is_some_and(|l| l as usize > size) {
                return Err(EINVAL);
            }
            if let Some(new) = slots.as_mut() {
                if r.len > new.len() {
                    return Err(EINVAL);
                }
                let len = r.len;
                for s in new.iter_mut().take(len) {
                    *s = r.pop();
                }
                r.head = 0;
                r.len = len;
            }
            if let Some(l) = m.limit {
                r.limit = l;
            }
            match slots {
                Some(new) => Some(core::mem::replace(&mut r.slots, new)),
                None => None,
            }
        };
        Ok(())
    }

    pub(crate) fn query(&self) -> SrqAttr {
        let r = self.inner.ring.lock();
        SrqAttr {
            max_wr: r.slots.len() as u32,
            max_sge: MAX_SGE,
            limit: r.limit,
        }
    }

    /// Posts a receive; ENOMEM when the SRQ is full. Its buffers are
    /// checked when data lands in them, against the SRQ's PD.
    pub(crate) fn post_recv(&self, wr: &RecvWr) -> Result {
        self.inner.ring.lock().push(*wr)
    }
}

#[kunit_tests(metaroce_srq)]
mod tests {
    use super::*;
    use crate::abstractions::types::Sge;

    fn wr(id: u64) -> RecvWr {
        RecvWr {
            wr_id: id,
            sge: [Sge::default(); SGE_SLOTS],
            num_sge: 0,
        }
    }

    #[test]
    fn the_ring_keeps_order_across_the_wrap_and_gives_back_in_front() -> Result {
        let mut r = SrqRing {
            slots: ring_slots(3)?,
            head: 0,
            len: 0,
            limit: 0,
        };
        for id in 1..=3 {
            r.push(wr(id))?;
        }
        // Full: neither end takes more.
        assert!(r.push(wr(4)).is_err());
        assert!(r.unshift(wr(0)).is_err());
        assert_eq!(r.pop().map(|w| w.wr_id), Some(1));
        assert_eq!(r.pop().map(|w| w.wr_id), Some(2));
        r.push(wr(4))?;
        r.push(wr(5))?;
        // Given back before the oldest (3), across the wrap of `head`.
        assert_eq!(r.pop().map(|w| w.wr_id), Some(3));
        r.unshift(wr(3))?;
        let order: [Option<u64>; 4] = core::array::from_fn(|_| r.pop().map(|w| w.wr_id));
        assert_eq!(order, [Some(3), Some(4), Some(5), None]);
        Ok(())
    }
}
