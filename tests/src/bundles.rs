//! Builders the image, plugin and harness tests share: bundle directories on disk, reading a
//! directory back, and running a tool that must succeed.

use std::path::Path;
use std::process::{Command, Output};

/// A bundle directory holding `files` (name, content) under `manifests/`.
pub fn bundle_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).expect("creating manifests/");
    for (name, content) in files {
        std::fs::write(manifests.join(name), content).expect("writing a manifest");
    }
    dir
}

/// The files of `dir` as (name, content), sorted by name.
pub fn read_dir_files(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| {
            let entry = entry.expect("a directory entry");
            (
                entry.file_name().to_string_lossy().into_owned(),
                std::fs::read_to_string(entry.path()).expect("a UTF-8 file"),
            )
        })
        .collect();
    files.sort();
    files
}

/// Runs `command`, failing the test with its stderr unless it succeeds.
pub fn run_ok(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}
