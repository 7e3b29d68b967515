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
}

impl Value {
    /// Bytes this entry takes in an SST leaf besides the key.
    pub(crate) fn stored_len(&self) -> usize {
        match self {
            Value::Inline(v) => 4 + v.len(),
            Value::Medium { .. } | Value::Large { .. } => 16,
            Value::Tombstone => 0,
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
