//! An automerge-repo sync server whose storage is Postgres through pg_automerge: clients
//! of `@automerge/automerge-repo` (or `samod`) connect over WebSocket, and every repo
//! document is a row of an `automerge` column that SQL reads and writes. See
//! docs/sync-server.md.

pub mod access;
pub mod auth;
pub mod client;
pub mod config;
pub mod listen;
pub mod schema;
pub mod server;
pub mod shards;
pub mod storage;
