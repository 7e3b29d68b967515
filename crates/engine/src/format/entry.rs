//! A version of a key as the index stores it: the key, its LSN and where its value is.

/// Where a version's value is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    /// Small or medium pair: the value itself.
    Inline(Vec<u8>),
    /// In the medium log: record offset, record length, segment salt.
    Medium { ptr: u64, len: u32, salt: u32 },
    /// In the large log.
    Large { ptr: u64, len: u32, salt: u32 },
    /// Deleted.
    Tombstone,
    /// A put that no reader sees from `at` (milliseconds since the Unix epoch) on: an expired
    /// pair reads as deleted, and compactions drop it. Holds an inline or pointer value, never
    /// another `Expiring` or a tombstone (made by [`Value::expiring`]).
    Expiring { at: u64, value: Box<Value> },
}

impl Value {
    /// Bytes this entry takes in an SST leaf besides the key.
    pub(crate) fn stored_len(&self) -> usize {
        match self {
            Value::Inline(v) => 4 + v.len(),
            Value::Medium { .. } | Value::Large { .. } => 16,
            Value::Tombstone => 0,
            Value::Expiring { value, .. } => 8 + value.stored_len(),
        }
    }

    /// `value` expiring at `at`; `value` itself for `at == 0` (no expiry) or a tombstone.
    pub(crate) fn expiring(at: u64, value: Value) -> Value {
        match value {
            Value::Tombstone => Value::Tombstone,
            Value::Expiring { value, .. } => Value::expiring(at, *value),
            v if at == 0 => v,
            v => Value::Expiring { at, value: Box::new(v) },
        }
    }

    /// Where the value is, whether or not it expires.
    pub(crate) fn base(&self) -> &Value {
        match self {
            Value::Expiring { value, .. } => value,
            v => v,
        }
    }

    /// When the pair expires (milliseconds since the Unix epoch); 0 for never.
    pub(crate) fn expire_at(&self) -> u64 {
        match self {
            Value::Expiring { at, .. } => *at,
            _ => 0,
        }
    }

    /// Whether a reader at time `now` sees no pair here: a tombstone, or a pair expired by then.
    pub(crate) fn is_gone(&self, now: u64) -> bool {
        match self {
            Value::Tombstone => true,
            Value::Expiring { at, .. } => *at <= now,
            _ => false,
        }
    }
}

/// One version of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub key: Vec<u8>,
    pub lsn: u64,
    pub value: Value,
}
