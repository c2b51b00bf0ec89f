//! Time and randomness, in one place so the rest of the library stays free of both details.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// RFC 3339 / ISO 8601 UTC timestamp with millisecond precision, e.g. `2026-08-20T09:00:00.000Z`.
pub fn iso8601(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    match time::OffsetDateTime::from_unix_timestamp_nanos(nanos) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.millisecond()
        ),
        Err(_) => "1970-01-01T00:00:00.000Z".to_owned(),
    }
}

/// Fills `buf` from the operating system's CSPRNG.
///
/// # Panics
/// If the OS has no entropy source, which no supported platform lacks; task ids and
/// request-state keys must never fall back to weak randomness.
pub fn random_bytes(buf: &mut [u8]) {
    getrandom::fill(buf).expect("the OS random source is unavailable");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_is_utc_with_milliseconds() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_787_216_400_123), "2026-08-20T09:00:00.123Z");
    }
}
