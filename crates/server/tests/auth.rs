//! Who may do what: API keys, ownership of uploaded matrices, ids that cannot
//! be derived from content, contribution to retraining, and CORS.

use crate::common;

use axum::body::Body;
use axum::http::Request;
use common::*;

const ALICE: &str = "alice-key-0123456789";
const BOB: &str = "bob-key-9876543210xx";
const KEYS: &str = "alice:alice-key-0123456789:contribute,bob:bob-key-9876543210xx";

fn with_key(mut req: Request<Body>, key: &str) -> Request<Body> {
    req.headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    req
}

fn matrix_body() -> String {
    mm_text(&random_matrix(40, 30, 9))
}

#[tokio::test]
async fn without_a_valid_key_only_the_open_routes_answer() {
    let (app, _) = test_app(&["--no-device", "--api-keys", KEYS]).await;
    for uri in ["/models", "/metrics", "/device"] {
        let r = send(&app, get(uri)).await;
        assert_eq!(r.status, 401, "{uri}");
        assert_eq!(r.error().0, "unauthorized");
    }
    let r = send(&app, post("/predict", "text/plain", matrix_body())).await;
    assert_eq!(r.status, 401);
    assert!(
        r.error().1.contains("Authorization: Bearer"),
        "{:?}",
        r.error()
    );
    let r = send(
        &app,
        with_key(
            post("/predict", "text/plain", matrix_body()),
            "not-a-key-at-all-xx",
        ),
    )
    .await;
    assert_eq!(r.status, 401);
    assert!(r.error().1.contains("not valid"));
    // X-API-Key works as well as Bearer.
    let mut req = get("/models");
    req.headers_mut().insert("x-api-key", BOB.parse().unwrap());
    assert_eq!(send(&app, req).await.status, 200);
    for uri in ["/healthz", "/openapi.json"] {
        assert_eq!(send(&app, get(uri)).await.status, 200, "{uri}");
    }
}

#[tokio::test]
async fn a_matrix_belongs_to_the_key_that_uploaded_it() {
    let (app, _) = test_app(&["--no-device", "--api-keys", KEYS]).await;
    let r = send(
        &app,
        with_key(post("/matrices", "text/plain", matrix_body()), ALICE),
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let id = r.json()["id"].as_str().unwrap().to_string();
    let uri = format!("/matrices/{id}");
    // Bob can neither see nor delete it: 404, as if it did not exist.
    assert_eq!(send(&app, with_key(get(&uri), BOB)).await.status, 404);
    let del = |key| with_key(Request::delete(&uri).body(Body::empty()).unwrap(), key);
    assert_eq!(send(&app, del(BOB)).await.status, 404);
    assert_eq!(send(&app, with_key(get(&uri), ALICE)).await.status, 200);
    // The same content uploaded by Bob is Bob's own matrix, with another id.
    let r = send(
        &app,
        with_key(post("/matrices", "text/plain", matrix_body()), BOB),
    )
    .await;
    assert_eq!(r.status, 201);
    let bob_id = r.json()["id"].as_str().unwrap().to_string();
    assert_ne!(bob_id, id);
    assert_eq!(send(&app, del(ALICE)).await.status, 204);
    assert_eq!(send(&app, with_key(get(&uri), ALICE)).await.status, 404);
    assert_eq!(
        send(&app, with_key(get(&format!("/matrices/{bob_id}")), BOB))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn spmv_by_another_keys_id_is_404() {
    let Some((app, _)) = device_app("spmv_by_another_keys_id", &["--api-keys", KEYS]).await else {
        return;
    };
    let a = random_matrix(40, 30, 9);
    let r = send(
        &app,
        with_key(post("/matrices", "text/plain", mm_text(&a)), ALICE),
    )
    .await;
    assert_eq!(r.status, 201);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let body = serde_json::json!({"matrix_id": id, "x": random_x(30, 1)}).to_string();
    let r = send(
        &app,
        with_key(post("/spmv", "application/json", body.clone()), BOB),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.error().0, "matrix_not_found");
    let r = send(
        &app,
        with_key(post("/spmv", "application/json", body), ALICE),
    )
    .await;
    assert_eq!(r.status, 200);
    check_y::<f64>(&a, &random_x(30, 1), &y_of(&r.json()));
}

#[tokio::test]
async fn ids_come_from_the_secret_not_the_content_alone() {
    async fn id_with(secret: Option<&str>) -> String {
        let mut args = vec!["server", "--no-device"];
        if let Some(s) = secret {
            args.extend(["--id-secret", s]);
        }
        let cfg = <server::Config as clap::Parser>::parse_from(args);
        let state = server::AppState::new(
            cfg,
            server::DeviceState::none("test"),
            server::Planner::load(&models_dir(), None),
            None,
        );
        let r = send(
            &server::app(state),
            post("/matrices", "text/plain", matrix_body()),
        )
        .await;
        assert_eq!(r.status, 201);
        r.json()["id"].as_str().unwrap().to_string()
    }
    let secret = "ab".repeat(32);
    let a = id_with(Some(&secret)).await;
    assert_eq!(
        a,
        id_with(Some(&secret)).await,
        "same secret, same id (replicas agree)"
    );
    assert_ne!(a, id_with(Some(&"cd".repeat(32))).await);
    // Without --id-secret each start draws its own.
    assert_ne!(id_with(None).await, id_with(None).await);
    // The plain content hash is not the id.
    let content: sparse::Csr<f64> =
        sparse::mm::read_str(&matrix_body(), &Default::default()).unwrap();
    assert_ne!(a, content.content_hash());
}

#[test]
fn a_public_address_needs_keys_unless_waived() {
    let e = server::auth::keys_for(&config(&["--bind", "0.0.0.0:8080"])).unwrap_err();
    assert!(e.to_string().contains("--allow-anonymous"), "{e}");
    assert!(
        server::auth::keys_for(&config(&["--bind", "0.0.0.0:8080", "--allow-anonymous"])).is_ok()
    );
    assert!(
        server::auth::keys_for(&config(&["--bind", "0.0.0.0:8080", "--api-keys", KEYS])).is_ok()
    );
    assert!(server::auth::keys_for(&config(&["--bind", "127.0.0.1:8080"])).is_ok());
    assert!(server::auth::keys_for(&config(&["--api-keys", "alice:short"])).is_err());
    assert!(server::auth::keys_for(&config(&["--id-secret", "zz"])).is_ok());
}

#[tokio::test]
async fn only_contributing_keys_feed_retraining() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().to_str().unwrap().to_string();
    let (app, _) = test_app(&["--no-device", "--api-keys", KEYS, "--keep-matrices", &keep]).await;
    let bob_m = mm_text(&random_matrix(20, 20, 1));
    let alice_m = mm_text(&random_matrix(20, 20, 2));
    assert_eq!(
        send(&app, with_key(post("/predict", "text/plain", bob_m), BOB))
            .await
            .status,
        200
    );
    assert_eq!(
        send(
            &app,
            with_key(post("/predict", "text/plain", alice_m), ALICE)
        )
        .await
        .status,
        200
    );
    let mut kept = 0;
    for _ in 0..100 {
        kept = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "mtx")
            })
            .count();
        if kept >= 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let kept_after = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!((kept, kept_after), (1, 1), "only alice's matrix is kept");
}

#[tokio::test]
async fn cors_headers_only_for_configured_origins() {
    let req = || {
        Request::get("/healthz")
            .header("origin", "https://lab.example")
            .body(Body::empty())
            .unwrap()
    };
    let (app, _) = test_app(&["--no-device"]).await;
    let r = send(&app, req()).await;
    assert!(r.headers.get("access-control-allow-origin").is_none());
    let (app, _) = test_app(&["--no-device", "--cors-origin", "https://lab.example"]).await;
    let r = send(&app, req()).await;
    assert_eq!(
        r.headers.get("access-control-allow-origin").unwrap(),
        "https://lab.example"
    );
}
