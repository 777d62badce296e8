//! The text form of an `automerge` value: `\x` followed by hex digits, as PostgreSQL prints
//! `bytea`, so that `psql`, `pg_dump` and drivers that only speak text can carry documents.

use crate::Error;

/// Formats Automerge bytes as `\x` and lowercase hex digits.
pub fn format(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(2 + bytes.len() * 2);
    text.push_str("\\x");
    text.push_str(&hex::encode(bytes));
    text
}

/// Parses `\x` followed by pairs of hex digits; like `bytea`, white space may separate pairs.
pub fn parse(text: &str) -> Result<Vec<u8>, Error> {
    let digits = text.strip_prefix("\\x").ok_or_else(|| {
        Error::InvalidText("the value must start with \\x followed by hex digits".into())
    })?;
    let compact: String = digits.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    if !compact.len().is_multiple_of(2) {
        return Err(Error::InvalidText("odd number of hex digits".into()));
    }
    hex::decode(&compact).map_err(|err| Error::InvalidText(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_what_it_formats() {
        assert_eq!(format(&[0x85, 0x6f, 0x4a, 0x83]), "\\x856f4a83");
        assert_eq!(parse("\\x856F4a83").unwrap(), vec![0x85, 0x6f, 0x4a, 0x83]);
        assert_eq!(parse("\\x").unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn allows_white_space_between_pairs() {
        assert_eq!(parse("\\x85 6f\n4a\t83").unwrap(), vec![0x85, 0x6f, 0x4a, 0x83]);
    }

    #[test]
    fn refuses_bad_text() {
        for bad in ["856f", "\\x8", "\\xzz", "x85", "\\x85 6"] {
            let err = parse(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidText(_)), "{bad}: {err}");
        }
    }

    proptest! {
        #[test]
        fn round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            prop_assert_eq!(parse(&format(&bytes)).unwrap(), bytes);
        }
    }
}
