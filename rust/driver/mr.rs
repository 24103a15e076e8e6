// SPDX-License-Identifier: GPL-2.0

//! Memory regions: a device's table of them, the checks every access passes
//! (key, protection domain, rights, bounds), and scatter/gather over a work
//! request's local buffers. Safe Rust only.

use super::frmr::{block_of, is_fast_key, next_free_block, FastError, FastMem, FAST_KEY};
use crate::abstractions::{
    memory::{KernelMemory, Umem},
    types::{Access, MrKeys, Sge},
};
use crate::transport::wire::NakCode;
use kernel::{
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
};

/// The memory behind a region.
pub(crate) enum Mem {
    /// Pinned pages of a user process.
    User(Umem),
    /// All of kernel memory, for a kernel consumer's PD (local access only):
    /// the region starts at address 0, so an offset is an address.
    Kernel(KernelMemory),
    /// A fast registration's kernel pages (frmr.rs), reachable only while
    /// it is valid.
    Fast(FastMem),
}

pub(super) struct MrEntry {
    pub(super) pd: PdId,
    pub(super) access: Access,
    iova: u64,
    mem: Mem,
}

/// A protection domain's number: 64 bits, counted up from 1 per device, so
/// it never wraps and is never that of a live PD.
pub(crate) type PdId = u64;

impl MrEntry {
    fn len(&self) -> u64 {
        match &self.mem {
            Mem::User(u) => u.len(),
            Mem::Kernel(_) => u64::MAX,
            Mem::Fast(f) => f.len(),
        }
    }

    /// The region offset of `[addr, addr + len)`, if it lies within.
    pub(super) fn offset(&self, addr: u64, len: u64) -> Option<u64> {
        region_offset(self.iova, self.len(), addr, len)
    }

    /// Copies `src` into the region at offset `off`.
    pub(super) fn write(&self, off: u64, src: &[u8]) -> Result {
        match &self.mem {
            Mem::User(u) => u.write(off, src),
            Mem::Kernel(k) => k.write(off, src),
            Mem::Fast(f) => f.write(off, src),
        }
    }

    /// Copies the region's bytes at offset `off` into `dst`.
    pub(super) fn read(&self, off: u64, dst: &mut [u8]) -> Result {
        match &self.mem {
            Mem::User(u) => u.read(off, dst),
            Mem::Kernel(k) => k.read(off, dst),
            Mem::Fast(f) => f.read(off, dst),
        }
    }
}

/// The offset of `[addr, addr + len)` in a region of `size` bytes at `iova`,
/// if it lies entirely within.
fn region_offset(iova: u64, size: u64, addr: u64, len: u64) -> Option<u64> {
    let off = addr.checked_sub(iova)?;
    (off.checked_add(len)? <= size).then_some(off)
}

/// Whether a region of domain `region_pd` granting `region_access` (all of
/// kernel memory if `kernel`) may be reached remotely for `right` through a
/// QP of domain `pd` granting `qp_access`.
fn remote_allowed(
    region_pd: PdId,
    region_access: Access,
    kernel: bool,
    pd: PdId,
    qp_access: Access,
    right: u32,
) -> bool {
    region_pd == pd && region_access.has(right) && qp_access.has(right) && !kernel
}

/// The rights a user region may be registered (or registered again) with:
/// remote write or atomic access needs local write (IBTA o10-35.2.2).
pub(crate) fn check_mr_access(access: Access) -> Result {
    let remote_writes = access.has(Access::REMOTE_WRITE) || access.has(Access::REMOTE_ATOMIC);
    if remote_writes && !access.has(Access::LOCAL_WRITE) {
        return Err(EINVAL);
    }
    Ok(())
}

/// The most regions a device holds (`max_mr` in `query_device`).
pub(crate) const MAX_MRS: usize = 1 << 20;

/// The next ordinary key after `last` that is not 0 and not in use
/// (`used`). Ordinary keys have bit 31 clear: fast registrations' have it
/// set (frmr.rs).
pub(super) fn next_free_key(last: u32, used: impl Fn(u32) -> bool) -> u32 {
    let mut k = last;
    loop {
        k = k.wrapping_add(1) & !FAST_KEY;
        if k != 0 && !used(k) {
            return k;
        }
    }
}

/// A device's memory regions, by key. Keys count up from a random start and
/// skip the live ones, so a key that was deregistered reaches no new region
/// before 2^31 more registrations (a key used to be a slot number and an
/// 8-bit count, which came back after 256). A fast registration is held
/// under its block of keys (frmr.rs).
pub(super) struct MrTable {
    mrs: RBTree<u32, MrEntry>,
    count: usize,
    last_key: u32,
    last_block: u32,
}

impl MrTable {
    pub(super) fn new(first_key: u32) -> Self {
        Self {
            mrs: RBTree::new(),
            count: 0,
            last_key: first_key & !FAST_KEY,
            last_block: block_of(first_key << 8) | FAST_KEY,
        }
    }

    /// The region key `key` reaches: a fast registration only while it is
    /// valid under exactly that key.
    pub(super) fn mr(&self, key: u32) -> Option<&MrEntry> {
        if !is_fast_key(key) {
            return self.mrs.get(&key);
        }
        let e = self.mrs.get(&block_of(key))?;
        match &e.mem {
            Mem::Fast(f) if f.valid_as(key) => Some(e),
            _ => None,
        }
    }

    /// The region of domain `pd` that owns fast key `key`'s block (the
    /// caller checks it is a fast registration).
    fn fast_mut(&mut self, pd: PdId, key: u32) -> Result<&mut MrEntry, FastError> {
        self.mrs
            .get_mut(&block_of(key))
            .filter(|e| e.pd == pd && is_fast_key(key))
            .ok_or(FastError::NoRegion)
    }

    /// Adds a free fast registration of domain `pd` in `node` (the caller
    /// checked [`Self::full`]); returns its block, which is also its
    /// first key.
    pub(super) fn reg_fast(
        &mut self,
        node: RBTreeNodeReservation<u32, MrEntry>,
        pd: PdId,
        mut mem: FastMem,
    ) -> u32 {
        let block = next_free_block(self.last_block, |k| self.mrs.get(&k).is_some());
        self.last_block = block;
        mem.set_key(block);
        let entry = MrEntry {
            pd,
            access: Access(0),
            iova: 0,
            mem: Mem::Fast(mem),
        };
        self.mrs.insert(node.into_node(block, entry));
        self.count += 1;
        block
    }

    /// `map_mr_sg`: stages a page list in fast registration `block`.
    pub(super) fn stage_fast(
        &mut self,
        block: u32,
        addrs: &[u64],
        page_size: u64,
        first: u64,
        len: u64,
    ) -> Result {
        match self.mrs.get_mut(&block).map(|e| &mut e.mem) {
            Some(Mem::Fast(f)) => f.stage(addrs, page_size, first, len),
            _ => Err(EINVAL),
        }
    }

    /// REG_MR by a QP of domain `pd`: the region owning `key`'s block
    /// becomes valid under `key`, with the staged pages, for `[iova, iova +
    /// length)` and `access`.
    pub(super) fn register_fast(
        &mut self,
        pd: PdId,
        key: u32,
        iova: u64,
        length: u64,
        access: Access,
    ) -> Result<(), FastError> {
        check_mr_access(access).map_err(|_| FastError::Access)?;
        iova.checked_add(length).ok_or(FastError::Length)?;
        let e = self.fast_mut(pd, key)?;
        let Mem::Fast(f) = &mut e.mem else {
            return Err(FastError::NoRegion);
        };
        f.register(key, length)?;
        e.iova = iova;
        e.access = access;
        Ok(())
    }

    /// A Send with Invalidate that arrived at a QP of domain `pd` (checked
    /// with [`Self::may_invalidate`] on arrival): key `key` reaches nothing
    /// any more. With `local` (LOCAL_INV), a region that is free already
    /// stays so, as verbs allows.
    pub(super) fn invalidate(&mut self, pd: PdId, key: u32, local: bool) -> Result<(), FastError> {
        let e = self.fast_mut(pd, key)?;
        let Mem::Fast(f) = &mut e.mem else {
            return Err(FastError::NoRegion);
        };
        if local && !f.is_valid() {
            return Ok(());
        }
        f.invalidate(key)
    }

    /// Whether a peer's Send with Invalidate may invalidate `key` at a QP
    /// of domain `pd`: a valid fast registration under that key that grants
    /// peers some right (a region registered for local access only is not
    /// the peers' to end).
    pub(super) fn may_invalidate(&self, pd: PdId, key: u32) -> bool {
        let remote = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
        self.mr(key).is_some_and(|e| {
            e.pd == pd && matches!(e.mem, Mem::Fast(_)) && e.access.0 & remote != 0
        })
    }

    /// The complete check of a remote access to `[addr, addr + len)` under
    /// `rkey` by a QP of domain `pd` whose access flags are `qp_access`:
    /// the region exists, is of that domain, grants `right` as the QP does,
    /// is not kernel memory, and holds the range. Run when a packet is
    /// placed and again whenever the bytes are touched later (an atomic's
    /// execution, a Read's answer).
    pub(super) fn remote(
        &self,
        pd: PdId,
        qp_access: Access,
        rkey: u32,
        right: u32,
        addr: u64,
        len: u64,
    ) -> Result<(&MrEntry, u64), NakCode> {
        let e = self.mr(rkey).ok_or(NakCode::RemoteAccess)?;
        let kernel = matches!(e.mem, Mem::Kernel(_));
        if !remote_allowed(e.pd, e.access, kernel, pd, qp_access, right) {
            return Err(NakCode::RemoteAccess);
        }
        Ok((e, e.offset(addr, len).ok_or(NakCode::RemoteAccess)?))
    }

    /// Checks a local buffer: key, domain, rights, bounds.
    pub(super) fn local(
        &self,
        pd: PdId,
        sge_addr: u64,
        len: u64,
        lkey: u32,
        write: bool,
    ) -> Option<(&MrEntry, u64)> {
        let e = self.mr(lkey)?;
        if e.pd != pd || (write && !e.access.has(Access::LOCAL_WRITE)) {
            return None;
        }
        Some((e, e.offset(sge_addr, len)?))
    }

    /// Whether the table holds as many regions as it may.
    pub(super) fn full(&self) -> bool {
        self.count >= MAX_MRS
    }

    /// Registers `mem` for domain `pd` at `iova` with `access` rights in
    /// `node` (allocated before the caller took the lock; the caller checked
    /// [`Self::full`]); returns the region's key.
    pub(super) fn reg(
        &mut self,
        node: RBTreeNodeReservation<u32, MrEntry>,
        pd: PdId,
        mem: Mem,
        iova: u64,
        access: Access,
    ) -> (u32, MrKeys) {
        let key = next_free_key(self.last_key, |k| self.mrs.get(&k).is_some());
        self.last_key = key;
        let entry = MrEntry {
            pd,
            access,
            iova,
            mem,
        };
        self.mrs.insert(node.into_node(key, entry));
        self.count += 1;
        (
            key,
            MrKeys {
                lkey: key,
                rkey: key,
            },
        )
    }

    /// Changes region `key` in place (`ibv_rereg_mr`): its domain to `pd`,
    /// its rights to `access`, and with `trans` its memory and address.
    /// On success `trans` holds the old memory, otherwise still the new
    /// one, for the caller to release after its lock. A right that writes
    /// needs pages pinned for writing: EACCES if the region keeps pages
    /// pinned only for reading (the core's `ib_umem_check_rereg` rule).
    pub(super) fn rereg(
        &mut self,
        key: u32,
        pd: Option<PdId>,
        access: Option<Access>,
        trans: &mut Option<(Mem, u64)>,
    ) -> Result {
        let e = self.mrs.get_mut(&key).ok_or(EINVAL)?;
        let access = access.unwrap_or(e.access);
        let writable = match (trans.as_ref(), &e.mem) {
            (Some((Mem::User(new), _)), Mem::User(_)) => new.writable(),
            (None, Mem::User(old)) => old.writable(),
            // Kernel memory is never registered again (no uverbs object).
            _ => return Err(EINVAL),
        };
        if access.writes() && !writable {
            return Err(EACCES);
        }
        if let Some((mem, iova)) = trans {
            core::mem::swap(&mut e.mem, mem);
            e.iova = *iova;
        }
        e.access = access;
        if let Some(pd) = pd {
            e.pd = pd;
        }
        Ok(())
    }

    /// Takes region `key` out of the table.
    pub(super) fn dereg(&mut self, key: u32) -> Option<MrEntry> {
        let e = self.mrs.remove(&key);
        if e.is_some() {
            self.count -= 1;
        }
        e
    }
}

/// Walks the local buffers `sges` over message bytes `[offset, offset +
/// len)`: each piece's region (checked: key, domain, local write access if
/// `write`, bounds), its offset in the region and its range in the message
/// slice. `None` if a check or `f` fails or the buffers are too short.
pub(super) fn sge_pieces(
    sges: &[Sge],
    pd: PdId,
    t: &MrTable,
    write: bool,
    offset: u32,
    len: usize,
    mut f: impl FnMut(&MrEntry, u64, core::ops::Range<usize>) -> Option<()>,
) -> Option<()> {
    let mut skip = u64::from(offset);
    let mut done = 0usize;
    for s in sges {
        if done == len {
            break;
        }
        let l = u64::from(s.length);
        if skip >= l {
            skip -= l;
            continue;
        }
        let n = ((l - skip) as usize).min(len - done);
        let (mr, off) = t.local(pd, s.addr, l, s.lkey, write)?;
        f(mr, off + skip, done..done + n)?;
        done += n;
        skip = 0;
    }
    (done == len).then_some(())
}

/// Writes arriving bytes at `offset` of the local buffers `sges` (a receive,
/// or the target of a Read or atomic), which need local write access.
pub(super) fn scatter(
    sges: &[Sge],
    pd: PdId,
    t: &MrTable,
    offset: u32,
    bytes: &[u8],
) -> Option<()> {
    sge_pieces(sges, pd, t, true, offset, bytes.len(), |mr, at, piece| {
        mr.write(at, bytes.get(piece)?).ok()
    })
}

#[kunit_tests(metaroce_mr)]
mod tests {
    use super::*;

    #[test]
    fn region_bounds_are_exact() {
        // A 4096-byte region at 0x1000.
        assert_eq!(region_offset(0x1000, 4096, 0x1000, 4096), Some(0));
        assert_eq!(region_offset(0x1000, 4096, 0x1ff8, 8), Some(0xff8));
        assert_eq!(region_offset(0x1000, 4096, 0x1ff9, 8), None);
        assert_eq!(region_offset(0x1000, 4096, 0x0fff, 1), None);
        assert_eq!(region_offset(0x1000, 4096, 0x2000, 0), Some(4096));
        assert_eq!(region_offset(0x1000, 4096, 0x2000, 1), None);
        assert_eq!(region_offset(0, u64::MAX, u64::MAX, 2), None);
    }

    #[test]
    fn remote_access_needs_the_pd_both_rights_and_user_memory() {
        let rw = Access(Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE);
        let w = Access::REMOTE_WRITE;
        assert!(remote_allowed(7, rw, false, 7, rw, w));
        // Another PD's region (a PD number that came back would do this).
        assert!(!remote_allowed(7, rw, false, 8, rw, w));
        // The region does not grant it, or the QP does not.
        assert!(!remote_allowed(
            7,
            Access(Access::LOCAL_WRITE),
            false,
            7,
            rw,
            w
        ));
        assert!(!remote_allowed(
            7,
            rw,
            false,
            7,
            Access(Access::REMOTE_READ),
            w
        ));
        assert!(!remote_allowed(7, rw, false, 7, rw, Access::REMOTE_ATOMIC));
        // Kernel memory, whatever the rights say.
        assert!(!remote_allowed(7, rw, true, 7, rw, w));
    }

    #[test]
    fn mr_keys_are_not_reused_for_a_long_time() {
        // The old keys (slot << 8 | an 8-bit count) came back after 256
        // registrations of one slot; now a key comes back only after 2^32.
        let mut last = 7u32;
        let first = next_free_key(last, |_| false);
        last = first;
        for _ in 0..300 {
            last = next_free_key(last, |_| false);
            assert_ne!(last, 0);
        }
        assert_eq!(last, first + 300);
        // Zero and live keys are skipped, across the wrap; bit 31 is never
        // set (it marks fast registrations' keys).
        assert_eq!(next_free_key(u32::MAX, |_| false), 1);
        assert_eq!(next_free_key(0x7fff_fffe, |_| false), 0x7fff_ffff);
        assert_eq!(
            next_free_key(0x7fff_fffe, |k| k == 0x7fff_ffff || k == 1),
            2
        );
    }

    #[test]
    fn fast_registrations_are_reached_only_while_valid() -> Result {
        let mut buf = [0u8; 8192];
        let a = buf.as_mut_ptr() as u64;
        let mut t = MrTable::new(0x1234_5678);
        let rw = Access(Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let fast = FastMem::new(2, KernelMemory::for_kunit())?;
        let block = t.reg_fast(RBTreeNodeReservation::new(GFP_KERNEL)?, 7, fast);
        assert!(is_fast_key(block) && block & 0xff == 0);
        let key = block | 0x2a;
        // Free: no key of its block reaches it.
        assert!(t.mr(block).is_none() && t.mr(key).is_none());
        t.stage_fast(block, &[a, a + 4096], 4096, 0, 8192)?;
        // Another domain's QP may not register it; a page list longer than
        // what was mapped is refused; rights that write remotely without
        // local write are refused.
        assert_eq!(
            t.register_fast(8, key, 0x10_000, 8192, rw),
            Err(FastError::NoRegion)
        );
        assert_eq!(
            t.register_fast(7, key, 0x10_000, 8193, rw),
            Err(FastError::Length)
        );
        let bad = Access(Access::REMOTE_WRITE);
        assert_eq!(
            t.register_fast(7, key, 0x10_000, 8192, bad),
            Err(FastError::Access)
        );
        assert_eq!(t.register_fast(7, key, 0x10_000, 8192, rw), Ok(()));
        // Valid under exactly that key, within its bounds, for its domain.
        let (e, off) = t
            .remote(7, rw, key, Access::REMOTE_WRITE, 0x10_000 + 4094, 4)
            .map_err(|_| EINVAL)?;
        e.write(off, b"edge")?;
        assert_eq!(&buf[4094..4098], b"edge");
        assert!(t
            .remote(7, rw, block, Access::REMOTE_WRITE, 0x10_000, 1)
            .is_err());
        assert!(t
            .remote(8, rw, key, Access::REMOTE_WRITE, 0x10_000, 1)
            .is_err());
        assert!(t
            .remote(7, rw, key, Access::REMOTE_READ, 0x10_000, 1)
            .is_err());
        assert!(t
            .remote(7, rw, key, Access::REMOTE_WRITE, 0x10_000 + 8190, 4)
            .is_err());
        assert!(t.may_invalidate(7, key) && !t.may_invalidate(8, key));
        // Only a QP of its own domain may invalidate it.
        assert_eq!(t.invalidate(8, key, true), Err(FastError::NoRegion));
        // Invalidated (as a Send with Invalidate does): the peer's next
        // access by that key is refused.
        assert_eq!(t.invalidate(7, key, false), Ok(()));
        assert!(t
            .remote(7, rw, key, Access::REMOTE_WRITE, 0x10_000, 1)
            .is_err());
        assert!(!t.may_invalidate(7, key));
        assert_eq!(t.invalidate(7, key, false), Err(FastError::State));
        // LOCAL_INV of a free region leaves it free.
        assert_eq!(t.invalidate(7, key, true), Ok(()));
        assert!(t.mr(key).is_none());
        // Registered for local access only: no peer may end it.
        let local = Access(Access::LOCAL_WRITE);
        assert_eq!(t.register_fast(7, key + 1, 0x10_000, 8192, local), Ok(()));
        assert!(t.mr(key + 1).is_some() && !t.may_invalidate(7, key + 1));
        // An ordinary key never names a fast registration's block.
        assert!(t.mr(block & !FAST_KEY).is_none());
        assert!(t.dereg(block).is_some());
        Ok(())
    }

    #[test]
    fn live_keys_are_never_handed_out() -> Result {
        // A long-lived region keeps its key while the counter wraps round.
        let live = [3u32, 4, 5, 0x7fff_ffff];
        let mut last = 0x7fff_fffc;
        let mut seen = KVec::new();
        for _ in 0..16 {
            last = next_free_key(last, |k| live.contains(&k));
            assert!(!live.contains(&last) && last != 0 && last & FAST_KEY == 0);
            assert!(!seen.contains(&last));
            seen.push(last, GFP_KERNEL)?;
        }
        Ok(())
    }
}
