//! The in-memory tail of a log: the current segment's image, appended to under the region's
//! write lock and written to the device chunk by chunk with direct I/O (through the region's
//! [`LogWriter`], after the lock is released, for the tails of user writes).

#![expect(clippy::indexing_slicing, reason = "the tail image is a whole segment; appends check the room first")]

use crate::catalog::LogKind;
use crate::device::aligned::{align_down, align_up, AlignedBuf, ALIGN};
use crate::device::Device;
use crate::error::Result;
use crate::format::record;
use crate::log::writer::LogWriter;
use std::sync::Arc;

/// A log segment being appended to.
pub(crate) struct LogTail {
    pub kind: LogKind,
    /// (segment, salt) or None before the first append.
    pub seg: Option<(u32, u32)>,
    buf: AlignedBuf,
    pos: usize,
    /// Bytes of `buf` that the device holds.
    written: usize,
    chunk: usize,
    /// Highest LSN appended to this tail.
    pub last_lsn: u64,
    /// Bytes of the current segment already handed to the ship listener.
    shipped: usize,
    /// Where completed chunks go when they are not written in place.
    writer: Option<Arc<LogWriter>>,
}

impl LogTail {
    pub(crate) fn new(kind: LogKind, seg_bytes: usize, chunk: usize) -> LogTail {
        LogTail {
            kind,
            seg: None,
            buf: AlignedBuf::new(seg_bytes),
            pos: 0,
            written: 0,
            chunk,
            last_lsn: 0,
            shipped: 0,
            writer: None,
        }
    }

    /// A tail whose completed chunks are queued on `writer` instead of written in place: the
    /// caller drains it (see [`LogWriter::drain`]) once it no longer holds the write lock.
    pub(crate) fn deferred(kind: LogKind, seg_bytes: usize, chunk: usize, writer: Arc<LogWriter>) -> LogTail {
        LogTail { writer: Some(writer), ..LogTail::new(kind, seg_bytes, chunk) }
    }

    /// Writes `[from, to)` of the image, or queues it.
    fn put(&self, dev: &Device, seg: u32, from: usize, to: usize) -> Result<()> {
        let off = dev.seg_base(seg) + from as u64;
        match &self.writer {
            Some(w) => {
                w.push(off, &self.buf[from..to], self.kind.io());
                Ok(())
            }
            None => dev.write(off, &self.buf[from..to], self.kind.io()),
        }
    }

    /// Bytes still free in the current segment (0 without one).
    pub(crate) fn remaining(&self) -> usize {
        if self.seg.is_some() {
            self.buf.len() - self.pos
        } else {
            0
        }
    }

    /// Appends a record; the caller made sure it fits. Returns its device offset and length.
    pub(crate) fn append(
        &mut self,
        dev: &Device,
        body: record::Body<'_>,
        lsn: u64,
        batch_remaining: u32,
    ) -> Result<(u64, u32)> {
        #[expect(clippy::expect_used, reason = "every caller opens a segment before appending")]
        let (seg, salt) = self.seg.expect("append without a segment");
        let len = body.encoded_len();
        let at = self.pos;
        record::encode(&mut self.buf[at..at + len], body, salt, lsn, batch_remaining);
        self.pos += len;
        self.last_lsn = lsn;
        // Write whole chunks as soon as they are complete.
        let full = align_down(self.pos, self.chunk);
        if full > self.written {
            self.put(dev, seg, align_down(self.written, ALIGN), full)?;
            self.written = full;
        }
        Ok((dev.seg_base(seg) + at as u64, len as u32))
    }

    /// Writes the unwritten part of the tail (rounded out to whole blocks), and every chunk
    /// still queued: when it returns, the device holds all that was appended. Does not sync.
    pub(crate) fn write_out(&mut self, dev: &Device) -> Result<()> {
        self.queue_out(dev)?;
        match &self.writer {
            Some(w) => w.drain(dev),
            None => Ok(()),
        }
    }

    /// Like [`LogTail::write_out`], but a deferred tail only queues the unwritten part (the
    /// caller drains after releasing the write lock).
    pub(crate) fn queue_out(&mut self, dev: &Device) -> Result<()> {
        let Some((seg, _)) = self.seg else {
            return Ok(());
        };
        if self.pos == self.written {
            return Ok(());
        }
        let from = align_down(self.written, ALIGN);
        let to = align_up(self.pos, ALIGN).min(self.buf.len());
        self.put(dev, seg, from, to)?;
        self.written = self.pos;
        Ok(())
    }

    /// Writes out the old segment and continues in `seg`.
    pub(crate) fn switch(&mut self, dev: &Device, seg: u32, salt: u32) -> Result<()> {
        self.write_out(dev)?;
        self.buf.fill(0);
        self.pos = 0;
        self.written = 0;
        self.shipped = 0;
        self.seg = Some((seg, salt));
        Ok(())
    }

    /// Continues in `seg` after a restart: `image` (a whole segment) holds the records the
    /// segment keeps and zeros after them, as the device does; the next append goes at `pos`.
    pub(crate) fn resume(&mut self, seg: u32, salt: u32, image: AlignedBuf, pos: usize, last_lsn: u64) {
        debug_assert_eq!(image.len(), self.buf.len());
        self.buf = image;
        self.pos = pos;
        self.written = pos;
        // A backup that catches up is sent the segment from its start (`Replication::with_snapshot`).
        self.shipped = pos;
        self.seg = Some((seg, salt));
        self.last_lsn = last_lsn;
    }

    /// Stops appending to the current segment; the next append needs a new one.
    pub(crate) fn close(&mut self) {
        self.seg = None;
        self.pos = 0;
        self.written = 0;
        self.shipped = 0;
    }

    /// Hands what was appended since the last call to `l`; with `seal`, also tells it the
    /// segment is done (before a switch or close).
    pub(crate) fn ship(&mut self, l: &dyn crate::log::listener::ShipListener, region: u32, seal: bool) {
        let Some((seg, salt)) = self.seg else {
            return;
        };
        if self.pos > self.shipped {
            let bytes = &self.buf[self.shipped..self.pos];
            l.log_append(region, self.kind, seg, salt, self.shipped as u32, bytes, self.last_lsn);
            self.shipped = self.pos;
        }
        if seal {
            l.log_sealed(region, self.kind, seg, salt);
        }
    }

    /// Device offset of the next append position.
    pub(crate) fn position(&self, dev: &Device) -> Option<u64> {
        self.seg.map(|(s, _)| dev.seg_base(s) + self.pos as u64)
    }

    /// The bytes appended so far to the current segment (for reads of recent large values).
    pub(crate) fn image(&self) -> &[u8] {
        &self.buf[..self.pos]
    }
}
