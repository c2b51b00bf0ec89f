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
/// Times past the year 9999 (which RFC 3339 cannot write) give the epoch.
///
/// Computed directly (the proleptic Gregorian calendar from days since the epoch, after
/// Howard Hinnant's `civil_from_days`), without a formatter: every `tasks/get` writes two.
pub fn iso8601(ms: u64) -> String {
    iso8601_bytes(ms).iter().map(|&b| b as char).collect()
}

/// [`iso8601`]'s ASCII bytes, without an allocation (a `tasks/get` answer writes them as is).
pub fn iso8601_bytes(ms: u64) -> [u8; 24] {
    const LAST_MS: u64 = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
    if ms > LAST_MS {
        return *b"1970-01-01T00:00:00.000Z";
    }
    let (secs, milli) = (ms / 1000, ms % 1000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 0000-03-01, in 400-year eras of 146,097 days.
    let z = days + 719_468;
    let (era, doe) = (z / 146_097, z % 146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    let mut out = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut v: u64| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, month);
    put(8, 2, day);
    put(11, 2, rem / 3600);
    put(14, 2, rem % 3600 / 60);
    put(17, 2, rem % 60);
    put(20, 3, milli);
    out
}

/// Fills `buf` from the operating system's CSPRNG.
///
/// # Panics
/// If the OS has no entropy source, which no supported platform lacks; task ids and
/// request-state keys must never fall back to weak randomness.
pub fn random_bytes(buf: &mut [u8]) {
    getrandom::fill(buf).expect("the OS random source is unavailable");
}

tokio::task_local! {
    static DEADLINE: tokio::time::Instant;
}

/// Runs `f` (one request) with `deadline` as its [`invocation_deadline`]; `None` runs it
/// without one. The Lambda HTTP functions run each request within their invocation's
/// deadline; the local server sets none.
pub async fn within_deadline<F: std::future::Future>(
    deadline: Option<tokio::time::Instant>,
    f: F,
) -> F::Output {
    match deadline {
        Some(d) => DEADLINE.scope(d, f).await,
        None => f.await,
    }
}

/// The deadline of the invocation this code runs in, when its host set one with
/// [`within_deadline`] (only within that request's own task, not in tasks it spawns).
pub fn invocation_deadline() -> Option<tokio::time::Instant> {
    DEADLINE.try_with(|d| *d).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_agrees_with_the_time_crate_everywhere() {
        // Spread over the whole writable range, plus every day boundary of four years.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let spread = (0..200_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % 253_402_300_800_000
        });
        let days = (0..4 * 366).map(|d| 946_684_800_000 + d * 86_400_000 - 1);
        for ms in spread.chain(days) {
            let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
                .unwrap();
            let want = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                t.millisecond()
            );
            assert_eq!(iso8601(ms), want, "{ms}");
        }
    }

    #[test]
    fn iso8601_is_utc_with_milliseconds() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_787_216_400_123), "2026-08-20T09:00:00.123Z");
        // Leap days, a century that is not a leap year, the last writable instant (the
        // expected values from Python's datetime).
        for (ms, want) in [
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (951_868_799_999, "2000-02-29T23:59:59.999Z"),
            (1_709_164_800_000, "2024-02-29T00:00:00.000Z"),
            (4_107_542_400_000, "2100-03-01T00:00:00.000Z"),
            (1_234_567_890_123, "2009-02-13T23:31:30.123Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
            (253_402_300_800_000, "1970-01-01T00:00:00.000Z"),
            (u64::MAX, "1970-01-01T00:00:00.000Z"),
        ] {
            assert_eq!(iso8601(ms), want, "{ms}");
        }
    }

    #[tokio::test]
    async fn the_invocation_deadline_is_seen_only_inside_its_scope() {
        use tokio::time::Instant;
        assert_eq!(invocation_deadline(), None);
        let d = Instant::now() + std::time::Duration::from_secs(7);
        let seen = within_deadline(Some(d), async { invocation_deadline() }).await;
        assert_eq!(seen, Some(d));
        assert_eq!(
            within_deadline(None, async { invocation_deadline() }).await,
            None
        );
        assert_eq!(invocation_deadline(), None);
    }
}
