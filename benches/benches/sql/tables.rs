//! The tables of documents every bench reads and writes, and each fixture's rows in them.

use std::cell::{Cell, RefCell, RefMut};

use benches::{forks, Author, Fixture};
use fixtures::generated::Kind;

use crate::session::{Path, Session};

const SCHEMA: &str = "
DROP TABLE IF EXISTS bench_jsonb, bench_jsonb_indexed, bench_forks, bench_docs_edits,
    bench_jsonb_edits;
CREATE TABLE bench_jsonb (name text PRIMARY KEY, j jsonb NOT NULL);
CREATE TABLE bench_jsonb_indexed (name text PRIMARY KEY, j jsonb NOT NULL);
CREATE INDEX ON bench_jsonb_indexed USING gin (j) WITH (fastupdate = off);
CREATE TABLE bench_forks (name text, doc automerge NOT NULL);
CREATE TABLE bench_docs_edits (name text PRIMARY KEY, doc automerge NOT NULL);
CREATE TABLE bench_jsonb_edits (name text PRIMARY KEY, j jsonb NOT NULL);
";

/// Each path's tables of documents.
const DOCS_SCHEMA: &str = "
DROP TABLE IF EXISTS {docs}, {docs}_indexed, {docs}_generated;
CREATE TABLE {docs} (name text PRIMARY KEY, doc automerge NOT NULL);
CREATE TABLE {docs}_indexed (name text PRIMARY KEY, doc automerge NOT NULL);
CREATE INDEX ON {docs}_indexed USING gin ((doc::jsonb)) WITH (fastupdate = off);
CREATE TABLE {docs}_generated (
    name text PRIMARY KEY,
    doc automerge NOT NULL,
    body jsonb GENERATED ALWAYS AS (doc::jsonb) STORED
);
";

/// Fills the tables with one row per fixture (and its two forks for `merge_agg`); the
/// edits from SQL have copies of their own.
pub fn load_tables(session: &Session, fixtures: &[Fixture]) {
    session.batch(SCHEMA);
    for path in Path::BOTH {
        session.use_path(path);
        session.batch(&path.sql(DOCS_SCHEMA));
        let insert = path.sql("INSERT INTO {docs} VALUES ($1, $2::bytea::automerge)");
        for fixture in fixtures {
            session.execute(&insert, &[&fixture.name(), &fixture.save]);
        }
        session.batch(&path.sql(
            "INSERT INTO {docs}_indexed SELECT * FROM {docs};
             INSERT INTO {docs}_generated (name, doc) SELECT * FROM {docs};",
        ));
    }
    session.use_path(Path::Fast);
    for fixture in fixtures {
        let (left, right) = forks(&fixture.save);
        for fork in [left, right] {
            session.execute(
                "INSERT INTO bench_forks VALUES ($1, $2::bytea::automerge)",
                &[&fixture.name(), &fork],
            );
        }
        // The JSON a value keeps is the JSON its document loads to.
        let same: bool = session.query_one(
            "SELECT fast.doc::jsonb = naive.doc::jsonb
             FROM bench_docs fast JOIN naive_docs naive USING (name) WHERE name = $1",
            &[&fixture.name()],
        );
        assert!(same, "{}: the kept JSON differs from the loaded document's", fixture.name());
    }
    session.batch(
        "INSERT INTO bench_jsonb SELECT name, doc::jsonb FROM bench_docs;
         INSERT INTO bench_jsonb_indexed SELECT * FROM bench_jsonb;
         INSERT INTO bench_docs_edits SELECT * FROM bench_docs;
         INSERT INTO bench_jsonb_edits SELECT * FROM bench_jsonb;",
    );
    // VACUUM runs outside a transaction: a statement of its own.
    session.batch("VACUUM ANALYZE");
    // One row per fixture: make the containment queries use their indexes, as they would on
    // a table of many documents.
    session.batch("SET enable_seqscan = off");
}

/// One fixture's rows, and the authors of the changes written to them: one author per
/// table, since each change depends on the one before it.
pub struct FixtureRows {
    pub name: String,
    pub kind: Kind,
    /// Of `{docs}`, by `Path` (in `Path::BOTH`'s order).
    authors: [RefCell<Author>; 2],
    /// Of `{docs}_generated`, by `Path`.
    generated_authors: [RefCell<Author>; 2],
    /// The fixture's JSON, which the jsonb upsert writes with a new title.
    pub json: serde_json::Value,
    /// How many jsonb writes were made: each writes a title or words of its own.
    jsonb_writes: Cell<u64>,
}

impl FixtureRows {
    pub fn new(session: &Session, fixture: &Fixture) -> FixtureRows {
        let authors = || [(); 2].map(|_| RefCell::new(Author::new(&fixture.save)));
        let name = fixture.name();
        let json = session.query_one("SELECT j FROM bench_jsonb WHERE name = $1", &[&name]);
        FixtureRows {
            name,
            kind: fixture.spec.kind,
            authors: authors(),
            generated_authors: authors(),
            json,
            jsonb_writes: Cell::new(0),
        }
    }

    pub fn author(&self, path: Path) -> RefMut<'_, Author> {
        self.authors[path as usize].borrow_mut()
    }

    pub fn generated_author(&self, path: Path) -> RefMut<'_, Author> {
        self.generated_authors[path as usize].borrow_mut()
    }

    /// The next title, or words, a jsonb write writes.
    pub fn next_jsonb_edit(&self) -> String {
        self.jsonb_writes.set(self.jsonb_writes.get() + 1);
        format!("Set {}", self.jsonb_writes.get())
    }

    /// The next full save a client upserts: the document with one more change.
    pub fn next_save(&self, path: Path) -> Vec<u8> {
        let mut author = self.author(path);
        author.retitle();
        author.save()
    }
}
