//! Image layers (tar, or gzip-compressed tar) applied in order to the `manifests/` tree, with
//! whiteouts and limits, then the canonical tarball of the result. Up to four layers are read
//! from one input, separated by `LAYER_SEPARATOR`.
//!
//! Besides "no panic": every file name the tree accepts is one plain path component; a tree
//! whose files validate gives a canonical tarball that is the same on every write and that
//! reads back to as many objects as validation counted.
#![no_main]

use gantry_image::layer::LayerTree;
use gantry_image::{EffectiveLimits, read_canonical, validate_files, write_canonical};
use libfuzzer_sys::fuzz_target;

const LAYER_SEPARATOR: &[u8] = b"\n--gantry-fuzz-layer--\n";

/// Small limits, so that a run spends its time on structure, not on large inputs.
fn limits() -> EffectiveLimits {
    EffectiveLimits {
        max_compressed_bytes: 1 << 20,
        max_uncompressed_bytes: 4 << 20,
        max_files: 64,
        max_file_bytes: 256 << 10,
        max_objects: 512,
    }
}

fn layers(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while out.len() < 3 {
        match rest
            .windows(LAYER_SEPARATOR.len())
            .position(|w| w == LAYER_SEPARATOR)
        {
            Some(at) => {
                out.push(&rest[..at]);
                rest = &rest[at + LAYER_SEPARATOR.len()..];
            }
            None => break,
        }
    }
    out.push(rest);
    out
}

fuzz_target!(|data: &[u8]| {
    let limits = limits();
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let mut tree = LayerTree::new(scratch.path().to_path_buf(), limits);
    for (index, layer) in layers(data).into_iter().enumerate() {
        if tree
            .apply_layer(index, &format!("layer{index}"), layer)
            .is_err()
        {
            return;
        }
    }
    let Ok(files) = tree.finish() else { return };
    for name in files.files.keys() {
        let path = std::path::Path::new(name);
        assert!(
            !name.is_empty()
                && !name.contains('/')
                && matches!(
                    path.components().collect::<Vec<_>>()[..],
                    [std::path::Component::Normal(_)]
                ),
            "accepted file name {name:?} is not one plain path component"
        );
    }
    let Ok(validated) = validate_files(&files, &limits) else {
        return;
    };
    let mut first = Vec::new();
    let digest = write_canonical(&files, &mut first).expect("writing the canonical tarball");
    let mut second = Vec::new();
    write_canonical(&files, &mut second).expect("writing it again");
    assert!(
        first == second,
        "the canonical tarball differs between writes"
    );
    let objects = read_canonical(&first[..], Some(&digest.digest), &limits)
        .expect("a validated bundle's canonical tarball reads back");
    assert_eq!(objects.len(), validated.len());
});
