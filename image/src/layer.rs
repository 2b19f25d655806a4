//! Application of image layers (tar or gzip-compressed tar) to the `manifests/` tree, with
//! OCI whiteouts, while enforcing the limits. File contents go to a scratch directory on
//! disk so that memory use does not grow with the bundle.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use tar::EntryType;

use super::error::ImageError;
use super::error::LimitKind;
use super::limits::{EffectiveLimits, LimitedReader};
use super::paths::{PathClass, classify, has_manifest_extension};

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const IO_BUFFER: usize = 64 * 1024;

/// One file of a bundle, stored on disk.
#[derive(Debug, Clone)]
pub struct StoredFile {
    /// Where the content is.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    layer: usize,
}

impl StoredFile {
    /// A file of `size` bytes at `path`.
    pub fn new(path: PathBuf, size: u64) -> Self {
        StoredFile {
            path,
            size,
            layer: 0,
        }
    }
}

/// The files of a bundle, by file name (sorted), each stored on disk.
#[derive(Debug, Default, Clone)]
pub struct BundleFiles {
    pub files: BTreeMap<String, StoredFile>,
    /// The files directly in `metadata/` (an OLM `registry+v1` bundle's `annotations.yaml`),
    /// in memory: not part of the canonical tarball, read by the provisioner that renders
    /// the bundle.
    pub metadata: BTreeMap<String, Vec<u8>>,
}

impl BundleFiles {
    /// Reads the files of `dir/manifests` (a bundle being authored): only regular files with a
    /// manifest extension, no sub-directories or links, within the limits.
    pub fn from_dir(dir: &Path, limits: &EffectiveLimits) -> Result<BundleFiles, ImageError> {
        let manifests = dir.join(super::paths::MANIFESTS_DIR);
        let meta = match std::fs::symlink_metadata(&manifests) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ImageError::MissingManifests);
            }
            Err(e) => return Err(ImageError::from_io(manifests.display(), e)),
        };
        if !meta.is_dir() {
            return Err(ImageError::InvalidEntry {
                path: manifests.display().to_string(),
                reason: "not a directory".into(),
            });
        }
        let mut files = BTreeMap::new();
        let entries = std::fs::read_dir(&manifests)
            .map_err(|e| ImageError::from_io(manifests.display(), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| ImageError::from_io(manifests.display(), e))?;
            let path = entry.path();
            let shown = format!(
                "{}/{}",
                super::paths::MANIFESTS_DIR,
                entry.file_name().to_string_lossy()
            );
            let invalid = |reason: &str| ImageError::InvalidEntry {
                path: shown.clone(),
                reason: reason.into(),
            };
            let name = entry
                .file_name()
                .into_string()
                .map_err(|_| invalid("file name is not UTF-8"))?;
            match classify(shown.as_bytes())? {
                PathClass::File(_) => {}
                _ => {
                    return Err(invalid(
                        "whiteout files are not allowed in a bundle directory",
                    ));
                }
            }
            let meta = std::fs::symlink_metadata(&path)
                .map_err(|e| ImageError::from_io(path.display(), e))?;
            let kind = meta.file_type();
            if kind.is_dir() {
                return Err(invalid(
                    "sub-directories are not allowed in manifests/ (files must be directly in it)",
                ));
            }
            if kind.is_symlink() {
                return Err(invalid("symbolic links are not allowed"));
            }
            if !kind.is_file() {
                return Err(invalid("not a regular file"));
            }
            if meta.len() > limits.max_file_bytes {
                return Err(limits.exceeded(LimitKind::FileBytes, shown));
            }
            files.insert(
                name,
                StoredFile {
                    path,
                    size: meta.len(),
                    layer: 0,
                },
            );
            if files.len() as u64 > limits.max_files {
                return Err(limits.exceeded(LimitKind::Files, "manifests/"));
            }
        }
        let bundle = BundleFiles {
            files,
            metadata: BTreeMap::new(),
        };
        bundle.check_names()?;
        Ok(bundle)
    }

    /// Every file must be YAML or JSON, and there must be at least one.
    fn check_names(&self) -> Result<(), ImageError> {
        if self.files.is_empty() {
            return Err(ImageError::EmptyManifests);
        }
        for name in self.files.keys() {
            if !has_manifest_extension(name) {
                return Err(ImageError::InvalidEntry {
                    path: format!("manifests/{name}"),
                    reason: "only .yaml, .yml and .json files are allowed".into(),
                });
            }
        }
        Ok(())
    }

    /// Total size of the files.
    pub fn total_bytes(&self) -> u64 {
        self.files.values().map(|f| f.size).sum()
    }
}

/// Why reading a layer's entries stopped early.
enum Stop {
    /// The tar stream itself is malformed (or a limit hit while reading it).
    Tar(io::Error),
    Image(ImageError),
}

impl From<ImageError> for Stop {
    fn from(e: ImageError) -> Self {
        Stop::Image(e)
    }
}

/// The `manifests/` tree being built from the layers of one image.
pub struct LayerTree {
    scratch: PathBuf,
    files: BTreeMap<String, StoredFile>,
    metadata: BTreeMap<String, Vec<u8>>,
    /// The latest layer that created `manifests/` (explicitly or through a file in it).
    dir_layer: Option<usize>,
    next_id: u64,
    uncompressed: u64,
    limits: EffectiveLimits,
    on_file: Option<std::sync::mpsc::Sender<(String, PathBuf, u64)>>,
}

impl LayerTree {
    /// A tree whose files are written below `scratch` (an existing, private directory).
    pub fn new(scratch: PathBuf, limits: EffectiveLimits) -> Self {
        LayerTree {
            scratch,
            files: BTreeMap::new(),
            metadata: BTreeMap::new(),
            dir_layer: None,
            next_id: 0,
            uncompressed: 0,
            limits,
            on_file: None,
        }
    }

    /// Announces every file written (its name and scratch path) on `sender`, so that it can be
    /// validated while later content is still streaming. A file may be replaced or removed
    /// afterwards: what counts is the tree [`LayerTree::finish`] returns.
    pub fn notify_files(&mut self, sender: std::sync::mpsc::Sender<(String, PathBuf, u64)>) {
        self.on_file = Some(sender);
    }

    /// Decompressed bytes read so far, over all layers.
    pub fn uncompressed_bytes(&self) -> u64 {
        self.uncompressed
    }

    /// Applies the layer `index` read from `blob` (gzip or plain tar, detected from its first
    /// bytes), then reads `blob` to its end so that the caller's digest covers all of it.
    pub fn apply_layer<R: Read>(
        &mut self,
        index: usize,
        name: &str,
        blob: R,
    ) -> Result<(), ImageError> {
        let mut input = BufReader::with_capacity(IO_BUFFER, blob);
        let head = input
            .fill_buf()
            .map_err(|e| ImageError::from_io(format!("layer {name}"), e))?;
        let (is_gzip, is_zstd) = (head.starts_with(&GZIP_MAGIC), head.starts_with(&ZSTD_MAGIC));
        let result = if is_gzip {
            let decoder = flate2::bufread::MultiGzDecoder::new(input);
            let (result, decoder) = self.apply_tar(index, name, decoder);
            input = decoder.into_inner();
            result
        } else if is_zstd {
            return Err(ImageError::UnsupportedMediaType {
                what: format!("layer {name}"),
                media_type: "zstd-compressed tar".into(),
            });
        } else {
            let (result, rest) = self.apply_tar(index, name, input);
            input = rest;
            result
        };
        result?;
        io::copy(&mut input, &mut io::sink())
            .map_err(|e| ImageError::from_io(format!("layer {name}"), e))?;
        Ok(())
    }

    fn apply_tar<R: Read>(
        &mut self,
        index: usize,
        name: &str,
        tar_stream: R,
    ) -> (Result<(), ImageError>, R) {
        let limited = LimitedReader::new(
            tar_stream,
            self.uncompressed,
            self.limits.max_uncompressed_bytes,
            LimitKind::UncompressedBytes,
            format!("layer {name}"),
        );
        let start = self.uncompressed;
        let mut archive = tar::Archive::new(limited);
        let mut data_end = None;
        let result = self.apply_entries(index, name, &mut archive, &mut data_end);
        let limited = archive.into_inner();
        self.uncompressed = limited.count;
        let result = match result {
            Ok(()) => Ok(()),
            Err(Stop::Image(e)) => Err(e),
            // Some writers (umoci among them) end the archive right after the last entry's
            // data, without padding or end-of-archive blocks: that is a complete archive.
            Err(Stop::Tar(e))
                if data_end == Some(limited.count - start)
                    && !e.get_ref().is_some_and(|inner| inner.is::<ImageError>()) =>
            {
                Ok(())
            }
            Err(Stop::Tar(e)) => Err(ImageError::from_io(format!("layer {name}: reading tar"), e)),
        };
        (result, limited.into_inner())
    }

    fn apply_entries<R: Read>(
        &mut self,
        index: usize,
        layer: &str,
        archive: &mut tar::Archive<R>,
        data_end: &mut Option<u64>,
    ) -> Result<(), Stop> {
        let context = |what: &str| format!("layer {layer}: {what}");
        let entries = archive.entries().map_err(Stop::Tar)?;
        for entry in entries {
            let mut entry = entry.map_err(Stop::Tar)?;
            *data_end = Some(entry.raw_file_position() + entry.size());
            self.apply_entry(index, &context, &mut entry)?;
        }
        Ok(())
    }

    fn apply_entry<R: Read>(
        &mut self,
        index: usize,
        context: &dyn Fn(&str) -> String,
        entry: &mut tar::Entry<'_, R>,
    ) -> Result<(), ImageError> {
        let raw_path = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw_path).into_owned();
        let kind = entry.header().entry_type();
        match classify(&raw_path)? {
            PathClass::Outside => {}
            PathClass::Metadata(file_name) => {
                // Only regular files; the last layer's wins. Counted against the same limits
                // as a file of manifests/.
                if kind.is_file() || kind == EntryType::Continuous {
                    let size = entry.size();
                    if size > self.limits.max_file_bytes {
                        return Err(self.limits.exceeded(LimitKind::FileBytes, shown));
                    }
                    let mut content = Vec::with_capacity(size as usize);
                    entry
                        .read_to_end(&mut content)
                        .map_err(|e| ImageError::from_io(context(&shown), e))?;
                    self.metadata.insert(file_name, content);
                    if self.metadata.len() as u64 > self.limits.max_files {
                        return Err(self.limits.exceeded(LimitKind::Files, shown));
                    }
                }
            }
            PathClass::ManifestsDir => {
                if !kind.is_dir() {
                    return Err(ImageError::InvalidEntry {
                        path: shown,
                        reason: format!("manifests must be a directory, found {}", describe(kind)),
                    });
                }
                self.dir_layer = Some(index);
            }
            PathClass::RemoveAll => {
                self.files.retain(|_, f| f.layer >= index);
                if self.dir_layer.is_some_and(|l| l < index) {
                    self.dir_layer = None;
                }
                // Files of this layer keep their directory.
                if !self.files.is_empty() {
                    self.dir_layer = Some(index);
                }
            }
            PathClass::Opaque => {
                self.files.retain(|_, f| f.layer >= index);
                self.dir_layer = Some(index);
            }
            PathClass::Whiteout(target) => {
                if self.files.get(&target).is_some_and(|f| f.layer < index)
                    && let Some(old) = self.files.remove(&target)
                {
                    remove_scratch(&old.path);
                }
            }
            PathClass::File(file_name) => {
                if !(kind.is_file() || kind == EntryType::Continuous) {
                    let reason = if kind.is_dir() {
                        "sub-directories are not allowed in manifests/ (files must be directly in it)".to_string()
                    } else {
                        format!("{} entries are not allowed", describe(kind))
                    };
                    return Err(ImageError::InvalidEntry {
                        path: shown,
                        reason,
                    });
                }
                let size = entry.size();
                if size > self.limits.max_file_bytes {
                    return Err(self.limits.exceeded(LimitKind::FileBytes, shown));
                }
                let path = self.scratch.join(format!("f{}", self.next_id));
                self.next_id += 1;
                let written = write_file(&path, entry)
                    .map_err(|e| ImageError::from_io(context(&shown), e))?;
                if written != size {
                    return Err(ImageError::InvalidEntry {
                        path: shown,
                        reason: format!("truncated: {written} of {size} bytes"),
                    });
                }
                if let Some(sender) = &self.on_file {
                    // A receiver that is gone only means nobody validates early.
                    let _ = sender.send((file_name.clone(), path.clone(), size));
                }
                let stored = StoredFile {
                    path,
                    size,
                    layer: index,
                };
                if let Some(old) = self.files.insert(file_name, stored) {
                    remove_scratch(&old.path);
                }
                self.dir_layer = Some(index);
                if self.files.len() as u64 > self.limits.max_files {
                    return Err(self.limits.exceeded(LimitKind::Files, shown));
                }
            }
        }
        Ok(())
    }

    /// The final tree: `manifests/` must exist and hold only YAML or JSON files.
    pub fn finish(self) -> Result<BundleFiles, ImageError> {
        if self.dir_layer.is_none() && self.files.is_empty() {
            return Err(ImageError::MissingManifests);
        }
        let bundle = BundleFiles {
            files: self.files,
            metadata: self.metadata,
        };
        bundle.check_names()?;
        Ok(bundle)
    }
}

fn write_file(path: &Path, content: &mut impl Read) -> io::Result<u64> {
    let mut file = File::create_new(path)?;
    let mut buffer = vec![0u8; IO_BUFFER];
    let mut written = 0u64;
    loop {
        let n = content.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        file.write_all(&buffer[..n])?;
        written += n as u64;
    }
    Ok(written)
}

fn remove_scratch(path: &Path) {
    // The scratch directory is removed as a whole at the end; this only frees space early.
    let _ = std::fs::remove_file(path);
}

fn describe(kind: EntryType) -> &'static str {
    match kind {
        EntryType::Symlink => "symbolic link",
        EntryType::Link => "hard link",
        EntryType::Char => "character device",
        EntryType::Block => "block device",
        EntryType::Fifo => "FIFO",
        EntryType::Directory => "directory",
        EntryType::Regular | EntryType::Continuous => "regular file",
        EntryType::GNUSparse => "sparse file",
        _ => "non-regular",
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Cursor;

    /// Builds tar archives with arbitrary (also malicious) paths and types.
    #[derive(Default)]
    pub(crate) struct TarBuilder {
        data: Vec<u8>,
    }

    impl TarBuilder {
        pub(crate) fn entry(mut self, path: &str, kind: EntryType, content: &[u8]) -> Self {
            let mut header = tar::Header::new_old();
            {
                let old = header.as_old_mut();
                let bytes = path.as_bytes();
                assert!(bytes.len() < 100, "test paths are short");
                old.name[..bytes.len()].copy_from_slice(bytes);
            }
            header.set_entry_type(kind);
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            if matches!(kind, EntryType::Symlink | EntryType::Link) {
                header.set_link_name("target.yaml").unwrap();
            }
            header.set_cksum();
            self.data.extend_from_slice(header.as_bytes());
            self.data.extend_from_slice(content);
            let pad = (512 - content.len() % 512) % 512;
            self.data.extend(std::iter::repeat_n(0u8, pad));
            self
        }

        pub(crate) fn file(self, path: &str, content: &str) -> Self {
            self.entry(path, EntryType::Regular, content.as_bytes())
        }

        pub(crate) fn dir(self, path: &str) -> Self {
            self.entry(path, EntryType::Directory, b"")
        }

        pub(crate) fn build(mut self) -> Vec<u8> {
            self.data.extend(std::iter::repeat_n(0u8, 1024));
            self.data
        }

        pub(crate) fn gzip(self) -> Vec<u8> {
            gzip(&self.build())
        }
    }

    pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    fn tree(limits: EffectiveLimits) -> (tempfile::TempDir, LayerTree) {
        let dir = tempfile::tempdir().unwrap();
        let tree = LayerTree::new(dir.path().to_path_buf(), limits);
        (dir, tree)
    }

    fn contents(bundle: &BundleFiles) -> Vec<(String, String)> {
        bundle
            .files
            .iter()
            .map(|(name, f)| (name.clone(), std::fs::read_to_string(&f.path).unwrap()))
            .collect()
    }

    fn apply_one(layer: Vec<u8>) -> Result<BundleFiles, ImageError> {
        let (_dir, bundle) = apply_one_in(layer)?;
        Ok(bundle)
    }

    fn apply_one_in(layer: Vec<u8>) -> Result<(tempfile::TempDir, BundleFiles), ImageError> {
        let (dir, mut tree) = tree(EffectiveLimits::default());
        tree.apply_layer(0, "l0", Cursor::new(layer))?;
        Ok((dir, tree.finish()?))
    }

    /// Applies `layers` in order (named `l0`, `l1`…), each successfully; what the tree then
    /// makes of them.
    fn layered(layers: [Vec<u8>; 2]) -> (tempfile::TempDir, Result<BundleFiles, ImageError>) {
        let (dir, mut tree) = tree(EffectiveLimits::default());
        for (index, layer) in layers.into_iter().enumerate() {
            tree.apply_layer(index, &format!("l{index}"), Cursor::new(layer))
                .unwrap();
        }
        (dir, tree.finish())
    }

    fn rejected_entry(layer: Vec<u8>) -> (String, String) {
        match apply_one(layer) {
            Err(ImageError::InvalidEntry { path, reason }) => (path, reason),
            other => panic!("expected an invalid entry, got {other:?}"),
        }
    }

    #[test]
    fn plain_and_gzip_layers_are_read() {
        for layer in [
            TarBuilder::default()
                .dir("manifests/")
                .file("manifests/a.yaml", "a")
                .build(),
            TarBuilder::default()
                .dir("manifests/")
                .file("manifests/a.yaml", "a")
                .gzip(),
        ] {
            let (_dir, bundle) = apply_one_in(layer).unwrap();
            assert_eq!(contents(&bundle), vec![("a.yaml".into(), "a".into())]);
        }
    }

    #[test]
    fn files_outside_manifests_are_dropped() {
        let layer = TarBuilder::default()
            .file("etc/passwd", "root")
            .entry("bin/sh", EntryType::Symlink, b"")
            .entry("dev/null", EntryType::Char, b"")
            .file("manifests/a.yaml", "a")
            .file("README.md", "hi")
            .gzip();
        let (_dir, bundle) = apply_one_in(layer).unwrap();
        assert_eq!(contents(&bundle), vec![("a.yaml".into(), "a".into())]);
    }

    #[test]
    fn layers_apply_in_order_with_whiteouts() {
        let l0 = TarBuilder::default()
            .dir("manifests/")
            .file("manifests/a.yaml", "a0")
            .file("manifests/b.yaml", "b0")
            .file("manifests/c.yaml", "c0")
            .gzip();
        let l1 = TarBuilder::default()
            .file("manifests/a.yaml", "a1")
            .file("manifests/.wh.b.yaml", "")
            .file("manifests/d.yaml", "d1")
            // A whiteout never hides a file of its own layer.
            .file("manifests/.wh.d.yaml", "")
            .build();
        let (_dir, bundle) = layered([l0, l1]);
        assert_eq!(
            contents(&bundle.unwrap()),
            vec![
                ("a.yaml".into(), "a1".into()),
                ("c.yaml".into(), "c0".into()),
                ("d.yaml".into(), "d1".into()),
            ]
        );
    }

    #[test]
    fn opaque_whiteout_clears_lower_layers_only() {
        let l0 = TarBuilder::default()
            .file("manifests/a.yaml", "a0")
            .file("manifests/b.yaml", "b0")
            .build();
        // The new file comes before the marker: order inside a layer does not matter.
        let l1 = TarBuilder::default()
            .file("manifests/c.yaml", "c1")
            .file("manifests/.wh..wh..opq", "")
            .build();
        let (_dir, bundle) = layered([l0, l1]);
        assert_eq!(
            contents(&bundle.unwrap()),
            vec![("c.yaml".into(), "c1".into())]
        );
    }

    #[test]
    fn removing_the_directory_leaves_it_missing() {
        let l0 = TarBuilder::default()
            .dir("manifests")
            .file("manifests/a.yaml", "a0")
            .build();
        let l1 = TarBuilder::default().file(".wh.manifests", "").build();
        let (_dir, bundle) = layered([l0, l1]);
        assert!(matches!(bundle, Err(ImageError::MissingManifests)));

        let l0 = TarBuilder::default().file("manifests/a.yaml", "a0").build();
        let l1 = TarBuilder::default()
            .file(".wh.manifests", "")
            .file("manifests/b.yaml", "b1")
            .build();
        let (_dir, bundle) = layered([l0, l1]);
        assert_eq!(
            contents(&bundle.unwrap()),
            vec![("b.yaml".into(), "b1".into())]
        );
    }

    #[test]
    fn missing_and_empty_manifests() {
        let layer = TarBuilder::default().file("etc/x.yaml", "x").build();
        assert!(matches!(
            apply_one(layer),
            Err(ImageError::MissingManifests)
        ));
        let layer = TarBuilder::default().dir("manifests/").build();
        assert!(matches!(apply_one(layer), Err(ImageError::EmptyManifests)));
    }

    #[test]
    fn non_regular_entries_are_rejected_with_their_path() {
        for (kind, what) in [
            (EntryType::Symlink, "symbolic link"),
            (EntryType::Link, "hard link"),
            (EntryType::Char, "character device"),
            (EntryType::Block, "block device"),
            (EntryType::Fifo, "FIFO"),
        ] {
            let layer = TarBuilder::default()
                .entry("manifests/x.yaml", kind, b"")
                .gzip();
            let (path, reason) = rejected_entry(layer);
            assert_eq!(path, "manifests/x.yaml");
            assert!(reason.contains(what), "{reason}");
        }
        let layer = TarBuilder::default()
            .entry("manifests", EntryType::Symlink, b"")
            .build();
        let (path, reason) = rejected_entry(layer);
        assert_eq!(path, "manifests");
        assert!(reason.contains("symbolic link"), "{reason}");
    }

    #[test]
    fn sub_directories_dot_dot_and_absolute_paths_are_rejected() {
        let (path, reason) = rejected_entry(TarBuilder::default().dir("manifests/sub/").build());
        assert_eq!(path, "manifests/sub/");
        assert!(reason.contains("sub-directories"));
        let (path, _) = rejected_entry(
            TarBuilder::default()
                .file("manifests/sub/a.yaml", "a")
                .build(),
        );
        assert_eq!(path, "manifests/sub/a.yaml");
        let (path, reason) = rejected_entry(
            TarBuilder::default()
                .file("manifests/../../etc/x", "a")
                .build(),
        );
        assert_eq!(path, "manifests/../../etc/x");
        assert!(reason.contains(".."));
        let (path, reason) =
            rejected_entry(TarBuilder::default().file("/manifests/a.yaml", "a").build());
        assert_eq!(path, "/manifests/a.yaml");
        assert!(reason.contains("absolute"));
    }

    #[test]
    fn root_directory_entries_are_skipped() {
        // umoci writes "/" first; other tools write "./". Both name the image root.
        let canonical = |layer: Vec<u8>| {
            let (_dir, bundle) = apply_one_in(layer).unwrap();
            let mut out = Vec::new();
            crate::canonical::write_canonical(&bundle, &mut out).unwrap();
            out
        };
        let without = canonical(
            TarBuilder::default()
                .dir("manifests/")
                .file("manifests/a.yaml", "a: 1\n")
                .build(),
        );
        for root in ["/", "./"] {
            let with = canonical(
                TarBuilder::default()
                    .dir(root)
                    .dir("manifests/")
                    .file("manifests/a.yaml", "a: 1\n")
                    .build(),
            );
            assert_eq!(with, without, "a layer with a {root:?} entry");
        }
        let both = canonical(
            TarBuilder::default()
                .dir("/")
                .dir("./")
                .dir("manifests/")
                .file("manifests/a.yaml", "a: 1\n")
                .build(),
        );
        assert_eq!(both, without, "a layer with both root entries");
        // Absolute paths to anything else stay refused, naming the entry.
        let (path, reason) = rejected_entry(
            TarBuilder::default()
                .dir("/")
                .file("/etc/x", "a")
                .file("manifests/a.yaml", "a: 1\n")
                .build(),
        );
        assert_eq!(path, "/etc/x");
        assert_eq!(reason, "absolute path");
        let message = ImageError::InvalidEntry { path, reason }.to_string();
        assert!(
            message.contains("\"/etc/x\"") && message.contains("absolute path"),
            "{message}"
        );
    }

    #[test]
    fn other_file_types_are_rejected() {
        let (path, reason) = rejected_entry(
            TarBuilder::default()
                .file("manifests/a.yaml", "a")
                .file("manifests/notes.txt", "hi")
                .build(),
        );
        assert_eq!(path, "manifests/notes.txt");
        assert!(reason.contains(".yaml"));
    }

    #[test]
    fn archives_ending_right_after_the_last_entry_are_complete() {
        // What umoci writes: no padding after the last file, no end-of-archive blocks.
        let mut layer = TarBuilder::default()
            .dir("manifests/")
            .file("manifests/a.yaml", "0123456789")
            .build();
        layer.truncate(512 + 512 + 10);
        let (_dir, bundle) = apply_one_in(layer.clone()).unwrap();
        assert_eq!(
            contents(&bundle),
            vec![("a.yaml".into(), "0123456789".into())]
        );
        // Cut inside the data: an error, not a shorter file.
        layer.truncate(512 + 512 + 5);
        assert!(apply_one(layer).is_err());
    }

    #[test]
    fn zstd_layers_are_refused() {
        let mut layer = ZSTD_MAGIC.to_vec();
        layer.extend_from_slice(&[0; 64]);
        assert!(matches!(
            apply_one(layer),
            Err(ImageError::UnsupportedMediaType { .. })
        ));
    }

    #[test]
    fn file_count_and_file_size_limits() {
        let limits = EffectiveLimits {
            max_files: 2,
            max_file_bytes: 4,
            ..EffectiveLimits::default()
        };
        let (_dir, mut t) = tree(limits);
        let layer = TarBuilder::default()
            .file("manifests/a.yaml", "a")
            .file("manifests/b.yaml", "b")
            .file("manifests/c.yaml", "c")
            .build();
        match t.apply_layer(0, "l0", Cursor::new(layer)) {
            Err(ImageError::LimitExceeded {
                limit: LimitKind::Files,
                value: 2,
                culprit,
            }) => assert_eq!(culprit, "manifests/c.yaml"),
            other => panic!("{other:?}"),
        }
        let (_dir, mut t) = tree(limits);
        let layer = TarBuilder::default()
            .file("manifests/a.yaml", "12345")
            .build();
        match t.apply_layer(0, "l0", Cursor::new(layer)) {
            Err(ImageError::LimitExceeded {
                limit: LimitKind::FileBytes,
                value: 4,
                culprit,
            }) => assert_eq!(culprit, "manifests/a.yaml"),
            other => panic!("{other:?}"),
        }
    }

    /// Counts the bytes pulled from the inner reader.
    struct Counting<R> {
        inner: R,
        read: std::rc::Rc<std::cell::Cell<u64>>,
    }

    impl<R: Read> Read for Counting<R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.read.set(self.read.get() + n as u64);
            Ok(n)
        }
    }

    /// A tar holding one file of `mib` MiB of zeros, gzip-compressed to about a thousandth of
    /// that: one gzip member with the header, then one identical member per MiB of zeros
    /// (concatenated members form one gzip stream; this builds the bomb without deflating it all).
    pub(crate) fn gzip_bomb(mib: u64) -> Vec<u8> {
        let mut header = tar::Header::new_gnu();
        header.set_path("manifests/bomb.yaml").unwrap();
        header.set_size(mib << 20);
        header.set_mode(0o644);
        header.set_cksum();
        let mut bomb = gzip(header.as_bytes());
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&vec![0u8; 1 << 20]).unwrap();
        let one_mib = encoder.finish().unwrap();
        for _ in 0..mib {
            bomb.extend_from_slice(&one_mib);
        }
        bomb.extend_from_slice(&gzip(&[0u8; 1024]));
        bomb
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_uncompressed_limit() {
        let bomb = gzip_bomb(1024);
        let limits = EffectiveLimits {
            max_uncompressed_bytes: 1 << 20,
            max_file_bytes: 1 << 40,
            ..EffectiveLimits::default()
        };
        let (_dir, mut t) = tree(limits);
        let read = std::rc::Rc::new(std::cell::Cell::new(0));
        let reader = Counting {
            inner: Cursor::new(&bomb),
            read: read.clone(),
        };
        match t.apply_layer(0, "bomb", reader) {
            Err(ImageError::LimitExceeded {
                limit: LimitKind::UncompressedBytes,
                value,
                ..
            }) => assert_eq!(value, 1 << 20),
            other => panic!("{other:?}"),
        }
        // One MiB of output needs about 1 KiB of this input; buffering reads a little more.
        assert!(
            read.get() < bomb.len() as u64 / 4,
            "read {} of {} compressed bytes",
            read.get(),
            bomb.len()
        );
        assert!(t.uncompressed_bytes() <= (1 << 20) + 1);
    }

    #[test]
    fn the_uncompressed_limit_spans_layers() {
        let limits = EffectiveLimits {
            max_uncompressed_bytes: 3000,
            ..EffectiveLimits::default()
        };
        let (_dir, mut t) = tree(limits);
        let layer = || {
            TarBuilder::default()
                .file("manifests/a.yaml", &"x".repeat(1000))
                .gzip()
        };
        t.apply_layer(0, "l0", Cursor::new(layer())).unwrap();
        // Header, content, and the first end-of-archive block.
        assert_eq!(t.uncompressed_bytes(), 512 + 1024 + 512);
        let err = t.apply_layer(1, "l1", Cursor::new(layer())).unwrap_err();
        assert!(matches!(
            err,
            ImageError::LimitExceeded {
                limit: LimitKind::UncompressedBytes,
                ..
            }
        ));
    }

    #[test]
    fn the_blob_is_read_to_its_end() {
        let mut layer = TarBuilder::default().file("manifests/a.yaml", "a").build();
        layer.extend_from_slice(&[0u8; 10_000]);
        let read = std::rc::Rc::new(std::cell::Cell::new(0));
        let len = layer.len() as u64;
        let (_dir, mut t) = tree(EffectiveLimits::default());
        t.apply_layer(
            0,
            "l0",
            Counting {
                inner: Cursor::new(layer),
                read: read.clone(),
            },
        )
        .unwrap();
        assert_eq!(read.get(), len);
    }

    #[test]
    fn bundle_directories_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            BundleFiles::from_dir(dir.path(), &EffectiveLimits::default()),
            Err(ImageError::MissingManifests)
        ));
        let manifests = dir.path().join("manifests");
        std::fs::create_dir(&manifests).unwrap();
        assert!(matches!(
            BundleFiles::from_dir(dir.path(), &EffectiveLimits::default()),
            Err(ImageError::EmptyManifests)
        ));
        std::fs::write(manifests.join("b.yaml"), "b").unwrap();
        std::fs::write(manifests.join("a.json"), "{}").unwrap();
        let bundle = BundleFiles::from_dir(dir.path(), &EffectiveLimits::default()).unwrap();
        assert_eq!(
            bundle.files.keys().collect::<Vec<_>>(),
            vec!["a.json", "b.yaml"]
        );
        std::os::unix::fs::symlink("b.yaml", manifests.join("c.yaml")).unwrap();
        match BundleFiles::from_dir(dir.path(), &EffectiveLimits::default()) {
            Err(ImageError::InvalidEntry { path, reason }) => {
                assert_eq!(path, "manifests/c.yaml");
                assert!(reason.contains("symbolic"));
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(manifests.join("c.yaml")).unwrap();
        std::fs::create_dir(manifests.join("sub")).unwrap();
        match BundleFiles::from_dir(dir.path(), &EffectiveLimits::default()) {
            Err(ImageError::InvalidEntry { path, .. }) => assert_eq!(path, "manifests/sub"),
            other => panic!("{other:?}"),
        }
    }
}
