//! Replays every committed regression input (`fuzz/regressions/*.bin`) through every
//! byte input of the core crate, with the fuzzer's oracles: each once broke one.

use std::time::Duration;

use pg_automerge_core::memory::CountingAllocator;
use pg_automerge_core::settings::WriteSettings;
use pg_automerge_core::writes::stored_from_client_bytes;
use pg_automerge_core::ErrorKind;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Generous for an unoptimized build; the hang this guards against never ended.
const SLOW: Duration = Duration::from_secs(20);

#[test]
fn every_regression_input_passes_the_oracles() {
    let regressions = fuzz::seeds::regressions();
    assert!(regressions.len() >= 10, "the regression inputs are committed");
    for seed in &regressions {
        let (failures, slowest) = fuzz::replay(&seed.bytes);
        assert!(failures.is_empty(), "{}: {failures:#?}", seed.name);
        assert!(slowest < SLOW, "{} took {slowest:?}", seed.name);
        println!("{}: {} bytes, {slowest:?}", seed.name, seed.bytes.len());
    }
    println!("fuzz regressions: {} inputs replayed", regressions.len());
}

/// The inputs the wrong-change target found (`wrong_changes-*`) hold its invariant: every
/// write refused as invalid binary or stored loadable.
#[test]
fn every_wrong_change_regression_input_holds_the_invariant() {
    for seed in fuzz::seeds::regressions() {
        if seed.name.starts_with("wrong_changes-") {
            let failure = fuzz::replay_wrong_writes(&seed.bytes);
            assert!(failure.is_none(), "{}: {failure:#?}", seed.name);
        }
    }
}

/// The inputs named `panic-*` made Automerge panic; the core must refuse them as bytes
/// that are not a document (22P03), saying what Automerge did.
#[test]
fn inputs_that_made_automerge_panic_are_invalid_binary() {
    let panics: Vec<_> =
        fuzz::seeds::regressions().into_iter().filter(|s| s.name.starts_with("panic-")).collect();
    assert!(!panics.is_empty());
    for seed in panics {
        let err = stored_from_client_bytes(&seed.bytes, WriteSettings::UNLIMITED)
            .expect_err(&format!("{} was accepted", seed.name));
        assert_eq!(err.kind(), ErrorKind::InvalidBinary, "{}: {err}", seed.name);
    }
}

/// The inputs named `hang-*` and `memory-*` went past the estimate before it refused
/// columns cut inside a value; now the estimate refuses them before any load.
#[test]
fn inputs_that_hung_or_overallocated_are_refused_by_the_estimate() {
    let refused: Vec<_> = fuzz::seeds::regressions()
        .into_iter()
        .filter(|s| s.name.starts_with("hang-") || s.name.starts_with("memory-"))
        .collect();
    assert!(refused.len() >= 2);
    for seed in refused {
        let err = pg_automerge_core::estimate::estimate_client_bytes(&seed.bytes)
            .expect_err(&format!("{} was estimated", seed.name));
        assert_eq!(err.kind(), ErrorKind::InvalidBinary, "{}: {err}", seed.name);
    }
}
