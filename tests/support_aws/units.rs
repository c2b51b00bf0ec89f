//! What DynamoDB bills for an item: its size by DynamoDB's own accounting, and the write units
//! a put of it costs.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

/// An item's size as DynamoDB counts it ("Item sizes and formats"): each attribute's name plus
/// its value; a number ~1 byte per two digits plus one; a map or list 3 bytes plus one per
/// element (and each map key's length).
pub fn item_bytes(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter().map(|(k, v)| k.len() + value_bytes(v)).sum()
}

fn value_bytes(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => n.bytes().filter(u8::is_ascii_digit).count().div_ceil(2) + 1,
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::L(l) => 3 + l.iter().map(|x| 1 + value_bytes(x)).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, x)| 1 + k.len() + value_bytes(x))
                .sum::<usize>()
        }
        AttributeValue::Ss(x) => x.iter().map(String::len).sum(),
        AttributeValue::Ns(x) => x.iter().map(String::len).sum(),
        AttributeValue::Bs(x) => x.iter().map(|b| b.as_ref().len()).sum(),
        _ => 1,
    }
}

/// Write units of one put replacing an item of `bytes` by one of the same size: one per
/// started KB.
pub fn write_units(bytes: usize) -> usize {
    bytes.div_ceil(1024).max(1)
}
