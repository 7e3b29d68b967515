//! What connections share, and what each one keeps.

use crate::keyspace::Keyspace;
use crate::metrics::Metrics;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

/// One client connection.
pub struct Session {
    pub id: u64,
    pub addr: String,
    pub proto: u8,
    /// Protocol switch requested by HELLO, applied once its reply is encoded.
    pub proto_next: Option<u8>,
    pub authed: bool,
    pub name: Option<Vec<u8>>,
    pub quit: bool,
    pub created: Instant,
    /// Commands run, for sampling their latency.
    pub timed: u32,
    /// Cluster mode: (region, LSN) of the writes run since the last reply write; the replies
    /// wait for the region's backups to hold them.
    pub writes: Vec<(u32, u64)>,
    /// A command forwarded from another node for one region: the keys it may see.
    pub span: Option<crate::keyspace::Span>,
    /// The region of `span`: every key the command names must lie in it.
    pub region: Option<u32>,
    /// The database SELECT chose (0 in a cluster).
    pub db: u8,
    /// A blocking command (BLPOP and the like) that found nothing: the keys it waits on and
    /// until when. Set by the command, which runs again when a key is written or time is up.
    pub block: Option<Block>,
    /// The last command asks its connection to wait and run it again (`block`).
    pub waiting: bool,
    /// Woken by writes to the keys of `block`.
    pub notify: std::sync::Arc<tokio::sync::Notify>,
    /// Inside EXEC or a script: blocking commands do not block, and MULTI queues nothing.
    pub atomic: bool,
    /// Inside a script (which may not ask XREAD to block).
    pub scripted: bool,
    /// The ACL user it authenticated as (None: `default`).
    pub user: Option<String>,
    /// Stream keyspace events the running command announced (`xgroup-create`, ...), published
    /// after it in order with its other events.
    pub events: Vec<(String, Vec<u8>)>,
    /// Inside a read-only script (EVAL_RO, FCALL_RO, a `no-writes` function): writes refused.
    pub script_read_only: bool,
    /// Inside MULTI: the queued commands.
    pub multi: Option<Queue>,
    /// The keys WATCH remembers.
    pub watched: Vec<Watched>,
    /// Its subscriptions (once it subscribed).
    pub subs: Option<crate::pubsub::Subscriber>,
    /// CLIENT REPLY: whether replies are sent.
    pub replies: Replies,
}

/// What CLIENT REPLY asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Replies {
    #[default]
    On,
    /// No replies until CLIENT REPLY ON.
    Off,
    /// No reply to this command (CLIENT REPLY SKIP) and the next.
    SkipNext,
    /// No reply to the next command.
    Skip,
}

/// A key WATCH remembers.
pub struct Watched {
    pub db: u8,
    pub key: Vec<u8>,
    /// `Db::read_bound` of its record when watched.
    pub bound: u64,
    /// When it expires (0: never or absent).
    pub expires: u64,
    /// It existed.
    pub existed: bool,
}

/// The state of a connection inside MULTI.
#[derive(Default)]
pub struct Queue {
    /// The commands to run, with their arguments.
    pub commands: Vec<Vec<Vec<u8>>>,
    /// A command failed its checks: EXEC answers EXECABORT.
    pub dirty: bool,
    /// Cluster mode: the region of the queued commands' keys.
    pub region: Option<u32>,
}

/// What a blocked connection waits for.
pub struct Block {
    /// The database of `keys`.
    pub db: u8,
    /// The keys whose writes wake it.
    pub keys: Vec<Vec<u8>>,
    /// When it gives up (None: never).
    pub deadline: Option<Instant>,
    /// XREAD's `$` IDs, as they were when it blocked (the entries after them wake it).
    pub after: Vec<(u64, u64)>,
}

/// Connections blocked on keys, by key: writes that may let a blocking command go on wake
/// them. Each connection has one `Notify`, which keeps a wake-up that came before it waited.
#[derive(Default)]
pub struct Waiters {
    count: AtomicUsize,
    map: Mutex<HashMap<DbKey, Vec<Waiter>>>,
    /// Connections CLIENT UNBLOCK released, and whether with an error.
    released: Mutex<HashMap<u64, bool>>,
}

/// A key of a database.
type DbKey = (u8, Vec<u8>);

/// A blocked connection: its id and what wakes it.
type Waiter = (u64, std::sync::Arc<tokio::sync::Notify>);

impl Waiters {
    /// Registers connection `id` as waiting on `keys` of database `db`.
    pub fn register(&self, db: u8, keys: &[Vec<u8>], id: u64, n: &std::sync::Arc<tokio::sync::Notify>) {
        let mut m = self.map.lock();
        for k in keys {
            m.entry((db, k.clone())).or_default().push((id, n.clone()));
        }
        self.count.fetch_add(1, Relaxed);
    }

    /// Forgets connection `id`'s wait on `keys` of `db`, passing its turn on.
    pub fn unregister(&self, db: u8, keys: &[Vec<u8>], id: u64) {
        let mut m = self.map.lock();
        Self::pass_on_locked(&m, db, keys, id);
        for k in keys {
            let key = (db, k.clone());
            if let Some(list) = m.get_mut(&key) {
                list.retain(|(i, _)| *i != id);
                if list.is_empty() {
                    m.remove(&key);
                }
            }
        }
        self.count.fetch_sub(1, Relaxed);
    }

    /// Connection `id` looked at its keys and is still waiting: the next connection blocked on
    /// each of them looks now. Woken connections look one at a time, in the order they blocked,
    /// so that the first to block is served first, as in Redis.
    pub fn pass_on(&self, db: u8, keys: &[Vec<u8>], id: u64) {
        Self::pass_on_locked(&self.map.lock(), db, keys, id);
    }

    fn pass_on_locked(m: &HashMap<DbKey, Vec<Waiter>>, db: u8, keys: &[Vec<u8>], id: u64) {
        for k in keys {
            let Some(list) = m.get(&(db, k.clone())) else { continue };
            let next = list.iter().skip_while(|(i, _)| *i != id).nth(1);
            if let Some((_, n)) = next {
                n.notify_one();
            }
        }
    }

    /// CLIENT UNBLOCK: releases connection `id` if it is blocked (it then answers as if its
    /// time ran out, or with an error); whether it was.
    pub fn release(&self, id: u64, error: bool) -> bool {
        let m = self.map.lock();
        let Some((_, n)) = m.values().flatten().find(|(i, _)| *i == id) else { return false };
        self.released.lock().insert(id, error);
        n.notify_one();
        true
    }

    /// Whether connection `id` was released by CLIENT UNBLOCK (Some(true): with an error).
    pub fn take_release(&self, id: u64) -> Option<bool> {
        let mut r = self.released.lock();
        if r.is_empty() {
            return None;
        }
        r.remove(&id)
    }

    /// How many connections are blocked now (INFO's `blocked_clients`).
    pub fn blocked(&self) -> usize {
        self.count.load(Relaxed)
    }

    /// Wakes the connections blocked in database `db` (its keys all changed: SWAPDB).
    pub fn wake_db(&self, db: u8) {
        for ((d, _), list) in self.map.lock().iter() {
            if let Some((_, n)) = list.first().filter(|_| *d == db) {
                n.notify_one();
            }
        }
    }

    /// `key` of `db` changed: the connections blocked on it look again (cheap when none waits).
    pub fn wake(&self, db: u8, key: &[u8]) {
        if self.count.load(Relaxed) == 0 {
            return;
        }
        // The first to block looks first; each passes the turn on (`pass_on`, `unregister`).
        if let Some((_, n)) = self.map.lock().get(&(db, key.to_vec())).and_then(|l| l.first()) {
            n.notify_one();
        }
    }
}

/// SCAN cursors: numbers that stand for "continue after this key". Old ones are forgotten
/// (a client holding one then gets "invalid cursor").
pub struct Cursors {
    next: u64,
    map: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
}

const MAX_CURSORS: usize = 100_000;

impl Cursors {
    pub fn get(&self, c: u64) -> Option<Vec<u8>> {
        self.map.get(&c).cloned()
    }
    pub fn put(&mut self, key: Vec<u8>) -> u64 {
        self.next += 1;
        let c = self.next;
        self.map.insert(c, key);
        self.order.push_back(c);
        if self.order.len() > MAX_CURSORS {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
        c
    }
}

/// The number of databases of a single node (Redis' `databases` default).
pub const DATABASES: u8 = 16;

/// What CONFIG GET and INFO report of the server's settings, and the ones CONFIG SET changes
/// while it runs.
pub struct Settings {
    /// Seconds a Redis client may idle before its connection is closed (0: never; Redis'
    /// `timeout`, the server's `idle_timeout_secs`). Read by each connection as it waits.
    pub timeout: AtomicU64,
    /// Redis' `min-replicas-to-write` on a single node, which has no replicas: above 0 every
    /// write is refused (NOREPLICAS). A cluster's own setting is `--min-replicas`.
    pub min_replicas: AtomicU64,
    /// When SAVE or BGSAVE last made the store durable (Unix seconds; the start before that).
    pub last_save: std::sync::Arc<AtomicU64>,
    /// Redis' `notify-keyspace-events`, and the expiries awaiting their `expired` event.
    pub notify: crate::notify::Notifier,
    /// The Redis listener's port (INFO's `tcp_port`; 0 until the server set it).
    pub port: AtomicU64,
    /// The most clients served at once (`maxclients`).
    pub max_clients: AtomicU64,
    /// The store's directory (`dir`).
    pub dir: std::sync::OnceLock<String>,
    /// 40 hex digits, random for each start of the server (INFO's `run_id`).
    pub run_id: String,
    /// Redis encoding thresholds CONFIG SET was given (kept for CONFIG GET).
    pub tuning: Mutex<HashMap<&'static str, i64>>,
}

impl Default for Settings {
    fn default() -> Settings {
        let run_id = (0..20).map(|_| format!("{:02x}", rand::random::<u8>())).collect();
        Settings {
            timeout: AtomicU64::new(0),
            min_replicas: AtomicU64::new(0),
            last_save: std::sync::Arc::new(AtomicU64::new(
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            )),
            notify: crate::notify::Notifier::default(),
            port: AtomicU64::new(0),
            max_clients: AtomicU64::new(10_000),
            dir: std::sync::OnceLock::new(),
            tuning: Mutex::default(),
            run_id,
        }
    }
}

impl Settings {
    /// The idle limit of Redis connections now (None: none).
    pub fn idle(&self) -> Option<std::time::Duration> {
        let t = self.timeout.load(Relaxed);
        (t > 0).then(|| std::time::Duration::from_secs(t))
    }
}

fn identity_slots() -> [u8; DATABASES as usize] {
    std::array::from_fn(|i| i as u8)
}

/// The database-to-slot map a store recorded; every database in its own slot when it holds
/// none, or one that is not a permutation (which no SWAPDB writes).
fn load_slots(db: &halyard_engine::Db) -> [u8; DATABASES as usize] {
    let stored = match db.get(crate::keyspace::SLOTS_KEY) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!("reading the database map: {e}; databases keep their own slots");
            None
        }
    };
    let Some(v) = stored else { return identity_slots() };
    let Ok(slots) = <[u8; DATABASES as usize]>::try_from(v.as_slice()) else { return identity_slots() };
    let mut seen = [false; DATABASES as usize];
    for &s in &slots {
        match seen.get_mut(usize::from(s)) {
            Some(x) if !*x => *x = true,
            _ => {
                tracing::warn!("the stored database map is not a permutation; databases keep their own slots");
                return identity_slots();
            }
        }
    }
    slots
}

/// Server-wide state.
pub struct Shared {
    /// Database 0: the whole key space of a cluster node.
    pub ks: Keyspace,
    /// Databases 1 to [`DATABASES`] - 1 of a single node (none on a cluster node), by slot.
    pub numbered: Vec<Keyspace>,
    /// Which slot (`ks` is slot 0, `numbered[i]` slot i + 1) each database number names:
    /// SWAPDB swaps two entries (`keyspace::encoding::SLOTS_KEY`).
    slots: [std::sync::atomic::AtomicU8; DATABASES as usize],
    pub requirepass: Option<String>,
    /// ACL users.
    pub acl: crate::acl::Acl,
    /// Notified by SHUTDOWN: the server stops as on SIGTERM.
    pub shutdown: tokio::sync::Notify,
    pub metrics: Metrics,
    pub cursors: Mutex<Cursors>,
    pub connected: AtomicUsize,
    pub started: Instant,
    pub native: std::sync::Arc<crate::native::NativeCounters>,
    /// Cluster mode: this node's share of the cluster (writes wait for room in its backups'
    /// queues).
    pub cluster: std::sync::OnceLock<std::sync::Arc<crate::cluster::ClusterNode>>,
    /// Protected mode (crate::protected): the RESP and native listeners serve loopback clients
    /// only.
    pub protect_resp: std::sync::atomic::AtomicBool,
    pub protect_native: std::sync::atomic::AtomicBool,
    /// Where `HALYARD.BACKUP` writes (the server's `backup_dir`).
    pub backup_dir: std::sync::OnceLock<std::path::PathBuf>,
    /// Connections blocked on keys.
    pub waiters: Waiters,
    /// Held shared by every RESP command while it runs and exclusively by EXEC and scripts,
    /// which therefore run alone.
    pub gate: parking_lot::RwLock<()>,
    /// Pub/sub subscriptions.
    pub pubsub: crate::pubsub::PubSub,
    /// EVAL's scripts and Lua state.
    pub scripts: crate::lua::Scripts,
    /// CONFIG's settings.
    pub settings: Settings,
    next_id: AtomicU64,
}

impl Shared {
    pub fn new(ks: Keyspace, requirepass: Option<String>, metrics: Metrics) -> Shared {
        let numbered =
            if ks.db.options().default_region { (1..DATABASES).map(|n| ks.numbered(n)).collect() } else { Vec::new() };
        let slots = if numbered.is_empty() { identity_slots() } else { load_slots(&ks.db) };
        Shared {
            ks,
            numbered,
            slots: slots.map(std::sync::atomic::AtomicU8::new),
            acl: crate::acl::Acl::new(requirepass.as_deref()),
            shutdown: tokio::sync::Notify::new(),
            requirepass,
            metrics,
            cursors: Mutex::new(Cursors { next: 0, map: HashMap::new(), order: VecDeque::new() }),
            connected: AtomicUsize::new(0),
            started: Instant::now(),
            native: Default::default(),
            cluster: std::sync::OnceLock::new(),
            protect_resp: Default::default(),
            protect_native: Default::default(),
            backup_dir: std::sync::OnceLock::new(),
            waiters: Waiters::default(),
            gate: parking_lot::RwLock::new(()),
            scripts: Default::default(),
            pubsub: Default::default(),
            settings: Settings::default(),
            next_id: AtomicU64::new(1),
        }
    }

    pub fn session(&self, addr: String) -> Session {
        Session {
            id: self.next_id.fetch_add(1, Relaxed),
            addr,
            proto: 2,
            proto_next: None,
            authed: self.acl.default_needs_no_password(),
            user: None,
            events: Vec::new(),
            name: None,
            quit: false,
            created: Instant::now(),
            timed: 0,
            writes: Vec::new(),
            span: None,
            region: None,
            db: 0,
            block: None,
            waiting: false,
            notify: Default::default(),
            atomic: false,
            scripted: false,
            script_read_only: false,
            multi: None,
            watched: Vec::new(),
            subs: None,
            replies: Replies::On,
        }
    }

    /// Wakes connections blocked on `key` of database `db`: it may have become a list (or
    /// sorted set) they can pop from.
    pub fn wake(&self, db: u8, key: &[u8]) {
        self.waiters.wake(db, key);
    }

    /// Whether `sess` is a RESP2 connection with subscriptions (which may run only the pub/sub
    /// commands, PING and QUIT).
    pub fn subscribed(sess: &Session) -> bool {
        sess.proto < 3 && sess.subs.as_ref().is_some_and(|s| s.count() > 0)
    }

    /// Forgets what a closing connection waited on and listened to.
    pub fn close(&self, sess: &mut Session) {
        self.unblock(sess);
        if let Some(mut s) = sess.subs.take() {
            self.pubsub.drop_subscriber(sess.id, &mut s);
        }
    }

    /// Ends `sess`'s blocking wait, if any.
    pub fn unblock(&self, sess: &mut Session) {
        if let Some(b) = sess.block.take() {
            self.waiters.unregister(b.db, &b.keys, sess.id);
        }
        sess.waiting = false;
    }

    /// The database `sess` works in.
    pub fn db(&self, sess: &Session) -> &Keyspace {
        self.database(sess.db).unwrap_or(&self.ks)
    }

    /// Database `n`, if this server has it.
    pub fn database(&self, n: u8) -> Option<&Keyspace> {
        match self.slots.get(usize::from(n))?.load(Relaxed) {
            0 => Some(&self.ks),
            slot => self.numbered.get(usize::from(slot) - 1),
        }
    }

    /// Every database of this server, numbered.
    pub fn databases(&self) -> impl Iterator<Item = (u8, &Keyspace)> {
        (0..=self.numbered.len() as u8).filter_map(|n| self.database(n).map(|k| (n, k)))
    }

    /// SWAPDB: databases `x` and `y` trade slots, durably, and the clients blocked in either
    /// look again. The caller holds the command gate exclusively (no command runs meanwhile).
    pub fn swap_databases(&self, x: u8, y: u8) -> Result<(), halyard_engine::Error> {
        let mut now: [u8; DATABASES as usize] =
            std::array::from_fn(|i| self.slots.get(i).map_or(0, |s| s.load(Relaxed)));
        now.swap(usize::from(x), usize::from(y));
        self.ks.db.put(crate::keyspace::SLOTS_KEY, &now)?;
        for (slot, v) in self.slots.iter().zip(now) {
            slot.store(v, Relaxed);
        }
        self.waiters.wake_db(x);
        self.waiters.wake_db(y);
        Ok(())
    }

    pub fn client_line(&self, s: &Session) -> String {
        format!(
            "id={} addr={} name={} age={} db={} resp={}\n",
            s.id,
            s.addr,
            String::from_utf8_lossy(s.name.as_deref().unwrap_or_default()),
            s.created.elapsed().as_secs(),
            s.db,
            s.proto
        )
    }
}
