// SPDX-License-Identifier: GPL-2.0

//! Memory regions: a device's table of them, the checks every access passes
//! (key, protection domain, rights, bounds), and scatter/gather over a work
//! request's local buffers. Safe Rust only.

use crate::abstractions::{
    memory::{KernelMemory, Umem},
    types::{Access, MrKeys, Sge},
};
use kernel::{alloc::KVec, prelude::*};

/// The memory behind a region.
pub(crate) enum Mem {
    /// Pinned pages of a user process.
    User(Umem),
    /// All of kernel memory, for a kernel consumer's PD (local access only):
    /// the region starts at address 0, so an offset is an address.
    Kernel(KernelMemory),
}

pub(super) struct MrEntry {
    key: u32,
    pub(super) pd: u32,
    pub(super) access: Access,
    iova: u64,
    mem: Mem,
}

impl MrEntry {
    fn len(&self) -> u64 {
        match &self.mem {
            Mem::User(u) => u.len(),
            Mem::Kernel(_) => u64::MAX,
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
        }
    }

    /// Copies the region's bytes at offset `off` into `dst`.
    pub(super) fn read(&self, off: u64, dst: &mut [u8]) -> Result {
        match &self.mem {
            Mem::User(u) => u.read(off, dst),
            Mem::Kernel(k) => k.read(off, dst),
        }
    }
}

/// The offset of `[addr, addr + len)` in a region of `size` bytes at `iova`,
/// if it lies entirely within.
fn region_offset(iova: u64, size: u64, addr: u64, len: u64) -> Option<u64> {
    let off = addr.checked_sub(iova)?;
    (off.checked_add(len)? <= size).then_some(off)
}

/// A device's memory regions. A key names its region's slot (high 24 bits)
/// and the table's count of registrations when it was made (low 8 bits).
pub(super) struct MrTable {
    mrs: KVec<Option<MrEntry>>,
    key_gen: u8,
}

impl MrTable {
    pub(super) fn new() -> Self {
        Self {
            mrs: KVec::new(),
            key_gen: 0,
        }
    }

    pub(super) fn mr(&self, key: u32) -> Option<&MrEntry> {
        let e = self.mrs.get((key >> 8) as usize)?.as_ref()?;
        (e.key == key).then_some(e)
    }

    /// Checks a local buffer: key, domain, rights, bounds.
    pub(super) fn local(
        &self,
        pd: u32,
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

    /// A free slot for a new region, made if there is none.
    pub(super) fn free_slot(&mut self) -> Result<usize> {
        Ok(match self.mrs.iter().position(|m| m.is_none()) {
            Some(i) => i,
            None => {
                if self.mrs.len() >= (1 << 24) {
                    return Err(ENOMEM);
                }
                self.mrs.push(None, GFP_ATOMIC)?;
                self.mrs.len() - 1
            }
        })
    }

    /// Registers `mem` for domain `pd` at `iova` with `access` rights, in
    /// `slot` (from `free_slot`); returns the region's key.
    pub(super) fn reg(
        &mut self,
        slot: usize,
        pd: u32,
        mem: Mem,
        iova: u64,
        access: Access,
    ) -> (u32, MrKeys) {
        self.key_gen = self.key_gen.wrapping_add(1);
        let key = ((slot as u32) << 8) | u32::from(self.key_gen);
        if let Some(s) = self.mrs.get_mut(slot) {
            *s = Some(MrEntry {
                key,
                pd,
                access,
                iova,
                mem,
            });
        }
        (
            key,
            MrKeys {
                lkey: key,
                rkey: key,
            },
        )
    }

    /// Takes region `key` out of the table.
    pub(super) fn dereg(&mut self, key: u32) -> Option<MrEntry> {
        match self.mrs.get_mut((key >> 8) as usize) {
            Some(s) if s.as_ref().is_some_and(|e| e.key == key) => s.take(),
            _ => None,
        }
    }
}

/// Walks the local buffers `sges` over message bytes `[offset, offset +
/// len)`: each piece's region (checked: key, domain, local write access if
/// `write`, bounds), its offset in the region and its range in the message
/// slice. `None` if a check or `f` fails or the buffers are too short.
pub(super) fn sge_pieces(
    sges: &[Sge],
    pd: u32,
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
pub(super) fn scatter(sges: &[Sge], pd: u32, t: &MrTable, offset: u32, bytes: &[u8]) -> Option<()> {
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
}
