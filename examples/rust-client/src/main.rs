//! `cargo run -p rust_client -- "host=127.0.0.1 port=5432 user=postgres dbname=pg_automerge"`
//! (or the connection string in PG_AUTOMERGE_CONNECTION): runs the client loop once.

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let conninfo = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("PG_AUTOMERGE_CONNECTION").ok())
        .ok_or("pass a libpq connection string, or set PG_AUTOMERGE_CONNECTION")?;
    let report = rust_client::run(&conninfo).await?;
    println!(
        "in sync: sent {} changes in {} bytes; server and client heads {:?}",
        report.changes_sent, report.bytes_sent, report.heads
    );
    Ok(())
}
