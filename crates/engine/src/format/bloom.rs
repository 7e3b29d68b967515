//! Bloom filter of an SST's keys, blocked: each key's probes fall in one 512-bit block, so a
//! lookup touches one cache line instead of k scattered ones.
//!
//! Layout: `u32 bit count (a multiple of 512) | u8 probes | 3 bytes 0 | u32 crc32c (of bytes
//! 0..8 and the bits) | bits`.

#![expect(
    clippy::indexing_slicing,
    reason = "probe positions are reduced modulo the filter length checked first (fuzzed: bloom_filter)"
)]

use xxhash_rust::xxh3::xxh3_64;

pub(crate) fn hash(key: &[u8]) -> u64 {
    xxh3_64(key)
}

const BLOCK_BITS: usize = 512;
const HEADER: usize = 12;

fn nbits_for(keys: usize, bits_per_key: usize) -> usize {
    (keys * bits_per_key).max(BLOCK_BITS).div_ceil(BLOCK_BITS) * BLOCK_BITS
}

/// The block a hash selects (`(h >> 32) * blocks >> 32`: no division) and the first probe and
/// stride inside it.
fn probes(h: u64, nbits: usize) -> (usize, u32, u32) {
    let blocks = (nbits / BLOCK_BITS) as u64;
    let block = (((h >> 32) * blocks) >> 32) as usize;
    let a = h as u32;
    let b = a.rotate_left(15) | 1;
    (block * BLOCK_BITS, a, b)
}

pub(crate) fn build(hashes: &[u64], bits_per_key: usize) -> Vec<u8> {
    let nbits = nbits_for(hashes.len(), bits_per_key);
    let k = ((bits_per_key as f64) * 0.69).round().clamp(1.0, 30.0) as u8;
    let mut out = vec![0u8; HEADER + nbits / 8];
    out[..4].copy_from_slice(&(nbits as u32).to_le_bytes());
    out[4] = k;
    let bits = &mut out[HEADER..];
    for &h in hashes {
        let (base, mut a, b) = probes(h, nbits);
        for _ in 0..k {
            let i = base + (a as usize % BLOCK_BITS);
            bits[i / 8] |= 1 << (i % 8);
            a = a.wrapping_add(b);
        }
    }
    let crc = checksum(&out);
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    out
}

/// crc32c of the header's first 8 bytes and the bits.
fn checksum(filter: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&filter[..8]), &filter[HEADER..])
}

/// Whether a filter's header is sane and its bits match their checksum.
pub(crate) fn verify(filter: &[u8]) -> bool {
    let (Some(nb), Some(crc)) = (halyard_codec::get_u32(filter, 0), halyard_codec::get_u32(filter, 8)) else {
        return false;
    };
    let nb = nb as usize;
    nb > 0 && nb.is_multiple_of(BLOCK_BITS) && filter.len() == HEADER + nb / 8 && checksum(filter) == crc
}

pub(crate) fn encoded_len(keys: usize, bits_per_key: usize) -> usize {
    HEADER + nbits_for(keys, bits_per_key) / 8
}

/// Checks a filter; a malformed filter answers "maybe" so that reads stay correct.
pub(crate) fn may_contain(filter: &[u8], h: u64) -> bool {
    let Some(nb) = filter.get(..4) else {
        return true;
    };
    let nbits = u32::from_le_bytes([nb[0], nb[1], nb[2], nb[3]]) as usize;
    let k = filter.get(4).copied().unwrap_or(0);
    let bits = &filter[HEADER.min(filter.len())..];
    if nbits == 0 || !nbits.is_multiple_of(BLOCK_BITS) || bits.len() * 8 < nbits {
        return true;
    }
    let (base, mut a, b) = probes(h, nbits);
    for _ in 0..k {
        let i = base + (a as usize % BLOCK_BITS);
        if bits[i / 8] & (1 << (i % 8)) == 0 {
            return false;
        }
        a = a.wrapping_add(b);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let keys: Vec<u64> = (0..10_000u32).map(|i| hash(&i.to_le_bytes())).collect();
        let f = build(&keys, 10);
        assert!(verify(&f));
        let mut bad = f.clone();
        bad[100] ^= 1;
        assert!(!verify(&bad));
        assert!(keys.iter().all(|&h| may_contain(&f, h)));
        let fp = (10_000..110_000u32).filter(|i| may_contain(&f, hash(&i.to_le_bytes()))).count();
        assert!(fp < 2_000, "false positive rate {fp}/100000");
    }
}
