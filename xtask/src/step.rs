//! Printing what xtask does, one step at a time, with how long each took.

use std::time::Instant;

/// Runs one named step, printing its name before and its duration after.
pub fn step<T>(name: &str, work: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    eprintln!("==> {name}");
    let started = Instant::now();
    let result = work();
    let outcome = if result.is_ok() { "done" } else { "FAILED" };
    eprintln!("<== {name}: {outcome} in {:.1}s", started.elapsed().as_secs_f64());
    result
}

/// Prints a note inside the current step.
pub fn note(text: impl std::fmt::Display) {
    eprintln!("    {text}");
}
