import type { Chunk, Repo, StorageAdapterInterface, StorageKey } from "@automerge/automerge-repo"
import type { Pool } from "pg"

/** The names the SQL is written with: lower-case letters, digits and `_`. */
export interface Tables {
  /** One row per repo document, merged as chunks arrive. Default `documents`. */
  documents: string
  /** automerge-repo's keys and bytes, exactly as saved. Default `automerge_repo_chunks`. */
  chunks: string
  /** The NOTIFY channel of the documents table's trigger. Default `automerge_repo_documents`. */
  channel: string
}

/** What a failed attempt was, passed to `onRetry` before the adapter waits and tries again. */
export interface RetryInfo {
  operation: "schema creation" | "load" | "loadRange" | "save" | "remove" | "removeRange" | "listen"
  /** The key (or prefix) with its parts joined by `/`. */
  key: string
  /** How long the adapter waits before the next attempt: 50 ms, doubling, at most 5 s. */
  retryInMs: number
}

export interface PostgresStorageAdapterOptions {
  /** A pool of yours; the adapter does not end it. Give this or `connectionString`. */
  pool?: Pool
  /** A libpq URL (`postgresql://user@host:5432/app`): the adapter's own pool, ended by `close()`. */
  connectionString?: string
  /** Other names, as the Rust server's `--documents-table`, `--chunks-table` and `--channel`. */
  tables?: Partial<Tables>
  /** Called on every failed attempt; by default a `console.warn` line. */
  onRetry?: (error: Error, info: RetryInfo) => void
}

/** The defaults of {@link Tables}: the Rust sync server's. */
export declare const DEFAULT_TABLES: Readonly<Tables>
/** The last key part under which `loadRange([docId, "snapshot"])` returns the document's row. */
export declare const ROW_SNAPSHOT: "documents-row"
/** The advisory lock key of schema creation, shared with the Rust server (a bigint as text). */
export declare const SCHEMA_LOCK: string

/** `name`, or a TypeError when it is not a plain SQL identifier. */
export declare function identifier(name: string): string
/** The DDL the adapter runs when the tables are missing (the Rust server's). */
export declare function schemaSql(tables: Tables): string
/** A key's parts joined by `/`; a TypeError when a part is empty or holds a `/`. */
export declare function joined(key: StorageKey): string
/** The document a key belongs to, and whether its bytes are merged into the document's row. */
export declare function classify(key: StorageKey): { document: string | null; merged: boolean }

export declare class PostgresStorageAdapter implements StorageAdapterInterface {
  constructor(options: PostgresStorageAdapterOptions)
  /**
   * Creates the extension and the tables when missing. Retries while Postgres cannot be
   * reached; rejects when Postgres refuses (pg_automerge not installed, no privilege).
   */
  ready(): Promise<void>
  load(key: StorageKey): Promise<Uint8Array | undefined>
  save(key: StorageKey, data: Uint8Array): Promise<void>
  remove(key: StorageKey): Promise<void>
  loadRange(keyPrefix: StorageKey): Promise<Chunk[]>
  removeRange(keyPrefix: StorageKey): Promise<void>
  /**
   * LISTENs on the documents table's channel and merges each written row into the
   * document `repo` holds, unless it has the row's heads, so that SQL's writes and other
   * servers' changes reach its clients. Returns a function that stops listening.
   */
  listen(repo: Repo): () => Promise<void>
  /** Stops retrying (waiting operations reject), stops listening, ends the pool it made. */
  close(): Promise<void>
}
