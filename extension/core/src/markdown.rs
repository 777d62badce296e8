//! Rich text as CommonMark (with `~~strike~~`, the one extension GitHub's and most
//! renderers read): every character of the text comes back when the Markdown is parsed,
//! because every character that could be read as syntax is escaped and spaces that
//! Markdown would drop are written as character references. A mark that starts or ends between a letter
//! and punctuation (`a`**`.b`**) cannot be written with CommonMark's delimiters and reads
//! back without it; its text is kept.

use automerge::{Automerge, ChangeHash};

use crate::inline::{self, Mark, Piece};
use crate::rich_text::{self, Block, Kind};
use crate::Error;

/// The text object at `path` as Markdown.
pub fn markdown(
    doc: &Automerge,
    path: &[String],
    heads: Option<&[ChangeHash]>,
) -> Result<String, Error> {
    Ok(render(&rich_text::blocks(doc, path, heads)?))
}

/// Every list item is indented three columns per level: its marker (`-  `, `1. `) is three
/// wide, so its content starts where a nested item's marker must.
const INDENT: &str = "   ";

fn render(blocks: &[Block]) -> String {
    let mut out = String::new();
    // The depth of the list item before, when the block before was one.
    let mut item_depth: Option<usize> = None;
    for block in blocks {
        crate::interrupts::check();
        let is_item = matches!(block.kind, Kind::OrderedItem | Kind::UnorderedItem);
        if block.runs.iter().all(|r| r.text.trim_matches('\n').is_empty()) && !is_item {
            continue; // an empty paragraph has no Markdown
        }
        if !out.is_empty() {
            out.push_str(if is_item && item_depth.is_some() { "\n" } else { "\n\n" });
        }
        let runs = trimmed(block);
        match block.kind {
            Kind::Paragraph => out.push_str(&inline(&runs, "", true)),
            Kind::Heading(level) => {
                out.push_str(&"#".repeat(level.into()));
                out.push(' ');
                // A heading is one line: its breaks become spaces.
                out.push_str(&inline(&runs, "", false));
            }
            Kind::OrderedItem | Kind::UnorderedItem => {
                // An item can only nest one level deeper than the item before it.
                let depth = block.depth.min(item_depth.map_or(0, |d| d + 1));
                let indent = INDENT.repeat(depth);
                out.push_str(&indent);
                out.push_str(if block.kind == Kind::OrderedItem { "1. " } else { "-  " });
                out.push_str(&inline(&runs, &format!("{indent}{INDENT}"), true));
                item_depth = Some(depth);
            }
            Kind::CodeBlock => {
                let code: String = runs.iter().map(|r| r.text.as_str()).collect();
                let fence = "`".repeat(longest_run(&code, '`').max(2) + 1);
                out.push_str(&format!("{fence}\n{code}\n{fence}"));
            }
            Kind::Blockquote => {
                out.push_str("> ");
                out.push_str(&inline(&runs, "> ", true));
            }
        }
        if !is_item {
            item_depth = None;
        }
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

/// The block's runs without line breaks at its start and end, which Markdown cannot hold.
fn trimmed(block: &Block) -> Vec<rich_text::Run> {
    let mut runs = block.runs.clone();
    if let Some(first) = runs.first_mut() {
        first.text = first.text.trim_start_matches('\n').to_string();
    }
    if let Some(last) = runs.last_mut() {
        last.text = last.text.trim_end_matches('\n').to_string();
    }
    runs
}

/// Marked runs as Markdown inline text; line breaks are hard breaks continued with
/// `indent` (or spaces, when `breaks` is false).
fn inline(runs: &[rich_text::Run], indent: &str, breaks: bool) -> String {
    let pieces = inline::pieces(runs);
    let mut out = String::new();
    let mut code: Option<String> = None;
    let mut at_line_start = true;
    // For each open mark, whether its delimiter is made of `_`.
    let mut underscores: Vec<bool> = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        match piece {
            Piece::Open(Mark::Code) => code = Some(String::new()),
            Piece::Close(Mark::Code) => {
                out.push_str(&code_span(&code.take().unwrap_or_default()));
                at_line_start = false;
            }
            Piece::Text(text) if code.is_some() => code.get_or_insert_default().push_str(text),
            Piece::Open(mark) => {
                // A delimiter right after another of the same character would join it in
                // one run: emphasis then uses `_` instead of `*`, and the closer matches.
                let underscore = out.ends_with('*');
                out.push_str(&delimiter(mark, true, underscore));
                underscores.push(underscore);
            }
            Piece::Close(Mark::Link(url)) => {
                underscores.pop();
                out.push_str(&format!("](<{}>)", destination(url)));
            }
            Piece::Close(mark) => {
                let underscore = underscores.pop().unwrap_or(false);
                out.push_str(&delimiter(mark, false, underscore));
            }
            Piece::Text(text) => {
                let line_ends = matches!(pieces.get(i + 1), None | Some(Piece::Break))
                    || pieces[i + 1..].iter().all(|p| matches!(p, Piece::Close(_)));
                out.push_str(&escape(text, at_line_start, line_ends));
                at_line_start = false;
            }
            Piece::Break if breaks => {
                out.push_str("\\\n");
                out.push_str(indent);
                at_line_start = true;
            }
            Piece::Break => out.push(' '),
        }
    }
    out
}

fn delimiter(mark: &Mark, open: bool, underscore: bool) -> String {
    match mark {
        Mark::Link(_) if open => "[".into(),
        Mark::Bold if underscore => "__".into(),
        Mark::Bold => "**".into(),
        Mark::Italic if underscore => "_".into(),
        Mark::Italic => "*".into(),
        Mark::Strike => "~~".into(),
        Mark::Link(_) | Mark::Code => String::new(),
    }
}

/// Text with every character that Markdown could read as syntax escaped, and the spaces
/// at a line's start or end, which Markdown drops, as references. Some characters are
/// syntax only where a line starts (`-`, `+` and `=`, and `.` or `)` after a number).
fn escape(text: &str, line_start: bool, line_end: bool) -> String {
    let chars: Vec<char> = text.chars().collect();
    let leading = if line_start { chars.iter().take_while(|c| is_blank(**c)).count() } else { 0 };
    let trailing =
        if line_end { chars.iter().rev().take_while(|c| is_blank(**c)).count() } else { 0 };
    let mut out = String::with_capacity(text.len());
    // Whether everything since the line's start (its blanks aside) is digits.
    let mut digits_only = line_start;
    for (i, c) in chars.iter().enumerate() {
        let first = line_start && i == leading;
        if i < leading || i >= chars.len().saturating_sub(trailing) {
            out.push_str(&format!("&#{};", u32::from(*c)));
            continue;
        }
        let escaped = match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '&' | '~' | '!' | '#' | '|' => true,
            '-' | '+' | '=' => first,
            '.' | ')' => digits_only && i > leading,
            _ => false,
        };
        if escaped {
            out.push('\\');
        }
        out.push(*c);
        digits_only = digits_only && c.is_ascii_digit();
    }
    out
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// Code as a code span: fenced with one more backtick than its longest run of them, and
/// padded with a space where it starts or ends with a backtick or a space.
fn code_span(code: &str) -> String {
    let fence = "`".repeat(longest_run(code, '`') + 1);
    let pad = code.starts_with(['`', ' ']) || code.ends_with(['`', ' ']);
    let pad = if pad && !code.chars().all(|c| c == ' ') { " " } else { "" };
    format!("{fence}{pad}{code}{pad}{fence}")
}

/// A link's URL inside `<…>`: the characters that would end it escaped or encoded.
fn destination(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    for c in url.chars() {
        match c {
            '<' | '>' | '\\' | '&' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' => out.push_str(&format!("%{:02X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

fn longest_run(text: &str, of: char) -> usize {
    let (mut longest, mut current) = (0, 0);
    for c in text.chars() {
        current = if c == of { current + 1 } else { 0 };
        longest = longest.max(current);
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rich_text::tests::{
        blocks_of, expected, hostile_text, overlapping_marks, Char, Leaf,
    };
    use automerge::ReadDoc;
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

    /// The blocks and marked characters a CommonMark parser reads from `markdown`.
    fn read_back(markdown: &str) -> Vec<Leaf> {
        let mut leaves: Vec<Leaf> = Vec::new();
        let mut marks: Vec<String> = Vec::new();
        // The lists around, ordered or not, and whether the current item has its leaf.
        let mut lists: Vec<bool> = Vec::new();
        let mut quote = false;
        let mut item_has_leaf = false;
        let push = |leaves: &mut Vec<Leaf>, kind: String| leaves.push(Leaf { kind, chars: vec![] });
        for event in Parser::new_ext(markdown, Options::ENABLE_STRIKETHROUGH) {
            let text = |leaves: &mut Vec<Leaf>, text: &str, marks: &[String]| {
                let leaf = leaves.last_mut().expect("text in a block");
                leaf.chars
                    .extend(text.chars().map(|c| -> Char { (c, marks.iter().cloned().collect()) }));
            };
            match event {
                Event::Start(Tag::List(start)) => lists.push(start.is_some()),
                Event::End(TagEnd::List(_)) => {
                    lists.pop();
                }
                Event::End(TagEnd::Item) => item_has_leaf = false,
                Event::Start(Tag::Item) => {
                    let kind = if *lists.last().unwrap() { "ordered" } else { "unordered" };
                    push(&mut leaves, format!("{kind} {}", lists.len() - 1));
                    item_has_leaf = true;
                }
                Event::Start(Tag::Paragraph) if item_has_leaf => item_has_leaf = false,
                Event::Start(Tag::Paragraph) => {
                    push(&mut leaves, (if quote { "quote" } else { "paragraph" }).into())
                }
                Event::Start(Tag::Heading { level, .. }) => {
                    push(&mut leaves, format!("heading {}", level as u8))
                }
                Event::Start(Tag::CodeBlock(_)) => push(&mut leaves, "code".into()),
                Event::Start(Tag::BlockQuote(_)) => quote = true,
                Event::End(TagEnd::BlockQuote(_)) => quote = false,
                Event::Start(Tag::Strong) => marks.push("bold".into()),
                Event::Start(Tag::Emphasis) => marks.push("italic".into()),
                Event::Start(Tag::Strikethrough) => marks.push("strike".into()),
                Event::Start(Tag::Link { dest_url, .. }) => marks.push(format!("link {dest_url}")),
                Event::End(
                    TagEnd::Strong | TagEnd::Emphasis | TagEnd::Strikethrough | TagEnd::Link,
                ) => {
                    marks.pop();
                }
                Event::Text(t) => text(&mut leaves, &t, &marks),
                Event::Code(t) => {
                    let mut with_code = marks.clone();
                    with_code.push("code".into());
                    text(&mut leaves, &t, &with_code)
                }
                Event::HardBreak => text(&mut leaves, "\n", &[]),
                Event::SoftBreak => text(&mut leaves, " ", &[]),
                Event::Html(_) | Event::InlineHtml(_) => panic!("HTML in:\n{markdown}"),
                _ => {}
            }
        }
        // A fenced code block's text ends with a line break that is not the code's.
        for leaf in &mut leaves {
            if leaf.kind == "code" && leaf.chars.last().is_some_and(|(c, _)| *c == '\n') {
                leaf.chars.pop();
            }
        }
        leaves
    }

    #[test]
    fn hostile_text_reads_back_as_it_was() {
        let mut doc = hostile_text();
        let blocks = blocks_of(&mut doc);
        let markdown = render(&blocks);
        let read = read_back(&markdown);
        let wanted = expected(&blocks, true);
        assert_eq!(
            read.iter().map(|l| (l.kind.clone(), l.text())).collect::<Vec<_>>(),
            wanted.iter().map(|l| (l.kind.clone(), l.text())).collect::<Vec<_>>(),
            "the text of every block comes back:\n{markdown}"
        );
        assert_eq!(read, wanted, "and its marks:\n{markdown}");
        assert!(!markdown.to_lowercase().contains("](< javascript"), "{markdown}");
        let text = doc.text(doc.get(automerge::ROOT, "content").unwrap().unwrap().1).unwrap();
        assert!(text.contains("javascript"), "the text keeps the word, the output only links");
    }

    #[test]
    fn every_mark_alone_and_together() {
        for (case, blocks) in overlapping_marks() {
            let markdown = render(&blocks);
            assert_eq!(read_back(&markdown), expected(&blocks, true), "{case}: {markdown}");
        }
    }

    #[test]
    fn an_empty_text_is_empty_markdown() {
        let mut doc = automerge::AutoCommit::new();
        use automerge::transaction::Transactable;
        doc.put_object(automerge::ROOT, "content", automerge::ObjType::Text).unwrap();
        assert_eq!(render(&blocks_of(&mut doc)), "");
    }
}
