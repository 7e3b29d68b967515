#![no_main]
//! The storage node protocol's decoders, a fragment meta file's header, a store's claim file and
//! a segment's name (which a primary sends a backup) on arbitrary bytes:
//! nothing panics, and whatever decodes re-encodes to exactly the same bytes (one meaning, one
//! encoding), except an error reply's text, which is read leniently.
use halyard_segstore::node::claims;
use halyard_segstore::remote::SegRef;
use halyard_segstore::node::fragments::{header, parse_header};
use halyard_segstore::wire::{Reply, Request};
use libfuzzer_sys::fuzz_target;

const HEADER: usize = 12;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = Request::decode(data) {
        assert_eq!(&req.encode()[HEADER..], data);
    }
    if let Ok((reply, queue)) = Reply::decode(data) {
        if !matches!(reply, Reply::Error { .. }) {
            assert_eq!(&reply.encode(queue)[HEADER..], data);
        }
    }
    if let Some((seg, frag, p)) = parse_header(data) {
        let h = header(seg, frag, &p);
        assert_eq!(parse_header(&h), Some((seg, frag, p)));
    }
    if let Some(c) = claims::decode(data) {
        assert_eq!(claims::encode(&c), data);
    }
    if let Ok(r) = SegRef::decode(data) {
        assert_eq!(r.encode(), data);
    }
});
