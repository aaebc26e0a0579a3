//! Batches (`POST /api/v1/actors:batch`, `/api/v1/tasks:batch`): many creations in one
//! request, each item checked and answered as its single endpoint would, the whole batch
//! durable before the answer. One request and one owner command instead of thousands: what a
//! driver submitting a burst pays per item drops to the item's own work.

use axum::http::StatusCode;
use axum::response::Response;
use berth_api::rest::{Batch, BatchAnswer, BatchItem};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;

use super::extract::{json_answer, parse_item, Failure, ANSWER_BYTES};
use crate::error::HeadError;

/// Each item of `batch` read as `T` (an item that is not one is that item's error). Items
/// arrive as their JSON text: each is parsed once, as `T`, never as a tree first. (The body's
/// scan refused more items than the head's limit before.)
pub(crate) fn items<T: DeserializeOwned>(
    batch: Batch<Box<RawValue>>,
) -> Result<Vec<Result<T, Failure>>, Failure> {
    if batch.items.is_empty() {
        return Err(Failure::invalid(
            Some("items".into()),
            "the batch has no items; give at least one",
        ));
    }
    Ok(batch.items.iter().map(|item| parse_item(item)).collect())
}

/// Runs `apply` on the items that parsed and answers every item in order.
pub(crate) async fn answer<B, T, F>(
    items: Vec<Result<B, Failure>>,
    apply: impl FnOnce(Vec<B>) -> F,
) -> Result<BatchAnswer<T>, Failure>
where
    F: std::future::Future<Output = Result<Vec<Result<T, HeadError>>, HeadError>>,
{
    let mut parsed = Vec::new();
    let mut answers: Vec<Option<BatchItem<T>>> = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Ok(body) => {
                parsed.push(body);
                answers.push(None);
            }
            Err(failure) => answers.push(Some(refused(failure))),
        }
    }
    let mut applied = if parsed.is_empty() { Vec::new() } else { apply(parsed).await? }.into_iter();
    let items = answers
        .into_iter()
        .map(|answer| {
            answer.unwrap_or_else(|| match applied.next() {
                Some(Ok(object)) => BatchItem {
                    status: StatusCode::CREATED.as_u16(),
                    created: Some(object),
                    error: None,
                },
                Some(Err(err)) => refused(err.into()),
                None => refused(HeadError::Unavailable("no answer for this item".into()).into()),
            })
        })
        .collect();
    Ok(BatchAnswer { items })
}

/// A batch's answer as JSON, its buffer sized for its items at once.
pub(crate) fn json<T: Serialize>(answer: &BatchAnswer<T>) -> Response {
    let capacity = answer.items.len().saturating_mul(ANSWER_BYTES);
    json_answer(StatusCode::OK, answer, capacity)
}

fn refused<T>(failure: Failure) -> BatchItem<T> {
    BatchItem { status: failure.status.as_u16(), created: None, error: Some(failure.body) }
}
