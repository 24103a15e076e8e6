// SPDX-License-Identifier: GPL-2.0

//! A device's count of its PDs, CQs and SRQs against the maxima it reports
//! in `query_device` (QPs and MRs are counted by their own tables). Without
//! it a local user could create such objects until kernel memory ran out.
//! Safe Rust only; a leaf: it imports nothing of the driver.

use kernel::{
    prelude::*,
    sync::{
        atomic::{Atomic as KAtomic, Relaxed},
        Arc,
    },
};

/// The verbs objects a device counts here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Protection domains (`max_pd`).
    Pd = 0,
    /// Completion queues (`max_cq`).
    Cq = 1,
    /// Shared receive queues (`max_srq`).
    Srq = 2,
}

impl Kind {
    /// The most of this kind a device holds, as `query_device` reports:
    /// plenty for the processes and kernel consumers of one host's software
    /// device, and few enough that a test can reach them (creating a CQ
    /// takes about 2.6 ms under the debug kernel in the test VM, a PD 0.5).
    pub(crate) const fn max(self) -> u32 {
        match self {
            Kind::Pd => 16384,
            Kind::Cq => 8192,
            Kind::Srq => 4096,
        }
    }
}

/// A device's live objects of each [`Kind`].
pub(crate) struct ObjectCounts {
    live: [KAtomic<u32>; 3],
}

impl ObjectCounts {
    pub(crate) fn new() -> Self {
        Self {
            live: [KAtomic::new(0), KAtomic::new(0), KAtomic::new(0)],
        }
    }

    fn of(&self, kind: Kind) -> &KAtomic<u32> {
        &self.live[kind as usize]
    }
}

/// Room for one object of a [`Kind`] on a device, held for as long as the
/// object lives (a field of it): dropping it gives the room back.
pub(crate) struct Quota {
    counts: Arc<ObjectCounts>,
    kind: Kind,
}

impl Quota {
    /// Takes room for one more `kind`: ENOMEM if the device holds its most.
    pub(crate) fn take(counts: &Arc<ObjectCounts>, kind: Kind) -> Result<Self> {
        let n = counts.of(kind);
        // Counted first, given back if that was one too many: two racing
        // takers may both be refused at the edge, never both let in.
        if n.fetch_add(1, Relaxed) >= kind.max() {
            n.fetch_sub(1, Relaxed);
            return Err(ENOMEM);
        }
        Ok(Self {
            counts: counts.clone(),
            kind,
        })
    }
}

impl Drop for Quota {
    fn drop(&mut self) {
        self.counts.of(self.kind).fetch_sub(1, Relaxed);
    }
}

#[kunit_tests(metaroce_quota)]
mod tests {
    use super::*;
    use kernel::alloc::KVVec;

    #[test]
    fn quota_stops_at_the_maximum_and_comes_back() -> Result {
        let counts = Arc::new(ObjectCounts::new(), GFP_KERNEL)?;
        let refused = |r: Result<Quota>| matches!(r, Err(e) if e == ENOMEM);
        let mut held = KVVec::with_capacity(Kind::Srq.max() as usize, GFP_KERNEL)?;
        for _ in 0..Kind::Srq.max() {
            held.push(Quota::take(&counts, Kind::Srq)?, GFP_KERNEL)?;
        }
        assert!(refused(Quota::take(&counts, Kind::Srq)));
        // Other kinds are counted apart.
        let pd = Quota::take(&counts, Kind::Pd)?;
        held.pop();
        let again = Quota::take(&counts, Kind::Srq)?;
        assert!(refused(Quota::take(&counts, Kind::Srq)));
        drop(again);
        drop(held);
        drop(pd);
        for k in [Kind::Pd, Kind::Cq, Kind::Srq] {
            assert_eq!(counts.of(k).load(Relaxed), 0);
        }
        Ok(())
    }
}
