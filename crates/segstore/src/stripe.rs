//! How a segment's bytes lie over its fragments: block `b` (4 KiB) of a segment with ρ data
//! fragments is block `b / ρ` of data fragment `b % ρ`; stripe `s` is blocks `sρ .. sρ + ρ`,
//! and block `s` of the parity fragment (index ρ) is the XOR of that stripe's blocks. A
//! fragment is thus `ceil(segment blocks / ρ)` blocks long; a block never written reads as
//! zeros, which leaves the XOR right.

/// The stripe unit: bytes per block.
pub const BLOCK: usize = 4096;

/// The most data fragments a segment can be cut into.
pub const MAX_RHO: usize = 8;

/// Which fragment holds segment block `b`, and the block's index within it.
pub fn locate(b: u64, rho: usize) -> (usize, u64) {
    let rho = rho.max(1) as u64;
    ((b % rho) as usize, b / rho)
}

/// The segment block that block `fb` of data fragment `frag` is.
pub fn segment_block(frag: usize, fb: u64, rho: usize) -> u64 {
    fb * rho as u64 + frag as u64
}

/// For data fragment `frag`, the range of its blocks that segment blocks `b0..b1` include.
pub fn fragment_range(frag: usize, b0: u64, b1: u64, rho: usize) -> std::ops::Range<u64> {
    let rho = rho as u64;
    let f = frag as u64;
    // First fragment block whose segment block is >= b0, and first past b1.
    let first = if b0 <= f { 0 } else { (b0 - f).div_ceil(rho) };
    let end = if b1 <= f { 0 } else { (b1 - f).div_ceil(rho) };
    first..end.max(first)
}

/// XORs `src` into `dst` (same lengths).
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_of_a_range_is_in_exactly_one_fragment_range() {
        for rho in 1..=5usize {
            for b0 in 0..12u64 {
                for b1 in b0..14u64 {
                    let mut seen = Vec::new();
                    for f in 0..rho {
                        for fb in fragment_range(f, b0, b1, rho) {
                            seen.push(segment_block(f, fb, rho));
                        }
                    }
                    seen.sort_unstable();
                    assert_eq!(seen, (b0..b1).collect::<Vec<_>>(), "rho {rho} {b0}..{b1}");
                }
            }
        }
    }

    #[test]
    fn locate_inverts_segment_block() {
        for rho in 1..=MAX_RHO {
            for b in 0..100 {
                let (f, fb) = locate(b, rho);
                assert_eq!(segment_block(f, fb, rho), b);
            }
        }
    }
}
