//! The checks at the end of a run: every write is in its row exactly once, every row
//! holds only what was written, one notification per write, no failure, and every
//! backend's Rust heap between statements only the structure indexes it holds.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::container::Server;
use crate::listener::Listener;
use crate::load::{IdleHeap, Query, State, TABLE};

/// What a backend's Rust heap may hold between statements once the load stopped, besides
/// the structure indexes it holds.
pub const IDLE_HEAP_LIMIT: i64 = 64 * 1024;
/// Connections that read the rows' changes at the end.
const CHECKING_CONNECTIONS: usize = 4;

#[derive(Clone, Debug)]
pub struct Invariant {
    pub name: &'static str,
    pub holds: bool,
    pub detail: String,
}

pub struct Verification {
    pub invariants: Vec<Invariant>,
    pub notification_wait: Duration,
    pub check_duration: Duration,
}

// The writers have all ended when the check runs: nothing else takes the log's lock.
#[allow(clippy::await_holding_lock)]
pub async fn check(
    server: &Server,
    state: &Arc<State>,
    listener: &Listener,
    final_heaps: &[IdleHeap],
    notification_wait: Duration,
) -> Result<Verification> {
    let started = Instant::now();
    let mut invariants = Vec::new();
    let log = state.log.lock().unwrap();
    let mut written: BTreeMap<i64, Vec<&crate::load::Write>> = BTreeMap::new();
    for write in &log.writes {
        written.entry(write.id).or_default().push(write);
    }

    let unreadable = listener.unreadable();
    invariants.push(Invariant {
        name: "no error",
        holds: log.failures.is_empty() && unreadable.is_empty(),
        detail: if log.failures.is_empty() && unreadable.is_empty() {
            format!(
                "{} statements, none failed; every notification was the documented JSON",
                log.timings.len()
            )
        } else {
            let mut shown: Vec<String> = log
                .failures
                .iter()
                .take(5)
                .map(|f| format!("{} at {:.0} s: {}", f.query.name(), f.at, f.message))
                .collect();
            shown.extend(unreadable.iter().take(3).cloned());
            format!(
                "{} failed statements, {} unreadable notifications; first: {}",
                log.failures.len(),
                unreadable.len(),
                shown.join("; ")
            )
        },
    });

    // The header-only functions give every row's change count and heads at no load cost.
    let client = server.connect().await?;
    let rows = client
        .query(&format!("SELECT id, automerge_change_count(doc), automerge_heads(doc) FROM {TABLE} ORDER BY id"), &[])
        .await?;
    let counts: BTreeMap<i64, i64> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
    let heads: HashMap<i64, Vec<String>> =
        rows.iter().map(|row| (row.get(0), row.get(2))).collect();
    let inserted: Vec<i64> = written
        .iter()
        .filter(|(_, w)| w.iter().any(|w| w.query == Query::Insert))
        .map(|(id, _)| *id)
        .collect();
    let rows_match = counts.keys().copied().eq(inserted.iter().copied());
    invariants.push(Invariant {
        name: "every inserted row is there, and no other",
        holds: rows_match,
        detail: format!("{} rows inserted, {} in the table", inserted.len(), counts.len()),
    });

    let mut miscounted = Vec::new();
    for (id, writes) in &written {
        let expected = state.catalogue.for_id(*id).changes as i64
            + writes.iter().filter(|w| w.query != Query::Insert).count() as i64;
        if counts.get(id) != Some(&expected) {
            miscounted.push(format!("row {id}: {:?} changes, {expected} expected", counts.get(id)));
        }
    }
    invariants.push(Invariant {
        name:
            "no duplicated or stray change: each row has its document's changes plus one per write",
        holds: miscounted.is_empty(),
        detail: if miscounted.is_empty() {
            format!("automerge_change_count(doc) as expected on all {} rows", written.len())
        } else {
            format!(
                "{} rows differ: {}",
                miscounted.len(),
                miscounted.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
            )
        },
    });

    // A row with only its insert must have exactly its document's heads (the heads name the
    // whole history, and the count matched). A row with writes must list each change written
    // exactly once among the changes since its document's heads (which must all be there,
    // or automerge_changes refuses them).
    let mut wrong = Vec::new();
    let mut to_read: Vec<(i64, Vec<String>, Vec<String>)> = Vec::new();
    let mut total_hashes = 0;
    for (id, writes) in &written {
        let document_heads = state.catalogue.for_id(*id).heads.clone();
        let changes: Vec<String> = writes
            .iter()
            .filter(|w| w.query != Query::Insert)
            .flat_map(|w| w.hashes.iter().cloned())
            .collect();
        total_hashes += changes.len();
        if changes.is_empty() {
            let mut stored = heads.get(id).cloned().unwrap_or_default();
            let mut expected = document_heads;
            stored.sort();
            expected.sort();
            if stored != expected {
                wrong.push(format!("row {id}: heads {stored:?}, its document's {expected:?}"));
            }
        } else {
            to_read.push((*id, document_heads, changes));
        }
    }
    let rows_by_heads = written.len() - to_read.len();
    let rows_read = to_read.len();
    drop(written);
    drop(log);
    let mut checkers = Vec::new();
    let chunk = to_read.len().div_ceil(CHECKING_CONNECTIONS).max(1);
    while !to_read.is_empty() {
        let part: Vec<(i64, Vec<String>, Vec<String>)> =
            to_read.drain(..chunk.min(to_read.len())).collect();
        let client = server.connect().await?;
        checkers.push(tokio::spawn(async move {
            let statement = client
                .prepare(&format!(
                    "SELECT hash FROM {TABLE}, automerge_changes(doc, $2::text[]) WHERE id = $1"
                ))
                .await?;
            let mut wrong = Vec::new();
            for (id, document_heads, changes) in part {
                let mut present: HashMap<String, usize> = HashMap::new();
                match client.query(&statement, &[&id, &document_heads]).await {
                    Ok(rows) => {
                        for row in rows {
                            *present.entry(row.get(0)).or_default() += 1;
                        }
                    }
                    Err(error) => {
                        wrong.push(format!("row {id}: reading its changes failed: {error}"))
                    }
                }
                for hash in changes {
                    let times = present.get(&hash).copied().unwrap_or(0);
                    if times != 1 {
                        wrong.push(format!(
                            "row {id}: change {} present {times} times",
                            &hash[..12]
                        ));
                    }
                }
            }
            anyhow::Ok(wrong)
        }));
    }
    for checker in checkers {
        wrong.extend(checker.await??);
    }
    let total_hashes = format!(
        "{total_hashes} changes written; {rows_read} rows' changes since their document's heads read back, \
         {rows_by_heads} rows without writes matched by their heads"
    );
    invariants.push(Invariant {
        name: "no lost or duplicated write: every change written is in automerge_changes(doc) exactly once",
        holds: wrong.is_empty(),
        detail: if wrong.is_empty() {
            total_hashes
        } else {
            format!("{} wrong ({total_hashes}): {}", wrong.len(), wrong.iter().take(5).cloned().collect::<Vec<_>>().join("; "))
        },
    });

    invariants.push(every_row_loads(server).await?);
    invariants.push(notifications_match(state, listener));

    let over: Vec<String> = final_heaps
        .iter()
        .enumerate()
        .filter(|(_, heap)| {
            heap.bytes > heap.index_cache_bytes + IDLE_HEAP_LIMIT
                || heap.without_indexes > IDLE_HEAP_LIMIT
        })
        .map(|(worker, heap)| {
            format!(
                "connection {worker}: {} bytes, {} without indexes",
                heap.bytes, heap.without_indexes
            )
        })
        .collect();
    let listed = |bytes: fn(&IdleHeap) -> i64| {
        final_heaps.iter().map(|heap| bytes(heap).to_string()).collect::<Vec<_>>().join(", ")
    };
    invariants.push(Invariant {
        name: "each connection's Rust heap between statements is the structure indexes it holds, within pg_automerge.index_cache, and almost nothing else",
        holds: over.is_empty() && !final_heaps.is_empty(),
        detail: format!(
            "automerge_memory_usage().allocated_bytes at the end: {} (limit index_cache, {} MB, and {IDLE_HEAP_LIMIT} bytes); with index_cache = 0: {} (limit {IDLE_HEAP_LIMIT} bytes){}",
            listed(|heap| heap.bytes),
            final_heaps.first().map_or(0, |heap| heap.index_cache_bytes >> 20),
            listed(|heap| heap.without_indexes),
            if over.is_empty() { String::new() } else { format!("; over: {}", over.join(", ")) }
        ),
    });

    Ok(Verification { invariants, notification_wait, check_duration: started.elapsed() })
}

/// Every stored value loads, its kept JSON and heads are the loaded document's, and its
/// next save loads (`automerge_loads`), however its writes took it: appended, loaded or
/// merged. Read on several connections, each a share of the rows.
async fn every_row_loads(server: &Server) -> Result<Invariant> {
    let mut checkers = Vec::new();
    for share in 0..CHECKING_CONNECTIONS as i64 {
        let client = server.connect().await?;
        checkers.push(tokio::spawn(async move {
            let rows = client
                .query(
                    &format!(
                        "SELECT id FROM {TABLE} WHERE id % $1 = $2 AND NOT automerge_loads(doc)"
                    ),
                    &[&(CHECKING_CONNECTIONS as i64), &share],
                )
                .await?;
            anyhow::Ok(rows.iter().map(|row| row.get::<_, i64>(0)).collect::<Vec<_>>())
        }));
    }
    let mut failing = Vec::new();
    for checker in checkers {
        failing.extend(checker.await??);
    }
    failing.sort();
    Ok(Invariant {
        name: "every row loads, and keeps the loaded document's JSON and heads (automerge_loads)",
        holds: failing.is_empty(),
        detail: match failing.is_empty() {
            true => "automerge_loads(doc) on every row".to_string(),
            false => {
                format!("{} rows do not: {:?}", failing.len(), &failing[..failing.len().min(10)])
            }
        },
    })
}

/// Exactly one notification per committed write: as many per row as writes, an INSERT for
/// each insert, and for each update exactly one notification whose new heads (`heads` less
/// `previous_heads`) are the one change it wrote.
fn notifications_match(state: &State, listener: &Listener) -> Invariant {
    let received = listener.received();
    let log = state.log.lock().unwrap();
    let mut problems = Vec::new();
    let mut notified: HashMap<Option<i64>, (usize, usize)> = HashMap::new();
    // How many notifications introduced each change, per row.
    let mut introduced: HashMap<(i64, String), usize> = HashMap::new();
    let mut truncated = 0;
    for notification in &received {
        let (inserts, updates) = notified.entry(notification.id).or_default();
        match notification.operation.as_str() {
            "INSERT" => *inserts += 1,
            "UPDATE" => *updates += 1,
            other => problems.push(format!("a {other} notification for row {:?}", notification.id)),
        }
        if notification.operation != "UPDATE" {
            continue;
        }
        match (&notification.heads, &notification.previous_heads, notification.id) {
            (Some(heads), Some(previous), Some(id)) => {
                let new: Vec<&String> = heads.iter().filter(|h| !previous.contains(h)).collect();
                if new.len() != 1 {
                    problems.push(format!(
                        "row {id}: an UPDATE notification with {} new heads",
                        new.len()
                    ));
                }
                for hash in new {
                    *introduced.entry((id, hash.clone())).or_default() += 1;
                }
            }
            _ => truncated += 1,
        }
    }
    let mut written: BTreeMap<i64, (usize, usize)> = BTreeMap::new();
    for write in &log.writes {
        let (inserts, updates) = written.entry(write.id).or_default();
        if write.query == Query::Insert {
            *inserts += 1;
        } else {
            *updates += 1;
            let times = introduced.remove(&(write.id, write.hashes[0].clone())).unwrap_or(0);
            if times != 1 && truncated == 0 {
                problems.push(format!(
                    "row {}: change {} announced {times} times",
                    write.id,
                    &write.hashes[0][..12]
                ));
            }
        }
    }
    for (id, counts) in &written {
        let got = notified.remove(&Some(*id)).unwrap_or_default();
        if got != *counts {
            problems
                .push(format!("row {id}: (inserts, updates) written {counts:?}, notified {got:?}"));
        }
    }
    for (id, extra) in notified {
        problems.push(format!("{extra:?} notifications for row {id:?}, which was never written"));
    }
    for ((id, hash), _) in introduced {
        problems.push(format!(
            "row {id}: a notification announced {}, which no write sent",
            &hash[..12.min(hash.len())]
        ));
    }
    Invariant {
        name: "exactly one notification per write",
        holds: problems.is_empty() && received.len() == log.writes.len(),
        detail: format!(
            "{} writes, {} notifications ({truncated} truncated, checked by count only){}",
            log.writes.len(),
            received.len(),
            if problems.is_empty() {
                String::new()
            } else {
                format!("; {}", problems.iter().take(5).cloned().collect::<Vec<_>>().join("; "))
            }
        ),
    }
}
