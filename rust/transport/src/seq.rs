// SPDX-License-Identifier: GPL-2.0

//! Wrapping 32-bit sequence numbers and a 256-bit window bitmap.

/// `a` comes before `b` in wrapping sequence order.
pub const fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Bits in a [`Bits256`].
pub const BITS: u32 = 256;

/// A 256-bit bitmap; bit 0 is the lowest. Shifts move bits toward 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bits256([u64; 4]);

impl Bits256 {
    /// No bit set.
    pub const EMPTY: Self = Self([0; 4]);

    /// Whether bit `i` is set (false for `i >= 256`).
    pub const fn get(&self, i: u32) -> bool {
        i < BITS && self.0[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// Sets bit `i`; returns whether it was already set. Ignores `i >= 256`.
    pub fn set(&mut self, i: u32) -> bool {
        if i >= BITS {
            return false;
        }
        let word = &mut self.0[(i / 64) as usize];
        let was = *word & (1 << (i % 64)) != 0;
        *word |= 1 << (i % 64);
        was
    }

    /// Clears bit `i`; returns whether it was set. Ignores `i >= 256`.
    pub fn clear(&mut self, i: u32) -> bool {
        if i >= BITS {
            return false;
        }
        let word = &mut self.0[(i / 64) as usize];
        let was = *word & (1 << (i % 64)) != 0;
        *word &= !(1 << (i % 64));
        was
    }

    /// Whether no bit is set.
    pub fn is_empty(&self) -> bool {
        // Not `self.0 == [0; 4]`: in the kernel that array comparison is a
        // call to `bcmp`, and the transmit path asks this of every path's
        // resend and relocation sets for each packet (a profile of lossless
        // Write put `bcmp` and `memcmp` under `wants_to_send` at about a
        // fifth of the module's own samples).
        self.0.iter().fold(0, |a, w| a | w) == 0
    }

    /// Number of set bits.
    pub fn count(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }

    /// The set bits, lowest first.
    pub fn ones(&self) -> Ones {
        Ones {
            words: self.0,
            word: 0,
        }
    }

    /// Moves every bit `n` places toward bit 0; bits below 0 are dropped.
    pub fn shift_down(&mut self, n: u32) {
        if n >= BITS {
            *self = Self::EMPTY;
            return;
        }
        let (words, bits) = ((n / 64) as usize, n % 64);
        let mut out = [0u64; 4];
        for (i, o) in out.iter_mut().enumerate() {
            let lo = self.0.get(i + words).copied().unwrap_or(0);
            let hi = self.0.get(i + words + 1).copied().unwrap_or(0);
            *o = if bits == 0 {
                lo
            } else {
                (lo >> bits) | (hi << (64 - bits))
            };
        }
        self.0 = out;
    }

    /// Index of the highest set bit, if any.
    pub fn highest(&self) -> Option<u32> {
        self.0
            .iter()
            .enumerate()
            .rev()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i as u32 * 64 + 63 - w.leading_zeros())
    }

    /// Number of trailing set bits (from bit 0 upward).
    pub fn trailing_ones(&self) -> u32 {
        let mut n = 0;
        for w in self.0 {
            let t = w.trailing_ones();
            n += t;
            if t < 64 {
                break;
            }
        }
        n
    }

    /// The bitmap as 32 bytes, bit `i` in bit `i % 8` of byte `i / 8` (the
    /// SACK encoding of the wire format).
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, w) in self.0.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// The inverse of [`Self::to_bytes`].
    pub fn from_bytes(b: &[u8; 32]) -> Self {
        let mut words = [0u64; 4];
        for (i, w) in words.iter_mut().enumerate() {
            let mut le = [0u8; 8];
            le.copy_from_slice(&b[i * 8..i * 8 + 8]);
            *w = u64::from_le_bytes(le);
        }
        Self(words)
    }
}

/// Iterator over the set bits of a [`Bits256`], lowest first.
#[derive(Clone, Debug)]
pub struct Ones {
    words: [u64; 4],
    word: usize,
}

impl Iterator for Ones {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        // (`word` is below 4 in the loop, `bit` below 64: the index is
        // assembled with `|`, which the kernel's overflow checks leave be.)
        while let Some(w) = self.words.get_mut(self.word) {
            if *w != 0 {
                let bit = w.trailing_zeros();
                *w &= *w - 1;
                return Some(((self.word as u32) << 6) | bit);
            }
            self.word = self.word.wrapping_add(1);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ones_count_and_clear_agree() {
        let mut b = Bits256::EMPTY;
        assert!(b.is_empty());
        for i in [0, 1, 63, 64, 130, 255] {
            b.set(i);
        }
        assert!(b.ones().eq([0, 1, 63, 64, 130, 255]));
        assert_eq!(b.count(), 6);
        assert!(b.clear(64));
        assert!(!b.clear(64));
        assert!(!b.clear(256));
        assert_eq!(b.count(), 5);
        assert!(!b.get(64));
    }

    #[test]
    fn one_bit_in_any_word_is_not_empty() {
        for i in 0..BITS {
            let mut b = Bits256::EMPTY;
            b.set(i);
            assert!(!b.is_empty(), "bit {i}");
            b.clear(i);
            assert!(b.is_empty(), "bit {i} cleared");
        }
    }

    #[test]
    fn wrapping_order() {
        assert!(before(1, 2));
        assert!(!before(2, 1));
        assert!(!before(5, 5));
        assert!(before(u32::MAX, 0), "wraps");
        assert!(before(u32::MAX - 10, 5));
    }

    #[test]
    fn set_get_shift() {
        let mut b = Bits256::EMPTY;
        assert!(!b.set(0));
        assert!(b.set(0), "second set reports it");
        b.set(65);
        b.set(255);
        assert!(!b.set(256), "out of range is ignored");
        assert_eq!(b.highest(), Some(255));
        b.shift_down(1);
        assert!(b.get(64) && b.get(254) && !b.get(0) && !b.get(255));
        b.shift_down(64);
        assert!(b.get(0) && b.get(190));
        b.shift_down(300);
        assert_eq!(b, Bits256::EMPTY);
        assert_eq!(b.highest(), None);
    }

    #[test]
    fn trailing_ones_cross_words() {
        let mut b = Bits256::EMPTY;
        for i in 0..70 {
            b.set(i);
        }
        b.set(71);
        assert_eq!(b.trailing_ones(), 70);
    }

    #[test]
    fn bytes_match_the_wire_bit_order() {
        let mut b = Bits256::EMPTY;
        b.set(0);
        b.set(10);
        b.set(255);
        let bytes = b.to_bytes();
        assert_eq!(bytes[0], 1);
        assert_eq!(bytes[1], 1 << 2);
        assert_eq!(bytes[31], 0x80);
        assert_eq!(Bits256::from_bytes(&bytes), b);
    }
}
