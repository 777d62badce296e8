//! The LISTEN client: one connection that receives every notification the trigger sends.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures_util::StreamExt;
use tokio_postgres::AsyncMessage;

use crate::container::Server;
use crate::load::CHANNEL;

/// A notification's payload, as docs/writing-documents.md describes it.
#[derive(Clone, Debug)]
pub struct Notification {
    pub id: Option<i64>,
    pub operation: String,
    /// None when the payload was truncated.
    pub heads: Option<Vec<String>>,
    /// The heads before the write: absent on INSERT, and when truncated.
    pub previous_heads: Option<Vec<String>>,
}

pub struct Listener {
    received: Arc<Mutex<Vec<Notification>>>,
    unreadable: Arc<Mutex<Vec<String>>>,
    // Kept so that the LISTEN session stays open.
    _client: tokio_postgres::Client,
}

impl Listener {
    pub async fn start(server: &Server) -> Result<Listener> {
        let (client, mut connection) = server.connect_raw().await?;
        let received = Arc::new(Mutex::new(Vec::new()));
        let unreadable = Arc::new(Mutex::new(Vec::new()));
        let (into, bad) = (received.clone(), unreadable.clone());
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(notification)) => {
                        match parse(notification.payload()) {
                            Some(parsed) => into.lock().unwrap().push(parsed),
                            None => bad.lock().unwrap().push(notification.payload().to_string()),
                        }
                    }
                    Ok(_) => {}
                    Err(error) => {
                        bad.lock().unwrap().push(format!("the LISTEN connection failed: {error}"));
                        break;
                    }
                }
            }
        });
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await.context("LISTEN")?;
        Ok(Listener { received, unreadable, _client: client })
    }

    pub fn count(&self) -> usize {
        self.received.lock().unwrap().len()
    }

    pub fn received(&self) -> Vec<Notification> {
        self.received.lock().unwrap().clone()
    }

    /// Payloads that were not the JSON the trigger documents, and connection failures.
    pub fn unreadable(&self) -> Vec<String> {
        self.unreadable.lock().unwrap().clone()
    }

    /// Waits until `expected` notifications arrived or `patience` ran out, and a little
    /// longer for any extra one; returns how long it waited.
    pub async fn drain(&self, expected: usize, patience: Duration) -> Duration {
        let started = Instant::now();
        while self.count() < expected && started.elapsed() < patience {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        started.elapsed()
    }
}

fn parse(payload: &str) -> Option<Notification> {
    let json: serde_json::Value = serde_json::from_str(payload).ok()?;
    let hashes = |field: &str| {
        json.get(field).and_then(|heads| {
            heads
                .as_array()
                .map(|list| list.iter().filter_map(|h| h.as_str().map(str::to_string)).collect())
        })
    };
    Some(Notification {
        id: json.get("key").and_then(|key| key.get("id")).and_then(|id| id.as_i64()),
        operation: json.get("operation")?.as_str()?.to_string(),
        heads: hashes("heads"),
        previous_heads: hashes("previous_heads"),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_documented_payload() {
        let parsed = super::parse(
            r#"{"table": "public.notes", "operation": "UPDATE", "key": {"id": 1}, "heads": ["9f2c"], "previous_heads": ["3b55"]}"#,
        )
        .unwrap();
        assert_eq!(parsed.id, Some(1));
        assert_eq!(parsed.operation, "UPDATE");
        assert_eq!(parsed.heads, Some(vec!["9f2c".to_string()]));
        assert_eq!(parsed.previous_heads, Some(vec!["3b55".to_string()]));
        let truncated = super::parse(
            r#"{"table": "t", "operation": "UPDATE", "key": {"id": 7}, "truncated": true}"#,
        )
        .unwrap();
        assert_eq!(truncated.heads, None);
        assert!(super::parse("not json").is_none());
    }
}
