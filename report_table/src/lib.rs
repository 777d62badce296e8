//! The markdown tables of the reports under `results/`: the bench's (`cargo xtask bench`)
//! and the soak's (the soak crate), written one way.
//!
//! ```
//! use report_table::{Align, Table};
//!
//! let mut table = Table::new([("fixture", Align::Left), ("median", Align::Right)]);
//! table.row(["rich-text-small", "1.20 ms"]);
//! assert_eq!(
//!     table.to_string(),
//!     "| fixture | median |\n|---|---:|\n| rich-text-small | 1.20 ms |\n"
//! );
//! ```

use std::fmt;

/// How a column's cells line up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    /// Figures: their units and decimals line up.
    Right,
}

/// A markdown table: a heading line, its separator, then one line per row.
#[derive(Clone, Debug)]
pub struct Table {
    heading: String,
    separator: String,
    rows: Vec<String>,
}

impl Table {
    /// A table with these column headings.
    pub fn new<'a>(columns: impl IntoIterator<Item = (&'a str, Align)>) -> Table {
        let (headings, separators): (Vec<&str>, Vec<&str>) = columns
            .into_iter()
            .map(|(heading, align)| (heading, if align == Align::Right { "---:" } else { "---" }))
            .unzip();
        Table {
            heading: line(headings),
            separator: format!("|{}|", separators.join("|")),
            rows: Vec::new(),
        }
    }

    /// A table whose columns, with these headings, are all left-aligned.
    pub fn left<'a>(headings: impl IntoIterator<Item = &'a str>) -> Table {
        Table::new(headings.into_iter().map(|heading| (heading, Align::Left)))
    }

    /// A table of name and value pairs, whose heading line is empty: `| | |`.
    pub fn pairs() -> Table {
        Table { heading: "| | |".into(), separator: "|---|---|".into(), rows: Vec::new() }
    }

    /// Adds a row of these cells.
    pub fn row<T: fmt::Display>(&mut self, cells: impl IntoIterator<Item = T>) -> &mut Table {
        self.rows.push(line(cells));
        self
    }

    /// Whether the table has no row.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// `| a | b |`.
fn line<T: fmt::Display>(cells: impl IntoIterator<Item = T>) -> String {
    let cells: Vec<String> = cells.into_iter().map(|cell| cell.to_string()).collect();
    format!("| {} |", cells.join(" | "))
}

/// The table's lines, each ending with a newline.
impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.heading)?;
        writeln!(f, "{}", self.separator)?;
        self.rows.iter().try_for_each(|row| writeln!(f, "{row}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_written_as_the_reports_wrote_them() {
        let mut table = Table::left(["invariant", "holds", "detail"]);
        table.row(["no lost write", "yes", ""]);
        assert_eq!(
            table.to_string(),
            "| invariant | holds | detail |\n|---|---|---|\n| no lost write | yes |  |\n"
        );
        let mut pairs = Table::pairs();
        pairs.row(["duration", "70.0 minutes"]);
        assert_eq!(pairs.to_string(), "| | |\n|---|---|\n| duration | 70.0 minutes |\n");
        let empty = Table::new([("a", Align::Left), ("b", Align::Right), ("c", Align::Right)]);
        assert!(empty.is_empty());
        assert_eq!(empty.to_string(), "| a | b | c |\n|---|---:|---:|\n");
    }
}
