//! Opening the database file, and why it may be refused.
//!
//! redb trusts a file it closed cleanly: a page overwritten since (a disk fault, a stray
//! write, a copy cut short) is found only when something reads it, and a plain open or read
//! may then panic, or a damaged index read as empty. So every open runs redb's integrity
//! check: the checksum of every page of the committed trees is verified before anything is
//! served from them, and a damaged file is refused as [`OpenError::Damaged`], naming it.
//!
//! The check reads the whole file once. On 100,000 in-flight tasks (a 143 MB file), in two
//! runs on a shared 2-core machine, it took 1.1× and 1.4× the time of reading the file once
//! (97 and 168 ms), where a plain open takes under 1 ms
//! (`cargo bench -p mcp-tasks-core --bench store_open`, page cache warm). Catching the
//! engine's panics instead would cost nothing at open but could not promise a refusal: a
//! damaged page may read as no data rather than panic, and a panic in the writer thread
//! leaves redb's state unknown.
//!
//! A crash (not a clean close) needs no check of ours: redb's recovery verifies the same
//! checksums and falls back to the last durable commit, as it always has. A file last closed
//! cleanly ends with a two-phase commit, after which a damaged newest commit is an error, never
//! a silent fall back to an older one.

use std::path::{Path, PathBuf};

use redb::{Database, DatabaseError, StorageError};

use super::{REDB_CACHE_BYTES, backend};
use crate::store::StoreError;

/// Why the database file could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another process has the file open (redb locks it for one process at a time).
    #[error(
        "the task database {0} is in use by another process: is another `mcp-tasks serve` \
         running on this data directory?"
    )]
    InUse(PathBuf),
    /// The file is not a sound database: changed since it was last closed, truncated, or not
    /// a database at all. Nothing is served from it.
    #[error(
        "the task database {path} is damaged ({detail}); it was not opened. Restore it from a \
         backup, or move it aside to start with an empty store"
    )]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What the check found.
        detail: String,
    },
    /// Anything else: the file cannot be read or written, the writer thread cannot start.
    #[error("cannot open the task database {path}")]
    Failed {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: StoreError,
    },
}

impl OpenError {
    fn from_redb(path: &Path, e: DatabaseError) -> Self {
        let path = path.to_owned();
        match e {
            DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => {
                OpenError::InUse(path)
            }
            DatabaseError::Storage(StorageError::Corrupted(detail)) => {
                OpenError::Damaged { path, detail }
            }
            // redb's word for "not a redb file" (a wrong magic number).
            DatabaseError::Storage(StorageError::Io(io))
                if io.kind() == std::io::ErrorKind::InvalidData =>
            {
                OpenError::Damaged {
                    path,
                    detail: io.to_string(),
                }
            }
            DatabaseError::RepairAborted => OpenError::Damaged {
                path,
                detail: "it could not be repaired".into(),
            },
            other => OpenError::Failed {
                path,
                source: backend(other),
            },
        }
    }

    /// A failure after the database opened (creating its tables).
    pub(super) fn failed(path: &Path, source: StoreError) -> Self {
        OpenError::Failed {
            path: path.to_owned(),
            source,
        }
    }
}

/// Opens the database at `path`, checked; creates it when `create` (else a missing or empty
/// file is an error: an empty one is a database truncated to nothing).
pub(super) fn database(path: &Path, create: bool) -> Result<Database, OpenError> {
    let mut builder = Database::builder();
    builder
        .set_cache_size(REDB_CACHE_BYTES)
        .set_check_integrity_on_open(true);
    match create {
        true => builder.create(path),
        false => builder.open(path),
    }
    .map_err(|e| OpenError::from_redb(path, e))
}
