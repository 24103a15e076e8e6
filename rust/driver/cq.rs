// SPDX-License-Identifier: GPL-2.0

//! Completion queues: a ring of completions per CQ, its completion event
//! armed by `req_notify_cq`. Safe Rust only.
//!
//! A CQ keeps its completions in one of two rings: a private one, which
//! `poll_cq` (a system call, or a kernel consumer) takes them from; or one
//! shared with its process (`CqRingMem`, `uapi/rdma/metaroce-abi.h`), which
//! the process reads without a system call. The kernel counts what it
//! wrote to a shared ring itself and reads back only the process's `cons`,
//! as a count bounded by the CQ's size (is the ring full, how many to copy
//! at a resize); slot indices are masked. A process that corrupts it can
//! make its own CQ overrun or lose completions, never touch other memory.
//!
//! Completions are added with the adder's locks held (a peer connection's,
//! a QP's); the completion handler is never called under them: an armed CQ
//! that gets a completion kicks a work item, and the handler runs there, on
//! a worker thread, with no lock of this driver held (only `CqEvents`' own,
//! which keeps the handler from racing the CQ's destruction).

use super::quota::{Kind, ObjectCounts, Quota};
use crate::abstractions::{
    ops::{CqEvents, ResAttrs},
    ring::CqRingMem,
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
    store: Store,
    /// Armed for the next completion (`Some(true)`: solicited only).
    armed: Option<bool>,
    overflow: bool,
}

/// Where a CQ keeps its completions.
enum Store {
    /// A ring only the kernel sees, read with `poll_cq`.
    Private(PrivateRing),
    /// A ring shared with the CQ's process.
    Shared(UserRing),
    /// The shared ring of a destroyed CQ, let go (`Cq::detach`).
    Gone,
}

struct PrivateRing {
    slots: KVVec<Option<Wc>>,
    head: usize,
    len: usize,
}

/// A ring shared with user space, and what the kernel knows of it.
struct UserRing {
    mem: Arc<CqRingMem>,
    /// Completions written (free running, as `prod` in the ring).
    prod: u32,
    /// The most that may be unread: the CQ's size.
    cqe: u32,
}

impl PrivateRing {
    fn new(cqe: u32) -> Result<Self> {
        Ok(Self {
            slots: ring_slots(cqe)?,
            head: 0,
            len: 0,
        })
    }

    fn push(&mut self, wc: Wc) -> bool {
        let cap = self.slots.len();
        if self.len == cap || cap == 0 {
            return false;
        }
        if let Some(s) = self.slots.get_mut((self.head + self.len) % cap) {
            *s = Some(wc);
        }
        self.len += 1;
        true
    }

    fn pop(&mut self) -> Option<Wc> {
        let cap = self.slots.len();
        // (A ring holding some has slots: `cap` is not 0 below, and the
        // compiler knows it, so no division panic is built in.)
        if self.len == 0 || cap == 0 {
            return None;
        }
        let wc = self.slots.get_mut(self.head).and_then(|s| s.take());
        self.head = (self.head + 1) % cap;
        self.len -= 1;
        wc
    }

    /// Drops the completions of `qp`, keeping the others in order.
    fn purge(&mut self, qp: QpId) {
        let cap = self.slots.len();
        if cap == 0 {
            return;
        }
        let mut kept = 0;
        for i in 0..self.len {
            let wc = self
                .slots
                .get_mut((self.head + i) % cap)
                .and_then(|s| s.take());
            if let Some(wc) = wc.filter(|w| w.qp != qp) {
                if let Some(s) = self.slots.get_mut((self.head + kept) % cap) {
                    *s = Some(wc);
                }
                kept += 1;
            }
        }
        self.len = kept;
    }

    /// Moves the completions into `to` (at least as large), in order.
    fn move_into(&mut self, to: &mut PrivateRing) -> Result {
        if self.len > to.slots.len() {
            return Err(EINVAL);
        }
        while let Some(wc) = self.pop() {
            to.push(wc);
        }
        Ok(())
    }
}

impl UserRing {
    /// Completions the process has not read, if what it says it read is
    /// believable (between `prod - cqe` and `prod`).
    fn unread(&self) -> Option<u32> {
        let n = self.prod.wrapping_sub(self.mem.cons());
        (n <= self.cqe).then_some(n)
    }

    /// Writes and publishes `wc`, unless the ring is full (or its `cons`
    /// is corrupt, which counts as full).
    fn push(&mut self, wc: &Wc) -> bool {
        match self.unread() {
            Some(n) if n < self.cqe => {
                self.mem.write(self.prod, wc);
                self.prod = self.prod.wrapping_add(1);
                self.mem.publish(self.prod);
                true
            }
            _ => false,
        }
    }

    /// Moves to ring `to` of `cqe` slots at most: the unread completions
    /// are copied to its start (as bytes, whatever the process made of
    /// them). EINVAL if they do not fit or `cons` is not believable, which
    /// decides how many (at most `cqe`) and from where (indices are masked).
    fn move_to(&mut self, to: Arc<CqRingMem>, cqe: u32) -> Result<Arc<CqRingMem>> {
        let n = self.unread().ok_or(EINVAL)?;
        if n > cqe || n > to.nslots() {
            return Err(EINVAL);
        }
        let first = self.prod.wrapping_sub(n);
        for i in 0..n {
            to.copy_from(i, &self.mem, first.wrapping_add(i));
        }
        to.publish(n);
        self.prod = n;
        self.cqe = cqe;
        Ok(core::mem::replace(&mut self.mem, to))
    }
}

impl CqRing {
    /// Stores `wc`; false if the ring is full (or gone).
    fn store(&mut self, wc: Wc) -> bool {
        match &mut self.store {
            Store::Private(p) => p.push(wc),
            Store::Shared(u) => u.push(&wc),
            Store::Gone => false,
        }
    }

    /// Completions waiting. A shared ring's count is what its `cons` says;
    /// a corrupt one counts as one waiting, so that a consumer arming the
    /// CQ polls once more rather than waits.
    fn waiting(&self) -> usize {
        match &self.store {
            Store::Private(p) => p.len,
            Store::Shared(u) => u.unread().map_or(1, |n| n as usize),
            Store::Gone => 0,
        }
    }
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
            let (status, stored) = (wc.status, r.store(wc));
            if !stored {
                if !r.overflow {
                    r.overflow = true;
                    self.notify.overrun.store(true, Relaxed);
                    true
                } else {
                    false
                }
            } else {
                match r.armed {
                    Some(sol_only) if !sol_only || solicited || status != WcStatus::Success => {
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

    /// Removes the completions of a QP being destroyed from a private ring.
    /// A shared ring keeps them (each names its QP by number, not pointer):
    /// the provider removes them after the QP's destroy returns, as mlx5's
    /// does.
    pub(super) fn purge(&self, qp: QpId) {
        if let Store::Private(p) = &mut self.ring.lock().store {
            p.purge(qp);
        }
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
    /// device's CQs in `counts` (ENOMEM if it holds its most); its
    /// completions go to `user`, a ring shared with its process, if given.
    pub(crate) fn new(
        cqe: u32,
        events: Arc<CqEvents>,
        counts: &Arc<ObjectCounts>,
        user: Option<Arc<CqRingMem>>,
    ) -> Result<Self> {
        let quota = Quota::take(counts, Kind::Cq)?;
        let store = match user {
            Some(mem) => Store::Shared(UserRing { mem, prod: 0, cqe }),
            None => Store::Private(PrivateRing::new(cqe)?),
        };
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
                                store,
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
    /// before the lock and the old one freed after it (a shared ring that
    /// a failed resize drops under the lock is not the last reference: the
    /// adapter's new mapping holds one). A CQ that overran
    /// may overrun, and report it, again. A CQ with a shared ring moves to
    /// `user` (and must be given one, which the process maps instead of the
    /// old one); EINVAL if the old ring's `cons` is not believable.
    pub(crate) fn resize(&self, cqe: u32, user: Option<Arc<CqRingMem>>) -> Result {
        let mut private = match user {
            Some(_) => None,
            None => Some(PrivateRing::new(cqe)?),
        };
        let mut r = self.inner.ring.lock();
        let old = match (&mut r.store, user, private.as_mut()) {
            (Store::Private(p), None, Some(new)) => {
                p.move_into(new)?;
                core::mem::swap(p, new);
                None
            }
            (Store::Shared(u), Some(mem), None) => Some(u.move_to(mem, cqe)?),
            _ => return Err(EINVAL),
        };
        r.overflow = false;
        drop(r);
        // The old rings go here, out of the lock.
        drop(old);
        drop(private);
        Ok(())
    }

    /// Takes the oldest completion of a private ring (none from a shared
    /// one: its process reads it without a system call).
    pub(crate) fn poll_one(&self) -> Option<Wc> {
        match &mut self.inner.ring.lock().store {
            Store::Private(p) => p.pop(),
            Store::Shared(_) | Store::Gone => None,
        }
    }

    /// The CQ is being destroyed: a shared ring is let go here, in process
    /// context (a QP still holding the CQ could otherwise free it last,
    /// from a softirq). Completions after this are dropped.
    pub(crate) fn detach(&self) {
        let old = core::mem::replace(&mut self.inner.ring.lock().store, Store::Gone);
        drop(old);
    }

    /// Its driver attributes in `rdma resource show cq -dd`
    /// (Documentation/observability.md).
    pub(crate) fn attrs(&self, out: &mut ResAttrs<'_>) -> Result {
        let (queued, armed, overflow, shared) = {
            let r = self.inner.ring.lock();
            let shared = matches!(r.store, Store::Shared(_));
            (r.waiting(), r.armed, r.overflow, shared)
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
        out.u32(c"overflowed", u32::from(overflow))?;
        out.u32(c"shared_ring", u32::from(shared))
    }

    pub(crate) fn req_notify(&self, solicited: bool) -> bool {
        let mut r = self.inner.ring.lock();
        r.armed = Some(solicited);
        r.waiting() > 0
    }
}
