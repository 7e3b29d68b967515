//! Publish/subscribe: which connections listen to which channels and patterns, and the
//! delivery of published messages to them.
//!
//! Each subscribed connection has a bounded queue (`INBOX`) that its connection task drains
//! onto the socket between requests. A subscriber that lets its queue fill (it reads slower
//! than messages come) is cut off, as Redis closes a pub/sub client past its output buffer
//! limit: its connection closes, and no publisher ever waits on a slow subscriber.

use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Messages a subscriber may have queued before it is cut off.
pub const INBOX: usize = 16 * 1024;

/// A published message as one subscriber receives it.
#[derive(Debug)]
pub struct Message {
    /// The pattern it matched (for a PSUBSCRIBE), or None.
    pub pattern: Option<Vec<u8>>,
    pub channel: Vec<u8>,
    pub payload: Vec<u8>,
}

/// What a publisher holds of a subscriber.
#[derive(Clone)]
struct Outbox {
    tx: mpsc::Sender<Arc<Message>>,
    /// Set when its queue overflowed: the connection closes.
    cut: Arc<AtomicBool>,
}

/// A connection's subscriptions and its queue of messages.
pub struct Subscriber {
    out: Outbox,
    /// Messages for this connection.
    pub inbox: mpsc::Receiver<Arc<Message>>,
    pub channels: BTreeSet<Vec<u8>>,
    pub patterns: BTreeSet<Vec<u8>>,
}

impl Subscriber {
    pub fn new() -> Subscriber {
        let (tx, inbox) = mpsc::channel(INBOX);
        Subscriber {
            out: Outbox { tx, cut: Arc::default() },
            inbox,
            channels: BTreeSet::new(),
            patterns: BTreeSet::new(),
        }
    }

    /// The number of channels and patterns it listens to.
    pub fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    /// Whether it fell too far behind and must be disconnected.
    pub fn cut_off(&self) -> bool {
        self.out.cut.load(Relaxed)
    }
}

impl Default for Subscriber {
    fn default() -> Self {
        Subscriber::new()
    }
}

type Listeners = HashMap<Vec<u8>, HashMap<u64, Outbox>>;

/// Every subscription of a server.
#[derive(Default)]
pub struct PubSub {
    channels: Mutex<Listeners>,
    patterns: Mutex<Listeners>,
}

impl PubSub {
    fn map(&self, pattern: bool) -> &Mutex<Listeners> {
        if pattern {
            &self.patterns
        } else {
            &self.channels
        }
    }

    /// Subscribes connection `id` to channel (or pattern) `name`; false if it already was.
    pub fn subscribe(&self, id: u64, s: &mut Subscriber, name: &[u8], pattern: bool) -> bool {
        let set = if pattern { &mut s.patterns } else { &mut s.channels };
        if !set.insert(name.to_vec()) {
            return false;
        }
        self.map(pattern).lock().entry(name.to_vec()).or_default().insert(id, s.out.clone());
        true
    }

    /// Unsubscribes connection `id` from `name`; false if it was not subscribed.
    pub fn unsubscribe(&self, id: u64, s: &mut Subscriber, name: &[u8], pattern: bool) -> bool {
        let set = if pattern { &mut s.patterns } else { &mut s.channels };
        if !set.remove(name) {
            return false;
        }
        let mut m = self.map(pattern).lock();
        if let Some(l) = m.get_mut(name) {
            l.remove(&id);
            if l.is_empty() {
                m.remove(name);
            }
        }
        true
    }

    /// Forgets every subscription of a connection that closed.
    pub fn drop_subscriber(&self, id: u64, s: &mut Subscriber) {
        for c in std::mem::take(&mut s.channels) {
            s.channels.insert(c.clone());
            self.unsubscribe(id, s, &c, false);
        }
        for p in std::mem::take(&mut s.patterns) {
            s.patterns.insert(p.clone());
            self.unsubscribe(id, s, &p, true);
        }
    }

    /// Delivers `payload` to the subscribers of `channel` and of the patterns it `matches`;
    /// returns how many received it.
    pub fn publish(&self, channel: &[u8], payload: &[u8], matches: fn(&[u8], &[u8]) -> bool) -> usize {
        let mut n = 0;
        let plain = self.channels.lock().get(channel).map(|l| l.values().cloned().collect::<Vec<_>>());
        let msg = Arc::new(Message { pattern: None, channel: channel.to_vec(), payload: payload.to_vec() });
        for out in plain.unwrap_or_default() {
            n += usize::from(deliver(&out, &msg));
        }
        let pats: Vec<(Vec<u8>, Vec<Outbox>)> = self
            .patterns
            .lock()
            .iter()
            .filter(|(p, _)| matches(p, channel))
            .map(|(p, l)| (p.clone(), l.values().cloned().collect()))
            .collect();
        for (p, outs) in pats {
            let msg = Arc::new(Message { pattern: Some(p), channel: channel.to_vec(), payload: payload.to_vec() });
            for out in outs {
                n += usize::from(deliver(&out, &msg));
            }
        }
        n
    }

    /// The channels with a subscriber (those `filter` keeps).
    pub fn channels(&self, filter: impl Fn(&[u8]) -> bool) -> Vec<Vec<u8>> {
        self.channels.lock().keys().filter(|c| filter(c)).cloned().collect()
    }

    /// The number of subscribers of `channel`.
    pub fn numsub(&self, channel: &[u8]) -> usize {
        self.channels.lock().get(channel).map_or(0, HashMap::len)
    }

    /// The number of distinct patterns subscribed to.
    pub fn numpat(&self) -> usize {
        self.patterns.lock().len()
    }
}

/// Queues `msg` for one subscriber; one whose queue is full is cut off instead.
fn deliver(out: &Outbox, msg: &Arc<Message>) -> bool {
    match out.tx.try_send(msg.clone()) {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Full(_)) => {
            out.cut.store(true, Relaxed);
            false
        }
        Err(mpsc::error::TrySendError::Closed(_)) => false,
    }
}
