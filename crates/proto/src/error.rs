//! Decoding errors and the error codes carried in error replies.

/// Why bytes could not be decoded. The first three are framing errors: after one of them the
/// stream position is lost and the connection must be closed; the rest concern one payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// The frame does not start with the protocol magic (not a Halyard client, or a lost position).
    #[error("bad frame magic {found:#010x} (expected {expected:#010x})", expected = crate::MAGIC)]
    BadMagic {
        /// The bytes found where the magic should be (the prefix read so far, zero-padded).
        found: u32,
    },
    /// The frame is larger than the receiver's limit.
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// Size of the whole frame, header and checksum included.
        size: u64,
        /// The limit.
        max: usize,
    },
    /// The CRC32C trailer does not match the frame.
    #[error("frame checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// The trailer.
        stored: u32,
        /// CRC32C of the header and payload as received.
        computed: u32,
    },
    /// The kind byte names no known request or reply.
    #[error("unknown message kind {0:#04x}")]
    UnknownKind(u8),
    /// The payload ends before a field.
    #[error("payload truncated while reading {0}")]
    Truncated(&'static str),
    /// The payload has bytes after its last field.
    #[error("{0} unexpected bytes after the payload's last field")]
    TrailingBytes(usize),
    /// A field has a value the protocol does not allow.
    #[error("invalid payload: {0}")]
    Invalid(&'static str),
}

impl ProtoError {
    /// True for errors after which the byte stream cannot be resynchronised.
    pub fn is_framing(&self) -> bool {
        matches!(self, ProtoError::BadMagic { .. } | ProtoError::FrameTooLarge { .. } | ProtoError::Checksum { .. })
    }

    /// The error code a server replies with for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            ProtoError::FrameTooLarge { .. } => ErrorCode::FrameTooLarge,
            ProtoError::Checksum { .. } => ErrorCode::Checksum,
            ProtoError::UnknownKind(_) => ErrorCode::UnknownOp,
            _ => ErrorCode::Malformed,
        }
    }
}

macro_rules! error_codes {
    ($($(#[$doc:meta])* $name:ident = $val:literal,)*) => {
        /// What went wrong, in an error reply. Stable numbers on the wire (`u16`); codes this
        /// version does not know decode as [`ErrorCode::Unknown`] so newer servers stay readable.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $($(#[$doc])* $name,)*
            /// A code this version of the protocol crate does not know.
            Unknown(u16),
        }

        impl ErrorCode {
            /// The wire value.
            pub fn to_u16(self) -> u16 {
                match self {
                    $(ErrorCode::$name => $val,)*
                    ErrorCode::Unknown(v) => v,
                }
            }
            /// From the wire value.
            pub fn from_u16(v: u16) -> ErrorCode {
                match v {
                    $($val => ErrorCode::$name,)*
                    v => ErrorCode::Unknown(v),
                }
            }
        }
    };
}

error_codes! {
    /// The frame or payload could not be parsed.
    Malformed = 1,
    /// The frame exceeds the receiver's maximum frame size.
    FrameTooLarge = 2,
    /// The frame's CRC32C does not match.
    Checksum = 3,
    /// No protocol version in common.
    UnsupportedVersion = 4,
    /// The first frame was not a HELLO, or a HELLO came twice.
    HandshakeRequired = 5,
    /// The opcode is not known to this server.
    UnknownOp = 6,
    /// The key exceeds the store's key size limit.
    KeyTooLarge = 10,
    /// The value exceeds the store's value size limit.
    ValueTooLarge = 11,
    /// The store's device is full; reads still work.
    NoSpace = 12,
    /// The store found corrupt data.
    Corruption = 13,
    /// The store refuses writes (after an earlier failure, or a replica region).
    ReadOnly = 14,
    /// The server or store is shutting down.
    ShuttingDown = 15,
    /// An I/O error in the store.
    Io = 16,
    /// The reply would exceed the client's maximum frame size.
    ResponseTooLarge = 17,
    /// No region covers the key.
    NoRegion = 18,
    /// A batch spans more than one region.
    BatchSpansRegions = 19,
    /// A well-formed request with arguments the server rejects.
    InvalidArgument = 20,
    /// The connection idled past the server's timeout.
    IdleTimeout = 21,
    /// This node does not lead the key's region; the message names the node that does
    /// (`region R is led by NODE at ADDR`).
    NotLeader = 22,
    /// The server has a password and the connection has not given it (AUTH).
    AuthRequired = 23,
    /// AUTH gave the wrong password.
    AuthFailed = 24,
    /// The write's region holds fewer copies than the server's `--min-replicas`; nothing ran.
    NotEnoughReplicas = 25,
    /// The request named a region epoch other than the receiver's; the message gives the
    /// receiver's (`region R is at epoch E, led by NODE`): refresh the region map and retry.
    StaleEpoch = 26,
    /// Cluster mode: the request ran here, but this node could not confirm that the region's
    /// backups hold what it wrote or read (a backup stayed silent past the ack timeout, or this
    /// node's role in the region ended meanwhile). A write may or may not be kept: read it
    /// back, and send again only a write that is safe to run twice. The connection stays open.
    OutcomeUnknown = 27,
    /// Anything else.
    Internal = 99,
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ErrorCode::Unknown(v) => write!(f, "Unknown({v})"),
            other => write!(f, "{other:?}"),
        }
    }
}
