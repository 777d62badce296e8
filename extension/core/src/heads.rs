//! Heads as SQL sees them: arrays of 64 hex digits, one per change hash.

use automerge::{Automerge, ChangeHash};

use crate::Error;

pub fn to_hex(heads: &[ChangeHash]) -> Vec<String> {
    heads.iter().map(ChangeHash::to_string).collect()
}

/// Parses change hashes written as hex, sorted and without duplicates as Automerge keeps them.
pub fn parse(texts: &[String]) -> Result<Vec<ChangeHash>, Error> {
    let mut heads = texts
        .iter()
        .map(|text| {
            text.trim().parse::<ChangeHash>().map_err(|_| {
                Error::InvalidParameter(format!("\"{text}\" is not a change hash (64 hex digits)"))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    heads.sort();
    heads.dedup();
    Ok(heads)
}

/// Fails unless every hash is a change of `doc`.
pub fn require_known(doc: &Automerge, heads: &[ChangeHash]) -> Result<(), Error> {
    let unknown: Vec<ChangeHash> = heads
        .iter()
        .filter(|head| !crate::load::has_all(doc, std::slice::from_ref(head)))
        .copied()
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(Error::UnknownHeads(unknown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sorts_and_refuses_non_hashes() {
        let a = "aa".repeat(32);
        let b = "0b".repeat(32);
        let parsed = parse(&[a.clone(), b.clone(), a.clone()]).unwrap();
        assert_eq!(to_hex(&parsed), vec![b, a]);
        for bad in ["", "xyz", "aa"] {
            assert!(matches!(parse(&[bad.to_string()]), Err(Error::InvalidParameter(_))));
        }
    }

    #[test]
    fn unknown_heads_are_named() {
        let doc = Automerge::new();
        let hash = ChangeHash([7; 32]);
        assert!(
            matches!(require_known(&doc, &[hash]), Err(Error::UnknownHeads(h)) if h == vec![hash])
        );
        assert!(require_known(&doc, &[]).is_ok());
    }
}
