#![no_main]
//! The replication port's decoders on arbitrary bytes (the streams' messages, and the admin
//! messages of halyard-admin): framing and the body decoders must never panic, a frame must
//! never claim more bytes than it was given or than the limit allows, and whatever body decodes
//! must re-encode to exactly the same bytes (one meaning, one encoding) — except segment images,
//! which the encoder may pack differently: those must decode back to the same message.
use halyard_replication::wire::{decode_frame, Msg, HEADER, MAX_BODY};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // As a stream of frames.
    let mut rest = data;
    while let Ok(Some((msg, used))) = decode_frame(rest) {
        assert!(used >= HEADER && used <= rest.len() && used - HEADER <= MAX_BODY);
        if !packs(&msg) {
            assert_eq!(msg.encode(), &rest[..used]);
        }
        rest = &rest[used..];
    }
    // As a bare body (the bytes after a verified header).
    if let Ok(msg) = Msg::decode_body(data) {
        let frame = msg.encode();
        if !packs(&msg) {
            assert_eq!(&frame[HEADER..], data);
        }
        assert_eq!(decode_frame(&frame).unwrap(), Some((msg, frame.len())));
    }
    // As an admin message's body.
    if let Ok(msg) = halyard_admin::Msg::decode_body(data) {
        assert_eq!(&msg.encode()[HEADER..], data);
    }
});

fn packs(m: &Msg) -> bool {
    matches!(m, Msg::Sst { .. } | Msg::Medium { .. })
}
