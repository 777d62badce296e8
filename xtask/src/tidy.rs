//! The repository's conventions, as tests (`cargo test -p xtask`, run by `cargo xtask test`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::doc_examples::documentation_files;
use crate::postgres::PgMajor;
use crate::{image, package, project_root};

fn read(path: impl AsRef<Path>) -> String {
    let path = project_root().join(path);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every file below `dir` (relative to the root) whose name ends with `suffix`.
fn files_below(dir: &str, suffix: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, suffix: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if path.is_dir() {
                if name != "target" && name != ".git" && name != "node_modules" {
                    walk(&path, suffix, out);
                }
            } else if name.ends_with(suffix) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&project_root().join(dir), suffix, &mut out);
    out.sort();
    out
}

/// The SQL names of the extension's functions: the `name = "…"` of each `#[pg_extern…]`
/// or `#[pg_trigger]`, or else the name of the `fn` after it.
fn sql_functions() -> Vec<String> {
    let mut names = Vec::new();
    for file in files_below("extension/pg_automerge/src", ".rs") {
        let text = fs::read_to_string(&file).unwrap();
        let mut after_attribute = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with("#[pg_extern") || line.starts_with("#[pg_trigger") {
                match line.split_once("name = \"") {
                    Some((_, rest)) => names.push(rest.split('"').next().unwrap().to_string()),
                    None => after_attribute = true,
                }
            } else if after_attribute {
                if let Some(rest) =
                    line.strip_prefix("fn ").or_else(|| line.strip_prefix("pub fn "))
                {
                    names.push(rest.split(['(', '<']).next().unwrap().to_string());
                    after_attribute = false;
                }
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

#[test]
fn every_sql_function_is_documented() {
    let functions = sql_functions();
    assert!(functions.len() >= 5, "found too few functions: {functions:?}");
    let reference = read("docs/sql-reference.md");
    let undocumented: Vec<&String> =
        functions.iter().filter(|f| !reference.contains(&format!("`{f}"))).collect();
    assert!(undocumented.is_empty(), "not in docs/sql-reference.md: {undocumented:?}");
}

/// The architecture page's table of SQL functions is the code's: every SQL function is a
/// row, the adapter file it names defines it, and each core function it names (as
/// `module::function` or `module::Type::method`) is a `fn` of that core module.
#[test]
fn every_sql_function_is_in_the_architecture_table() {
    let table = architecture_section("Every SQL function");
    let mut rows = BTreeMap::new();
    for line in table.lines().filter(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, function, file, core, ..] = cells[..] else { panic!("a short row: {line}") };
        rows.insert(function.trim_matches('`').to_string(), (file.trim_matches('`'), core));
    }
    let functions = sql_functions();
    let missing: Vec<&String> = functions.iter().filter(|f| !rows.contains_key(*f)).collect();
    assert!(
        missing.is_empty(),
        "SQL functions missing from docs/architecture.md's table: {missing:?}"
    );
    for (function, (file, core)) in &rows {
        assert!(
            functions.contains(function),
            "docs/architecture.md names no SQL function {function}"
        );
        let adapter = read(format!("extension/pg_automerge/src/{file}"));
        assert!(
            adapter.contains(&format!("name = \"{function}\"")) || defines_fn(&adapter, function),
            "docs/architecture.md: {file} does not define {function}"
        );
        for path in core.split('`').skip(1).step_by(2).filter(|path| path.contains("::")) {
            let (module, name) =
                (path.split("::").next().unwrap(), path.rsplit("::").next().unwrap());
            let sources = [format!("{module}.rs"), format!("{module}/mod.rs")]
                .into_iter()
                .map(|file| project_root().join("extension/core/src").join(file))
                .find(|file| file.exists())
                .unwrap_or_else(|| {
                    panic!("docs/architecture.md: the core has no module {module} ({function})")
                });
            let text = fs::read_to_string(sources).unwrap();
            assert!(
                defines_fn(&text, name),
                "docs/architecture.md: the core's {module} has no fn {name} ({function})"
            );
        }
    }
}

/// The text of the architecture page's section `heading`, up to the next.
fn architecture_section(heading: &str) -> String {
    let architecture = read("docs/architecture.md");
    let section = architecture
        .split(&format!("## {heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("docs/architecture.md has no section \"{heading}\""));
    section.split("\n## ").next().unwrap_or(section).to_string()
}

/// Whether the Rust source `text` defines a function `name` (generic or not).
fn defines_fn(text: &str, name: &str) -> bool {
    text.contains(&format!("fn {name}(")) || text.contains(&format!("fn {name}<"))
}

#[test]
fn readme_shows_the_two_commands_and_links_every_page() {
    let readme = read("README.md");
    for command in ["cargo xtask run", "cargo xtask test"] {
        assert!(readme.contains(command), "README.md does not show `{command}`");
    }
    for page in documentation_files().unwrap().iter().skip(1) {
        let link = page.strip_prefix(project_root()).unwrap().display().to_string();
        assert!(readme.contains(&format!("({link})")), "README.md does not link {link}");
    }
}

#[test]
fn ci_calls_xtask_for_every_major() {
    let ci = read(".ci/run");
    assert!(ci.contains("cargo xtask test"), ".ci/run must run the README's test command");
    let logic_lines =
        ci.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).count();
    assert!(logic_lines <= 25, ".ci/run has {logic_lines} lines: move logic into xtask");

    let workflow = read(".github/workflows/ci.yml");
    assert!(workflow.contains("cargo xtask test --pg ${{ matrix.pg }}"));
    for major in PgMajor::ALL {
        assert!(
            workflow.contains(&format!("- \"{}\"", major.number())),
            "ci.yml's matrix lacks {major}"
        );
    }
}

/// The release workflow cannot run here: this holds it to what xtask makes, so that a new
/// major or a renamed package cannot leave the release behind.
#[test]
fn the_release_workflow_ships_every_major_and_package_xtask_makes() {
    let workflow = read(".github/workflows/release.yml");
    assert!(workflow.contains("cargo xtask package --out dist"));
    let attached: Vec<&str> =
        workflow.lines().map(str::trim).filter(|l| l.starts_with("dist/")).collect();
    let mut expected: Vec<String> = PgMajor::ALL
        .iter()
        .map(|&major| format!("dist/{}_*.deb", package::extension_package(major)))
        .collect();
    expected.push(format!("dist/{}_*.deb", package::SYNC_SERVER_PACKAGE));
    assert_eq!(attached, expected, "release.yml attaches exactly the packages xtask makes");
    let matrix: Vec<String> = workflow
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("- \"") && l.ends_with('"'))
        .map(|l| l.trim_start_matches("- ").trim_matches('"').to_string())
        .filter(|entry| entry.chars().all(|c| c.is_ascii_digit()))
        .collect();
    let majors: Vec<String> = PgMajor::ALL.iter().map(|m| m.number().to_string()).collect();
    assert_eq!(matrix, majors, "the images' matrix is xtask's majors");
    for major in PgMajor::ALL {
        let tag = image::tag(major, false);
        assert_eq!(
            tag.replace(&major.number().to_string(), "${{ matrix.pg }}"),
            "pg_automerge:pg${{ matrix.pg }}"
        );
    }
    assert!(workflow.contains("cargo xtask image --pg ${{ matrix.pg }}"));
    assert!(workflow.contains("docker tag \"pg_automerge:pg${{ matrix.pg }}\""));
}

#[test]
fn no_shell_scripts_grow_beside_xtask() {
    let scripts: Vec<PathBuf> = files_below(".", ".sh");
    assert!(scripts.is_empty(), "write these as xtask verbs instead: {scripts:?}");
}

#[test]
fn every_crate_inherits_the_workspace_package_settings() {
    for manifest in files_below(".", "Cargo.toml") {
        let text = fs::read_to_string(&manifest).unwrap();
        if !text.contains("[package]") {
            continue;
        }
        for key in ["version", "edition", "license", "publish", "rust-version"] {
            assert!(
                text.contains(&format!("{key}.workspace = true")),
                "{} does not take {key} from the workspace",
                manifest.display()
            );
        }
    }
}

#[test]
fn core_crate_stays_free_of_postgres() {
    let manifest = read("extension/core/Cargo.toml");
    assert!(!manifest.contains("pgrx"), "the core crate must not depend on pgrx");
}

#[test]
fn every_release_has_its_frozen_script_and_an_upgrade_path_to_the_current_version() {
    use sha2::{Digest, Sha256};

    use cluster_tests::versions::{self, numeric, RELEASES};
    let current = versions::current().unwrap();
    let released = versions::released();
    let upgrades = versions::upgrades().unwrap();
    assert!(!released.is_empty(), "versions::RELEASES names no release");
    assert!(
        released.windows(2).all(|pair| numeric(&pair[0]) < numeric(&pair[1])),
        "versions::RELEASES is not oldest first: {released:?}"
    );
    for (version, digest) in RELEASES {
        let script = versions::install_script(version).unwrap();
        assert_eq!(
            hex::encode(Sha256::digest(script.as_bytes())),
            *digest,
            "{} changed after its release: change the SQL in a new version instead",
            versions::install_script_name(version)
        );
        assert!(
            numeric(version) <= numeric(&current),
            "released {version} is newer than the workspace's {current}"
        );
        assert!(
            versions::upgrade_path(version, &current, &upgrades).is_some(),
            "no chain of upgrade scripts from {version} to {current}: add {}",
            versions::upgrade_script_name(version, &current)
        );
    }
    for script in versions::scripts().unwrap() {
        match script.as_slice() {
            [version] => assert!(
                released.contains(version),
                "{} is not in versions::RELEASES",
                versions::install_script_name(version)
            ),
            [from, to] => {
                let name = versions::upgrade_script_name(from, to);
                assert!(numeric(from) < numeric(to), "{name} goes backwards");
                assert!(released.contains(from), "{name} upgrades from {from}, which is not a release");
                assert!(
                    released.contains(to) || *to == current,
                    "{name} upgrades to {to}, which is neither a release nor the current version"
                );
            }
            other => panic!("sql/ holds a script for versions {other:?}: name it pg_automerge--<version>.sql or pg_automerge--<from>--<to>.sql"),
        }
    }
}

#[test]
fn every_published_report_says_what_produced_it() {
    // Reports are generated, never written by hand: each names the xtask command, the
    // machine, the date and the toolchain that produced it.
    let is_date = |word: &str| {
        let digits: Vec<bool> = word.chars().take(10).map(|c| c.is_ascii_digit()).collect();
        digits == [true, true, true, true, false, true, true, false, true, true]
    };
    for report in
        files_below("results", ".md").into_iter().filter(|p| !p.ends_with("results/README.md"))
    {
        let text = fs::read_to_string(&report).unwrap().to_lowercase();
        for entry in ["`cargo xtask ", "machine", "rustc"] {
            assert!(text.contains(entry), "{} does not say `{entry}…`", report.display());
        }
        let dated = text.split(|c: char| c.is_whitespace() || c == ',').any(is_date);
        assert!(dated, "{} has no date", report.display());
    }
}

#[test]
fn the_tree_is_formatted() {
    let output = std::process::Command::new(env!("CARGO"))
        .args(["fmt", "--all", "--check"])
        .current_dir(project_root())
        .output()
        .expect("running cargo fmt");
    assert!(
        output.status.success(),
        "run `cargo fmt --all`; these differ:\n{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

/// A source file over 600 lines is hard to find one's way in: each that stays longer is
/// named, with its reason, under "Files over 600 lines" in the architecture page.
#[test]
fn every_long_source_file_has_a_reason() {
    const LONGEST: usize = 600;
    let reasons = architecture_section("Files over 600 lines");
    for file in files_below("", ".rs") {
        let lines = read(&file).lines().count();
        let name = file.strip_prefix(project_root()).unwrap().display().to_string();
        assert!(
            lines <= LONGEST || reasons.contains(&format!("`{name}`")),
            "{name} has {lines} lines: split it, or give the reason it stays in \
             docs/architecture.md under \"Files over 600 lines\""
        );
    }
}

/// The modules of the crate whose sources are in `dir` and the modules of it that each
/// imports: the `crate::<module>` paths (also inside `crate::{…}`) in its files, outside
/// comments and its tests (`tests.rs`, and what follows a `#[cfg(test)]` before a `mod`).
/// A directory module (`bench/`, `writes/`) counts as one.
fn module_imports(dir: &str) -> BTreeMap<String, BTreeSet<String>> {
    let src = project_root().join(dir);
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files_below(dir, ".rs") {
        let relative = file.strip_prefix(&src).unwrap();
        let module =
            relative.iter().next().unwrap().to_string_lossy().trim_end_matches(".rs").to_string();
        if file.ends_with("tests.rs") || module == "main" || module == "lib" {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        let tests_start = lines
            .windows(2)
            .position(|pair| pair[0] == "#[cfg(test)]" && pair[1].contains("mod "))
            .unwrap_or(lines.len());
        let code: String = lines[..tests_start]
            .iter()
            .filter(|line| !line.starts_with("//"))
            .map(|line| format!("{line}\n"))
            .collect();
        let entry = imports.entry(module.clone()).or_default();
        for (at, _) in code.match_indices("crate::") {
            for name in imported_modules(&code[at + "crate::".len()..]) {
                if name != module {
                    entry.insert(name);
                }
            }
        }
    }
    let modules: BTreeSet<String> = imports.keys().cloned().collect();
    for imported in imports.values_mut() {
        imported.retain(|name| modules.contains(name));
    }
    imports
}

/// The first segment of the path that `rest` (the text after a `crate::`) starts with, or
/// of each path in the `{…}` group it starts with.
fn imported_modules(rest: &str) -> Vec<String> {
    let identifier = |text: &str| -> String {
        text.trim_start().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
    };
    let Some(group) = rest.strip_prefix('{') else { return vec![identifier(rest)] };
    let (mut names, mut depth, mut at_start) = (Vec::new(), 0usize, true);
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => at_start = true,
            c if at_start && !c.is_whitespace() => {
                names.push(identifier(&group[at..]));
                at_start = false;
            }
            _ => {}
        }
    }
    names
}

/// Panics naming the loop when a module of `imports` is reachable from itself.
fn assert_no_import_loop(crate_name: &str, imports: &BTreeMap<String, BTreeSet<String>>) {
    // Depth-first search for a module reachable from itself.
    fn visit(
        crate_name: &str,
        module: &str,
        imports: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if let Some(at) = path.iter().position(|m| m == module) {
            panic!(
                "{crate_name}'s modules import in a loop: {}",
                path[at..].join(" -> ") + " -> " + module
            );
        }
        if !done.insert(module.to_string()) {
            return;
        }
        path.push(module.to_string());
        for next in imports.get(module).into_iter().flatten() {
            visit(crate_name, next, imports, path, done);
        }
        path.pop();
    }
    let mut done = BTreeSet::new();
    for module in imports.keys() {
        visit(crate_name, module, imports, &mut Vec::new(), &mut done);
    }
}

/// xtask's modules import one another without a loop, and `util` and `flags` are leaves
/// that every verb can import.
#[test]
fn xtask_modules_import_without_a_loop() {
    let imports = module_imports("xtask/src");
    for leaf in ["util", "flags"] {
        let allowed: &[&str] = if leaf == "flags" { &["postgres"] } else { &[] };
        let extra: Vec<_> =
            imports[leaf].iter().filter(|name| !allowed.contains(&name.as_str())).collect();
        assert!(extra.is_empty(), "xtask's `{leaf}` must stay a leaf, but imports {extra:?}");
    }
    assert_no_import_loop("xtask", &imports);
}

/// The core's modules import one another without a loop, and its layers (framing, the
/// stored value, load and apply, the write paths, compaction: see docs/architecture.md)
/// import only downwards: no module of a layer reaches, through any chain of imports, a
/// module of a layer above it.
#[test]
fn core_modules_import_without_a_loop_and_by_layer() {
    let imports = module_imports("extension/core/src");
    assert_no_import_loop("the core", &imports);
    let reached_from = |module: &str| {
        let mut reached = BTreeSet::new();
        let mut next = vec![module.to_string()];
        while let Some(module) = next.pop() {
            for imported in imports.get(&module).into_iter().flatten() {
                if reached.insert(imported.clone()) {
                    next.push(imported.clone());
                }
            }
        }
        reached
    };
    for (at, layer) in CORE_LAYERS.iter().enumerate() {
        for module in *layer {
            assert!(imports.contains_key(*module), "the core has no module `{module}`");
            let reached = reached_from(module);
            for above in CORE_LAYERS[at + 1..].iter().flat_map(|layer| layer.iter()) {
                assert!(
                    !reached.contains(*above),
                    "the core's `{module}` imports `{above}` (maybe through others), a \
                     module of a layer above it"
                );
            }
        }
    }
}

/// The core's write lifecycle, lowest layer first, as docs/architecture.md names it.
const CORE_LAYERS: &[&[&str]] = &[
    &["chunk", "leb128"],
    &["format", "kept_json", "settings"],
    &["load", "save"],
    &["writes"],
    &["compaction"],
    &["edits"],
];

/// The reliability and Citus tests run only on the clusters that xtask provisions: each is
/// `#[ignore]`d, so that a plain `cargo test` (the snapshots step's) leaves it out, and the
/// tests whose names xtask's reliability step reads exist.
#[test]
fn provisioned_cluster_tests_are_ignored_and_named_as_xtask_reads_them() {
    use crate::reliability::{CRASH_TESTS, FROZEN_SCRIPT_TEST, UPGRADE_TEST};

    for dir in ["extension/cluster_tests/tests/reliability", "extension/cluster_tests/tests/citus"]
    {
        for file in files_below(dir, ".rs") {
            let text = fs::read_to_string(&file).unwrap();
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            for (at, line) in lines.iter().enumerate() {
                if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
                    assert!(
                        lines.get(at + 1).is_some_and(|next| next.starts_with("#[ignore")),
                        "{}:{}: a test of provisioned clusters without #[ignore] after its #[test]",
                        file.display(),
                        at + 1
                    );
                }
            }
        }
    }
    let dir = "extension/cluster_tests/tests/reliability";
    for name in CRASH_TESTS.into_iter().chain([FROZEN_SCRIPT_TEST, UPGRADE_TEST]) {
        let (module, test) = name.split_once("::").unwrap();
        assert!(
            read(format!("{dir}/{module}.rs")).contains(&format!("fn {test}(")),
            "xtask's reliability step reads `{name}`, which {dir}/{module}.rs does not define"
        );
    }
}
