//! Rich text as HTML that is safe to put in a page: every character of text and of an
//! attribute is escaped (`&`, `<`, `>`, `"`, `'`), the only attribute written is a link's
//! `href`, and only links to `http`, `https` and `mailto` URLs are written (see
//! [`rich_text`](crate::rich_text)); no element but those of the blocks and marks is made.

use automerge::{Automerge, ChangeHash};

use crate::inline::{self, Mark, Piece};
use crate::rich_text::{self, Block, Kind};
use crate::Error;

/// The text object at `path` as an HTML fragment.
pub fn html(
    doc: &Automerge,
    path: &[String],
    heads: Option<&[ChangeHash]>,
) -> Result<String, Error> {
    Ok(render(&rich_text::blocks(doc, path, heads)?))
}

fn render(blocks: &[Block]) -> String {
    let mut out = String::new();
    // The lists open around the current item, outermost first, each with an `<li>` open.
    let mut lists: Vec<&'static str> = Vec::new();
    for block in blocks {
        crate::interrupts::check();
        let list = match block.kind {
            Kind::OrderedItem => Some("ol"),
            Kind::UnorderedItem => Some("ul"),
            _ => None,
        };
        let Some(list) = list else {
            close_lists(&mut out, &mut lists, 0);
            let (open, close) = match block.kind {
                Kind::Heading(level) => (format!("<h{level}>"), format!("</h{level}>")),
                Kind::CodeBlock => ("<pre><code>".into(), "</code></pre>".into()),
                Kind::Blockquote => ("<blockquote><p>".into(), "</p></blockquote>".into()),
                _ => ("<p>".into(), "</p>".into()),
            };
            out.push_str(&open);
            if block.kind == Kind::CodeBlock {
                let code: String = block.runs.iter().map(|r| r.text.as_str()).collect();
                out.push_str(&escape(&code));
            } else {
                inline(&mut out, &block.runs);
            }
            out.push_str(&close);
            out.push('\n');
            continue;
        };
        // An item can only nest one level deeper than the item before it.
        let depth = block.depth.min(lists.len());
        close_lists(&mut out, &mut lists, depth + 1);
        if lists.len() == depth + 1 && lists[depth] == list {
            out.push_str("</li>\n<li>");
        } else {
            close_lists(&mut out, &mut lists, depth);
            out.push_str(&format!("<{list}>\n<li>"));
            lists.push(list);
        }
        inline(&mut out, &block.runs);
    }
    close_lists(&mut out, &mut lists, 0);
    out
}

/// Closes the lists deeper than `keep`, each with its open item.
fn close_lists(out: &mut String, lists: &mut Vec<&'static str>, keep: usize) {
    while lists.len() > keep {
        let list = lists.pop().expect("longer than keep");
        out.push_str(&format!("</li>\n</{list}>"));
        out.push_str(if lists.is_empty() { "\n" } else { "" });
    }
}

fn inline(out: &mut String, runs: &[rich_text::Run]) {
    for piece in inline::pieces(runs) {
        match piece {
            Piece::Open(Mark::Link(url)) => out.push_str(&format!("<a href=\"{}\">", escape(&url))),
            Piece::Open(mark) => out.push_str(&format!("<{}>", tag(&mark))),
            Piece::Close(mark) => out.push_str(&format!("</{}>", tag(&mark))),
            Piece::Text(text) => out.push_str(&escape(&text)),
            Piece::Break => out.push_str("<br>"),
        }
    }
}

fn tag(mark: &Mark) -> &'static str {
    match mark {
        Mark::Link(_) => "a",
        Mark::Bold => "strong",
        Mark::Italic => "em",
        Mark::Strike => "s",
        Mark::Code => "code",
    }
}

/// Text or an attribute's value with every character that HTML reads as syntax escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rich_text::tests::{
        blocks_of, expected, hostile_text, overlapping_marks, Char, Leaf,
    };
    use automerge::transaction::Transactable;
    use automerge::{AutoCommit, ObjType, ROOT};
    use scraper::{ElementRef, Html, Node};

    const ELEMENTS: [&str; 16] = [
        "p",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "ul",
        "ol",
        "li",
        "pre",
        "code",
        "blockquote",
        "strong",
        "em",
        "s",
    ];

    /// The blocks and marked characters an HTML parser reads from `html`; fails on any
    /// element or attribute the renderer must not make.
    fn read_back(html: &str) -> Vec<Leaf> {
        let fragment = Html::parse_fragment(html);
        assert!(fragment.errors.is_empty(), "{:?} in:\n{html}", fragment.errors);
        let mut leaves = Vec::new();
        walk(fragment.root_element(), &mut Vec::new(), &mut leaves, html);
        leaves
    }

    fn walk(element: ElementRef<'_>, marks: &mut Vec<String>, leaves: &mut Vec<Leaf>, html: &str) {
        for child in element.children() {
            match child.value() {
                Node::Text(text) if !in_leaf(element) => {
                    assert!(text.trim().is_empty(), "text outside a block in:\n{html}");
                }
                Node::Text(text) => {
                    let leaf: &mut Leaf = leaves.last_mut().expect("text in a block");
                    let chars =
                        text.chars().map(|c| -> Char { (c, marks.iter().cloned().collect()) });
                    leaf.chars.extend(chars);
                }
                Node::Element(e) => {
                    let name = e.name();
                    let child = ElementRef::wrap(child).unwrap();
                    let attributes: Vec<_> = e.attrs().collect();
                    let mark = match name {
                        "a" => {
                            assert_eq!(attributes.len(), 1, "{html}");
                            let (attribute, href) = attributes[0];
                            assert_eq!(attribute, "href");
                            let scheme = href.split(':').next().unwrap().to_ascii_lowercase();
                            assert!(
                                ["http", "https", "mailto"].contains(&scheme.as_str()),
                                "{html}"
                            );
                            Some(format!("link {href}"))
                        }
                        "br" => {
                            leaves.last_mut().unwrap().chars.push(('\n', Default::default()));
                            None
                        }
                        name => {
                            assert!(ELEMENTS.contains(&name), "<{name}> in:\n{html}");
                            assert!(attributes.is_empty(), "{html}");
                            match name {
                                "strong" => Some("bold".into()),
                                "em" => Some("italic".into()),
                                "s" => Some("strike".into()),
                                "code" if e.name() == "code" && !in_pre(child) => {
                                    Some("code".into())
                                }
                                _ => None,
                            }
                        }
                    };
                    let block = match name {
                        "p" if in_blockquote(child) => Some("quote".to_string()),
                        "p" => Some("paragraph".to_string()),
                        "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => {
                            Some(format!("heading {}", &name[1..]))
                        }
                        "pre" => Some("code".into()),
                        "li" => {
                            let list = child.parent().and_then(ElementRef::wrap).unwrap();
                            let kind =
                                if list.value().name() == "ol" { "ordered" } else { "unordered" };
                            let depth = child.ancestors().filter(|a| {
                                a.value()
                                    .as_element()
                                    .is_some_and(|e| matches!(e.name(), "ul" | "ol"))
                            });
                            Some(format!("{kind} {}", depth.count() - 1))
                        }
                        _ => None,
                    };
                    if let Some(kind) = block {
                        leaves.push(Leaf { kind, chars: Vec::new() });
                    }
                    marks.extend(mark.clone());
                    walk(child, marks, leaves, html);
                    if mark.is_some() {
                        marks.pop();
                    }
                    // A nested list ends its item's text: what follows is the item's again,
                    // and the renderer writes nothing there.
                }
                _ => {}
            }
        }
    }

    /// Whether `element` is, or is in, an element that holds a block's text (the layout
    /// between blocks and list items is not text).
    fn in_leaf(element: ElementRef<'_>) -> bool {
        let leaf = |e: &scraper::node::Element| {
            matches!(e.name(), "p" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6" | "li" | "pre")
        };
        leaf(element.value())
            || element.ancestors().any(|a| a.value().as_element().is_some_and(leaf))
                && !matches!(element.value().name(), "ul" | "ol")
    }

    fn in_pre(element: ElementRef<'_>) -> bool {
        element.parent().and_then(ElementRef::wrap).is_some_and(|p| p.value().name() == "pre")
    }

    fn in_blockquote(element: ElementRef<'_>) -> bool {
        element
            .parent()
            .and_then(ElementRef::wrap)
            .is_some_and(|p| p.value().name() == "blockquote")
    }

    #[test]
    fn hostile_text_reads_back_as_it_was_and_nothing_else() {
        let mut doc = hostile_text();
        let blocks = blocks_of(&mut doc);
        let html = render(&blocks);
        assert_eq!(read_back(&html), expected(&blocks, false), "{html}");
        assert!(!html.contains("<script"), "{html}");
        assert!(
            !html.to_lowercase().contains("href=\"javascript")
                && !html.to_lowercase().contains("href=\" javascript")
        );
    }

    #[test]
    fn every_mark_alone_and_together() {
        for (case, blocks) in overlapping_marks() {
            let html = render(&blocks);
            assert_eq!(read_back(&html), expected(&blocks, false), "{case}: {html}");
        }
    }

    #[test]
    fn lists_nest_and_end() {
        let mut doc = AutoCommit::new();
        let text = doc.put_object(ROOT, "content", ObjType::Text).unwrap();
        doc.splice_text(&text, 0, 0, "abcde").unwrap();
        use crate::rich_text::tests::split_block;
        split_block(&mut doc, &text, 4, "paragraph", &[]);
        split_block(&mut doc, &text, 3, "ordered-list-item", &[]);
        split_block(&mut doc, &text, 2, "ordered-list-item", &["unordered-list-item"]);
        split_block(&mut doc, &text, 1, "unordered-list-item", &[]);
        split_block(&mut doc, &text, 0, "unordered-list-item", &[]);
        assert_eq!(
            render(&blocks_of(&mut doc)),
            "<ul>\n<li>a</li>\n<li>b<ol>\n<li>c</li>\n</ol></li>\n</ul>\n<ol>\n<li>d</li>\n</ol>\n<p>e</p>\n"
        );
    }
}
