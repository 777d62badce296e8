//! Automerge panics on some inputs instead of returning an error: malformed columns that
//! pass the checksum, documents listing actors that no change uses, values of a type it
//! does not know. Every call into Automerge that reads client or stored bytes, or works
//! on a document loaded from them, goes through [`no_panic`], which turns such a panic
//! into an error, so that no panic leaves this crate. What the call was working on is
//! dropped with the error: a document that panicked mid-merge is never used again.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `call`; a panic becomes `Err` with the panic's message.
pub(crate) fn no_panic<T>(call: impl FnOnce() -> T) -> Result<T, String> {
    // Unwind safety: callers drop whatever `call` mutated when it panics.
    catch_unwind(AssertUnwindSafe(call)).map_err(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("no message");
        format!("Automerge failed on it ({message})")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_error_with_its_message() {
        assert_eq!(no_panic(|| 7), Ok(7));
        let err = no_panic(|| -> u8 { panic!("index {} out of range", 3) }).unwrap_err();
        assert_eq!(err, "Automerge failed on it (index 3 out of range)");
    }
}
