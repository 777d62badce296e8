//! Every byte input of the core crate, driven by one input, with the oracles: no panic
//! escapes the core API, and a load the estimate lets through stays within a multiple of
//! that estimate. (Time is the campaign's to watch.)

use std::panic::{self, AssertUnwindSafe};

use automerge::{Automerge, ChangeHash, ObjId, ObjType, ReadDoc, ValueRef, ROOT};
use pg_automerge_core::estimate::{estimate_client_bytes, estimate_stored, LoadEstimate};
use pg_automerge_core::load::load_stored;
use pg_automerge_core::settings::{LoadLimit, WriteSettings};
use pg_automerge_core::{format, heads, history, json, memory, spans, text_form, writes, Error};

/// The write settings (and load limit) the fuzzer runs under: low enough that what it lets through loads in
/// well under a second, high enough for every seed.
pub const LOAD_LIMIT: WriteSettings =
    WriteSettings { load_limit: LoadLimit(Some(64 << 20)), ..WriteSettings::UNLIMITED };

/// A load may reach this many times its estimate, plus [`MEMORY_SLACK`], before it counts
/// as a failure. The estimate is fit to the load alone (1.0–1.5× of its peak); twice leaves
/// room for the save that follows a load, but not for a runaway.
pub const MEMORY_FACTOR: u64 = 2;

/// What a write adds around its load whatever the document's size (the kept JSON, the
/// save, the loader-rule checks' metadata): on a small document it can pass twice a load
/// estimate fit to the load alone, and it is bounded, which is what the check is for.
pub const MEMORY_SLACK: u64 = 4 << 20;

/// At most this many objects are visited looking for text, and texts read as spans.
const MAX_OBJECTS: usize = 200;
const MAX_TEXTS: usize = 8;

thread_local! {
    /// Where the last panic happened, recorded by the hook `record_panics` installs.
    static PANIC_LOCATION: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Replaces the panic hook, which prints every panic, with one that only records where
/// it happened, for the failure to name. Returns the hook it replaced.
#[allow(clippy::type_complexity)]
pub fn record_panics() -> Box<dyn Fn(&panic::PanicHookInfo<'_>) + Sync + Send + 'static> {
    let previous = panic::take_hook();
    panic::set_hook(Box::new(|info| {
        let location = info.location().map(|l| l.to_string()).unwrap_or_default();
        PANIC_LOCATION.with(|cell| *cell.borrow_mut() = location);
    }));
    previous
}

/// How the core words an error that was a panic inside Automerge.
pub const CAUGHT_PANIC: &str = "Automerge failed on it";

/// What broke an oracle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The core function that broke it.
    pub target: &'static str,
    pub what: String,
}

/// How an input fared: the failures, and a signature of the outcomes (which call
/// succeeded, which error it gave), for keeping inputs that reach something new.
#[derive(Debug, Default)]
pub struct Report {
    pub failures: Vec<Failure>,
    pub signature: Vec<String>,
    /// Whether the input got past the estimate to Automerge's load.
    pub reached_load: bool,
    /// Whether it loaded as a document.
    pub loaded: bool,
    /// Panics inside Automerge that the core turned into errors: not failures, but each
    /// kind is worth keeping as a regression input.
    pub caught: Vec<String>,
}

impl Report {
    /// Runs `call` as `target`, catching any panic as a failure.
    fn call<T>(
        &mut self,
        target: &'static str,
        call: impl FnOnce() -> Result<T, Error>,
    ) -> Option<T> {
        match panic::catch_unwind(AssertUnwindSafe(call)) {
            Ok(Ok(value)) => {
                self.signature.push(format!("{target}: ok"));
                Some(value)
            }
            Ok(Err(err)) => {
                let message = err.to_string();
                if let Some(at) = message.find(CAUGHT_PANIC) {
                    // One line, without the numbers that vary from input to input.
                    let kind = message[at..].split_whitespace().collect::<Vec<_>>().join(" ");
                    self.caught.push(kind.chars().filter(|c| !c.is_ascii_digit()).collect());
                }
                self.signature.push(format!("{target}: {}", without_digits(&message)));
                None
            }
            Err(payload) => {
                let what = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into());
                let at = PANIC_LOCATION.with(|cell| cell.borrow().clone());
                self.failures.push(Failure { target, what: format!("panicked at {at}: {what}") });
                None
            }
        }
    }

    /// Like `call`, and fails when the heap's peak during the call is above
    /// `MEMORY_FACTOR` times `estimate` plus `MEMORY_SLACK`.
    fn measured<T>(
        &mut self,
        target: &'static str,
        estimate: u64,
        call: impl FnOnce() -> Result<T, Error>,
    ) -> Option<T> {
        let before = memory::usage().allocated_bytes;
        memory::reset();
        let result = self.call(target, call);
        let peak = memory::usage().peak_allocated_bytes.saturating_sub(before) as u64;
        if peak > estimate.saturating_mul(MEMORY_FACTOR).saturating_add(MEMORY_SLACK) {
            self.failures.push(Failure {
                target,
                what: format!("peak heap {peak} bytes, estimate {estimate} bytes"),
            });
        }
        result
    }
}

/// The start of an error message, without numbers: what kind of error it is, not which
/// bytes it quotes.
fn without_digits(text: &str) -> String {
    text.chars().filter(|c| !c.is_ascii_digit()).take(60).collect()
}

/// Runs `input` through every byte input of the core crate. `base` is a stored document
/// (a real one) to apply the input to, merge with, and put the input under as a payload.
pub fn run(input: &[u8], base: &[u8]) -> Report {
    let mut report = Report::default();

    report.call("text_form::parse", || {
        let text = String::from_utf8_lossy(input);
        let _ = text_form::parse(&format!("\\x{text}"));
        let parsed = text_form::parse(&text_form::format(input))?;
        assert_eq!(parsed, input, "the text form round-trips");
        Ok(())
    });
    report.call("heads::parse", || {
        let text = String::from_utf8_lossy(input);
        heads::parse(&text.split(',').map(str::to_string).collect::<Vec<_>>())
    });
    report.call("format::decode", || format::decode(input).map(drop));

    // The type's input from bytea and from text: client bytes to a stored value.
    let estimate = report.call("estimate::estimate_client_bytes", || estimate_client_bytes(input));
    report.reached_load = within_limit(&estimate);
    let stored = estimate.and_then(|estimate| {
        report.measured("writes::stored_from_client_bytes", estimate.peak_bytes(), || {
            writes::stored_from_client_bytes(input, LOAD_LIMIT)
        })
    });
    if let Some(stored) = &stored {
        report.loaded = true;
        reads(&mut report, stored);
        report.call("writes::merge", || writes::merge(base, stored, LOAD_LIMIT));
        report.call("writes::merge", || writes::merge(stored, base, LOAD_LIMIT));
    }

    // `doc || bytea`: the input applied to a real document.
    if let Some(estimate) = estimate {
        let base_value = format::decode(base).expect("the base is a valid stored value");
        let base_estimate = estimate_stored(&base_value.summary, base_value.payload);
        let bound = base_estimate.peak_bytes().saturating_add(estimate.peak_bytes());
        if let Some(applied) =
            report.measured("writes::apply", bound, || writes::apply(base, input, LOAD_LIMIT))
        {
            reads(&mut report, &applied);
        }
    }

    // A stored value whose header does not describe its payload: what a corrupted page
    // would hold. Reads of stored values are not limited, so the payload is estimated
    // first, as the input to the type was.
    let mut mismatched = base[..format::Header::len_from(base).expect("a valid base")].to_vec();
    mismatched.extend_from_slice(input);
    if within_limit(&estimate) {
        reads(&mut report, &mismatched);
    }
    report
}

fn within_limit(estimate: &Option<LoadEstimate>) -> bool {
    estimate.is_some_and(|estimate| LOAD_LIMIT.load_limit.check(&estimate).is_ok())
}

/// Every read of a stored value: JSON, changes, catch-up bytes and spans, now and as of
/// some of its changes.
fn reads(report: &mut Report, stored: &[u8]) {
    report.call("format::client_bytes", || format::client_bytes(stored).map(drop));
    let Some(value) = report.call("format::decode", || format::decode(stored)) else { return };
    let Some(doc) = report.call("load::load_stored", || load_stored(&value)) else { return };
    report.call("json::document", || json::document(&doc, None));
    let Some(changes) = report.call("history::changes", || history::changes(&doc, None)) else {
        return;
    };
    let texts = report.call("find texts", || Ok(text_paths(&doc))).unwrap_or_default();
    for path in &texts {
        report.call("spans::spans", || spans::spans(&doc, path, None));
    }
    let picked = [changes.first(), changes.get(changes.len() / 2), changes.last()];
    for change in picked.into_iter().flatten() {
        let Some(at) =
            report.call("heads::parse", || heads::parse(std::slice::from_ref(&change.meta.hash)))
        else {
            continue;
        };
        report.call("history::changes", || history::changes(&doc, Some(&at)));
        report.call("history::catch_up", || history::catch_up(&doc, &at));
        report.call("json::document", || {
            known(&doc, &at).and_then(|()| json::document(&doc, Some(&at)))
        });
        for path in &texts {
            report.call("spans::spans", || spans::spans(&doc, path, Some(&at)));
        }
    }
    report.call("history::catch_up", || history::catch_up(&doc, &[]));
}

/// As the SQL functions do: heads are checked before a read at them.
fn known(doc: &Automerge, at: &[ChangeHash]) -> Result<(), Error> {
    heads::require_known(doc, at)
}

/// The paths of some of the document's texts, as `spans` takes them.
fn text_paths(doc: &Automerge) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut queue: Vec<(ObjId, Vec<String>)> = vec![(ROOT, Vec::new())];
    let mut visited = 0;
    while let Some((object, path)) = queue.pop() {
        visited += 1;
        if visited > MAX_OBJECTS || found.len() >= MAX_TEXTS {
            break;
        }
        let children: Vec<(String, Option<ObjType>, ObjId)> = match doc.object_type(&object) {
            Ok(ObjType::Map | ObjType::Table) => doc
                .map_range(&object, ..)
                .map(|item| (item.key.to_string(), object_type(&item.value), item.id()))
                .collect(),
            Ok(ObjType::List) => doc
                .list_range(&object, ..)
                .map(|item| (item.index.to_string(), object_type(&item.value), item.id()))
                .collect(),
            _ => Vec::new(),
        };
        for (segment, value, id) in children {
            let mut child_path = path.clone();
            child_path.push(segment);
            match value {
                Some(ObjType::Text) => found.push(child_path),
                Some(_) => queue.push((id, child_path)),
                None => {}
            }
        }
    }
    found
}

fn object_type(value: &ValueRef<'_>) -> Option<ObjType> {
    match value {
        ValueRef::Object(object_type) => Some(*object_type),
        ValueRef::Scalar(_) => None,
    }
}
