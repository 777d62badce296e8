//! Runs of marked text as a renderer walks them: each character's marks, with the
//! whitespace at the edge of a mark moved out of it, split into segments, and the marks to
//! close and open between segments, nested so that a mark open over several runs stays
//! open. Markdown needs the whitespace out (`** x**` is not bold) and HTML is tidier so.

use crate::rich_text::{Marks, Run};

/// A mark as it nests, outermost first: a link holds the others, code is innermost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mark {
    Link(String),
    Bold,
    Italic,
    Strike,
    Code,
}

/// What a renderer writes, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    Open(Mark),
    Close(Mark),
    Text(String),
    /// A line break inside a block (a `\n` in its text); no mark is open across it.
    Break,
}

/// The pieces of `runs`, every mark opened closed again by the end.
pub(crate) fn pieces(runs: &[Run]) -> Vec<Piece> {
    let chars: Vec<(char, &Marks)> =
        runs.iter().flat_map(|run| run.text.chars().map(move |c| (c, &run.marks))).collect();
    let marks = edge_whitespace_unmarked(&chars);
    let mut pieces = Vec::new();
    let mut open: Vec<Mark> = Vec::new();
    for ((c, _), marks) in chars.iter().zip(&marks) {
        let wanted = if *c == '\n' { Vec::new() } else { nesting(marks) };
        let kept = open.iter().zip(&wanted).take_while(|(a, b)| a == b).count();
        while open.len() > kept {
            pieces.push(Piece::Close(open.pop().expect("longer than kept")));
        }
        for mark in &wanted[kept..] {
            pieces.push(Piece::Open(mark.clone()));
            open.push(mark.clone());
        }
        match (c, pieces.last_mut()) {
            ('\n', _) => pieces.push(Piece::Break),
            (c, Some(Piece::Text(text))) => text.push(*c),
            (c, _) => pieces.push(Piece::Text(c.to_string())),
        }
    }
    while let Some(mark) = open.pop() {
        pieces.push(Piece::Close(mark));
    }
    pieces
}

/// Each character's marks, except that whitespace keeps its marks only between two
/// characters with the same marks, and has none at the ends or where the marks change: a
/// mark then opens and closes next to a character that is not whitespace.
fn edge_whitespace_unmarked(chars: &[(char, &Marks)]) -> Vec<Marks> {
    let mut marks: Vec<Marks> = chars.iter().map(|(_, m)| (*m).clone()).collect();
    let mut left: Option<&Marks> = None;
    let mut lefts = Vec::with_capacity(chars.len());
    for (c, m) in chars {
        lefts.push(left);
        if !c.is_whitespace() {
            left = Some(m);
        }
    }
    let mut right: Option<&Marks> = None;
    for (i, (c, m)) in chars.iter().enumerate().rev() {
        if c.is_whitespace() {
            marks[i] = match (lefts[i], right) {
                (Some(l), Some(r)) if l == r => l.common(m),
                _ => Marks::default(),
            };
        } else {
            right = Some(m);
        }
    }
    marks
}

fn nesting(marks: &Marks) -> Vec<Mark> {
    let mut nested = Vec::new();
    if let Some(url) = &marks.link {
        nested.push(Mark::Link(url.clone()));
    }
    for (on, mark) in [
        (marks.bold, Mark::Bold),
        (marks.italic, Mark::Italic),
        (marks.strike, Mark::Strike),
        (marks.code, Mark::Code),
    ] {
        if on {
            nested.push(mark);
        }
    }
    nested
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str, marks: Marks) -> Run {
        Run { text: text.into(), marks }
    }

    #[test]
    fn marks_nest_and_whitespace_leaves_their_edges() {
        let bold = Marks { bold: true, ..Marks::default() };
        let both = Marks { bold: true, italic: true, ..Marks::default() };
        let pieces = pieces(&[run("a ", Marks::default()), run(" b ", bold), run("c\nd", both)]);
        use Piece::*;
        assert_eq!(
            pieces,
            vec![
                Text("a  ".into()),
                Open(Mark::Bold),
                Text("b".into()),
                Close(Mark::Bold),
                Text(" ".into()),
                Open(Mark::Bold),
                Open(Mark::Italic),
                Text("c".into()),
                Close(Mark::Italic),
                Close(Mark::Bold),
                Break,
                Open(Mark::Bold),
                Open(Mark::Italic),
                Text("d".into()),
                Close(Mark::Italic),
                Close(Mark::Bold),
            ]
        );
    }
}
