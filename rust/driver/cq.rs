// SPDX-License-Identifier: GPL-2.0

//! Completion queues: a ring of completions per CQ, its completion event
//! armed by `req_notify_cq`. Safe Rust only.
//!
//! Completions are added with the adder's locks held (a peer connection's,
//! a QP's); the completion handler is never called under them: an armed CQ
//! that gets a completion kicks a work item, and the handler runs there, on
//! a worker thread, with no lock of this driver held (only `CqEvents`' own,
//! which keeps the handler from racing the CQ's destruction).

use super::quota::{Kind, ObjectCounts, Quota};
use crate::abstractions::{
    ops::{CqEvents, ResAttrs},
    sync::SpinLockBh,
    timer::{Timer, TimerHandler},
    types::{QpId, Wc, WcStatus},
};
use crate::new_spinlock_bh;
use kernel::{
    alloc::KVVec,
    prelude::*,
    sync::{
        atomic::{Atomic as KAtomic, Relaxed},
        Arc,
    },
};

/// The most entries of a CQ (reported by `query_device`).
pub(crate) const MAX_CQE: u32 = 65536;

/// A completion queue.
pub(crate) struct Cq {
    pub(super) inner: Arc<CqShared>,
    /// Its place among the device's CQs.
    _quota: Quota,
}

pub(super) struct CqShared {
    notify: Arc<Timer<CqNotify>>,
    ring: Pin<KBox<SpinLockBh<CqRing>>>,
}

/// A CQ's events, raised on a worker thread (its timer is unused): what
/// was kicked for is in the two flags.
pub(crate) struct CqNotify {
    events: Arc<CqEvents>,
    /// An armed CQ got a completion.
    completion: KAtomic<bool>,
    /// A completion found the CQ full and was dropped.
    overrun: KAtomic<bool>,
}

impl TimerHandler for CqNotify {
    fn expired(_: &Timer<Self>) {}

    fn kicked(t: &Timer<Self>) {
        if t.completion.xchg(false, Relaxed) {
            t.events.fire();
        }
        if t.overrun.xchg(false, Relaxed) {
            t.events.overrun();
        }
    }
}

struct CqRing {
    slots: KVVec<Option<Wc>>,
    head: usize,
    len: usize,
    /// Armed for the next completion (`Some(true)`: solicited only).
    armed: Option<bool>,
    overflow: bool,
}

impl CqShared {
    /// Adds a completion; raises the event if armed (on a worker thread:
    /// see the top of this file). A completion that finds the ring full is
    /// dropped, and the first such raises the CQ's error event: verbs calls
    /// the CQ unusable from then on, and its consumer learns it so (rather
    /// than by a completion that never comes).
    pub(super) fn push(&self, wc: Wc, solicited: bool) {
        let fire = {
            let mut r = self.ring.lock();
            let cap = r.slots.len();
            if r.len == cap {
                if !r.overflow {
                    r.overflow = true;
                    self.notify.overrun.store(true, Relaxed);
                    true
                } else {
                    false
                }
            } else {
                let at = (r.head + r.len) % cap;
                if let Some(s) = r.slots.get_mut(at) {
                    *s = Some(wc);
                }
                r.len += 1;
                match r.armed {
                    Some(sol_only) if !sol_only || solicited || wc.status != WcStatus::Success => {
                        r.armed = None;
                        self.notify.completion.store(true, Relaxed);
                        true
                    }
                    _ => false,
                }
            }
        };
        if fire {
            self.notify.kick();
        }
    }

    pub(super) fn purge(&self, qp: QpId) {
        let mut r = self.ring.lock();
        let cap = r.slots.len();
        let (head, len) = (r.head, r.len);
        let mut kept = 0;
        for i in 0..len {
            let wc = r.slots.get_mut((head + i) % cap).and_then(|s| s.take());
            if let Some(wc) = wc.filter(|w| w.qp != qp) {
                if let Some(s) = r.slots.get_mut((head + kept) % cap) {
                    *s = Some(wc);
                }
                kept += 1;
            }
        }
        r.len = kept;
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // destroy_cq, process context: no event runs after this (and one
        // kicked later, which no QP of this CQ can do any more, would find
        // the CQ gone in `CqEvents`).
        self.inner.notify.stop();
    }
}

/// An empty ring of `n` slots (of a CQ, an SRQ), charged to the calling
/// process's memory cgroup; virtually contiguous when large (a CQ of 65536
/// is 2.5 MiB).
pub(super) fn ring_slots<T>(n: u32) -> Result<KVVec<Option<T>>> {
    let mut slots = KVVec::with_capacity(n as usize, GFP_KERNEL_ACCOUNT)?;
    for _ in 0..n {
        slots.push(None, GFP_KERNEL_ACCOUNT)?;
    }
    Ok(slots)
}

impl Cq {
    /// A CQ of `cqe` entries (checked by `cq_size`), counted among the
    /// device's CQs in `counts` (ENOMEM if it holds its most).
    pub(crate) fn new(cqe: u32, events: Arc<CqEvents>, counts: &Arc<ObjectCounts>) -> Result<Self> {
        let quota = Quota::take(counts, Kind::Cq)?;
        let slots = ring_slots(cqe)?;
        let notify = Timer::new_arc(
            CqNotify {
                events,
                completion: KAtomic::new(false),
                overrun: KAtomic::new(false),
            },
            GFP_KERNEL_ACCOUNT,
        )?;
        Ok(Self {
            inner: Arc::new(
                CqShared {
                    notify,
                    ring: KBox::pin_init(
                        new_spinlock_bh!(
                            CqRing {
                                slots,
                                head: 0,
                                len: 0,
                                armed: None,
                                overflow: false,
                            },
                            "metaroce_cq"
                        ),
                        GFP_KERNEL_ACCOUNT,
                    )?,
                },
                GFP_KERNEL_ACCOUNT,
            )?,
            _quota: quota,
        })
    }

    /// Gives the ring room for `cqe` completions, keeping those it holds
    /// in order (EINVAL if they do not fit). The new ring is allocated
    /// before the lock and the old one freed after it. A CQ that overran
    /// may overrun, and report it, again.
    pub(crate) fn resize(&self, cqe: u32) -> Result {
        let mut slots = ring_slots(cqe)?;
        let old = {
            let mut r = self.inner.ring.lock();
            if r.len > slots.len() {
                return Err(EINVAL);
            }
            let cap = r.slots.len();
            let head = r.head;
            for i in 0..r.len {
                let wc = r.slots.get_mut((head + i) % cap).and_then(|s| s.take());
                if let Some(s) = slots.get_mut(i) {
                    *s = wc;
                }
            }
            r.head = 0;
            r.overflow = false;
            core::mem::replace(&mut r.slots, slots)
        };
        drop(old);
        Ok(())
    }

    pub(crate) fn poll_one(&self) -> Option<Wc> {
        let mut r = self.inner.ring.lock();
        if r.len == 0 {
            return None;
        }
        let cap = r.slots.len();
        let head = r.head;
        let wc = r.slots.get_mut(head).and_then(|s| s.take());
        r.head = if head + 1 >= cap { 0 } else { head + 1 };
        r.len -= 1;
        wc
    }

    /// Its driver attributes in `rdma resource show cq -dd`
    /// (Documentation/observability.md).
    pub(crate) fn attrs(&self, out: &mut ResAttrs<'_>) -> Result {
        let (queued, armed, overflow) = {
            let r = self.inner.ring.lock();
            (r.len, r.armed, r.overflow)
        };
        out.u32(c"queued", queued as u32)?;
        out.string(
            c"armed",
            match armed {
                None => c"no",
                Some(false) => c"any",
                Some(true) => c"solicited",
            },
        )?;
        out.u32(c"overflowed", u32::from(overflow))
    }

    pub(crate) fn req_notify(&self, solicited: bool) -> bool {
        let mut r = self.inner.ring.lock();
        r.armed = Some(solicited);
        r.len > 0
    }
}
