// SPDX-License-Identifier: GPL-2.0

//! The queue pairs that have work for their peer connection (requests or
//! answers not yet handed to the transport), first in, first out. A QP is in
//! it at most once (its `queued` flag says so), so a pump visits the QPs with
//! work, in turn, and never scans the others: the cost of a packet does not
//! grow with the number of QPs. Safe Rust only.

use kernel::{alloc::KVec, prelude::*, sync::Arc};

/// A ring of `Arc<T>`, sized by [`ReadyRing::reserve`]: pushing never
/// allocates, so it can be done in any context.
pub(super) struct ReadyRing<T> {
    slots: KVec<Option<Arc<T>>>,
    head: usize,
    len: usize,
}

impl<T> ReadyRing<T> {
    pub(super) const fn new() -> Self {
        Self {
            slots: KVec::new(),
            head: 0,
            len: 0,
        }
    }

    /// Entries it has room for.
    pub(super) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Entries queued.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The slot of the `i`-th entry from the head (`i` below the capacity).
    /// No division: a panic path (by zero) has no place in a kernel ring.
    fn at(&self, i: usize) -> usize {
        let at = self.head + i;
        if at >= self.slots.len() {
            at - self.slots.len()
        } else {
            at
        }
    }

    /// Makes room for `n` entries in all, keeping the queued ones in order.
    pub(super) fn reserve(&mut self, n: usize, flags: kernel::alloc::Flags) -> Result {
        if self.slots.len() >= n {
            return Ok(());
        }
        let mut slots = KVec::with_capacity(n, flags)?;
        for i in 0..self.len {
            let at = self.at(i);
            let e = self.slots.get_mut(at).and_then(Option::take);
            // Within the capacity just allocated: no allocation.
            slots.push(e, flags)?;
        }
        while slots.len() < n {
            slots.push(None, flags)?;
        }
        self.slots = slots;
        self.head = 0;
        Ok(())
    }

    /// Queues `t` last; gives it back when the ring is full.
    pub(super) fn push(&mut self, t: Arc<T>) -> Result<(), Arc<T>> {
        if self.len >= self.slots.len() {
            return Err(t);
        }
        let at = self.at(self.len);
        match self.slots.get_mut(at) {
            Some(s) => *s = Some(t),
            None => return Err(t),
        }
        self.len += 1;
        Ok(())
    }

    /// Takes the first entry.
    pub(super) fn pop(&mut self) -> Option<Arc<T>> {
        if self.len == 0 {
            return None;
        }
        let t = self.slots.get_mut(self.head).and_then(Option::take);
        self.head = self.at(1);
        self.len -= 1;
        t
    }

    /// Removes the entries for which `gone` is true (a QP leaving its peer).
    pub(super) fn remove(&mut self, gone: impl Fn(&Arc<T>) -> bool) {
        let mut kept = 0;
        for i in 0..self.len {
            let at = self.at(i);
            let e = self.slots.get_mut(at).and_then(Option::take);
            if let Some(e) = e.filter(|e| !gone(e)) {
                let to = self.at(kept);
                if let Some(s) = self.slots.get_mut(to) {
                    *s = Some(e);
                }
                kept += 1;
            }
        }
        self.len = kept;
    }

    /// Empties the ring.
    pub(super) fn clear(&mut self) {
        while self.pop().is_some() {}
    }
}

#[kunit_tests(metaroce_ready)]
mod tests {
    use super::*;

    fn ring(values: &[u32], cap: usize) -> Result<ReadyRing<u32>> {
        let mut r = ReadyRing::new();
        r.reserve(cap, GFP_KERNEL)?;
        for v in values {
            assert!(r.push(Arc::new(*v, GFP_KERNEL)?).is_ok());
        }
        Ok(r)
    }

    #[test]
    fn first_in_first_out_across_the_wrap() -> Result {
        let mut r = ring(&[1, 2, 3], 3)?;
        assert_eq!(r.pop().map(|a| *a), Some(1));
        assert!(r.push(Arc::new(4, GFP_KERNEL)?).is_ok());
        // Full: the entry comes back, nothing is lost.
        assert_eq!(r.push(Arc::new(5, GFP_KERNEL)?).map_err(|a| *a), Err(5));
        // Growing keeps the order of what is queued.
        r.reserve(8, GFP_KERNEL)?;
        assert!(r.push(Arc::new(5, GFP_KERNEL)?).is_ok());
        for want in [2, 3, 4, 5] {
            assert_eq!(r.pop().map(|a| *a), Some(want));
        }
        assert!(r.pop().is_none());
        assert_eq!(r.len(), 0);
        Ok(())
    }

    #[test]
    fn removal_keeps_the_others_in_order() -> Result {
        let mut r = ring(&[1, 2, 3, 4], 4)?;
        r.pop();
        assert!(r.push(Arc::new(5, GFP_KERNEL)?).is_ok());
        r.remove(|a| **a % 2 == 0);
        assert_eq!(r.len(), 2);
        assert_eq!(r.pop().map(|a| *a), Some(3));
        assert_eq!(r.pop().map(|a| *a), Some(5));
        r.clear();
        assert_eq!(r.len(), 0);
        Ok(())
    }
}
