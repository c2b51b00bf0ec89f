//! The tenant: who owns a task, as a type of its own.
//!
//! A [`Tenant`] is made at the edge — by the authenticator from a verified token's tenant claim
//! ([`crate::auth`]), from the local server's configured tenant, or from an operator's command
//! line — and carried as it is below: in every task key ([`crate::task::TaskKey`],
//! [`crate::task::TaskRef`]), the task record, the work messages, the store's and the quotas'
//! calls. Nothing below the edge takes a bare string for it.
//!
//! It is cloned on every request and message, so it shares one allocation (`Arc<str>`): a
//! clone is a reference count, not a copy. On every wire and in every store it is the plain
//! string it always was (serialized and read as a string), so messages in flight and items
//! written by earlier builds read back unchanged.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The owner of tasks: every task key starts with it.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tenant(Arc<str>);

impl Tenant {
    /// A tenant named `name`, as the edge found it (the authenticator checks a token's claim
    /// before making one; see [`crate::auth`]).
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Self(name.into())
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for Tenant {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Tenant {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Tenant {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Tenant {
    fn from(name: &str) -> Self {
        Self(name.into())
    }
}

impl From<&String> for Tenant {
    fn from(name: &String) -> Self {
        Self(name.as_str().into())
    }
}

impl From<String> for Tenant {
    fn from(name: String) -> Self {
        Self(name.into())
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// As the string it is (`"acme"`), as when tenants were strings.
impl fmt::Debug for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl PartialEq<str> for Tenant {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Tenant {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for Tenant {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<Tenant> for str {
    fn eq(&self, other: &Tenant) -> bool {
        self == &*other.0
    }
}

impl PartialEq<Tenant> for &str {
    fn eq(&self, other: &Tenant) -> bool {
        *self == &*other.0
    }
}

/// A plain string on every wire and in every store.
impl Serialize for Tenant {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// From a plain string, in one allocation (the string is copied once, from the input when the
/// format lends it, as a `String` field would be).
impl<'de> Deserialize<'de> for Tenant {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = Tenant;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a tenant name (a string)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Tenant, E> {
                Ok(Tenant(v.into()))
            }
        }
        d.deserialize_str(Name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_is_its_string_on_the_wire_and_in_logs() {
        let t = Tenant::new("acme\"co");
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, serde_json::to_string("acme\"co").unwrap());
        assert_eq!(serde_json::from_str::<Tenant>(&json).unwrap(), t);
        assert_eq!(format!("{t}"), "acme\"co");
        assert_eq!(format!("{t:?}"), format!("{:?}", "acme\"co"));
        assert!(serde_json::from_str::<Tenant>("7").is_err());
    }

    #[test]
    fn clones_share_the_name() {
        let t = Tenant::new("acme");
        let u = t.clone();
        assert!(std::ptr::eq(t.as_str(), u.as_str()));
        assert_eq!(t, "acme");
        let next = Tenant::from("acmf");
        assert!(t < next, "ordered as their names");
    }
}
