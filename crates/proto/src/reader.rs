//! A bounds-checked cursor over a payload: `halyard_codec::Reader`, with every read naming the
//! field it wants so that a short payload reports which one is missing.

use crate::ProtoError;

pub(crate) struct Reader<'a>(halyard_codec::Reader<'a>);

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader(halyard_codec::Reader::new(buf))
    }

    pub(crate) fn remaining(&self) -> usize {
        self.0.remaining()
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, ProtoError> {
        self.0.u8().map_err(|_| ProtoError::Truncated(what))
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, ProtoError> {
        self.0.u16().map_err(|_| ProtoError::Truncated(what))
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, ProtoError> {
        self.0.u32().map_err(|_| ProtoError::Truncated(what))
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, ProtoError> {
        self.0.u64().map_err(|_| ProtoError::Truncated(what))
    }

    /// A `u32` length followed by that many bytes.
    pub(crate) fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], ProtoError> {
        self.0.bytes().map_err(|_| ProtoError::Truncated(what))
    }

    /// Everything left.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        self.0.rest()
    }

    pub(crate) fn finish(self) -> Result<(), ProtoError> {
        self.0.finish().map_err(|halyard_codec::Trailing(n)| ProtoError::TrailingBytes(n))
    }
}
