//! The canonical tarball: `manifests/<file>` entries in name order with normalised headers
//! (mtime 0, uid/gid 0, mode 0644, no user names), gzip-compressed with a fixed header, so
//! that its sha256 depends only on the files' names and contents.

use std::io::{self, BufReader, Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::error::ImageError;
use super::error::LimitKind;
use super::layer::BundleFiles;
use super::limits::{EffectiveLimits, LimitedReader};
use super::objects::{BundleObject, parse_file};
use super::paths::{PathClass, classify};

/// The digest and size of a canonical tarball.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalDigest {
    /// `sha256:<hex>`.
    pub digest: String,
    pub size: u64,
    /// sha256 of the uncompressed tar (an image layer's diff ID).
    pub diff_id: String,
}

impl CanonicalDigest {
    /// The hex part of the digest (the storage server's file name).
    pub fn hex(&self) -> &str {
        self.digest.strip_prefix("sha256:").unwrap_or(&self.digest)
    }
}

/// Hashes and counts what is written through it.
struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    count: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

pub(crate) fn sha256_digest(hasher: Sha256) -> String {
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

/// Writes the canonical tarball of `files` to `out`.
pub fn write_canonical<W: Write>(
    files: &BundleFiles,
    out: W,
) -> Result<CanonicalDigest, ImageError> {
    write_entries(files, out, |_, _| Ok(()))
}

/// Writes the canonical tarball of `files` to `out` and parses the objects from the same
/// bytes, as [`read_canonical`] would from the tarball: each file is read once, and the tarball
/// just written never needs to be read back.
pub fn write_canonical_objects<W: Write>(
    files: &BundleFiles,
    out: W,
    limits: &EffectiveLimits,
) -> Result<(CanonicalDigest, Vec<BundleObject>), ImageError> {
    let mut objects = Vec::new();
    let digest = write_entries(files, out, |name, content| {
        objects.extend(parse_file(name, content, limits)?);
        if objects.len() as u64 > limits.max_objects {
            return Err(limits.exceeded(LimitKind::Objects, format!("manifests/{name}")));
        }
        Ok(())
    })?;
    Ok((digest, objects))
}

/// Writes the canonical tarball of `files` to `out`, handing each file's name and content to
/// `each_file` once it is in the tarball.
fn write_entries<W: Write>(
    files: &BundleFiles,
    out: W,
    mut each_file: impl FnMut(&str, &[u8]) -> Result<(), ImageError>,
) -> Result<CanonicalDigest, ImageError> {
    let outer = HashingWriter {
        inner: out,
        hasher: Sha256::new(),
        count: 0,
    };
    // A fixed gzip header: no name, mtime 0, OS "unknown".
    let gzip = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(outer, flate2::Compression::default());
    let inner = HashingWriter {
        inner: gzip,
        hasher: Sha256::new(),
        count: 0,
    };
    let mut builder = tar::Builder::new(inner);
    builder.mode(tar::HeaderMode::Deterministic);
    for (name, stored) in &files.files {
        let path = format!("manifests/{name}");
        // One more byte than validated is asked for: a file that grew since is caught too.
        let mut content = Vec::with_capacity(stored.size as usize);
        std::fs::File::open(&stored.path)
            .and_then(|file| file.take(stored.size + 1).read_to_end(&mut content))
            .map_err(|e| ImageError::from_io(format!("reading {path}"), e))?;
        // The size in the header is what was validated: a file that changed since is an error.
        if content.len() as u64 != stored.size {
            return Err(ImageError::InvalidEntry {
                path,
                reason: "changed while the tarball was written".into(),
            });
        }
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(stored.size);
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        builder
            .append_data(&mut header, &path, &content[..])
            .map_err(|e| ImageError::from_io(format!("writing {path} to the tarball"), e))?;
        each_file(name, &content)?;
    }
    let inner = builder
        .into_inner()
        .map_err(|e| ImageError::from_io("finishing the tarball", e))?;
    let diff_id = sha256_digest(inner.hasher);
    let mut outer = inner
        .inner
        .finish()
        .map_err(|e| ImageError::from_io("finishing the tarball", e))?;
    outer
        .flush()
        .map_err(|e| ImageError::from_io("finishing the tarball", e))?;
    Ok(CanonicalDigest {
        digest: sha256_digest(outer.hasher),
        size: outer.count,
        diff_id,
    })
}

/// Writes the canonical tarball of `files` to the file `path`.
pub fn write_canonical_file(
    files: &BundleFiles,
    path: &Path,
) -> Result<CanonicalDigest, ImageError> {
    write_to_file(path, |out| write_canonical(files, out))
}

/// Writes the canonical tarball of `files` to the file `path`, and returns its objects too
/// (see [`write_canonical_objects`]).
pub fn write_canonical_file_objects(
    files: &BundleFiles,
    path: &Path,
    limits: &EffectiveLimits,
) -> Result<(CanonicalDigest, Vec<BundleObject>), ImageError> {
    write_to_file(path, |out| write_canonical_objects(files, out, limits))
}

/// Creates `path`, lets `write` fill it through a buffer, and syncs it to disk.
fn write_to_file<T>(
    path: &Path,
    write: impl FnOnce(&mut io::BufWriter<std::fs::File>) -> Result<T, ImageError>,
) -> Result<T, ImageError> {
    let file = std::fs::File::create(path)
        .map_err(|e| ImageError::from_io(format!("creating {}", path.display()), e))?;
    let mut writer = io::BufWriter::with_capacity(64 * 1024, file);
    let written = write(&mut writer)?;
    let file = writer
        .into_inner()
        .map_err(|e| ImageError::from_io(format!("writing {}", path.display()), e.into_error()))?;
    file.sync_all()
        .map_err(|e| ImageError::from_io(format!("writing {}", path.display()), e))?;
    Ok(written)
}

/// Hashes what is read through it.
pub(crate) struct HashingReader<R> {
    pub(crate) inner: R,
    pub(crate) hasher: Sha256,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// Reads a canonical tarball back into its objects, in file-name order and, within a file, in
/// document order. When `expected_digest` is given the tarball must have that sha256; nothing
/// is returned otherwise. The limits apply as for a pull.
pub fn read_canonical<R: Read>(
    tarball: R,
    expected_digest: Option<&str>,
    limits: &EffectiveLimits,
) -> Result<Vec<BundleObject>, ImageError> {
    let hashing = HashingReader {
        inner: LimitedReader::new(
            tarball,
            0,
            limits.max_compressed_bytes,
            LimitKind::CompressedBytes,
            "canonical tarball".into(),
        ),
        hasher: Sha256::new(),
    };
    let decoder =
        flate2::bufread::MultiGzDecoder::new(BufReader::with_capacity(64 * 1024, hashing));
    let limited = LimitedReader::new(
        decoder,
        0,
        limits.max_uncompressed_bytes,
        LimitKind::UncompressedBytes,
        "canonical tarball".into(),
    );
    let mut archive = tar::Archive::new(limited);
    let mut objects = Vec::new();
    let mut previous: Option<String> = None;
    let mut files = 0u64;
    let context = "reading the canonical tarball";
    for entry in archive
        .entries()
        .map_err(|e| ImageError::from_io(context, e))?
    {
        let mut entry = entry.map_err(|e| ImageError::from_io(context, e))?;
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let name = match classify(&raw)? {
            PathClass::File(name) if entry.header().entry_type().is_file() => name,
            _ => {
                return Err(ImageError::InvalidEntry {
                    path: shown,
                    reason: "a canonical tarball holds only regular files in manifests/".into(),
                });
            }
        };
        if previous.as_deref().is_some_and(|p| p >= name.as_str()) {
            return Err(ImageError::InvalidEntry {
                path: shown,
                reason: "entries of a canonical tarball are sorted and unique".into(),
            });
        }
        files += 1;
        if files > limits.max_files {
            return Err(limits.exceeded(LimitKind::Files, shown));
        }
        if entry.size() > limits.max_file_bytes {
            return Err(limits.exceeded(LimitKind::FileBytes, shown));
        }
        let mut content = Vec::with_capacity(entry.size() as usize);
        entry
            .read_to_end(&mut content)
            .map_err(|e| ImageError::from_io(format!("{context}: {shown}"), e))?;
        objects.extend(parse_file(&name, &content, limits)?);
        if objects.len() as u64 > limits.max_objects {
            return Err(limits.exceeded(LimitKind::Objects, shown));
        }
        previous = Some(name);
    }
    let decoder = archive.into_inner().into_inner();
    let mut rest = decoder.into_inner();
    io::copy(&mut rest, &mut io::sink()).map_err(|e| ImageError::from_io(context, e))?;
    let actual = sha256_digest(rest.into_inner().hasher);
    if let Some(expected) = expected_digest
        && expected != actual
    {
        return Err(ImageError::DigestMismatch {
            what: "canonical tarball".into(),
            expected: expected.to_string(),
            actual,
        });
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dir::bundle_dir;
    use crate::layer::BundleFiles;

    const A: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a2}\n";
    const B: &str = "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"b\"}}";

    fn canonical(dir: &Path) -> (Vec<u8>, CanonicalDigest) {
        let files = BundleFiles::from_dir(dir, &EffectiveLimits::default()).unwrap();
        let mut out = Vec::new();
        let digest = write_canonical(&files, &mut out).unwrap();
        (out, digest)
    }

    /// The objects of the canonical tarball `bytes`, checked against `digest`.
    fn read_back(bytes: &[u8], digest: &CanonicalDigest) -> Vec<BundleObject> {
        read_canonical(bytes, Some(&digest.digest), &EffectiveLimits::default()).unwrap()
    }

    #[test]
    fn the_same_content_gives_the_same_digest() {
        let one = bundle_dir(&[("b.json", B), ("a.yaml", A)]);
        let two = bundle_dir(&[("a.yaml", A), ("b.json", B)]);
        // Different mtimes and modes on disk do not matter.
        let path = two.path().join("manifests/a.yaml");
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
        std::fs::set_permissions(&path, perms).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(99))
            .unwrap();
        let (bytes_one, digest_one) = canonical(one.path());
        let (bytes_two, digest_two) = canonical(two.path());
        assert_eq!(digest_one, digest_two);
        assert_eq!(bytes_one, bytes_two);
        let expected = format!("sha256:{}", hex::encode(Sha256::digest(&bytes_one)));
        assert_eq!(digest_one.digest, expected);
        assert_eq!(digest_one.size, bytes_one.len() as u64);
        assert_eq!(digest_one.hex().len(), 64);

        let three = bundle_dir(&[("a.yaml", A), ("b.json", &B.replace("\"b\"", "\"c\""))]);
        assert_ne!(canonical(three.path()).1.digest, digest_one.digest);
    }

    #[test]
    fn entries_are_sorted_and_normalised() {
        let dir = bundle_dir(&[("z.yaml", A), ("b.json", B)]);
        let (bytes, digest) = canonical(dir.path());
        let tar_bytes = {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&bytes[..])
                .read_to_end(&mut out)
                .unwrap();
            out
        };
        assert_eq!(
            digest.diff_id,
            format!("sha256:{}", hex::encode(Sha256::digest(&tar_bytes)))
        );
        let mut archive = tar::Archive::new(&tar_bytes[..]);
        let mut names = Vec::new();
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            let header = entry.header();
            assert_eq!(header.mtime().unwrap(), 0);
            assert_eq!(header.uid().unwrap(), 0);
            assert_eq!(header.gid().unwrap(), 0);
            assert_eq!(header.mode().unwrap(), 0o644);
            assert!(header.entry_type().is_file());
            names.push(entry.path().unwrap().display().to_string());
        }
        assert_eq!(names, vec!["manifests/b.json", "manifests/z.yaml"]);
        // gzip header: no mtime, OS unknown.
        assert_eq!(&bytes[4..8], &[0, 0, 0, 0]);
        assert_eq!(bytes[9], 255);
    }

    #[test]
    fn read_back_gives_objects_in_order() {
        let dir = bundle_dir(&[("b.json", B), ("a.yaml", A)]);
        let (bytes, digest) = canonical(dir.path());
        let objects = read_back(&bytes, &digest);
        let names: Vec<(&str, usize, &str)> = objects
            .iter()
            .map(|o| {
                (
                    o.summary.file.as_str(),
                    o.summary.document,
                    o.summary.name.as_str(),
                )
            })
            .collect();
        assert_eq!(
            names,
            vec![("a.yaml", 0, "a"), ("a.yaml", 1, "a2"), ("b.json", 0, "b")]
        );
    }

    #[test]
    fn long_file_names_round_trip() {
        let long = format!("{}.yaml", "n".repeat(150));
        let dir = bundle_dir(&[(&long, A)]);
        let (bytes, digest) = canonical(dir.path());
        let objects = read_back(&bytes, &digest);
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0].summary.file, long);
        // And the same bytes again.
        assert_eq!(canonical(dir.path()).0, bytes);
    }

    #[test]
    fn read_back_checks_the_digest() {
        let dir = bundle_dir(&[("a.yaml", A)]);
        let (bytes, _) = canonical(dir.path());
        let wrong = format!("sha256:{}", "0".repeat(64));
        match read_canonical(&bytes[..], Some(&wrong), &EffectiveLimits::default()) {
            Err(ImageError::DigestMismatch { expected, .. }) => assert_eq!(expected, wrong),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn read_back_refuses_unsorted_or_foreign_entries() {
        let tar = crate::layer::tests::TarBuilder::default()
            .file("manifests/b.yaml", A)
            .file("manifests/a.yaml", A)
            .gzip();
        assert!(matches!(
            read_canonical(&tar[..], None, &EffectiveLimits::default()),
            Err(ImageError::InvalidEntry { path, .. }) if path == "manifests/a.yaml"
        ));
        let tar = crate::layer::tests::TarBuilder::default()
            .file("etc/passwd", "x")
            .gzip();
        assert!(matches!(
            read_canonical(&tar[..], None, &EffectiveLimits::default()),
            Err(ImageError::InvalidEntry { path, .. }) if path == "etc/passwd"
        ));
    }

    #[test]
    fn writing_yields_the_objects_that_reading_back_gives() {
        let dir = bundle_dir(&[("b.json", B), ("a.yaml", A)]);
        let files = BundleFiles::from_dir(dir.path(), &EffectiveLimits::default()).unwrap();
        let mut bytes = Vec::new();
        let (digest, objects) =
            write_canonical_objects(&files, &mut bytes, &EffectiveLimits::default()).unwrap();
        assert_eq!((bytes.clone(), digest.clone()), canonical(dir.path()));
        let read = read_back(&bytes, &digest);
        let ids = |objects: &[BundleObject]| {
            objects
                .iter()
                .map(|o| (o.summary.clone(), o.object.get().to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&objects), ids(&read));

        let limits = EffectiveLimits {
            max_objects: 2,
            ..EffectiveLimits::default()
        };
        assert!(matches!(
            write_canonical_objects(&files, io::sink(), &limits),
            Err(ImageError::LimitExceeded { .. })
        ));
    }
}
