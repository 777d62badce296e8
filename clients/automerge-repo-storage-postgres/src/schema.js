// The two tables the Rust sync server keeps (sync_server/src/schema.rs), created when
// missing with the same DDL under the same advisory lock, so that JS adapters and Rust
// servers starting at once on one database never race on `IF NOT EXISTS`.

/** The tables' and channel's names when none are given: the Rust server's defaults. */
export const DEFAULT_TABLES = Object.freeze({
  documents: "documents",
  chunks: "automerge_repo_chunks",
  channel: "automerge_repo_documents",
})

/** The advisory lock key of schema creation: "pgamsync", as the Rust server's `SCHEMA_LOCK`. */
export const SCHEMA_LOCK = "8099549577565793891"

/**
 * A name the SQL is written with, checked as the Rust server's `--documents-table` is:
 * lower-case letters, digits and `_`, not starting with a digit, at most 63 bytes.
 * @param {string} name
 * @returns {string}
 */
export function identifier(name) {
  if (typeof name !== "string" || !/^[a-z_][a-z0-9_]{0,62}$/.test(name)) {
    throw new TypeError(
      `\`${name}\` is not a plain SQL identifier: use lower-case letters, digits and _`,
    )
  }
  return name
}

/**
 * The statements creating the extension, both tables, their index and the NOTIFY trigger.
 * @param {{documents: string, chunks: string, channel: string}} tables
 */
export function schemaSql({ documents, chunks, channel }) {
  return `
CREATE EXTENSION IF NOT EXISTS pg_automerge;

-- One row per repo document, merged with \`||\` as its chunks arrive: what SQL reads.
CREATE TABLE IF NOT EXISTS ${documents} (
    id text PRIMARY KEY,
    doc automerge NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- automerge-repo's key/value storage, exactly: the key's parts joined by '/' (no part
-- holds one), in the C collation so that a prefix is a range of the primary key.
CREATE TABLE IF NOT EXISTS ${chunks} (
    key text COLLATE "C" PRIMARY KEY,
    document_id text COLLATE "C",
    data bytea NOT NULL,
    -- A snapshot or incremental chunk not yet merged into ${documents}: its dependencies
    -- have not arrived, or the extension refused it (refusal says why).
    pending boolean NOT NULL DEFAULT false,
    refusal text,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ${chunks}_pending ON ${chunks} (document_id) WHERE pending;

CREATE OR REPLACE TRIGGER ${documents}_notify
    AFTER INSERT OR UPDATE OR DELETE ON ${documents}
    FOR EACH ROW EXECUTE FUNCTION automerge_notify('${channel}', 'doc', 'id');
`
}

/**
 * Creates what is missing, in one transaction under the schema lock. A server without
 * pg_automerge installed fails with an error that says so.
 * @param {import("pg").PoolClient} client
 * @param {{documents: string, chunks: string, channel: string}} tables
 */
export async function ensureSchema(client, tables) {
  try {
    await client.query("BEGIN")
    await client.query("SELECT pg_advisory_xact_lock($1)", [SCHEMA_LOCK])
    await client.query(schemaSql(tables))
    await client.query("COMMIT")
  } catch (error) {
    await client.query("ROLLBACK").catch(() => {})
    // 58P01: CREATE EXTENSION found no control file, the extension is not installed.
    if (error.code === "58P01" && /pg_automerge/.test(error.message)) {
      throw new Error(
        `pg_automerge is not installed on this PostgreSQL server (${error.message}): ` +
          "install the extension, then start again",
        { cause: error },
      )
    }
    throw error
  }
}
