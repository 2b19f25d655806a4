//! Property tests: the canonical tarball depends only on the files (not on the order, the
//! headers or the compression of the layers that carried them, nor on how a bundle directory
//! was written), and every entry path the layer reader accepts as a file stays one plain name
//! inside `manifests/`.

use std::collections::BTreeMap;
use std::path::{Component, Path};
use std::time::{Duration, SystemTime};

use gantry_image::layer::LayerTree;
use gantry_image::paths::{PathClass, classify};
use gantry_image::{BundleFiles, EffectiveLimits, ImageError, write_canonical};
use proptest::prelude::*;

/// How one entry is written into a layer: header fields the canonical tarball must not keep.
#[derive(Debug, Clone)]
struct Noise {
    mode: u32,
    mtime: u64,
    uid: u64,
    gid: u64,
    dot_slash: bool,
}

fn noise() -> impl Strategy<Value = Noise> {
    (
        0o400u32..0o1000,
        any::<u32>(),
        0u64..70_000,
        0u64..70_000,
        any::<bool>(),
    )
        .prop_map(|(mode, mtime, uid, gid, dot_slash)| Noise {
            mode,
            mtime: u64::from(mtime),
            uid,
            gid,
            dot_slash,
        })
}

fn files() -> impl Strategy<Value = BTreeMap<String, Vec<u8>>> {
    prop::collection::btree_map(
        "[a-z0-9][a-z0-9._-]{0,12}\\.(yaml|yml|json)",
        prop::collection::vec(any::<u8>(), 0..2048),
        1..12,
    )
}

/// A layer holding `files` in the order of `order`, each with its own header noise.
fn layer(
    files: &BTreeMap<String, Vec<u8>>,
    order: &[usize],
    noise: &[Noise],
    gzip: bool,
) -> Vec<u8> {
    let entries: Vec<(&String, &Vec<u8>)> = files.iter().collect();
    let mut builder = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_path("manifests/").unwrap();
    dir.set_mode(0o755);
    dir.set_size(0);
    dir.set_cksum();
    builder.append(&dir, &[][..]).unwrap();
    for (position, &index) in order.iter().enumerate() {
        let (name, content) = entries[index];
        let n = &noise[position % noise.len()];
        let mut header = tar::Header::new_gnu();
        let path = if n.dot_slash {
            format!("./manifests/{name}")
        } else {
            format!("manifests/{name}")
        };
        header.set_path(&path).unwrap();
        header.set_size(content.len() as u64);
        header.set_mode(n.mode);
        header.set_mtime(n.mtime);
        header.set_uid(n.uid);
        header.set_gid(n.gid);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        builder.append(&header, &content[..]).unwrap();
    }
    let tar = builder.into_inner().unwrap();
    if !gzip {
        return tar;
    }
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut encoder, &tar).unwrap();
    encoder.finish().unwrap()
}

fn canonical_of_layer(layer: &[u8]) -> Vec<u8> {
    let scratch = tempfile::tempdir().unwrap();
    let mut tree = LayerTree::new(scratch.path().to_path_buf(), EffectiveLimits::default());
    tree.apply_layer(0, "layer", layer).unwrap();
    let files = tree.finish().unwrap();
    let mut out = Vec::new();
    write_canonical(&files, &mut out).unwrap();
    out
}

/// A bundle directory written file by file in `order`, each file with its own mtime.
fn canonical_of_dir(
    files: &BTreeMap<String, Vec<u8>>,
    order: &[usize],
    noise: &[Noise],
) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    let entries: Vec<(&String, &Vec<u8>)> = files.iter().collect();
    for (position, &index) in order.iter().enumerate() {
        let (name, content) = entries[index];
        let path = manifests.join(name);
        std::fs::write(&path, content).unwrap();
        let mtime =
            SystemTime::UNIX_EPOCH + Duration::from_secs(noise[position % noise.len()].mtime);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
    }
    let bundle = BundleFiles::from_dir(dir.path(), &EffectiveLimits::default()).unwrap();
    let mut out = Vec::new();
    write_canonical(&bundle, &mut out).unwrap();
    out
}

fn orders(len: usize) -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    let identity: Vec<usize> = (0..len).collect();
    (
        Just(identity.clone()).prop_shuffle(),
        Just(identity).prop_shuffle(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_canonical_tarball_depends_only_on_the_files(
        (files, (first, second)) in files().prop_flat_map(|f| {
            let len = f.len();
            (Just(f), orders(len))
        }),
        noise_a in prop::collection::vec(noise(), 1..6),
        noise_b in prop::collection::vec(noise(), 1..6),
        gzip_a in any::<bool>(),
        gzip_b in any::<bool>(),
    ) {
        let a = canonical_of_layer(&layer(&files, &first, &noise_a, gzip_a));
        let b = canonical_of_layer(&layer(&files, &second, &noise_b, gzip_b));
        prop_assert!(a == b, "same files, another order or header: another tarball");
        let from_dir = canonical_of_dir(&files, &second, &noise_a);
        prop_assert!(a == from_dir, "a bundle directory gives another tarball than a layer");
    }

    #[test]
    fn different_files_give_different_tarballs(
        files in files(),
        extra in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let order: Vec<usize> = (0..files.len()).collect();
        let noise = [Noise { mode: 0o644, mtime: 0, uid: 0, gid: 0, dot_slash: false }];
        let a = canonical_of_layer(&layer(&files, &order, &noise, false));
        let mut changed = files.clone();
        let first = changed.keys().next().unwrap().clone();
        let content = changed.get_mut(&first).unwrap();
        content.push(b'#');
        content.extend_from_slice(&extra);
        let b = canonical_of_layer(&layer(&changed, &order, &noise, false));
        prop_assert!(a != b);
    }
}

/// Entry paths built from the components that matter (and some that should not).
fn entry_path() -> impl Strategy<Value = Vec<u8>> {
    let component = prop::sample::select(vec![
        "manifests",
        "..",
        ".",
        "",
        "a.yaml",
        "b.json",
        ".wh.a.yaml",
        ".wh..wh..opq",
        ".wh.manifests",
        ".wh..",
        ".wh.",
        "...",
        "etc",
        "a\nb.yaml",
        "a\\b.yaml",
        "x",
        "manifests\u{0}",
        "\u{202e}c.yaml",
    ]);
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..48),
        (any::<bool>(), prop::collection::vec(component, 0..5)).prop_map(|(absolute, parts)| {
            let mut path = if absolute {
                "/".to_string()
            } else {
                String::new()
            };
            path.push_str(&parts.join("/"));
            path.into_bytes()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn accepted_entry_paths_stay_inside_manifests(raw in entry_path()) {
        match classify(&raw) {
            Ok(PathClass::File(name)) | Ok(PathClass::Whiteout(name)) => {
                prop_assert!(!name.is_empty());
                prop_assert!(!name.contains('/') && !name.contains('\\'), "{name:?}");
                prop_assert!(!name.chars().any(char::is_control), "{name:?}");
                // Where a file of this name would go: one plain component below manifests/.
                let path = Path::new("root").join("manifests").join(&name);
                let components: Vec<Component<'_>> = path.components().collect();
                prop_assert_eq!(components.len(), 3, "{:?} leaves manifests/", name);
                prop_assert!(matches!(components[2], Component::Normal(_)), "{name:?}");
                // The name is the path's last real component: nothing was re-interpreted.
                let last = raw
                    .split(|b| *b == b'/')
                    .rfind(|c| !c.is_empty() && *c != b".")
                    .unwrap();
                let shown = String::from_utf8_lossy(last);
                prop_assert!(shown.ends_with(name.as_str()), "{shown:?} gave {name:?}");
                let parts: Vec<&[u8]> = raw
                    .split(|b| *b == b'/')
                    .filter(|c| !c.is_empty() && *c != b".")
                    .collect();
                prop_assert_eq!(parts.len(), 2);
                prop_assert_eq!(parts[0], &b"manifests"[..]);
            }
            Ok(_) => {}
            Err(ImageError::InvalidEntry { path, reason }) => {
                prop_assert_eq!(path, String::from_utf8_lossy(&raw).into_owned());
                prop_assert!(!reason.is_empty());
            }
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
        // No accepted path has a ".." component anywhere.
        if raw.split(|b| *b == b'/').any(|c| c == b"..") {
            prop_assert!(classify(&raw).is_err(), "{:?}", String::from_utf8_lossy(&raw));
        }
    }
}
