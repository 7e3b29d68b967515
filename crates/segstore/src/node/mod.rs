//! A storage node: serves the fragments it holds ([`fragments`]) over TCP, a thread per
//! connection, every connection first giving the cluster secret (`halyard_admin::auth`), each
//! store fenced to the processing node that claimed it last ([`claims`]).

pub mod claims;
pub mod fragments;

use crate::wire::{read_frame, write_frame, Code, Reply, Request};
use claims::Claims;
use fragments::Fragments;
use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

/// Most connections served at once; more are closed at once (bounded threads and buffers).
const MAX_CONNECTIONS: u32 = 512;

/// A running storage node.
pub struct StorageNode {
    frags: Fragments,
    claims: Claims,
    /// Requests being served (the queue the replies report).
    queue: AtomicU32,
    conns: AtomicU32,
}

impl StorageNode {
    /// A node keeping its fragments under `dir`.
    pub fn open(dir: &Path) -> std::io::Result<Arc<StorageNode>> {
        let (frags, claims) = (Fragments::open(dir)?, Claims::new(dir));
        Ok(Arc::new(StorageNode { frags, claims, queue: AtomicU32::new(0), conns: AtomicU32::new(0) }))
    }

    /// Serves connections from `listener` until the process ends.
    pub fn serve(self: &Arc<Self>, listener: TcpListener) {
        for s in listener.incoming() {
            let Ok(s) = s else { continue };
            if self.conns.fetch_add(1, Relaxed) >= MAX_CONNECTIONS {
                self.conns.fetch_sub(1, Relaxed);
                continue;
            }
            let node = self.clone();
            let spawned = std::thread::Builder::new().name("segstore-conn".into()).spawn(move || {
                if let Err(e) = node.connection(s) {
                    tracing::debug!("storage connection ended: {e}");
                }
                node.conns.fetch_sub(1, Relaxed);
            });
            if spawned.is_err() {
                self.conns.fetch_sub(1, Relaxed);
            }
        }
    }

    fn connection(&self, mut s: TcpStream) -> std::io::Result<()> {
        s.set_nodelay(true)?;
        let mut authed = false;
        // The epoch this connection claimed each store at.
        let mut held: HashMap<String, u64> = HashMap::new();
        loop {
            let body = read_frame(&mut s)?;
            let reply = match Request::decode(&body) {
                Err(e) => Reply::Error { code: Code::Malformed, message: e.to_string() },
                Ok(Request::Hello { secret }) => {
                    authed = halyard_admin::is_cluster_secret(&secret);
                    if authed {
                        Reply::Ok
                    } else {
                        Reply::Error { code: Code::Unauthenticated, message: "wrong cluster secret".into() }
                    }
                }
                Ok(_) if !authed => Reply::Error {
                    code: Code::Unauthenticated,
                    message: "send Hello with the cluster secret first".into(),
                },
                Ok(req) => {
                    self.queue.fetch_add(1, Relaxed);
                    let r = self.admitted(req, &mut held);
                    self.queue.fetch_sub(1, Relaxed);
                    r
                }
            };
            write_frame(&mut s, &reply.encode(self.queue.load(Relaxed)))?;
        }
    }

    /// Answers a request of an authenticated connection: a store request only if the
    /// connection holds the store's current claim (or nobody claimed it).
    fn admitted(&self, req: Request, held: &mut HashMap<String, u64>) -> Reply {
        if let Request::Claim { store, epoch, owner } = req {
            return self.claim(&store, epoch, &owner, held);
        }
        let Some(store) = req.store().map(str::to_string) else { return self.handle(req) };
        if !fragments::valid_store(&store) {
            return bad_name(&store);
        }
        let epoch = held.get(&store).copied().unwrap_or(0);
        self.claims.admit(&store, epoch, || Ok(self.handle(req))).unwrap_or_else(refused)
    }

    fn claim(&self, store: &str, epoch: u64, owner: &str, held: &mut HashMap<String, u64>) -> Reply {
        if !fragments::valid_store(store) {
            return bad_name(store);
        }
        match self.claims.claim(store, epoch, owner) {
            Ok(c) => {
                if epoch != 0 && c.epoch == epoch && c.owner == owner {
                    held.insert(store.to_string(), epoch);
                }
                Reply::Claimed { epoch: c.epoch, owner: c.owner }
            }
            Err(r) => refused(r),
        }
    }

    fn handle(&self, req: Request) -> Reply {
        let f = &self.frags;
        let done = match req {
            Request::Write { store, seg, frag, block, data } => f.write(&store, seg, frag, block, &data),
            Request::Read { store, seg, frag, block, blocks } => {
                return f.read(&store, seg, frag, block, blocks).map_or_else(refused, Reply::Data)
            }
            Request::Sync { store } => f.sync(&store),
            Request::Delete { store, seg } => f.delete(&store, seg),
            Request::List { store } => return f.list(&store).map_or_else(refused, Reply::Listed),
            Request::Place { store, seg, frag, placement } => f.place(&store, seg, frag, &placement),
            Request::Adopt { store, seg, frag, from, from_seg, from_gen, placement } => {
                f.adopt(&store, seg, frag, (&from, from_seg, from_gen), &placement)
            }
            Request::Stats => {
                let (fragments, bytes) = f.usage();
                return Reply::Stats { fragments, bytes, direct: f.is_direct() };
            }
            Request::Hello { .. } | Request::Claim { .. } => Ok(()),
        };
        done.map_or_else(refused, |()| Reply::Ok)
    }
}

fn bad_name(store: &str) -> Reply {
    Reply::Error { code: Code::BadName, message: format!("store name {store:?} is not [A-Za-z0-9._-]{{1,64}}") }
}

fn refused((code, message): fragments::Refusal) -> Reply {
    Reply::Error { code, message }
}
