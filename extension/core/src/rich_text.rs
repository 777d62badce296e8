//! Rich text as blocks of marked runs, read from the spans of a text object (see
//! [`spans`](crate::spans)), for the Markdown and HTML renderings. Blocks are in the JS
//! library's shape: a block marker's `type` is `paragraph`, `heading` (with `attrs.level`),
//! `ordered-list-item`, `unordered-list-item`, `code-block` or `blockquote`, and its
//! `parents` the types of the blocks it nests in. Text before the first marker is a
//! paragraph; an unknown type is a paragraph too. The marks read are `bold`, `italic`,
//! `code`, `strike` and `link` (its value the URL); others are left out.

use automerge::iter::Span;
use automerge::{Automerge, ChangeHash, ScalarValue};
use serde_json::Value as Json;

use crate::{json, spans, Error};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Paragraph,
    /// Level 1 to 6.
    Heading(u8),
    OrderedItem,
    UnorderedItem,
    CodeBlock,
    Blockquote,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Block {
    pub kind: Kind,
    /// How many list items it nests in (its `parents` that are list items).
    pub depth: usize,
    pub runs: Vec<Run>,
}

/// Text with the same marks throughout.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Run {
    pub text: String,
    pub marks: Marks,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Marks {
    pub bold: bool,
    pub italic: bool,
    pub strike: bool,
    pub code: bool,
    /// Only a link whose scheme is `http`, `https` or `mailto`: any other is dropped.
    pub link: Option<String>,
}

/// The blocks of the text object at `path`.
pub(crate) fn blocks(
    doc: &Automerge,
    path: &[String],
    heads: Option<&[ChangeHash]>,
) -> Result<Vec<Block>, Error> {
    let mut blocks: Vec<Block> = Vec::new();
    for span in spans::read(doc, path, heads)? {
        match span {
            Span::Block(attributes) => blocks.push(block(&json::map_object(&attributes))),
            Span::Text { text, marks } => {
                if blocks.is_empty() {
                    blocks.push(Block { kind: Kind::Paragraph, depth: 0, runs: Vec::new() });
                }
                let marks = marks
                    .map(|marks| {
                        let mut read = Marks::default();
                        for (name, value) in marks.iter() {
                            read.set(name, value);
                        }
                        read
                    })
                    .unwrap_or_default();
                let runs = &mut blocks.last_mut().expect("pushed above").runs;
                match runs.last_mut() {
                    Some(last) if last.marks == marks => last.text.push_str(&text),
                    _ => runs.push(Run { text, marks }),
                }
            }
        }
    }
    Ok(blocks)
}

fn block(attributes: &Json) -> Block {
    let kind = match attributes["type"].as_str() {
        Some("heading") => {
            let level = attributes["attrs"]["level"].as_u64().unwrap_or(1).clamp(1, 6);
            Kind::Heading(level as u8)
        }
        Some("ordered-list-item") => Kind::OrderedItem,
        Some("unordered-list-item") => Kind::UnorderedItem,
        Some("code-block") => Kind::CodeBlock,
        Some("blockquote") => Kind::Blockquote,
        _ => Kind::Paragraph,
    };
    let depth = attributes["parents"].as_array().map_or(0, |parents| {
        parents
            .iter()
            .filter(|p| matches!(p.as_str(), Some("ordered-list-item" | "unordered-list-item")))
            .count()
    });
    Block { kind, depth, runs: Vec::new() }
}

impl Marks {
    fn set(&mut self, name: &str, value: &ScalarValue) {
        let on = !matches!(value, ScalarValue::Null | ScalarValue::Boolean(false));
        match name {
            "bold" | "strong" => self.bold = on,
            "italic" | "em" | "emphasis" => self.italic = on,
            "strike" | "strikethrough" => self.strike = on,
            "code" => self.code = on,
            "link" => self.link = link_target(value),
            _ => {}
        }
    }

    /// The marks that both have.
    pub fn common(&self, other: &Marks) -> Marks {
        Marks {
            bold: self.bold && other.bold,
            italic: self.italic && other.italic,
            strike: self.strike && other.strike,
            code: self.code && other.code,
            link: self.link.clone().filter(|_| self.link == other.link),
        }
    }
}

/// The URL of a link mark, when it is one a page may link to. A link mark's value is the
/// URL, or an object with an `href`, as editors write them.
fn link_target(value: &ScalarValue) -> Option<String> {
    let ScalarValue::Str(url) = value else { return None };
    let url = url.trim();
    let scheme = url.split_once(':')?.0.to_ascii_lowercase();
    matches!(scheme.as_str(), "http" | "https" | "mailto").then(|| url.to_string())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use automerge::marks::{ExpandMark, Mark};
    use automerge::transaction::Transactable;
    use automerge::{AutoCommit, ObjId, ObjType, ReadDoc, ROOT};

    /// A JS-shaped block marker at `index` of `text`.
    pub fn split_block(
        doc: &mut AutoCommit,
        text: &ObjId,
        index: usize,
        kind: &str,
        parents: &[&str],
    ) {
        let block = doc.split_block(text, index).unwrap();
        doc.put(&block, "type", kind).unwrap();
        let list = doc.put_object(&block, "parents", ObjType::List).unwrap();
        for (i, parent) in parents.iter().enumerate() {
            doc.insert(&list, i, *parent).unwrap();
        }
        let attrs = doc.put_object(&block, "attrs", ObjType::Map).unwrap();
        if kind == "heading" {
            doc.put(&attrs, "level", 2_i64).unwrap();
        }
    }

    pub fn mark(
        doc: &mut AutoCommit,
        text: &ObjId,
        name: &str,
        value: ScalarValue,
        range: (usize, usize),
    ) {
        doc.mark(text, Mark::new(name.into(), value, range.0, range.1), ExpandMark::None).unwrap();
    }

    /// The blocks of the text at `content`.
    pub fn blocks_of(doc: &mut AutoCommit) -> Vec<Block> {
        blocks(doc.document(), &["content".into()], None).unwrap()
    }

    /// Each pair of marks overlapping, in both orders, at word edges: the blocks of each.
    pub fn overlapping_marks() -> Vec<(String, Vec<Block>)> {
        let names = ["bold", "italic", "strike", "code"];
        let mut cases = Vec::new();
        for first in names {
            for second in names {
                let mut doc = AutoCommit::new();
                let text = doc.put_object(ROOT, "content", ObjType::Text).unwrap();
                doc.splice_text(&text, 0, 0, "one two three four").unwrap();
                mark(&mut doc, &text, first, true.into(), (0, 13));
                mark(&mut doc, &text, second, true.into(), (4, 18));
                cases.push((format!("{first} over {second}"), blocks_of(&mut doc)));
            }
        }
        cases
    }

    /// A character and the marks over it (`bold`, `italic`, `strike`, `code`, `link <url>`).
    pub type Char = (char, std::collections::BTreeSet<String>);

    /// A block as a renderer's output reads back: its kind (`paragraph`, `heading 2`,
    /// `ordered 0` for an ordered item at depth 0, `unordered 1`, `code`, `quote`) and text.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Leaf {
        pub kind: String,
        pub chars: Vec<Char>,
    }

    impl Leaf {
        pub fn text(&self) -> String {
            self.chars.iter().map(|(c, _)| c).collect()
        }
    }

    /// What `blocks` must read back as: each block's text with the marks that
    /// [`inline::pieces`](crate::inline::pieces) nests (whitespace out of mark edges, none
    /// across a line break). `markdown` drops empty paragraphs and a block's leading and
    /// trailing line breaks, and turns a heading's breaks into spaces, as Markdown must.
    pub fn expected(blocks: &[Block], markdown: bool) -> Vec<Leaf> {
        use crate::inline::{pieces, Mark, Piece};
        let mut leaves = Vec::new();
        let mut item_depth: Option<usize> = None;
        for block in blocks {
            let is_item = matches!(block.kind, Kind::OrderedItem | Kind::UnorderedItem);
            let mut runs = block.runs.clone();
            if markdown {
                if let Some(first) = runs.first_mut() {
                    first.text = first.text.trim_start_matches('\n').to_string();
                }
                if let Some(last) = runs.last_mut() {
                    last.text = last.text.trim_end_matches('\n').to_string();
                }
                if !is_item && runs.iter().all(|r| r.text.is_empty()) {
                    continue;
                }
            }
            let kind = match block.kind {
                Kind::Paragraph => "paragraph".to_string(),
                Kind::Heading(level) => format!("heading {level}"),
                Kind::OrderedItem | Kind::UnorderedItem => {
                    let depth = block.depth.min(item_depth.map_or(0, |d| d + 1));
                    item_depth = Some(depth);
                    let list =
                        if block.kind == Kind::OrderedItem { "ordered" } else { "unordered" };
                    format!("{list} {depth}")
                }
                Kind::CodeBlock => "code".to_string(),
                Kind::Blockquote => "quote".to_string(),
            };
            if !is_item {
                item_depth = None;
            }
            let mut chars = Vec::new();
            if block.kind == Kind::CodeBlock {
                let code: String = runs.iter().map(|r| r.text.as_str()).collect();
                chars.extend(code.chars().map(|c| (c, Default::default())));
            } else {
                let mut open: Vec<String> = Vec::new();
                for piece in pieces(&runs) {
                    match piece {
                        Piece::Open(mark) => open.push(name(&mark)),
                        Piece::Close(_) => {
                            open.pop();
                        }
                        Piece::Text(text) => {
                            chars.extend(text.chars().map(|c| (c, open.iter().cloned().collect())))
                        }
                        Piece::Break => {
                            let c = if markdown && matches!(block.kind, Kind::Heading(_)) {
                                ' '
                            } else {
                                '\n'
                            };
                            chars.push((c, Default::default()));
                        }
                    }
                }
            }
            leaves.push(Leaf { kind, chars });
        }
        fn name(mark: &Mark) -> String {
            match mark {
                Mark::Link(url) => format!("link {url}"),
                Mark::Bold => "bold".into(),
                Mark::Italic => "italic".into(),
                Mark::Strike => "strike".into(),
                Mark::Code => "code".into(),
            }
        }
        leaves
    }

    /// A rich text with every kind of block and mark, and text that means something to
    /// Markdown and HTML: none of it may be read as syntax.
    pub fn hostile_text() -> AutoCommit {
        let mut doc = AutoCommit::new();
        let text = doc.put_object(ROOT, "content", ObjType::Text).unwrap();
        let lines = [
            "<script>alert('x')</script> & \"quotes\" **not bold** _not em_ [a](javascript:alert(1))",
            "# not a heading <b>",
            "    four spaces, not code; trailing  ",
            "1. not a list ` tick `` ticks",
            "bold then italic overlapping, and a 👋 wave",
            "item one",
            "nested item",
            "ordered item",
            "fn main() {\n    println!(\"<hi>\");\n}",
            "quoted *text* > here",
            "line one\n- not an item\n===\n2) not a list\n+ plus | pipe",
            "links: good, mail, bad, case",
            "",
        ];
        doc.splice_text(&text, 0, 0, &lines.join("\n")).unwrap();
        let s = doc.text(&text).unwrap();
        let at = |needle: &str| {
            let byte = s.find(needle).unwrap();
            let start = s[..byte].chars().count();
            (start, start + needle.chars().count())
        };
        // Overlapping and unbalanced marks, a mark that runs into the next block, a code mark
        // over backticks, links with schemes good and bad.
        let (start, _) = at("bold then");
        let (_, end) = at("overlapping");
        mark(&mut doc, &text, "bold", true.into(), (start, end));
        let (start, _) = at("italic");
        let (_, end) = at("and a 👋");
        mark(&mut doc, &text, "italic", true.into(), (start, end));
        mark(&mut doc, &text, "strike", true.into(), at("wave"));
        mark(&mut doc, &text, "code", true.into(), at("` tick `` ticks"));
        let (start, _) = at("not a heading");
        mark(&mut doc, &text, "bold", true.into(), (start, at("four spaces").1));
        mark(&mut doc, &text, "link", "https://example.com/?a=1&amp;b=\"<x>\"".into(), at("good"));
        mark(&mut doc, &text, "link", "mailto:someone@example.com".into(), at("mail"));
        mark(&mut doc, &text, "link", "javascript:alert(1)".into(), at("bad"));
        mark(&mut doc, &text, "link", " JaVaScRiPt:alert(2)".into(), at("case"));
        mark(&mut doc, &text, "italic", true.into(), at("quoted"));
        // Blocks, from the end so that the positions found above stay right.
        let blocks: [(&str, &str, &[&str]); 11] = [
            ("links: good", "paragraph", &[]),
            ("line one", "paragraph", &[]),
            ("quoted", "blockquote", &[]),
            ("fn main", "code-block", &[]),
            ("ordered item", "ordered-list-item", &[]),
            ("nested item", "unordered-list-item", &["unordered-list-item"]),
            ("item one", "unordered-list-item", &[]),
            ("bold then", "paragraph", &[]),
            ("1. not a list", "paragraph", &[]),
            ("    four spaces", "paragraph", &[]),
            ("# not a heading", "heading", &[]),
        ];
        for (needle, kind, parents) in blocks {
            // The block marker takes the place of the line break before the line.
            let (start, _) = at(needle);
            doc.delete(&text, start - 1).unwrap();
            split_block(&mut doc, &text, start - 1, kind, parents);
        }
        doc
    }

    #[test]
    fn blocks_with_their_marked_runs() {
        let mut doc = AutoCommit::new();
        let text = doc.put_object(ROOT, "content", ObjType::Text).unwrap();
        doc.splice_text(&text, 0, 0, "Intro. Title. item").unwrap();
        mark(&mut doc, &text, "bold", true.into(), (0, 5));
        mark(&mut doc, &text, "link", "javascript:alert(1)".into(), (7, 12));
        split_block(&mut doc, &text, 14, "unordered-list-item", &["ordered-list-item"]);
        split_block(&mut doc, &text, 7, "heading", &[]);
        let blocks = blocks(doc.document(), &["content".into()], None).unwrap();
        let bold = Marks { bold: true, ..Marks::default() };
        let plain = Marks::default();
        assert_eq!(blocks.len(), 3);
        assert_eq!((blocks[0].kind, blocks[0].depth), (Kind::Paragraph, 0));
        assert_eq!(
            blocks[0].runs,
            vec![
                Run { text: "Intro".into(), marks: bold },
                Run { text: ". ".into(), marks: plain.clone() }
            ]
        );
        assert_eq!(blocks[1].kind, Kind::Heading(2));
        assert_eq!(
            blocks[1].runs,
            vec![Run { text: "Title. ".into(), marks: plain }],
            "no javascript: link"
        );
        assert_eq!((blocks[2].kind, blocks[2].depth), (Kind::UnorderedItem, 1));
    }
}
