// automerge-repo's StorageAdapterInterface on Postgres, on the tables of pg_automerge's
// Rust sync server and with its semantics (sync_server/src/storage.rs), so that a JS
// server and the Rust server can share one database: the repo's keys and bytes in the
// chunks table exactly as saved, and each document chunk merged into the document's row
// with the extension's `||` in the same transaction, under the advisory lock the Rust
// server takes, so writers of both kinds merge one document one at a time.

import { setTimeout as sleep } from "node:timers/promises"

import pg from "pg"

import { listenForWrites } from "./listen.js"
import { DEFAULT_TABLES, ensureSchema, identifier } from "./schema.js"

export { DEFAULT_TABLES, identifier, schemaSql, SCHEMA_LOCK } from "./schema.js"

/** The last part of the key under which a load of snapshots returns the document's row. */
export const ROW_SNAPSHOT = "documents-row"

/** The first wait after a failure, and the longest: the Rust server's backoff. */
const FIRST_RETRY_MS = 50
const LONGEST_RETRY_MS = 5000

/** The statements, written once with the configured table names (as storage.rs's). */
function statements({ documents, chunks }) {
  const underPrefix = "key = $1 OR (key > $1 || '/' AND key < $1 || '0')"
  return {
    load: `SELECT data FROM ${chunks} WHERE key = $1`,
    loadAll: `SELECT key, data FROM ${chunks}`,
    loadRange: `SELECT key, data FROM ${chunks} WHERE ${underPrefix}`,
    // Re-putting the bytes a key holds leaves its merge state alone; new bytes under a
    // key are merged again.
    put:
      `INSERT INTO ${chunks} AS c (key, document_id, data, pending) VALUES ($1, $2, $3, $4) ` +
      "ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data, " +
      "pending = CASE WHEN c.data = EXCLUDED.data THEN c.pending ELSE EXCLUDED.pending END, " +
      "refusal = CASE WHEN c.data = EXCLUDED.data THEN c.refusal END, updated_at = now()",
    delete: `DELETE FROM ${chunks} WHERE key = $1`,
    deleteAll: `DELETE FROM ${chunks}`,
    deleteRange: `DELETE FROM ${chunks} WHERE ${underPrefix}`,
    lockDocument: "SELECT pg_advisory_xact_lock(hashtextextended($1, 1853))",
    pending: `SELECT key, data FROM ${chunks} WHERE document_id = $1 AND pending ORDER BY key`,
    merge: `UPDATE ${documents} SET doc = doc || $2::bytea, updated_at = now() WHERE id = $1`,
    insertDocument:
      `INSERT INTO ${documents} (id, doc) VALUES ($1, $2::bytea::automerge) ` +
      "ON CONFLICT (id) DO NOTHING",
    merged: `UPDATE ${chunks} SET pending = false, refusal = NULL WHERE key = $1`,
    refused: `UPDATE ${chunks} SET refusal = $2 WHERE key = $1`,
    rowSnapshot: `SELECT doc::bytea AS data FROM ${documents} WHERE id = $1`,
  }
}

/**
 * A key's parts joined by '/', refused when a part is empty or holds a '/' (the joined key
 * could not be split back): the Rust server's `StorageKey` rule.
 * @param {string[]} key
 */
export function joined(key) {
  if (
    !Array.isArray(key) ||
    key.some(part => typeof part !== "string" || part === "" || part.includes("/"))
  ) {
    throw new TypeError(
      `storage key ${JSON.stringify(key)}: every part must be a non-empty string without '/'`,
    )
  }
  return key.join("/")
}

/**
 * The document a key belongs to, and whether its bytes are the document's (a snapshot or
 * an incremental change) rather than a sync state: `[docId, kind, …]`.
 * @param {string[]} key
 */
export function classify(key) {
  if (key.length !== 3) return { document: null, merged: false }
  return { document: key[0], merged: key[1] === "snapshot" || key[1] === "incremental" }
}

/** An error with the server's SQLSTATE, message and detail when it has them. */
function describe(error) {
  if (!(error instanceof pg.DatabaseError)) return error.message
  return `${error.code}: ${error.message}${error.detail ? ` (${error.detail})` : ""}`
}

/** Whether Postgres itself answered with the error (not a connection that failed). */
function answeredByPostgres(error) {
  return error instanceof pg.DatabaseError || error?.cause instanceof pg.DatabaseError
}

/** bytea as the Uint8Array the interface names, without copying pg's Buffer. */
function bytes(buffer) {
  return new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength)
}

function defaultOnRetry(error, { operation, key, retryInMs }) {
  console.warn(
    `automerge-repo storage: ${operation} of "${key}" failed (${describe(error)}); retrying in ${retryInMs} ms`,
  )
}

export class PostgresStorageAdapter {
  #pool
  #ownsPool
  #tables
  #sql
  #onRetry
  #schema = null
  #closing = new AbortController()
  #closed = null

  /** @param {import("../index.js").PostgresStorageAdapterOptions} options */
  constructor({ pool, connectionString, tables = {}, onRetry = defaultOnRetry } = {}) {
    if (!pool && !connectionString)
      throw new TypeError("PostgresStorageAdapter needs a pool or a connectionString")
    const names = { ...DEFAULT_TABLES, ...tables }
    this.#tables = {
      documents: identifier(names.documents),
      chunks: identifier(names.chunks),
      channel: identifier(names.channel),
    }
    this.#sql = statements(this.#tables)
    this.#onRetry = onRetry
    this.#ownsPool = !pool
    this.#pool = pool ?? new pg.Pool({ connectionString })
    // An idle connection that drops would otherwise be an uncaught error; the next
    // operation gets a fresh one.
    if (this.#ownsPool) this.#pool.on("error", () => {})
  }

  /**
   * Creates the extension and the tables when missing (once; every operation waits for
   * it). Retries while Postgres cannot be reached; rejects when Postgres refuses, as when
   * pg_automerge is not installed, so that an app awaiting it at start sees why.
   */
  ready() {
    this.#schema ??= this.#retrying(
      "schema creation",
      "",
      () => this.#withClient(client => ensureSchema(client, this.#tables)),
      {
        refusalsRetried: false,
      },
    ).catch(error => {
      this.#schema = null
      throw error
    })
    return this.#schema
  }

  /** @param {string[]} key */
  async load(key) {
    const text = joined(key)
    const { rows } = await this.#operation("load", text, () => this.#query(this.#sql.load, [text]))
    return rows.length ? bytes(rows[0].data) : undefined
  }

  /** @param {string[]} keyPrefix */
  async loadRange(keyPrefix) {
    const prefix = keyPrefix.length ? joined(keyPrefix) : ""
    return this.#operation("loadRange", prefix, () =>
      this.#withClient(async client => {
        const { rows } = prefix
          ? await client.query(this.#sql.loadRange, [prefix])
          : await client.query(this.#sql.loadAll)
        const chunks = rows.map(row => ({ key: row.key.split("/"), data: bytes(row.data) }))
        if (keyPrefix.length === 2 && keyPrefix[1] === "snapshot") {
          const row = await client.query(this.#sql.rowSnapshot, [keyPrefix[0]])
          if (row.rows.length)
            chunks.push({ key: [...keyPrefix, ROW_SNAPSHOT], data: bytes(row.rows[0].data) })
        }
        return chunks
      }),
    )
  }

  /**
   * @param {string[]} key
   * @param {Uint8Array} data
   */
  async save(key, data) {
    const text = joined(key)
    const { document, merged } = classify(key)
    await this.#operation("save", text, () =>
      this.#transaction(async client => {
        if (merged) await client.query(this.#sql.lockDocument, [document])
        await client.query(this.#sql.put, [text, document, data, merged])
        if (merged) await this.#mergePending(client, document)
      }),
    )
  }

  /** @param {string[]} key */
  async remove(key) {
    const text = joined(key)
    await this.#operation("remove", text, () => this.#query(this.#sql.delete, [text]))
  }

  /** @param {string[]} keyPrefix */
  async removeRange(keyPrefix) {
    const prefix = keyPrefix.length ? joined(keyPrefix) : ""
    await this.#operation("removeRange", prefix, () =>
      prefix ? this.#query(this.#sql.deleteRange, [prefix]) : this.#query(this.#sql.deleteAll),
    )
  }

  /**
   * Hands the documents table's writes (SQL's, and other servers' merges) to the
   * documents `repo` holds, which sync them to their clients: a LISTEN on the table's
   * channel over a connection of the pool, connecting again after a second when it is
   * lost. Returns a function that stops it; `close()` stops it too.
   * @param {import("@automerge/automerge-repo").Repo} repo
   * @returns {() => Promise<void>}
   */
  listen(repo) {
    const stopping = new AbortController()
    const listening = this.ready().then(() =>
      listenForWrites(
        {
          connect: () => this.#pool.connect(),
          channel: this.#tables.channel,
          loadRow: documentId => this.#row(documentId),
          onLost: (error, retryInMs) =>
            this.#onRetry(error, { operation: "listen", key: this.#tables.channel, retryInMs }),
          signal: AbortSignal.any([stopping.signal, this.#closing.signal]),
        },
        repo,
      ),
    )
    // Its failure is the stop function's answer, never an unhandled rejection.
    listening.catch(() => {})
    return () => {
      stopping.abort()
      return listening
    }
  }

  /** The document's row as it is now, when the row exists. */
  async #row(documentId) {
    const { rows } = await this.#operation("load", documentId, () =>
      this.#query(this.#sql.rowSnapshot, [documentId]),
    )
    return rows.length ? bytes(rows[0].data) : undefined
  }

  /**
   * Stops retrying (operations still waiting reject) and listening, and, when the
   * adapter made its pool, closes it; a second call waits for the first. Shut the repo down first:
   * `await repo.shutdown()` saves what it holds.
   */
  close() {
    this.#closing.abort()
    this.#closed ??= this.#ownsPool ? this.#pool.end() : Promise.resolve()
    return this.#closed
  }

  async #operation(operation, key, attempt) {
    await this.ready()
    return this.#retrying(operation, key, attempt, { refusalsRetried: true })
  }

  /**
   * Runs `attempt` until Postgres answers it, waiting longer after each failure (at most
   * five seconds): a save the repo was told failed would be lost, since automerge-repo
   * does not save it again. With `refusalsRetried` false, an error Postgres itself
   * answered ends the wait.
   */
  async #retrying(operation, key, attempt, { refusalsRetried }) {
    let wait = FIRST_RETRY_MS
    for (;;) {
      if (this.#closing.signal.aborted)
        throw new Error(
          `automerge-repo storage: ${operation} of "${key}" stopped, the adapter was closed`,
        )
      try {
        return await attempt()
      } catch (error) {
        if (this.#closing.signal.aborted || (!refusalsRetried && answeredByPostgres(error)))
          throw error
        this.#onRetry(error, { operation, key, retryInMs: wait })
        await sleep(wait, undefined, { signal: this.#closing.signal }).catch(() => {})
        wait = Math.min(wait * 2, LONGEST_RETRY_MS)
      }
    }
  }

  /** `work` on a connection of the pool; every statement runs through one. */
  async #withClient(work) {
    const client = await this.#pool.connect()
    // A connection lost mid-statement fails the statement (which is retried) and emits
    // "error", which would be uncaught on a connection out of the pool.
    const lost = () => {}
    client.on("error", lost)
    let failure
    try {
      return await work(client)
    } catch (error) {
      failure = error
      throw error
    } finally {
      client.off("error", lost)
      // A connection that failed otherwise than by Postgres's answer is dropped.
      client.release(failure && !answeredByPostgres(failure) ? failure : undefined)
    }
  }

  /** One statement on a connection of the pool. */
  #query(sql, parameters) {
    return this.#withClient(client => client.query(sql, parameters))
  }

  async #transaction(work) {
    return this.#withClient(async client => {
      await client.query("BEGIN")
      try {
        const value = await work(client)
        await client.query("COMMIT")
        return value
      } catch (error) {
        await client.query("ROLLBACK").catch(() => {})
        throw error
      }
    })
  }

  /**
   * Merges the document's pending chunks into its row, each under a savepoint, until a
   * pass merges nothing more (a change may wait for a dependency later in the list).
   */
  async #mergePending(client, document) {
    let { rows: pending } = await client.query(this.#sql.pending, [document])
    for (;;) {
      const refusals = []
      const left = []
      for (const chunk of pending) {
        try {
          await this.#mergeOne(client, document, chunk.data)
          await client.query(this.#sql.merged, [chunk.key])
        } catch (error) {
          if (!(error instanceof pg.DatabaseError)) throw error
          refusals.push([chunk.key, describe(error)])
          left.push(chunk)
        }
      }
      if (left.length === 0 || left.length === pending.length) {
        for (const refusal of refusals) await client.query(this.#sql.refused, refusal)
        return
      }
      pending = left
    }
  }

  /**
   * One chunk into the document's row, under a savepoint: `doc || bytes`, or the bytes
   * as a new document when the row does not exist yet.
   */
  async #mergeOne(client, document, data) {
    await client.query("SAVEPOINT merge_chunk")
    try {
      const updated = await client.query(this.#sql.merge, [document, data])
      if (updated.rowCount === 0) {
        const inserted = await client.query(this.#sql.insertDocument, [document, data])
        // Another writer inserted the row since the update: merge into it.
        if (inserted.rowCount === 0) await client.query(this.#sql.merge, [document, data])
      }
    } catch (error) {
      await client.query("ROLLBACK TO SAVEPOINT merge_chunk")
      throw error
    }
    await client.query("RELEASE SAVEPOINT merge_chunk")
  }
}
