//! The labelling queue: idempotent enqueueing, one owner per claim even with
//! many claimers at once, heartbeats that hold a claim, and lapsed claims taken
//! over; on SQLite and on PostgreSQL.

use std::collections::BTreeMap;
use std::time::Duration;
use store::{QueueStatus, Store};

/// `n` corpus items `m0`, `m1`, ...
fn items(n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("m{i}"), "suitesparse".to_string()))
        .collect()
}

const LONG: Duration = Duration::from_secs(3600);

/// Claims until the queue gives nothing, as `worker`; the names claimed.
async fn drain(s: &Store, queue: &str, worker: &str) -> Vec<String> {
    let mut got = Vec::new();
    while let Some(c) = s.claim_label(queue, worker, LONG, 3).await.unwrap() {
        assert!(s.finish_label(c.id, worker, None).await.unwrap());
        got.push(c.name);
    }
    got
}

store::test_on_both_backends! {
async fn enqueue_is_idempotent_and_claims_go_in_order(db: TestDb) {
    let s = db.open().await;
    assert_eq!(s.enqueue_labels("q", &items(3)).await.unwrap(), 3);
    assert_eq!(s.enqueue_labels("q", &items(5)).await.unwrap(), 2);
    assert_eq!(s.enqueue_labels("other", &items(1)).await.unwrap(), 1);
    let c = s.claim_label("q", "w1", LONG, 3).await.unwrap().unwrap();
    assert_eq!((c.name.as_str(), c.source.as_str(), c.attempts), ("m0", "suitesparse", 1));
    assert!(s.heartbeat_label(c.id, "w1").await.unwrap());
    assert!(!s.heartbeat_label(c.id, "w2").await.unwrap(), "not w2's claim");
    assert!(!s.finish_label(c.id, "w2", None).await.unwrap());
    assert!(s.finish_label(c.id, "w1", Some("bad matrix")).await.unwrap());
    assert!(!s.finish_label(c.id, "w1", None).await.unwrap(), "already finished");
    assert_eq!(drain(&s, "q", "w1").await, ["m1", "m2", "m3", "m4"]);
    let q = s.label_queue("q", LONG).await.unwrap();
    assert_eq!(q.len(), 5);
    assert_eq!(q[0].status, QueueStatus::Failed);
    assert_eq!(q[0].error.as_deref(), Some("bad matrix"));
    assert!(q[1..].iter().all(|e| e.status == QueueStatus::Done && e.attempts == 1));
    assert_eq!(s.label_queue("other", LONG).await.unwrap()[0].status, QueueStatus::Pending);
}

async fn many_claimers_at_once_never_share_a_row(db: TestDb) {
    let (a, b) = (db.open().await, db.open().await);
    a.enqueue_labels("q", &items(60)).await.unwrap();
    let handles: Vec<_> = (0..6)
        .map(|w| {
            let s = if w % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { drain(&s, "q", &format!("w{w}")).await })
        })
        .collect();
    let mut owners: BTreeMap<String, usize> = BTreeMap::new();
    for h in handles {
        for name in h.await.unwrap() {
            *owners.entry(name).or_default() += 1;
        }
    }
    assert_eq!(owners.len(), 60, "every row claimed");
    assert!(owners.values().all(|&n| n == 1), "a row claimed twice");
    let q = a.label_queue("q", LONG).await.unwrap();
    assert!(q.iter().all(|e| e.status == QueueStatus::Done && e.attempts == 1));
}

async fn a_claim_without_heartbeat_lapses_and_is_taken_over(db: TestDb) {
    let s = db.open().await;
    s.enqueue_labels("q", &items(1)).await.unwrap();
    let lease = Duration::from_millis(600);
    let c = s.claim_label("q", "dead", lease, 3).await.unwrap().unwrap();
    // Held while it beats.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(s.heartbeat_label(c.id, "dead").await.unwrap());
        assert!(s.claim_label("q", "live", lease, 3).await.unwrap().is_none());
    }
    // It stops beating: the claim lapses and another worker takes it over.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(s.label_queue("q", lease).await.unwrap()[0].lapsed);
    let again = s.claim_label("q", "live", lease, 3).await.unwrap().unwrap();
    assert_eq!((again.id, again.attempts), (c.id, 2));
    // The first worker, back, cannot beat or finish what is no longer its own.
    assert!(!s.heartbeat_label(c.id, "dead").await.unwrap());
    assert!(!s.finish_label(c.id, "dead", None).await.unwrap());
    assert!(s.finish_label(c.id, "live", None).await.unwrap());
    let q = s.label_queue("q", lease).await.unwrap();
    assert_eq!((q[0].status, q[0].worker.as_deref(), q[0].lapsed), (QueueStatus::Done, Some("live"), false));
}

async fn a_row_is_claimed_at_most_max_attempts_times(db: TestDb) {
    let s = db.open().await;
    s.enqueue_labels("q", &items(1)).await.unwrap();
    let lease = Duration::ZERO;
    for attempt in 1..=2 {
        let c = s.claim_label("q", "w", lease, 2).await.unwrap().unwrap();
        assert_eq!(c.attempts, attempt);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(s.claim_label("q", "w", lease, 2).await.unwrap().is_none());
}
}
