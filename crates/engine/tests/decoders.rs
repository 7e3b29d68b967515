//! Every decoder of device bytes against random and mutated input: no panic, and what
//! decodes re-encodes identically. (Deeper runs: the cargo-fuzz targets in `fuzz/`.)

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::fuzzing;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn record_decoder(data in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = fuzzing::record(&data);
    }

    #[test]
    fn record_decoder_near_valid(key in prop::collection::vec(any::<u8>(), 0..20), flip in 0usize..80, bits in 1u8..=255) {
        // A valid record with one byte changed.
        let mut data = vec![0x56, 0x4B, 1, 0, 7, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0];
        data.extend_from_slice(&(key.len() as u16).to_le_bytes());
        data.extend_from_slice(&3u32.to_le_bytes());
        data.extend_from_slice(&key);
        data.extend_from_slice(b"abc");
        data.extend_from_slice(&0u32.to_le_bytes());
        let crc = crc32c(&data);
        data.extend_from_slice(&crc.to_le_bytes());
        data.extend_from_slice(&0x2144_4E45u32.to_le_bytes());
        prop_assert!(fuzzing::record(&data), "the unmodified record must decode");
        let i = flip % data.len();
        data[i] ^= bits;
        prop_assert!(!fuzzing::record(&data), "a changed byte must be detected");
    }

    #[test]
    fn edit_decoder(data in prop::collection::vec(any::<u8>(), 0..300)) {
        fuzzing::edits(&data);
    }

    #[test]
    fn node_decoder(data in prop::collection::vec(any::<u8>(), 16..2048), ty in 1u8..=2, count in 0u16..300) {
        let mut data = data;
        data[0] = ty;
        data[2..4].copy_from_slice(&count.to_le_bytes());
        fuzzing::node(&data);
    }

    #[test]
    fn sst_descriptor_read_through(
        leaves in 0u32..32, height in 0u8..3, root in 0u32..32, bloom in 0u32..64, bloom_len in 0u32..9000,
        used in 0u32..33, entries in 0u64..5000, image in prop::collection::vec(any::<u8>(), 0..40_000),
    ) {
        // Fields in small ranges, so that many descriptions pass the check and are read through.
        let info = halyard_engine::SstInfo {
            seg: 0, used_bytes: used * 2048, leaf_count: leaves, root_off: root * 2048, height,
            bloom_off: bloom * 1024, bloom_len, entries, stored_bytes: 0, full_bytes: 0,
            medium_ptrs: 0, large_ptrs: 0, min_lsn: 0, max_lsn: 0, first_key: vec![], last_key: vec![0xff],
            range_lsn: u64::from(height),
        };
        let desc = info.to_bytes();
        let mut data = (desc.len() as u16).to_le_bytes().to_vec();
        data.extend_from_slice(&desc);
        data.extend_from_slice(&image);
        fuzzing::sst(&data);
    }

    #[test]
    fn bloom_decoder(data in prop::collection::vec(any::<u8>(), 0..200)) {
        fuzzing::bloom(&data);
    }
}

fn crc32c(b: &[u8]) -> u32 {
    // Bitwise CRC-32C (Castagnoli), independent of the engine's implementation.
    let mut crc = !0u32;
    for &x in b {
        crc ^= x as u32;
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
        }
    }
    !crc
}
