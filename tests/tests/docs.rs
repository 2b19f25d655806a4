//! The developer docs against the code. docs/architecture.md's table of crates names every
//! workspace member and every top-level module of each (a file or folder directly under
//! `src/`), and every module it names exists; docs/development.md's table of the process
//! tier's modules with a control plane of their own lists exactly those that start one. A
//! crate or module added, moved or removed without the page fails here.

use std::collections::BTreeSet;
use std::path::Path;

use gantry_tests::workspace_root;

/// A row of the table under "## Crates": the crate's directory and the backquoted file and
/// folder names of its modules column.
struct Row {
    directory: String,
    modules: Vec<String>,
}

fn backquoted(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

fn rows(page: &str) -> Vec<Row> {
    let section = page
        .split("\n## Crates")
        .nth(1)
        .expect("docs/architecture.md has a \"## Crates\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.split(" | ").collect();
            assert!(cells.len() >= 3, "a row of three cells: {line}");
            let directory = backquoted(cells[0])
                .find(|name| name.ends_with('/'))
                .unwrap_or_else(|| panic!("the crate's directory in backquotes: {line}"))
                .trim_end_matches('/')
                .to_string();
            let modules = backquoted(cells[1])
                .filter(|name| name.ends_with(".rs") || name.ends_with('/'))
                .map(str::to_string)
                .collect();
            Row { directory, modules }
        })
        .collect()
}

fn workspace_members(root: &Path) -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("a members list in Cargo.toml");
    members
        .split(',')
        .map(|member| member.trim().trim_matches('"').to_string())
        .filter(|member| !member.is_empty())
        .collect()
}

/// The files and folders directly under `src/`, but the crate roots.
fn top_level_modules(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .unwrap_or_else(|e| panic!("{}: {e}", src.display()))
        .map(|entry| entry.expect("a directory entry"))
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.path().is_dir() {
                Some(format!("{name}/"))
            } else if name.ends_with(".rs") && name != "lib.rs" && name != "main.rs" {
                Some(name)
            } else {
                None
            }
        })
        .collect()
}

/// Whether `name` (`walk.rs`, `store/`, `ui/pages.rs`) is a file or folder somewhere under `src`.
fn exists_under(src: &Path, name: &str) -> bool {
    let wanted = name.trim_end_matches('/');
    let mut folders = vec![src.to_path_buf()];
    while let Some(folder) = folders.pop() {
        if folder.join(wanted).exists() {
            return true;
        }
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            if entry.path().is_dir() {
                folders.push(entry.path());
            }
        }
    }
    false
}

#[test]
fn the_architecture_page_describes_every_crate_and_top_level_module() {
    let root = workspace_root();
    let page =
        std::fs::read_to_string(root.join("docs/architecture.md")).expect("docs/architecture.md");
    let rows = rows(&page);
    let described: BTreeSet<String> = rows.iter().map(|row| row.directory.clone()).collect();
    assert_eq!(
        described,
        workspace_members(&root),
        "docs/architecture.md's table of crates and the workspace's members differ"
    );
    let mut faults = Vec::new();
    for row in &rows {
        let src = root.join(&row.directory).join("src");
        let named: BTreeSet<&str> = row.modules.iter().map(String::as_str).collect();
        for module in top_level_modules(&src) {
            if !named.contains(module.as_str()) {
                faults.push(format!("{}/src/{module} is not described", row.directory));
            }
        }
        for module in &row.modules {
            if !exists_under(&src, module) {
                faults.push(format!(
                    "`{module}` is named for {} but does not exist",
                    row.directory
                ));
            }
        }
    }
    assert!(
        faults.is_empty(),
        "docs/architecture.md:\n{}",
        faults.join("\n")
    );
}

#[test]
fn the_development_page_lists_the_modules_with_a_control_plane_of_their_own() {
    let root = workspace_root();
    let page =
        std::fs::read_to_string(root.join("docs/development.md")).expect("docs/development.md");
    let table = page
        .split("| module | why its own control plane |")
        .nth(1)
        .expect("docs/development.md has the table of modules with their own control plane");
    let listed: BTreeSet<String> = table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with("| `"))
        .filter_map(|line| backquoted(line).next().map(str::to_string))
        .collect();
    let process = root.join("tests/tests/process");
    let isolated: BTreeSet<String> = std::fs::read_dir(&process)
        .expect("tests/tests/process")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| {
            std::fs::read_to_string(path).is_ok_and(|text| {
                text.contains("Isolated::new(") || text.contains("Isolated::with_gantry(")
            })
        })
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        listed, isolated,
        "docs/development.md's table and the modules with a `static ...: Isolated`"
    );
}
