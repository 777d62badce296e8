//! The edits from SQL that the SQL benches time (`sql/sql edit: <function>`), each beside
//! the `jsonb` write it mirrors, by which the goals find and judge them.

use fixtures::generated::Kind;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqlEdit {
    /// A root key set to a string, again each time.
    Set,
    /// A list item (a map) inserted at the start of `items`.
    Insert,
    /// A root key deleted (set, untimed, before each).
    Delete,
    /// Words typed into the middle of `content`.
    Splice,
    /// A root counter incremented (made, untimed, before the first).
    Increment,
    /// The start of `content` marked.
    Mark,
    /// A block split in the middle of a rich text's `content`.
    SplitBlock,
    /// The document updated to its JSON with a new title, as an app that speaks JSON writes.
    Update,
}

impl SqlEdit {
    pub const ALL: [SqlEdit; 8] = [
        SqlEdit::Set,
        SqlEdit::Insert,
        SqlEdit::Delete,
        SqlEdit::Splice,
        SqlEdit::Increment,
        SqlEdit::Mark,
        SqlEdit::SplitBlock,
        SqlEdit::Update,
    ];

    /// The SQL function timed.
    pub fn function(self) -> &'static str {
        match self {
            SqlEdit::Set => "automerge_set",
            SqlEdit::Insert => "automerge_insert",
            SqlEdit::Delete => "automerge_delete",
            SqlEdit::Splice => "automerge_splice",
            SqlEdit::Increment => "automerge_increment",
            SqlEdit::Mark => "automerge_mark",
            SqlEdit::SplitBlock => "automerge_split_block",
            SqlEdit::Update => "automerge_update",
        }
    }

    /// What the `jsonb` column does instead, as the goals name it.
    pub fn jsonb_twin(self) -> &'static str {
        match self {
            SqlEdit::Set | SqlEdit::Increment => "`jsonb_set`",
            SqlEdit::Insert => "`jsonb_insert`",
            SqlEdit::Delete => "`#-`",
            SqlEdit::Splice | SqlEdit::SplitBlock => "`jsonb_set` of the edited text",
            // jsonb has no marks: the value is written again, as a mark's twin among the
            // client writes.
            SqlEdit::Mark => "the value written again",
            SqlEdit::Update => "the new JSON written",
        }
    }

    /// The operation the report and the goals name it by (its group is `sql/<operation>`).
    pub fn operation(self) -> String {
        format!("sql edit: {}", self.function())
    }

    /// Whether a fixture of `kind` has what the edit edits.
    pub fn applies_to(self, kind: Kind) -> bool {
        match self {
            SqlEdit::Set | SqlEdit::Delete | SqlEdit::Increment | SqlEdit::Update => true,
            SqlEdit::Insert => kind == Kind::MapList,
            SqlEdit::Splice | SqlEdit::Mark => kind != Kind::MapList,
            SqlEdit::SplitBlock => kind == Kind::RichText,
        }
    }
}
