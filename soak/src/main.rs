//! The soak binary that `cargo xtask soak` runs in release: reads its [`soak::Config`] as
//! a JSON argument, runs the load, and exits non-zero when an invariant fails.

use anyhow::{bail, Context, Result};

#[tokio::main]
async fn main() -> Result<()> {
    let json = std::env::args()
        .nth(1)
        .context("no configuration given: run the soak with `cargo xtask soak`")?;
    let config: soak::Config =
        serde_json::from_str(&json).context("reading the soak configuration")?;
    let outcome = soak::run(config).await?;
    for invariant in &outcome.invariants {
        println!(
            "{} {}: {}",
            if invariant.holds { "ok    " } else { "FAILED" },
            invariant.name,
            invariant.detail
        );
    }
    if let Some(report) = &outcome.report {
        println!("report: {}", report.display());
    }
    let failed = outcome.failed();
    if !failed.is_empty() {
        bail!("{} of {} invariants failed", failed.len(), outcome.invariants.len());
    }
    Ok(())
}
