//! The places each tenant holds: its entries in the `active` table, counted in a table of
//! their own. The count moves only where an `active` entry comes or goes, in the same
//! transaction, so at every commit it is exactly that tenant's active tasks — nothing to leak,
//! nothing for a crash to leave half done.

use redb::{ReadableTable, TableDefinition, TableHandle, WriteTransaction};

use super::{ACTIVE, backend};
use crate::store::{StoreError, split_key};
use crate::tenant::Tenant;

/// Tenant → the number of its keys in `active` (no entry: none).
const PLACES: TableDefinition<&str, u64> = TableDefinition::new("places");

/// How many places `tenant` holds.
pub(super) fn held(txn: &WriteTransaction, tenant: &Tenant) -> Result<u64, StoreError> {
    let table = txn.open_table(PLACES).map_err(backend)?;
    let n = table
        .get(tenant.as_str())
        .map_err(backend)?
        .map_or(0, |v| v.value());
    Ok(n)
}

/// Counts the `active` entry of `k` in or out (`entered`); a tenant at zero has no row.
pub(super) fn moved(txn: &WriteTransaction, k: &str, entered: bool) -> Result<(), StoreError> {
    let Some(tenant) = split_key(k).map(|k| k.tenant) else {
        return Ok(());
    };
    let mut table = txn.open_table(PLACES).map_err(backend)?;
    let n = table
        .get(tenant.as_str())
        .map_err(backend)?
        .map_or(0, |v| v.value());
    let next = if entered {
        n.saturating_add(1)
    } else {
        n.saturating_sub(1)
    };
    if next == 0 {
        table.remove(tenant.as_str()).map_err(backend)?;
    } else {
        table.insert(tenant.as_str(), next).map_err(backend)?;
    }
    Ok(())
}

/// Opens the table; a database written before it existed has its `active` table counted once,
/// here, in the transaction that creates it.
pub(super) fn ensure(txn: &WriteTransaction) -> Result<(), StoreError> {
    let existed = txn
        .list_tables()
        .map_err(backend)?
        .any(|t| t.name() == PLACES.name());
    let mut places = txn.open_table(PLACES).map_err(backend)?;
    if existed {
        return Ok(());
    }
    let mut counts = std::collections::BTreeMap::<Tenant, u64>::new();
    let active = txn.open_table(ACTIVE).map_err(backend)?;
    for entry in active.iter().map_err(backend)? {
        let (k, _) = entry.map_err(backend)?;
        if let Some(k) = split_key(k.value()) {
            *counts.entry(k.tenant).or_default() += 1;
        }
    }
    for (tenant, n) in counts {
        places.insert(tenant.as_str(), n).map_err(backend)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::EmbeddedStore;
    use super::*;
    use crate::store::TaskStore;
    use crate::store::contract::{args, task};

    #[tokio::test]
    async fn a_database_from_before_places_counts_them_at_open_and_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.redb");
        {
            let s = EmbeddedStore::open(&path).unwrap();
            for tenant in ["a", "a", "a", "b"] {
                s.create(&task(tenant, None), &args()).await.unwrap();
            }
        }
        // The file as an earlier release left it: no `places` table.
        {
            let db = redb::Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            assert!(txn.delete_table(PLACES).unwrap());
            txn.commit().unwrap();
        }
        let s = EmbeddedStore::open(&path).unwrap();
        assert!(!s.create_within(&task("a", None), &args(), 3).await.unwrap());
        assert!(s.create_within(&task("a", None), &args(), 4).await.unwrap());
        assert!(!s.create_within(&task("b", None), &args(), 1).await.unwrap());
        drop(s);
        // Counted once: a reopened store keeps the count it wrote.
        let s = EmbeddedStore::open(&path).unwrap();
        assert!(!s.create_within(&task("a", None), &args(), 4).await.unwrap());
        assert!(s.create_within(&task("a", None), &args(), 5).await.unwrap());
    }
}
