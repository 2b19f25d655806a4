//! Limits on untrusted bundle content, enforced while streaming.

use std::io::{self, Read};

use gantry_api::Limits;

use super::error::{ImageError, LimitKind};

/// How deep a document may nest mappings and sequences, the document itself counting as one:
/// serde_json's limit, which every reader of the objects after validation has (objects are
/// applied from JSON), so that nothing validation accepts is refused later.
pub const MAX_DEPTH: usize = 127;

/// The stack a parse of untrusted input runs on, whatever thread calls it. Measured in an
/// unoptimised build: a YAML mapping nested [`MAX_DEPTH`] deep takes 2.9 MiB (23 KiB a level;
/// deeper input is refused before it takes more), a health rule's CEL expression at its bounds
/// 4.9 MiB; the 2 MiB of a spawned or tokio thread is not enough. 16 MiB leaves more than three
/// times either; only the pages a parse uses are touched.
pub const PARSE_STACK_BYTES: usize = 16 << 20;

/// Runs `parse` with at least [`PARSE_STACK_BYTES`] of stack: in place when the calling thread
/// has that much left, else on a stack allocated for the call.
pub fn on_parse_stack<R>(parse: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(PARSE_STACK_BYTES, PARSE_STACK_BYTES, parse)
}

/// The limits in force for one pull: `spec.limits` with defaults for absent (or non-positive)
/// fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EffectiveLimits {
    /// Sum of the sizes of the image's layer blobs as transferred.
    pub max_compressed_bytes: u64,
    /// Sum of the decompressed tar streams of all layers (headers, padding and entries outside
    /// `manifests/` included): this is what stops a gzip bomb.
    pub max_uncompressed_bytes: u64,
    /// Files under `manifests/` at any point while layers are applied.
    pub max_files: u64,
    /// Size of one file under `manifests/`.
    pub max_file_bytes: u64,
    /// Objects in the bundle after flattening `List`s.
    pub max_objects: u64,
}

impl EffectiveLimits {
    pub const DEFAULT_MAX_COMPRESSED_BYTES: u64 = 256 << 20;
    pub const DEFAULT_MAX_UNCOMPRESSED_BYTES: u64 = 1 << 30;
    pub const DEFAULT_MAX_FILES: u64 = 4096;
    pub const DEFAULT_MAX_FILE_BYTES: u64 = 8 << 20;
    pub const DEFAULT_MAX_OBJECTS: u64 = 10_000;

    /// Applies defaults to the class's limits.
    pub fn from_api(limits: Option<&Limits>) -> Self {
        fn pick(value: Option<i64>, default: u64) -> u64 {
            match value {
                Some(v) if v > 0 => v as u64,
                _ => default,
            }
        }
        let l = limits.copied().unwrap_or_default();
        EffectiveLimits {
            max_compressed_bytes: pick(l.max_compressed_bytes, Self::DEFAULT_MAX_COMPRESSED_BYTES),
            max_uncompressed_bytes: pick(
                l.max_uncompressed_bytes,
                Self::DEFAULT_MAX_UNCOMPRESSED_BYTES,
            ),
            max_files: pick(l.max_files, Self::DEFAULT_MAX_FILES),
            max_file_bytes: pick(l.max_file_bytes, Self::DEFAULT_MAX_FILE_BYTES),
            max_objects: pick(l.max_objects, Self::DEFAULT_MAX_OBJECTS),
        }
    }

    pub fn value(&self, kind: LimitKind) -> u64 {
        match kind {
            LimitKind::CompressedBytes => self.max_compressed_bytes,
            LimitKind::UncompressedBytes => self.max_uncompressed_bytes,
            LimitKind::Files => self.max_files,
            LimitKind::FileBytes => self.max_file_bytes,
            LimitKind::Objects => self.max_objects,
        }
    }

    pub(crate) fn exceeded(&self, kind: LimitKind, culprit: impl Into<String>) -> ImageError {
        ImageError::LimitExceeded {
            limit: kind,
            value: self.value(kind),
            culprit: culprit.into(),
        }
    }
}

impl Default for EffectiveLimits {
    fn default() -> Self {
        Self::from_api(None)
    }
}

/// A reader that fails with [`ImageError::LimitExceeded`] as soon as more than `max` bytes
/// went through it. The count is shared across readers (all layers of one image) by
/// passing the running total in and out.
pub(crate) struct LimitedReader<R> {
    inner: R,
    pub(crate) count: u64,
    max: u64,
    kind: LimitKind,
    culprit: String,
}

impl<R: Read> LimitedReader<R> {
    pub(crate) fn new(inner: R, start: u64, max: u64, kind: LimitKind, culprit: String) -> Self {
        LimitedReader {
            inner,
            count: start,
            max,
            kind,
            culprit,
        }
    }

    pub(crate) fn into_inner(self) -> R {
        self.inner
    }
}

impl<R: Read> Read for LimitedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Never ask for more than one byte past the limit: a decompressor cannot then produce
        // much more than the limit however large its output would be.
        let allowed = self.max.saturating_sub(self.count).saturating_add(1);
        let want = buf
            .len()
            .min(usize::try_from(allowed).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.count += n as u64;
        if self.count > self.max {
            return Err(ImageError::LimitExceeded {
                limit: self.kind,
                value: self.max,
                culprit: self.culprit.clone(),
            }
            .into_io());
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_apply_to_absent_and_non_positive_fields() {
        let limits = Limits {
            max_compressed_bytes: Some(10),
            max_uncompressed_bytes: Some(0),
            max_files: Some(-3),
            max_file_bytes: None,
            max_objects: Some(7),
        };
        let effective = EffectiveLimits::from_api(Some(&limits));
        assert_eq!(effective.max_compressed_bytes, 10);
        assert_eq!(
            effective.max_uncompressed_bytes,
            EffectiveLimits::DEFAULT_MAX_UNCOMPRESSED_BYTES
        );
        assert_eq!(effective.max_files, EffectiveLimits::DEFAULT_MAX_FILES);
        assert_eq!(
            effective.max_file_bytes,
            EffectiveLimits::DEFAULT_MAX_FILE_BYTES
        );
        assert_eq!(effective.max_objects, 7);
        assert_eq!(EffectiveLimits::default(), EffectiveLimits::from_api(None));
    }

    #[test]
    fn limited_reader_stops_one_byte_past_the_limit() {
        let data = vec![7u8; 10_000];
        let mut reader = LimitedReader::new(
            &data[..],
            0,
            100,
            LimitKind::UncompressedBytes,
            "layer".into(),
        );
        let mut out = Vec::new();
        let err = reader.read_to_end(&mut out).unwrap_err();
        assert!(out.len() <= 100);
        assert_eq!(reader.count, 101);
        match ImageError::from_io("reading", err) {
            ImageError::LimitExceeded { limit, value, .. } => {
                assert_eq!(limit, LimitKind::UncompressedBytes);
                assert_eq!(value, 100);
            }
            other => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn limited_reader_counts_from_a_running_total() {
        let data = [1u8; 50];
        let mut reader =
            LimitedReader::new(&data[..], 60, 200, LimitKind::CompressedBytes, "x".into());
        let mut out = Vec::new();
        reader.read_to_end(&mut out).unwrap();
        assert_eq!(reader.count, 110);
        let mut reader =
            LimitedReader::new(&data[..], 60, 80, LimitKind::CompressedBytes, "x".into());
        assert!(reader.read_to_end(&mut Vec::new()).is_err());
    }
}
