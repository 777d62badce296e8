//! The documentation's SQL examples are tests. In README.md and docs/*.md, a ```sql block
//! followed by an ```output block must print exactly that output in psql; a ```sql block
//! with no output block must run and print nothing. The examples of a file run in order in
//! one psql session, so later examples see what earlier ones created.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use cluster_tests::server::Server;

use crate::cluster::Cluster;
use crate::project_root;
use crate::run::DATABASE;
use crate::util::{note, Counts};

#[derive(Debug, PartialEq, Eq)]
pub struct Example {
    /// 1-based line of the ```sql fence, for messages.
    pub line: usize,
    pub sql: String,
    pub expected: String,
}

/// The files whose examples are checked: README.md and every page in docs/.
pub fn documentation_files() -> Result<Vec<PathBuf>> {
    let root = project_root();
    let mut files = vec![root.join("README.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    pages.retain(|p| p.extension().is_some_and(|e| e == "md"));
    pages.sort();
    files.extend(pages);
    Ok(files)
}

/// The page whose examples need Citus: the `citus` test step runs them on its coordinator.
pub const CITUS_PAGE: &str = "docs/scaling.md";

/// Every page's examples but the Citus page's, on a single node.
pub fn check_all(cluster: &Cluster) -> Result<Counts> {
    let mut counts = Counts::default();
    for file in documentation_files()? {
        if file != project_root().join(CITUS_PAGE) {
            counts += check_file(cluster, &file, DATABASE)?;
        }
    }
    Ok(counts)
}

const MARKER: &str = "@@ pg_automerge example @@";

pub fn check_file(server: &Server, file: &Path, database: &str) -> Result<Counts> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let examples = parse(&text);
    if examples.is_empty() {
        return Ok(Counts::default());
    }
    let script: String =
        examples.iter().map(|e| format!("\\echo '{MARKER}'\n{}\n", e.sql)).collect();
    let session = server.psql_session(database, &script, &[])?;
    let separator = format!("{MARKER}\n");
    let mut outputs = session.text.split(&separator).skip(1);
    let name = file.strip_prefix(project_root()).unwrap_or(file).display().to_string();
    let mut counts = Counts::default();
    for example in &examples {
        let actual = normalize(outputs.next().unwrap_or(""));
        if actual == normalize(&example.expected) {
            counts.passed += 1;
        } else {
            counts.failed += 1;
            note(format!(
                "FAILED {name}:{}\n--- SQL\n{}\n--- expected\n{}\n--- actual\n{}\n---",
                example.line, example.sql, example.expected, actual
            ));
        }
    }
    note(format!("{name}: {counts}"));
    Ok(counts)
}

/// Finds the ```sql blocks and the ```output blocks that follow them.
pub fn parse(markdown: &str) -> Vec<Example> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut examples = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "```sql" {
            i += 1;
            continue;
        }
        let line = i + 1;
        let (sql, after) = fenced_body(&lines, i + 1);
        let mut next = after;
        while next < lines.len() && lines[next].trim().is_empty() {
            next += 1;
        }
        let (expected, after) = if next < lines.len() && lines[next].trim() == "```output" {
            fenced_body(&lines, next + 1)
        } else {
            (String::new(), after)
        };
        examples.push(Example { line, sql, expected });
        i = after;
    }
    examples
}

/// The lines from `start` up to the closing fence, and the index after that fence.
fn fenced_body(lines: &[&str], start: usize) -> (String, usize) {
    let end = (start..lines.len()).find(|&j| lines[j].trim() == "```").unwrap_or(lines.len());
    (lines[start..end].join("\n"), end + 1)
}

/// Drops psql's `psql:<stdin>:12: ` prefix from errors, trailing spaces, and blank lines
/// at either end.
fn normalize(text: &str) -> String {
    let lines: Vec<String> = text
        .lines()
        .map(|line| cluster_tests::strip_psql_location(line).trim_end().to_string())
        .collect();
    lines.join("\n").trim_matches('\n').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_sql_blocks_with_their_output() {
        let md = "intro\n```sql\nSELECT 1;\n```\n\n```output\n ?column?\n```\ntext\n```sql\nCREATE TABLE t ();\n```\n";
        let examples = parse(md);
        assert_eq!(
            examples,
            vec![
                Example { line: 2, sql: "SELECT 1;".into(), expected: " ?column?".into() },
                Example { line: 10, sql: "CREATE TABLE t ();".into(), expected: String::new() },
            ]
        );
    }

    #[test]
    fn normalizes_psql_error_locations() {
        assert_eq!(normalize("\npsql:<stdin>:12: ERROR:  boom   \n"), "ERROR:  boom");
        assert_eq!(normalize("psql:<stdin>:x"), "psql:<stdin>:x");
    }
}
