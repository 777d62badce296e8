//! What an appended change does to the document's JSON, as the structure index
//! ([`structure`](crate::structure)) reads it off the change's operations: edits at paths,
//! which a codec ([`kept_json`](crate::kept_json)) makes on the JSON a value keeps.

use serde_json::Value as Json;

/// A step from a JSON value to one inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Key(String),
    Index(u64),
}

/// One change to the JSON, as an appended change makes it (see
/// [`structure`](crate::structure)). Offsets in strings count characters.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonEdit {
    /// Sets a map key (added if missing) or replaces a list item.
    Set(Vec<Step>, Json),
    /// Removes a map key or a list item.
    Remove(Vec<Step>),
    /// Inserts a list item before the one at the path's last index (or at the end).
    Insert(Vec<Step>, Json),
    /// Replaces `delete` characters of the string at the path, from `at`, with text.
    Splice(Vec<Step>, u64, u64, String),
    /// Adds to the number at the path.
    Increment(Vec<Step>, i64),
}

impl JsonEdit {
    pub fn path(&self) -> &[Step] {
        match self {
            JsonEdit::Set(path, _)
            | JsonEdit::Remove(path)
            | JsonEdit::Insert(path, _)
            | JsonEdit::Splice(path, ..)
            | JsonEdit::Increment(path, _) => path,
        }
    }

    /// Takes `next` into this edit when the two make one: a splice right after a splice's
    /// text (characters typed one after another, or deleted one by one from the same
    /// place, then typed over), or anything written inside a value this edit sets or
    /// inserts (an object made with content). Returns whether it did.
    pub fn absorb(&mut self, next: &JsonEdit) -> bool {
        match (self, next) {
            (
                JsonEdit::Splice(path, at, delete, text),
                JsonEdit::Splice(next_path, next_at, next_delete, more),
            ) if path == next_path && *next_at == *at + text.chars().count() as u64 => {
                *delete += next_delete;
                text.push_str(more);
                true
            }
            (JsonEdit::Set(path, value) | JsonEdit::Insert(path, value), next)
                if next.path().len() >= path.len() && next.path().starts_with(path) =>
            {
                let inner = next.path()[path.len()..].to_vec();
                next.relative(inner).apply(value)
            }
            _ => false,
        }
    }

    /// The same edit at another path: inside a value, at the path relative to it.
    pub fn at(&self, path: &[Step]) -> JsonEdit {
        self.relative(path.to_vec())
    }

    fn relative(&self, path: Vec<Step>) -> JsonEdit {
        match self {
            JsonEdit::Set(_, value) => JsonEdit::Set(path, value.clone()),
            JsonEdit::Remove(_) => JsonEdit::Remove(path),
            JsonEdit::Insert(_, value) => JsonEdit::Insert(path, value.clone()),
            JsonEdit::Splice(_, at, delete, text) => {
                JsonEdit::Splice(path, *at, *delete, text.clone())
            }
            JsonEdit::Increment(_, by) => JsonEdit::Increment(path, *by),
        }
    }

    /// Makes the edit on `json`; false when its path is not there.
    pub fn apply(&self, json: &mut Json) -> bool {
        let path = self.path();
        let Some((last, parent)) = path.split_last() else {
            return match self {
                JsonEdit::Set(_, value) => {
                    *json = value.clone();
                    true
                }
                JsonEdit::Splice(_, at, delete, text) => splice(json, *at, *delete, text),
                JsonEdit::Increment(_, by) => increment(json, *by),
                _ => false,
            };
        };
        let Some(target) = walk(json, parent) else { return false };
        match (self, last, target) {
            (JsonEdit::Set(_, value), Step::Key(key), Json::Object(map)) => {
                map.insert(key.clone(), value.clone());
                true
            }
            (JsonEdit::Remove(_), Step::Key(key), Json::Object(map)) => map.remove(key).is_some(),
            (JsonEdit::Set(_, value), Step::Index(i), Json::Array(items)) => {
                items.get_mut(*i as usize).map(|item| *item = value.clone()).is_some()
            }
            (JsonEdit::Remove(_), Step::Index(i), Json::Array(items))
                if (*i as usize) < items.len() =>
            {
                items.remove(*i as usize);
                true
            }
            (JsonEdit::Insert(_, value), Step::Index(i), Json::Array(items))
                if (*i as usize) <= items.len() =>
            {
                items.insert(*i as usize, value.clone());
                true
            }
            (JsonEdit::Splice(_, at, delete, text), step, target) => {
                walk(target, std::slice::from_ref(step))
                    .is_some_and(|s| splice(s, *at, *delete, text))
            }
            (JsonEdit::Increment(_, by), step, target) => {
                walk(target, std::slice::from_ref(step)).is_some_and(|n| increment(n, *by))
            }
            _ => false,
        }
    }
}

fn walk<'j>(mut json: &'j mut Json, path: &[Step]) -> Option<&'j mut Json> {
    for step in path {
        json = match (step, json) {
            (Step::Key(key), Json::Object(map)) => map.get_mut(key)?,
            (Step::Index(i), Json::Array(items)) => items.get_mut(*i as usize)?,
            _ => return None,
        };
    }
    Some(json)
}

/// Replaces `delete` characters from character `at` of a JSON string with `text`.
pub fn splice(json: &mut Json, at: u64, delete: u64, text: &str) -> bool {
    let Json::String(s) = json else { return false };
    splice_str(s, at, delete, text)
}

/// Replaces `delete` characters from character `at` of `s` with `text`; false (and `s`
/// unchanged) when they are not all there.
pub fn splice_str(s: &mut String, at: u64, delete: u64, text: &str) -> bool {
    // Each character's byte offset, then the end.
    let mut boundaries = s.char_indices().map(|(i, _)| i).chain(std::iter::once(s.len()));
    let Some(from) = boundaries.nth(at as usize) else { return false };
    let to = match delete {
        0 => from,
        n => match boundaries.nth(n as usize - 1) {
            Some(to) => to,
            None => return false,
        },
    };
    s.replace_range(from..to, text);
    true
}

fn increment(json: &mut Json, by: i64) -> bool {
    let Some(n) = json.as_i64().and_then(|n| n.checked_add(by)) else { return false };
    *json = Json::Number(n.into());
    true
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{splice_str, JsonEdit, Step};

    /// Splices that follow on make one, and the one makes what they make in turn.
    #[test]
    fn splices_that_follow_on_make_one() {
        let path = vec![Step::Key("text".into())];
        let splice =
            |at, delete, text: &str| JsonEdit::Splice(path.clone(), at, delete, text.into());
        let made = |edits: &[JsonEdit]| {
            let mut json = json!({"text": "hello brave world"});
            edits.iter().all(|edit| edit.apply(&mut json)).then_some(json)
        };
        let cases = [
            // Three characters deleted from one place, then typed over.
            vec![splice(6, 1, ""), splice(6, 1, ""), splice(6, 1, ""), splice(6, 0, "new")],
            // Typed one after another.
            vec![splice(5, 0, ","), splice(6, 0, " so")],
            // Typed, then what follows deleted.
            vec![splice(0, 0, "oh "), splice(3, 6, "")],
        ];
        for edits in cases {
            let mut joined = edits[0].clone();
            assert!(edits[1..].iter().all(|edit| joined.absorb(edit)), "{edits:?}");
            assert_eq!(made(&[joined]), made(&edits), "{edits:?}");
        }
        // A splice elsewhere stays apart.
        assert!(!splice(6, 1, "").absorb(&splice(2, 0, "x")));
    }

    #[test]
    fn splices_count_characters() {
        let splice = |s: &str, at, delete, text| {
            let mut s = s.to_string();
            splice_str(&mut s, at, delete, text).then_some(s)
        };
        assert_eq!(splice("hello", 5, 0, "!").as_deref(), Some("hello!"));
        assert_eq!(splice("héllo", 1, 2, "a").as_deref(), Some("halo"));
        assert_eq!(splice("a😀b", 2, 1, "c").as_deref(), Some("a😀c"));
        assert_eq!(splice("a😀b", 1, 1, "").as_deref(), Some("ab"));
        assert_eq!(splice("abc", 4, 0, "x"), None);
        assert_eq!(splice("abc", 2, 2, "x"), None);
        assert_eq!(splice("", 0, 0, "x").as_deref(), Some("x"));
    }
}
