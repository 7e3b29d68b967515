//! The storage node protocol: requests and replies, each the body of one frame of the nodes'
//! common frame (`u32 magic "HLYR" | u32 body length | u32 crc32c(body)`, then the body; see
//! `halyard_admin::frame`). Integers are little-endian; `bytes` is a `u32` length, then the
//! bytes. Version 3 (version 2 had no Adopt; version 1 had no Claim, no Claimed and no Fenced).
//!
//! ```text
//! request  = tag u8, then by tag:
//!   0x71 Hello  secret:bytes                       first frame of every connection
//!   0x72 Write  store:bytes seg:u32 frag:u8 block:u64 data:bytes   (data: whole 4 KiB blocks)
//!   0x73 Read   store:bytes seg:u32 frag:u8 block:u64 blocks:u32
//!   0x74 Sync   store:bytes                        makes the store's writes durable
//!   0x75 Delete store:bytes seg:u32                drops the segment's fragments held here
//!   0x76 List   store:bytes                        the store's fragments held here
//!   0x77 Place  store:bytes seg:u32 frag:u8 placement   creates a fragment or names its new placement
//!   0x78 Stats
//!   0x79 Claim  store:bytes epoch:u64 owner:bytes    fences the store's older owners (epoch 0: asks)
//!   0x7A Adopt  store:bytes seg:u32 frag:u8 from:bytes from_seg:u32 from_gen:u64 placement
//!               the fragment becomes a copy of fragment `frag` of `from`'s segment `from_seg`
//!               (held here under placement generation `from_gen`), made on this node
//! placement = gen:u64 rho:u8 count:u8 node:bytes × count    (node i holds fragment i; i = rho is parity)
//! reply    = tag u8 queue:u32, then by tag:     (queue: requests the node is serving)
//!   0x81 Ok
//!   0x82 Data    data:bytes
//!   0x83 Listed  count:u32 (seg:u32 frag:u8 placement) × count
//!   0x84 Stats   fragments:u64 bytes:u64 direct:u8
//!   0x85 Claimed epoch:u64 owner:bytes            the store's claim after a Claim
//!   0x8F Error   code:u8 message:bytes          (codes: [`Code`])
//! ```

use halyard_admin::frame;
use halyard_codec::{Reader, Writer};
use std::io::{self, Read, Write};

/// Longest store or node name.
pub const MAX_NAME: usize = 255;
/// Most bytes one Read or Write carries.
pub const MAX_IO: usize = 8 << 20;

const HELLO: u8 = 0x71;
const WRITE: u8 = 0x72;
const READ: u8 = 0x73;
const SYNC: u8 = 0x74;
const DELETE: u8 = 0x75;
const LIST: u8 = 0x76;
const PLACE: u8 = 0x77;
const STATS: u8 = 0x78;
const CLAIM: u8 = 0x79;
const ADOPT: u8 = 0x7A;
const OK: u8 = 0x81;
const DATA: u8 = 0x82;
const LISTED: u8 = 0x83;
const STATS_REPLY: u8 = 0x84;
const CLAIMED: u8 = 0x85;
const ERROR: u8 = 0x8F;

/// Which nodes hold a segment's fragments, and how new that choice is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Raised each time a fragment moves to another node; the highest wins.
    pub gen: u64,
    /// Data fragments; `nodes.len()` is `rho + 1`.
    pub rho: u8,
    /// The node holding fragment i, as its address.
    pub nodes: Vec<String>,
}

/// A request to a storage node.
#[expect(missing_docs, reason = "the fields are the byte layout's, documented at the top of the module")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Authenticates the connection.
    Hello { secret: Vec<u8> },
    /// Writes whole blocks of a fragment from block `block` on.
    Write { store: String, seg: u32, frag: u8, block: u64, data: Vec<u8> },
    /// Reads `blocks` blocks of a fragment from `block` on.
    Read { store: String, seg: u32, frag: u8, block: u64, blocks: u32 },
    /// Makes every write to the store's fragments durable.
    Sync { store: String },
    /// Drops every fragment of the segment held here.
    Delete { store: String, seg: u32 },
    /// Lists the store's fragments held here.
    List { store: String },
    /// Creates a fragment, or records its segment's new placement.
    Place { store: String, seg: u32, frag: u8, placement: Placement },
    /// The node's counters.
    Stats,
    /// Makes `owner` the store's owner from `epoch` on, if no owner claimed it at that epoch or
    /// a later one; the connection then acts for the store at that epoch. Every store request
    /// of a connection holding an older epoch is refused ([`Code::Fenced`]). Epoch 0 only asks.
    Claim { store: String, epoch: u64, owner: String },
    /// Makes fragment `frag` of segment `seg` a copy of the same fragment of another store's
    /// segment held on this node, under placement `placement`: the bytes are copied within the
    /// node (a region moving between processing nodes by its metadata). Refused with
    /// [`Code::NoFragment`] unless the source's placement is still generation `from_gen`.
    Adopt { store: String, seg: u32, frag: u8, from: String, from_seg: u32, from_gen: u64, placement: Placement },
}

/// Why a node refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// The request did not parse.
    Malformed = 1,
    /// The connection has not given the cluster secret.
    Unauthenticated = 2,
    /// The fragment is not held here.
    NoFragment = 3,
    /// A block failed its checksum.
    Corrupt = 4,
    /// The node's disk failed.
    Io = 5,
    /// A store name the node will not use as a directory.
    BadName = 6,
    /// Another owner claimed the store at a later epoch than this connection's.
    Fenced = 7,
}

impl Code {
    fn from_u8(v: u8) -> Code {
        match v {
            2 => Code::Unauthenticated,
            3 => Code::NoFragment,
            4 => Code::Corrupt,
            5 => Code::Io,
            6 => Code::BadName,
            7 => Code::Fenced,
            _ => Code::Malformed,
        }
    }
}

/// One listed fragment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Its segment.
    pub seg: u32,
    /// Its index in the placement.
    pub frag: u8,
    /// The placement it last recorded.
    pub placement: Placement,
}

/// A storage node's reply.
#[expect(missing_docs, reason = "the fields are the byte layout's, documented at the top of the module")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Done.
    Ok,
    /// The blocks read.
    Data(Vec<u8>),
    /// The fragments held.
    Listed(Vec<Listed>),
    /// Counters.
    Stats { fragments: u64, bytes: u64, direct: bool },
    /// The store's claim after a Claim: the request's own when it was taken.
    Claimed { epoch: u64, owner: String },
    /// Refused.
    Error { code: Code, message: String },
}

/// A body that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("malformed storage node message: {0}")]
pub struct Malformed(pub &'static str);

impl From<halyard_codec::Short> for Malformed {
    fn from(_: halyard_codec::Short) -> Malformed {
        Malformed("shorter than its fields")
    }
}

fn name(r: &mut Reader<'_>) -> Result<String, Malformed> {
    let b = r.bytes()?;
    if b.len() > MAX_NAME {
        return Err(Malformed("name longer than 255 bytes"));
    }
    String::from_utf8(b.to_vec()).map_err(|_| Malformed("name not UTF-8"))
}

fn put_placement(w: &mut Writer, p: &Placement) {
    w.u64(p.gen).u8(p.rho).u8(p.nodes.len() as u8);
    for n in &p.nodes {
        w.bytes(n.as_bytes());
    }
}

fn placement(r: &mut Reader<'_>) -> Result<Placement, Malformed> {
    let (gen, rho, count) = (r.u64()?, r.u8()?, r.u8()?);
    if rho == 0 || rho as usize > crate::stripe::MAX_RHO || count != rho + 1 {
        return Err(Malformed("placement needs 1..=8 data fragments and one parity"));
    }
    let nodes = (0..count).map(|_| name(r)).collect::<Result<_, _>>()?;
    Ok(Placement { gen, rho, nodes })
}

impl Placement {
    /// The placement's bytes (as in a Place request).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        put_placement(&mut w, self);
        w.into_inner()
    }

    /// Parses [`Placement::encode`]'s bytes.
    pub fn decode(b: &[u8]) -> Result<Placement, Malformed> {
        placement(&mut Reader::new(b))
    }
}

impl Request {
    /// The store a request reads or changes (Hello, Stats and Claim act on none).
    pub fn store(&self) -> Option<&str> {
        match self {
            Request::Write { store, .. }
            | Request::Read { store, .. }
            | Request::Sync { store }
            | Request::Delete { store, .. }
            | Request::List { store }
            | Request::Place { store, .. }
            | Request::Adopt { store, .. } => Some(store),
            Request::Hello { .. } | Request::Stats | Request::Claim { .. } => None,
        }
    }

    /// The request's frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = frame::begin();
        match self {
            Request::Hello { secret } => w.u8(HELLO).bytes(secret),
            Request::Write { store, seg, frag, block, data } => {
                w.u8(WRITE).bytes(store.as_bytes()).u32(*seg).u8(*frag).u64(*block).bytes(data)
            }
            Request::Read { store, seg, frag, block, blocks } => {
                w.u8(READ).bytes(store.as_bytes()).u32(*seg).u8(*frag).u64(*block).u32(*blocks)
            }
            Request::Sync { store } => w.u8(SYNC).bytes(store.as_bytes()),
            Request::Delete { store, seg } => w.u8(DELETE).bytes(store.as_bytes()).u32(*seg),
            Request::List { store } => w.u8(LIST).bytes(store.as_bytes()),
            Request::Place { store, seg, frag, placement } => {
                w.u8(PLACE).bytes(store.as_bytes()).u32(*seg).u8(*frag);
                put_placement(&mut w, placement);
                &mut w
            }
            Request::Stats => w.u8(STATS),
            Request::Claim { store, epoch, owner } => {
                w.u8(CLAIM).bytes(store.as_bytes()).u64(*epoch).bytes(owner.as_bytes())
            }
            Request::Adopt { store, seg, frag, from, from_seg, from_gen, placement } => {
                w.u8(ADOPT).bytes(store.as_bytes()).u32(*seg).u8(*frag);
                w.bytes(from.as_bytes()).u32(*from_seg).u64(*from_gen);
                put_placement(&mut w, placement);
                &mut w
            }
        };
        frame::seal(w)
    }

    /// Parses a request's body.
    pub fn decode(body: &[u8]) -> Result<Request, Malformed> {
        let mut r = Reader::new(body);
        let req = match r.u8()? {
            HELLO => Request::Hello { secret: r.bytes()?.to_vec() },
            WRITE => Request::Write {
                store: name(&mut r)?,
                seg: r.u32()?,
                frag: r.u8()?,
                block: r.u64()?,
                data: r.bytes()?.to_vec(),
            },
            READ => {
                Request::Read { store: name(&mut r)?, seg: r.u32()?, frag: r.u8()?, block: r.u64()?, blocks: r.u32()? }
            }
            SYNC => Request::Sync { store: name(&mut r)? },
            DELETE => Request::Delete { store: name(&mut r)?, seg: r.u32()? },
            LIST => Request::List { store: name(&mut r)? },
            PLACE => {
                Request::Place { store: name(&mut r)?, seg: r.u32()?, frag: r.u8()?, placement: placement(&mut r)? }
            }
            STATS => Request::Stats,
            CLAIM => Request::Claim { store: name(&mut r)?, epoch: r.u64()?, owner: name(&mut r)? },
            ADOPT => Request::Adopt {
                store: name(&mut r)?,
                seg: r.u32()?,
                frag: r.u8()?,
                from: name(&mut r)?,
                from_seg: r.u32()?,
                from_gen: r.u64()?,
                placement: placement(&mut r)?,
            },
            _ => return Err(Malformed("unknown request tag")),
        };
        r.finish().map_err(|_| Malformed("bytes after the request"))?;
        Ok(req)
    }
}

impl Reply {
    /// The reply's frame, naming the node's queue.
    pub fn encode(&self, queue: u32) -> Vec<u8> {
        let mut w = frame::begin();
        match self {
            Reply::Ok => w.u8(OK).u32(queue),
            Reply::Data(d) => w.u8(DATA).u32(queue).bytes(d),
            Reply::Listed(l) => {
                w.u8(LISTED).u32(queue).u32(l.len() as u32);
                for f in l {
                    w.u32(f.seg).u8(f.frag);
                    put_placement(&mut w, &f.placement);
                }
                &mut w
            }
            Reply::Stats { fragments, bytes, direct } => {
                w.u8(STATS_REPLY).u32(queue).u64(*fragments).u64(*bytes).u8(u8::from(*direct))
            }
            Reply::Claimed { epoch, owner } => w.u8(CLAIMED).u32(queue).u64(*epoch).bytes(owner.as_bytes()),
            Reply::Error { code, message } => w.u8(ERROR).u32(queue).u8(*code as u8).bytes(message.as_bytes()),
        };
        frame::seal(w)
    }

    /// Parses a reply's body: the reply and the node's queue.
    pub fn decode(body: &[u8]) -> Result<(Reply, u32), Malformed> {
        let mut r = Reader::new(body);
        let tag = r.u8()?;
        let queue = r.u32()?;
        let reply = match tag {
            OK => Reply::Ok,
            DATA => Reply::Data(r.bytes()?.to_vec()),
            LISTED => {
                let n = r.u32()? as usize;
                if n > r.remaining() / 14 {
                    return Err(Malformed("count larger than the message"));
                }
                let mut l = Vec::with_capacity(n);
                for _ in 0..n {
                    l.push(Listed { seg: r.u32()?, frag: r.u8()?, placement: placement(&mut r)? });
                }
                Reply::Listed(l)
            }
            STATS_REPLY => Reply::Stats {
                fragments: r.u64()?,
                bytes: r.u64()?,
                direct: match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(Malformed("direct is 0 or 1")),
                },
            },
            CLAIMED => Reply::Claimed { epoch: r.u64()?, owner: name(&mut r)? },
            ERROR => {
                Reply::Error { code: Code::from_u8(r.u8()?), message: String::from_utf8_lossy(r.bytes()?).into_owned() }
            }
            _ => return Err(Malformed("unknown reply tag")),
        };
        r.finish().map_err(|_| Malformed("bytes after the reply"))?;
        Ok((reply, queue))
    }
}

/// Reads one frame's body from a blocking stream, its checksum verified.
pub fn read_frame(s: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut h = [0u8; frame::HEADER];
    s.read_exact(&mut h)?;
    let (len, crc) = frame::header(&h).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    if crc32c::crc32c(&body) != crc {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "storage node frame checksum mismatch"));
    }
    Ok(body)
}

/// Writes a whole frame to a blocking stream.
pub fn write_frame(s: &mut impl Write, frame: &[u8]) -> io::Result<()> {
    s.write_all(frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn body(frame: &[u8]) -> &[u8] {
        &frame[frame::HEADER..]
    }

    #[test]
    fn every_request_and_reply_round_trips() {
        let p = Placement { gen: 3, rho: 2, nodes: vec!["a:1".into(), "b:2".into(), "c:3".into()] };
        let reqs = [
            Request::Hello { secret: b"s".to_vec() },
            Request::Write { store: "n1".into(), seg: 7, frag: 1, block: 9, data: vec![5; 4096] },
            Request::Read { store: "n1".into(), seg: 7, frag: 2, block: 0, blocks: 3 },
            Request::Sync { store: "n1".into() },
            Request::Delete { store: "n1".into(), seg: 4 },
            Request::List { store: "n1".into() },
            Request::Place { store: "n1".into(), seg: 4, frag: 0, placement: p.clone() },
            Request::Stats,
            Request::Claim { store: "n1".into(), epoch: 4, owner: "p1 pid 7".into() },
            Request::Adopt {
                store: "n2".into(),
                seg: 9,
                frag: 1,
                from: "n1".into(),
                from_seg: 4,
                from_gen: 3,
                placement: p.clone(),
            },
        ];
        for r in reqs {
            assert_eq!(Request::decode(body(&r.encode())).unwrap(), r);
        }
        let replies = [
            Reply::Ok,
            Reply::Data(vec![1, 2, 3]),
            Reply::Listed(vec![Listed { seg: 1, frag: 2, placement: p }]),
            Reply::Stats { fragments: 4, bytes: 5, direct: true },
            Reply::Claimed { epoch: 4, owner: "p1 pid 7".into() },
            Reply::Error { code: Code::Corrupt, message: "block 3".into() },
        ];
        for r in replies {
            assert_eq!(Reply::decode(body(&r.encode(9))).unwrap(), (r, 9));
        }
    }

    proptest! {
        #[test]
        fn any_bytes_decode_to_a_message_or_an_error(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Request::decode(&b);
            let _ = Reply::decode(&b);
        }
    }
}
