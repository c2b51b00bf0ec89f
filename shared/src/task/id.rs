//! A task's id as a type: made once, where a request is decoded ([`TaskId::parse`]) or a task
//! is created ([`TaskId::generate`]), then carried by [`TaskKey`](super::TaskKey),
//! [`TaskRef`](super::TaskRef), the [`TaskRecord`](super::TaskRecord) and the
//! [`WorkMessage`](crate::queue::WorkMessage), so that nothing below the edge checks it again.
//!
//! On the wire, in stored records and in work messages it is the bare string, as before;
//! reading one back (a record, a work message) checks it as [`TaskId::parse`] does, so that a
//! `TaskId` is a valid id however it was made, and the stores need not look at it again.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Serialize};

/// A task id: 1..=128 printable ASCII characters without spaces, not starting with `#` (the
/// stores' own items sit there); the server makes `tsk_…` ones.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct TaskId(String);

impl TaskId {
    /// A new unguessable task id: `tsk_` + a ULID (time-ordered, 80 random bits) + 64 more
    /// random bits, all printable ASCII, 46 characters.
    pub fn generate() -> Self {
        let mut extra = [0u8; 8];
        crate::clock::random_bytes(&mut extra);
        Self(format!(
            "tsk_{}{:016x}",
            ulid::Ulid::new(),
            u64::from_be_bytes(extra)
        ))
    }

    /// A task id as a client sent it, or `None` when no task could have it (which callers
    /// answer as an unknown task).
    pub fn parse(id: impl Into<String>) -> Option<Self> {
        let id = id.into();
        is_valid(&id).then_some(Self(id))
    }

    /// A task id written in the code (fixtures, tests), as `http::HeaderValue::from_static`.
    ///
    /// # Panics
    /// When `id` is not a task id: a literal is the programmer's to get right.
    pub fn from_static(id: &'static str) -> Self {
        Self::parse(id).unwrap_or_else(|| panic!("{id:?} is not a task id"))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether `id` is a task id a client may send (see [`TaskId`]).
pub fn is_valid(id: &str) -> bool {
    // A leading `#` is kept for the stores' own items (DynamoDB: a tenant's running-jobs and
    // arguments items sit where a task id would).
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('#')
        && id.bytes().all(|b| b.is_ascii_graphic())
}

impl Deref for TaskId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for TaskId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for TaskId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A string that is no task id ([`TaskId::parse`] refused it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a task id (1 to 128 printable ASCII characters, not starting with '#')")]
pub struct NotATaskId;

impl TryFrom<String> for TaskId {
    type Error = NotATaskId;
    fn try_from(id: String) -> Result<Self, NotATaskId> {
        Self::parse(id).ok_or(NotATaskId)
    }
}

impl From<TaskId> for String {
    fn from(id: TaskId) -> Self {
        id.0
    }
}

impl PartialEq<str> for TaskId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for TaskId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for TaskId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<TaskId> for str {
    fn eq(&self, other: &TaskId) -> bool {
        self == other.0
    }
}

impl PartialEq<TaskId> for &str {
    fn eq(&self, other: &TaskId) -> bool {
        *self == other.0
    }
}

impl PartialEq<TaskId> for String {
    fn eq(&self, other: &TaskId) -> bool {
        *self == other.0
    }
}
