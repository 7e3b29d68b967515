//! Taking another store's segment without its bytes crossing the network: the source names
//! the segment ([`RemoteStorage::segment_ref`]: its store, number and placement), and each
//! storage node holding one of its fragments copies that fragment into this store on its own
//! device (`Adopt`). A region moving between processing nodes of one cluster of storage nodes
//! then moves its metadata, not its data.
//!
//! A segment reference, version 1 (little-endian):
//!
//! ```text
//! u8 version = 1 | store:bytes | seg:u32 | placement (as on the wire)
//! ```

use super::storage::{RemoteStorage, Seg};
use crate::wire::{Placement, Reply, Request};
use halyard_codec::{Reader, Writer};
use std::io;
use std::sync::atomic::Ordering::Relaxed;

const REF_VERSION: u8 = 1;

/// A segment's name on the storage nodes: its store, its number there and its placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegRef {
    /// The store holding the segment.
    pub store: String,
    /// The segment's number in that store.
    pub seg: u32,
    /// Where its fragments are, and the placement's generation.
    pub placement: Placement,
}

impl SegRef {
    /// The name's bytes (version 1, above).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(64);
        w.u8(REF_VERSION).bytes(self.store.as_bytes()).u32(self.seg).raw(&self.placement.encode());
        w.into_inner()
    }

    /// Parses [`SegRef::encode`]'s bytes (from a peer: anything else is an error).
    pub fn decode(b: &[u8]) -> io::Result<SegRef> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("segment name: {what}"));
        let mut r = Reader::new(b);
        if r.u8().map_err(|_| bad("empty"))? != REF_VERSION {
            return Err(bad("unknown version"));
        }
        let store = r.bytes().map_err(|_| bad("no store"))?;
        let store = String::from_utf8(store.to_vec()).map_err(|_| bad("store name is not UTF-8"))?;
        let seg = r.u32().map_err(|_| bad("no segment"))?;
        let rest = r.take(r.remaining()).map_err(|_| bad("no placement"))?;
        let placement = Placement::decode(rest).map_err(|_| bad("malformed placement"))?;
        if placement.encode() != rest {
            return Err(bad("bytes after the placement"));
        }
        if placement.nodes.len() != usize::from(placement.rho) + 1 || placement.rho == 0 {
            return Err(bad("placement of the wrong width"));
        }
        Ok(SegRef { store, seg, placement })
    }
}

impl RemoteStorage {
    /// Names segment `seg` for [`RemoteStorage::adopt`] by another store on the same storage
    /// nodes; None for a segment never written.
    pub fn segment_ref(&self, seg: u32) -> Option<Vec<u8>> {
        let s = self.seg(seg)?;
        Some(SegRef { store: self.o.store.clone(), seg, placement: self.placement_of(&s) }.encode())
    }

    /// Makes segment `seg` a copy of the segment `r` names, each fragment copied by the node
    /// holding it. One fragment the copy misses (its node down, or the fragment moved on) is
    /// rebuilt from the others onto another node; with more missing, the segment is dropped
    /// and the call fails (the caller then sends the bytes instead).
    pub fn adopt(&self, seg: u32, r: &[u8]) -> io::Result<()> {
        self.check_fenced()?;
        let src = SegRef::decode(r)?;
        let nodes = {
            let known = self.nodes.read();
            let find = |a: &String| known.iter().position(|n| &n.addr == a);
            src.placement.nodes.iter().map(find).collect::<Option<Vec<usize>>>()
        };
        let nodes =
            nodes.ok_or_else(|| io::Error::other("the segment lies on storage nodes this store does not use"))?;
        // What this store kept of the segment (a free segment keeps its fragments) goes first.
        self.delete_segment(seg);
        let shard = self.shard(seg).lock();
        let s = Seg { gen: self.next_gen(), rho: usize::from(src.placement.rho), nodes };
        let p = self.placement_of(&s);
        let calls = s
            .nodes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let req = Request::Adopt {
                    store: self.o.store.clone(),
                    seg,
                    frag: i as u8,
                    from: src.store.clone(),
                    from_seg: src.seg,
                    from_gen: src.placement.gen,
                    placement: p.clone(),
                };
                (n, req)
            })
            .collect();
        let results = self.fan_out(calls);
        let failed: Vec<usize> =
            results.iter().enumerate().filter(|(_, r)| !matches!(r, Ok(Reply::Ok))).map(|(i, _)| i).collect();
        self.segs.write().insert(seg, s);
        if failed.len() > 1 {
            drop(shard);
            self.delete_segment(seg);
            let why = results.into_iter().find_map(|r| r.err()).map(|f| f.into_io("a storage node"));
            return Err(why.unwrap_or_else(|| io::Error::other("storage nodes refused to copy a segment")));
        }
        if let Some(&x) = failed.first() {
            self.replace(seg, x)?;
        }
        self.counters.adopted.fetch_add(1, Relaxed);
        self.len.fetch_max(u64::from(seg + 1) << self.o.seg_bits, Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_name_round_trips_and_nonsense_is_refused() {
        let p = Placement { gen: 7, rho: 2, nodes: vec!["a:1".into(), "b:2".into(), "c:3".into()] };
        let r = SegRef { store: "n1".into(), seg: 42, placement: p };
        let b = r.encode();
        assert_eq!(SegRef::decode(&b).unwrap(), r);
        let mut longer = b.clone();
        longer.push(0);
        assert!(SegRef::decode(&longer).is_err(), "bytes after the placement");
        assert!(SegRef::decode(&b[..b.len() - 1]).is_err(), "a cut name");
        let mut v2 = b.clone();
        v2[0] = 2;
        assert!(SegRef::decode(&v2).is_err(), "an unknown version");
        let narrow = SegRef { placement: Placement { gen: 1, rho: 2, nodes: vec!["a:1".into()] }, ..r };
        assert!(SegRef::decode(&narrow.encode()).is_err(), "a placement of the wrong width");
        assert!(SegRef::decode(&[]).is_err());
    }
}
