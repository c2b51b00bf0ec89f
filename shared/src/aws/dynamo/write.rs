//! Writes: the conditional `PutItem` of a record with its own retries and read-backs, and the
//! arguments item written once at creation.

use std::time::Duration;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;

use super::item::{from_item, to_item};
use super::key::arguments_key;
use super::{ATTR_ARGUMENTS, ATTR_PK, ATTR_TTL, DynamoStore, backend, is_condition_failed};
use crate::store::{StoreError, TaskStore, encode};
use crate::task::TaskRecord;

impl DynamoStore {
    /// One `PutItem` of `task` under `condition`, whose meaning in terms of the stored record
    /// is `prior`.
    ///
    /// The SDK's own retries are off for it: a retried conditional write whose first attempt
    /// landed (its answer lost to a timeout or a 5xx) would fail its own condition and report
    /// a conflict for a write that happened — a worker would then drop its continuation, a
    /// client its new task. Instead, after an answer that leaves it open whether the write
    /// landed, the item is read back: exactly `task` means it landed; still `prior` means it
    /// did not, and the write is tried again; anything else is a real conflict.
    pub(super) async fn put(
        &self,
        op: &'static str,
        task: &TaskRecord,
        prior: Prior,
        condition: &str,
        names: &[(&str, &str)],
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<(), StoreError> {
        encode(task)?;
        let item = to_item(task)?;
        // What a read of the item returns once it landed: numbers go through DynamoDB's `N`
        // (a float `2.0` reads back as the integer `2`), so compare with that, not `task`.
        let landed = from_item(item.clone())?;
        // Set once an attempt ended without telling whether it was applied: from then on a
        // failed condition may be our own earlier attempt (landing late), so it is checked.
        let mut maybe_applied = false;
        // The whole write, its own retries and read-backs included, within about the client's
        // operation timeout (see `super::Timeouts`): against an endpoint that never answers,
        // five attempts each followed by a read-back would otherwise take a minute.
        let until = self
            .client
            .config()
            .timeout_config()
            .and_then(|t| t.operation_timeout())
            .map(|d| tokio::time::Instant::now() + d);
        let mut pause = PUT_RETRY_PAUSE;
        for attempt in 1..=PUT_ATTEMPTS {
            let mut req = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item.clone()))
                .condition_expression(condition);
            for (k, v) in names {
                req = req.expression_attribute_names(*k, *v);
            }
            for (k, v) in &values {
                req = req.expression_attribute_values(*k, v.clone());
            }
            let err = match req
                .customize()
                .config_override(
                    aws_sdk_dynamodb::config::Builder::default()
                        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled()),
                )
                .send()
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_condition_failed(&e) => {
                    if maybe_applied && self.holds(&landed).await {
                        tracing::info!(op, attempt, "dynamodb.put_landed_late");
                        return Ok(());
                    }
                    return Err(StoreError::Conflict);
                }
                Err(e) => e,
            };
            match failure_kind(&err) {
                Failure::Refused => return Err(backend(op, &self.table, err)),
                // Definitely not applied: wait and try again, no need to look.
                Failure::Throttled => {}
                Failure::Unknown => {
                    maybe_applied = true;
                    let read = self.get(task.key());
                    let read = match until {
                        Some(u) => tokio::time::timeout_at(u, read).await.unwrap_or_else(|_| {
                            Err(StoreError::backend("dynamodb read-back timed out"))
                        }),
                        None => read.await,
                    };
                    match read {
                        Ok(Some(stored)) if stored == landed => {
                            tracing::info!(op, attempt, "dynamodb.put_landed_answer_lost");
                            return Ok(());
                        }
                        Ok(stored) if prior.holds(stored.as_ref()) => {}
                        Ok(_) => return Err(StoreError::Conflict),
                        // Cannot tell yet: the next attempt settles it (its condition fails
                        // if this one landed, and that failure is then checked).
                        Err(_) => {}
                    }
                }
            }
            let out_of_time = until.is_some_and(|u| tokio::time::Instant::now() + pause >= u);
            if attempt == PUT_ATTEMPTS || out_of_time {
                return Err(backend(op, &self.table, err));
            }
            tracing::info!(op, attempt, "dynamodb.put_retry");
            tokio::time::sleep(jittered(pause)).await;
            pause *= 2;
        }
        unreachable!("the last attempt returns")
    }

    /// Stores a new task's arguments in their own item (see [`arguments_key`]): written once,
    /// here, so the record's frequent writes stay small — DynamoDB bills a `PutItem` or
    /// `UpdateItem` by the larger of the old and new item, so arguments kept in the record
    /// would be paid again at every checkpoint. The item carries the task's TTL attribute
    /// (DynamoDB removes it with an expired task even if the sweep never does) and no index
    /// attribute: no listing sees it.
    ///
    /// Conditional on the item being absent, with the SDK's retries on: a failed condition
    /// re-reads the item, and finding exactly these arguments means an earlier attempt of this
    /// call landed (task ids are random, so nothing else writes that key).
    pub(super) async fn put_arguments(
        &self,
        task: &TaskRecord,
        bytes: Vec<u8>,
    ) -> Result<(), StoreError> {
        let key = arguments_key(task.key());
        let mut req = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(ATTR_PK, AttributeValue::S(key))
            .item(ATTR_ARGUMENTS, AttributeValue::B(Blob::new(bytes.clone())))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", ATTR_PK);
        if let Some(at) = task.expires_at_ms() {
            req = req.item(
                ATTR_TTL,
                AttributeValue::N(super::ttl_seconds(at).to_string()),
            );
        }
        match req.send().await {
            Ok(_) => Ok(()),
            Err(e) if is_condition_failed(&e) => match self.arguments_bytes(task.key()).await? {
                Some(stored) if stored == bytes => Ok(()),
                _ => Err(StoreError::Conflict),
            },
            Err(e) => Err(backend("create", &self.table, e)),
        }
    }

    /// Whether the item now is exactly `landed` (a consistent read; a failed read says no).
    async fn holds(&self, landed: &TaskRecord) -> bool {
        matches!(
            self.get(landed.key()).await,
            Ok(Some(stored)) if stored == *landed
        )
    }
}

/// Attempts of one conditional write (the SDK's standard mode makes 3), and the first pause
/// (doubled each time, with jitter: about 1.5 s in all).
const PUT_ATTEMPTS: u32 = 5;
const PUT_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// `pause` plus up to half of it again, at random, so that writers throttled together do not
/// retry together.
pub(super) fn jittered(pause: Duration) -> Duration {
    let mut b = [0u8; 2];
    let r = getrandom::fill(&mut b).map_or(0, |()| u16::from_le_bytes(b));
    pause + pause.mul_f64(f64::from(r) / f64::from(u16::MAX) / 2.0)
}

/// What a conditional write expects to find, as a condition on the stored record.
#[derive(Debug, Clone, Copy)]
pub(super) enum Prior {
    /// No item (create).
    Absent,
    /// The item at this version, not terminal (update).
    Version(u64),
}

impl Prior {
    fn holds(self, stored: Option<&TaskRecord>) -> bool {
        match (self, stored) {
            (Prior::Absent, None) => true,
            (Prior::Version(v), Some(t)) => t.version == v && !t.status.is_terminal(),
            _ => false,
        }
    }
}

/// What a failed write request says about the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    /// Refused for good (a 4xx other than throttling, or never sent): not applied, and trying
    /// again would not help.
    Refused,
    /// Throttled: not applied; worth trying again after a pause.
    Throttled,
    /// Timeouts, connection failures, unreadable answers, 5xx: may or may not have been
    /// applied (DynamoDB says so of a 500).
    Unknown,
}

pub(super) fn failure_kind<E: ProvideErrorMetadata>(
    e: &SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
) -> Failure {
    match e {
        SdkError::ConstructionFailure(_) => Failure::Refused,
        SdkError::ServiceError(se) => {
            if matches!(
                e.code(),
                Some(
                    "ProvisionedThroughputExceededException"
                        | "ThrottlingException"
                        | "RequestLimitExceeded"
                )
            ) {
                Failure::Throttled
            } else if se.raw().status().as_u16() >= 500 {
                Failure::Unknown
            } else {
                Failure::Refused
            }
        }
        _ => Failure::Unknown,
    }
}
