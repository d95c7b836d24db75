//! Every endpoint through `app()` with `oneshot`: happy paths in both
//! precisions, y checked against the reference SpMV.

use crate::common;

use axum::body::Body;
use axum::http::Request;
use common::*;
use serde_json::{json, Value};

const PRECISIONS: [&str; 2] = ["f32", "f64"];

fn check_by_precision(p: &str, a: &sparse::Csr<f64>, x: &[f64], y: &[f64]) {
    match p {
        "f32" => check_y::<f32>(a, x, y),
        _ => check_y::<f64>(a, x, y),
    }
}

#[tokio::test]
async fn predict_takes_matrix_market_gzip_and_json_csr_alike() {
    let (app, _) = test_app(&[]).await;
    let a = random_matrix(300, 200, 1);
    let id = matrix_id(&a);
    let bodies: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        ("text/plain", mm_text(&a).into_bytes(), None),
        ("text/plain", mm_gzip(&a), None),
        ("text/plain", mm_gzip(&a), Some("gzip")),
        (
            "application/json",
            serde_json::to_vec(&csr_json(&a)).unwrap(),
            None,
        ),
    ];
    let mut plans = Vec::new();
    for (ct, body, enc) in bodies {
        let mut req = Request::post("/predict").header("content-type", ct);
        if let Some(e) = enc {
            req = req.header("content-encoding", e);
        }
        let r = send(&app, req.body(Body::from(body)).unwrap()).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        assert_eq!(v["matrix"]["id"], id);
        assert_eq!(v["matrix"]["nnz"], a.nnz());
        assert_eq!(v["features"]["rows"], 300.0);
        assert_eq!(
            v["features"].as_object().unwrap().len(),
            sparse::FEATURE_NAMES.len()
        );
        for t in ["parse", "features", "predict", "total"] {
            assert!(v["timings_ms"][t].as_f64().unwrap() >= 0.0, "{t}");
        }
        assert!(v.get("explanation").is_none());
        plans.push(v["plan"].clone());
    }
    assert!(
        plans.windows(2).all(|w| w[0] == w[1]),
        "same matrix, same plan: {plans:?}"
    );
    // The plan covers every row once.
    let rows: u64 = plans[0]["bins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["rows"].as_u64().unwrap())
        .sum();
    assert_eq!(rows, 300);
}

#[tokio::test]
async fn predict_explains_and_names_the_selector_in_both_precisions() {
    let (app, state) = test_app(&[]).await;
    let a = random_matrix(100, 100, 2);
    for p in PRECISIONS {
        let r = send(
            &app,
            post(
                &format!("/predict?explain=true&precision={p}"),
                "text/plain",
                mm_text(&a),
            ),
        )
        .await;
        assert_eq!(r.status, 200);
        let v = r.json();
        assert_eq!(v["precision"], p);
        let e = &v["explanation"];
        assert!(e["stage1"]["scheme"].is_string(), "{e}");
        let bins = v["plan"]["bins"].as_array().unwrap();
        assert_eq!(e["stage2"].as_array().unwrap().len(), bins.len());
        let model = &v["model"];
        let used = state.planner().used(p.parse().unwrap());
        assert_eq!(model["id"], used.id);
        if model["kind"] == "rule" {
            assert_eq!(model["fallback"], true);
            assert!(
                model["reason"].as_str().unwrap().contains("rule baseline"),
                "{model}"
            );
        } else {
            assert_eq!(model["precision"], p);
        }
    }
}

#[tokio::test]
async fn upload_then_spmv_by_id_in_both_precisions_json_and_binary() {
    let Some((app, _)) = device_app("upload_then_spmv_by_id", &[]).await else {
        return;
    };
    let (a, x) = random_problem(500, 400, 3);
    for p in PRECISIONS {
        let r = send(
            &app,
            post(
                &format!("/matrices?precision={p}"),
                "text/plain",
                mm_text(&a),
            ),
        )
        .await;
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        let id = v["id"].as_str().unwrap().to_string();
        assert_eq!(id, matrix_id(&a));
        assert_eq!(r.headers["location"], format!("/matrices/{id}"));
        assert_eq!(v["on_device"], true);
        assert!(v["bytes"]["device"].as_u64().unwrap() > 0);

        // JSON x, JSON y, verified on the server too.
        let body = json!({"matrix_id": id, "x": x, "precision": p, "verify": true});
        let r = send(&app, post("/spmv", "application/json", body.to_string())).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        assert_eq!(v["precision"], p);
        assert_eq!(v["uploaded"], true);
        assert_eq!(v["verify"]["ok"], true, "{}", v["verify"]);
        assert!(v["timings_ms"]["kernel"].as_f64().unwrap() > 0.0);
        assert!(
            v["timings_ms"]["device"].as_f64().unwrap()
                >= v["timings_ms"]["kernel"].as_f64().unwrap()
        );
        assert!(v["gbps"].as_f64().unwrap() > 0.0);
        check_by_precision(p, &a, &x, &y_of(&v));

        // Binary x in, binary y out.
        let xb: Vec<u8> = match p {
            "f32" => x.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect(),
            _ => x.iter().flat_map(|&v| v.to_le_bytes()).collect(),
        };
        let req = Request::post(format!("/spmv?matrix_id={id}&precision={p}"))
            .header("content-type", "application/octet-stream")
            .header("accept", "application/octet-stream")
            .body(Body::from(xb))
            .unwrap();
        let r = send(&app, req).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.headers["content-type"], "application/octet-stream");
        assert_eq!(r.headers["x-matrix-id"], id.as_str());
        let y = server::input::parse_x_binary(&r.body, p.parse().unwrap()).unwrap();
        assert_eq!(y.len(), 500);
        check_by_precision(p, &a, &x, &y);
    }
    // Both precisions are now on the device under the one id.
    let r = send(&app, get(&format!("/matrices/{}", matrix_id(&a)))).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    let mut ps: Vec<&str> = v["uploaded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["precision"].as_str().unwrap())
        .collect();
    ps.sort();
    assert_eq!(ps, vec!["f32", "f64"]);
    assert_eq!(v["matrix"]["nnz"], a.nnz());
}

/// Binary x on the device: a value that is not finite past the first block of
/// the check is refused with its index, whether y is asked for as bytes (x
/// goes to the device as it came) or as JSON (x converted on the way); and a
/// finite x repeated gives the same bytes of y each time.
#[tokio::test]
async fn binary_x_on_the_device_is_checked_and_y_is_stable() {
    let Some((app, _)) = device_app("binary_x_on_the_device", &[]).await else {
        return;
    };
    let a = random_matrix(40, 5000, 12);
    let r = send(&app, post("/matrices", "text/plain", mm_text(&a))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let id = r.json()["id"].as_str().unwrap().to_string();
    let x = random_x(5000, 12);
    for p in PRECISIONS {
        let encode = |x: &[f64]| -> Vec<u8> {
            match p {
                "f32" => x.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect(),
                _ => x.iter().flat_map(|&v| v.to_le_bytes()).collect(),
            }
        };
        let call = |xb: Vec<u8>, accept: &'static str| {
            Request::post(format!("/spmv?matrix_id={id}&precision={p}"))
                .header("content-type", "application/octet-stream")
                .header("accept", accept)
                .body(Body::from(xb))
                .unwrap()
        };
        let mut bad = x.clone();
        bad[4100] = f64::INFINITY;
        for accept in ["application/octet-stream", "application/json"] {
            let r = send(&app, call(encode(&bad), accept)).await;
            assert_eq!(r.status, 422, "{p} {accept}");
            let (code, msg) = r.error();
            assert_eq!(code, "non_finite");
            assert!(msg.contains("x[4100] = inf"), "{p} {accept}: {msg}");
        }
        let first = send(&app, call(encode(&x), "application/octet-stream")).await;
        assert_eq!(
            first.status,
            200,
            "{}",
            String::from_utf8_lossy(&first.body)
        );
        let y = server::input::parse_x_binary(&first.body, p.parse().unwrap()).unwrap();
        check_by_precision(p, &a, &x, &y);
        let again = send(&app, call(encode(&x), "application/octet-stream")).await;
        assert_eq!(again.body, first.body, "{p}: the same x gives the same y");
    }
}

#[tokio::test]
async fn spmv_inline_json_text_json_csr_and_multipart() {
    let Some((app, _)) = device_app("spmv_inline", &[]).await else {
        return;
    };
    let (a, x) = random_problem(200, 150, 4);
    for p in PRECISIONS {
        // JSON with Matrix Market text.
        let body = json!({"matrix": mm_text(&a), "x": x, "precision": p});
        let r = send(&app, post("/spmv", "application/json", body.to_string())).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        assert_eq!(v["uploaded"], false);
        assert_eq!(v["matrix_id"], matrix_id(&a));
        check_by_precision(p, &a, &x, &y_of(&v));

        // JSON with a CSR object, precision in the query.
        let body = json!({"matrix": csr_json(&a), "x": x});
        let r = send(
            &app,
            post(
                &format!("/spmv?precision={p}&verify=true"),
                "application/json",
                body.to_string(),
            ),
        )
        .await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        assert_eq!(v["precision"], p);
        assert_eq!(v["verify"]["ok"], true);
        check_by_precision(p, &a, &x, &y_of(&v));

        // multipart/form-data: a gzip Matrix Market part and a JSON x part.
        let boundary = "XyZbOuNdArY";
        let mut body = Vec::new();
        body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"matrix\"; filename=\"a.mtx.gz\"\r\nContent-Type: application/gzip\r\n\r\n").as_bytes());
        body.extend_from_slice(&mm_gzip(&a));
        body.extend_from_slice(
            format!(
                "\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n{}\r\n",
                serde_json::to_string(&x).unwrap()
            )
            .as_bytes(),
        );
        body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"precision\"\r\n\r\n{p}\r\n--{boundary}--\r\n").as_bytes());
        let r = send(
            &app,
            post(
                "/spmv",
                &format!("multipart/form-data; boundary={boundary}"),
                body,
            ),
        )
        .await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        assert_eq!(v["precision"], p);
        check_by_precision(p, &a, &x, &y_of(&v));
    }
}

#[tokio::test]
async fn spmv_with_csr_fields_at_the_top_level_as_in_the_readme() {
    let Some((app, _)) = device_app("spmv_with_csr_fields_at_the_top_level", &[]).await else {
        return;
    };
    let body = r#"{"nrows":2,"ncols":2,"row_ptr":[0,1,2],"col_idx":[0,1],"values":[2,3],"x":[1,1],"verify":true}"#;
    let r = send(&app, post("/spmv", "application/json", body)).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(y_of(&v), vec![2.0, 3.0]);
    assert_eq!(v["verify"]["ok"], true);
    let r = send(
        &app,
        post("/spmv", "application/json", r#"{"nrows":2,"x":[1,1]}"#),
    )
    .await;
    assert_eq!(r.status, 422);
    assert!(r.error().1.contains("without 'ncols'"), "{:?}", r.error());
}

#[tokio::test]
async fn awkward_matrices_multiply_correctly() {
    let Some((app, _)) = device_app("awkward_matrices", &[]).await else {
        return;
    };
    let cases: Vec<(&str, sparse::Csr<f64>)> = vec![
        ("1x1", sparse::Csr::identity(1).unwrap()),
        ("all rows empty", sparse::gen::all_rows_empty(50).unwrap()),
        ("one huge row", sparse::gen::one_huge_row(5000).unwrap()),
        ("tall thin", sparse::gen::tall_thin(3000, 3).unwrap()),
        (
            "many empty rows",
            sparse::gen::many_empty_rows(2000, 0.7, 5).unwrap(),
        ),
        ("power law", sparse::gen::power_law(3000, 8.0, 6).unwrap()),
    ];
    for (name, a) in cases {
        let x = random_x(a.ncols(), 9);
        for p in PRECISIONS {
            let body = json!({"matrix": csr_json(&a), "x": x, "precision": p, "verify": true});
            let r = send(&app, post("/spmv", "application/json", body.to_string())).await;
            let v = r.json_ok(&format!("{name} {p}"));
            assert_eq!(v["verify"]["ok"], true, "{name} {p}");
            check_by_precision(p, &a, &x, &y_of(&v));
        }
    }
}

#[tokio::test]
async fn delete_then_404() {
    let (app, _) = test_app(&["--no-device"]).await;
    let a = random_matrix(50, 50, 7);
    let r = send(&app, post("/matrices", "text/plain", mm_text(&a))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let id = r.json()["id"].as_str().unwrap().to_string();
    assert_eq!(
        send(&app, get(&format!("/matrices/{id}"))).await.status,
        200
    );
    let del = || {
        Request::delete(format!("/matrices/{id}"))
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(send(&app, del()).await.status, 204);
    let r = send(&app, del()).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.error().0, "matrix_not_found");
    let r = send(&app, get(&format!("/matrices/{id}"))).await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn info_routes() {
    // Without a device, /device says so and why; the expected answer follows
    // from the setup, not from what the state happens to hold.
    let (app, _) = test_app(&["--no-device"]).await;
    let r = send(&app, get("/device")).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["available"], false, "{v}");
    assert_eq!(v["reason"], "disabled by --no-device", "{v}");
    assert!(v.get("name").is_none(), "{v}");

    let (app, _) = test_app(&[]).await;
    let r = send(&app, get("/healthz")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["status"], "ok");

    // With the shared device (its absence fails under CI / SPMV_REQUIRE_DEVICE=1).
    if have_device("info_routes /device") {
        let r = send(&app, get("/device")).await;
        assert_eq!(r.status, 200);
        let v = r.json();
        assert_eq!(v["available"], true, "{v}");
        assert!(v["name"].as_str().is_some_and(|n| !n.is_empty()));
        assert!(v["global_mem_bytes"].as_u64().unwrap() > 0);
        assert!(v["copy_bandwidth"]["gbps"].as_f64().unwrap() > 0.0, "{v}");
    }

    let r = send(&app, get("/models")).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    for p in PRECISIONS {
        assert!(v["in_use"][p]["kind"].is_string(), "{v}");
    }

    // Some traffic, then the metrics show it.
    let a = random_matrix(30, 30, 8);
    send(&app, post("/predict", "text/plain", mm_text(&a))).await;
    send(&app, post("/predict", "text/plain", "garbage")).await;
    let r = send(&app, get("/metrics")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], server::metrics::CONTENT_TYPE);
    let t = String::from_utf8(r.body.to_vec()).unwrap();
    assert!(
        t.contains("spmv_http_requests_total{route=\"/predict\",method=\"POST\",status=\"200\"} 1"),
        "{t}"
    );
    assert!(
        t.contains("spmv_http_requests_total{route=\"/predict\",method=\"POST\",status=\"400\"} 1"),
        "{t}"
    );
    assert!(
        t.contains("spmv_http_request_duration_seconds_count{route=\"/predict\"} 2"),
        "{t}"
    );
    assert!(t.contains("spmv_cache_bytes "), "{t}");
}

/// The served OpenAPI document, and checks of real exchanges against it.
struct Spec {
    doc: Value,
}

/// Every object schema with properties and no word on others gets
/// `additionalProperties: false`: an answer carrying a field the document
/// does not describe fails (the document itself stays open to additions).
fn strict(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.contains_key("properties") && !m.contains_key("additionalProperties") {
                m.insert("additionalProperties".into(), Value::Bool(false));
            }
            m.values_mut().for_each(strict);
        }
        Value::Array(a) => a.iter_mut().for_each(strict),
        _ => {}
    }
}

impl Spec {
    async fn fetch(app: &axum::Router) -> Spec {
        let r = send(app, get("/openapi.json")).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.headers["content-type"], "application/json");
        let doc = r.json();
        assert_eq!(
            doc["openapi"], "3.1.0",
            "OpenAPI 3.1: schemas are JSON Schema 2020-12"
        );
        Spec { doc }
    }

    fn op(&self, method: &str, path: &str) -> &Value {
        let op = &self.doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is not in the document");
        op
    }

    /// A validator for `schema`, with the document's components as `$defs`
    /// (no resolver reaches outside the document).
    fn validator(&self, schema: &Value) -> jsonschema::Validator {
        let mut root = schema.clone();
        let mut defs = self.doc["components"]["schemas"].clone();
        strict(&mut root);
        strict(&mut defs);
        root["$defs"] = defs;
        let text = root
            .to_string()
            .replace("#/components/schemas/", "#/$defs/");
        let root: Value = serde_json::from_str(&text).unwrap();
        jsonschema::draft202012::new(&root)
            .unwrap_or_else(|e| panic!("schema does not compile ({e}): {root}"))
    }

    fn validate(&self, what: &str, schema: &Value, body: &Value) {
        let v = self.validator(schema);
        let errors: Vec<String> = v
            .iter_errors(body)
            .map(|e| {
                let text = e.to_string();
                let cut: String = text.chars().rev().take(300).collect();
                format!(
                    "...{} at {}",
                    cut.chars().rev().collect::<String>(),
                    e.instance_path()
                )
            })
            .collect();
        let shown: String = body.to_string().chars().take(1500).collect();
        assert!(
            errors.is_empty(),
            "{what} does not match its schema: {errors:#?}\n{shown}"
        );
    }

    /// Checks a JSON request body against the operation's request schema.
    fn request(&self, method: &str, path: &str, body: &Value) {
        let schema = &self.op(method, path)["requestBody"]["content"]["application/json"]["schema"];
        assert!(
            schema.is_object(),
            "{method} {path} documents no JSON request body"
        );
        self.validate(&format!("the request to {method} {path}"), schema, body);
    }

    /// Checks an answer: its status is documented for the route, its content
    /// type is one the document gives for that status, a JSON body matches the
    /// schema, and every `x-*`, Location and Retry-After header it sends is
    /// documented. Returns the status, for the caller's own assertions.
    fn check(&self, method: &str, path: &str, r: &Resp) -> u16 {
        let status = r.status.as_u16();
        let resp = &self.op(method, path)["responses"][status.to_string()];
        assert!(
            resp.is_object(),
            "{method} {path} answered {status}, which its document does not list: {}",
            String::from_utf8_lossy(&r.body)
        );
        self.check_headers(method, path, status, resp, r);
        let content = resp["content"].as_object();
        let Some(content) = content.filter(|c| !c.is_empty()) else {
            assert!(
                r.body.is_empty(),
                "{method} {path} {status}: a body the document does not describe"
            );
            return status;
        };
        let ct = r.headers["content-type"].to_str().unwrap();
        let essence = ct.split(';').next().unwrap().trim();
        let media = content
            .get(ct)
            .or_else(|| content.get(essence))
            .unwrap_or_else(|| {
                panic!("{method} {path} {status}: content type {ct} is not documented")
            });
        if essence == "application/json" {
            let what = format!("the answer {status} of {method} {path}");
            self.validate(&what, &media["schema"], &r.json());
        }
        status
    }

    fn check_headers(&self, method: &str, path: &str, status: u16, resp: &Value, r: &Resp) {
        let documented = resp["headers"].as_object().cloned().unwrap_or_default();
        for name in r.headers.keys().map(|h| h.as_str()) {
            if name.starts_with("x-") || name == "location" || name == "retry-after" {
                assert!(
                    documented.keys().any(|k| k.eq_ignore_ascii_case(name)),
                    "{method} {path} {status} sends header {name}, which its document does not list"
                );
            }
        }
    }
}

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

#[tokio::test]
async fn openapi_document_lists_every_route_and_method_the_app_serves() {
    let (app, _) = test_app(&["--no-device"]).await;
    let spec = Spec::fetch(&app).await;
    let paths = spec.doc["paths"].as_object().unwrap();
    let mut listed: Vec<&str> = paths.keys().map(String::as_str).collect();
    listed.sort();
    let mut expected = vec![
        "/predict",
        "/matrices",
        "/matrices/{id}",
        "/matrices/{id}/solve",
        "/matrices/{id}/spmm",
        "/spmv",
        "/healthz",
        "/readyz",
        "/device",
        "/models",
        "/metrics",
        "/openapi.json",
    ];
    expected.sort();
    assert_eq!(listed, expected);
    // Each documented path: its documented methods are routed, every other
    // method is a 405 (so nothing undocumented is served there).
    for (path, ops) in paths {
        for method in METHODS {
            let uri = path.replace("{id}", "0000");
            let req = Request::builder()
                .method(method.to_uppercase().as_str())
                .uri(&uri)
                .body(Body::empty())
                .unwrap();
            let r = send(&app, req).await;
            if ops.get(method).is_some() {
                assert_ne!(
                    r.status, 405,
                    "{method} {path} is documented but not routed"
                );
                if r.status == 404 {
                    assert_ne!(
                        r.error().0,
                        "no_route",
                        "{method} {path} is documented but not routed"
                    );
                }
                spec.check(method, path, &r);
            } else {
                assert_eq!(
                    r.status, 405,
                    "{method} {path} is routed but not documented"
                );
                assert_eq!(r.error().0, "method_not_allowed");
            }
        }
    }
    // Every route of the app comes from the documented list: `app()` adds none.
    let lib = include_str!("../src/lib.rs");
    let app_fn = &lib[lib.find("pub fn app(").expect("app() in lib.rs")..];
    for adds_routes in [".route(", ".nest(", ".merge(", ".route_service("] {
        assert!(
            !app_fn.contains(adds_routes),
            "app() adds a route outside routes_documented() ({adds_routes})"
        );
    }
    // Anything else is the JSON 404.
    for uri in ["/", "/matrices/a/b", "/spmv/x", "/openapi.yaml"] {
        let r = send(&app, get(uri)).await;
        assert_eq!(r.status, 404, "{uri}");
        assert_eq!(r.error().0, "no_route");
    }
}

/// Sends `req` and checks the answer against the document.
async fn exchange(app: &axum::Router, spec: &Spec, path: &str, req: Request<Body>) -> Resp {
    let method = req.method().as_str().to_ascii_lowercase();
    let r = send(app, req).await;
    spec.check(&method, path, &r);
    r
}

#[tokio::test]
async fn answers_without_a_device_match_the_document() {
    let (app, _) = test_app(&["--no-device", "--max-body-bytes", "20000"]).await;
    let spec = Spec::fetch(&app).await;
    let a = random_matrix(60, 50, 21);
    let mm = mm_text(&a);
    let id = matrix_id(&a);
    let cases: Vec<(&str, Request<Body>, u16)> = vec![
        ("/healthz", get("/healthz"), 200),
        ("/readyz", get("/readyz"), 503),
        ("/device", get("/device"), 200),
        ("/models", get("/models"), 200),
        ("/metrics", get("/metrics"), 200),
        (
            "/predict",
            post("/predict?explain=true", "text/plain", mm.clone()),
            200,
        ),
        (
            "/predict",
            post(
                "/predict?precision=f32&expected_calls=5",
                "application/json",
                csr_json(&a).to_string(),
            ),
            200,
        ),
        (
            "/predict",
            post(
                "/predict",
                "text/plain",
                "%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1.0\n",
            ),
            400,
        ),
        (
            "/predict",
            post("/predict?expected_calls=0", "text/plain", mm.clone()),
            400,
        ),
        (
            "/predict",
            post("/predict?colour=red", "text/plain", mm.clone()),
            400,
        ),
        (
            "/predict",
            post("/predict", "text/plain", "x".repeat(30_000)),
            413,
        ),
        ("/predict", post("/predict", "image/png", mm.clone()), 415),
        (
            "/predict",
            post("/predict?precision=f16", "text/plain", mm.clone()),
            422,
        ),
        (
            "/predict",
            post(
                "/predict",
                "text/plain",
                "%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 nan\n",
            ),
            422,
        ),
        (
            "/matrices",
            post("/matrices", "text/plain", mm.clone()),
            201,
        ),
        (
            "/matrices",
            post("/matrices", "application/json", "{\"nrows\": 1"),
            400,
        ),
        ("/matrices/{id}", get(&format!("/matrices/{id}")), 200),
        ("/matrices/{id}", get("/matrices/nosuch"), 404),
        (
            "/spmv",
            post(
                "/spmv",
                "application/json",
                json!({"matrix_id": id, "x": random_x(50, 1)}).to_string(),
            ),
            503,
        ),
        (
            "/spmv",
            post(
                "/spmv",
                "application/json",
                json!({"matrix_id": id, "x": [1.0]}).to_string(),
            ),
            422,
        ),
        (
            "/spmv",
            post(
                "/spmv",
                "application/json",
                json!({"matrix_id": "nosuch", "x": [1.0]}).to_string(),
            ),
            404,
        ),
        ("/spmv", post("/spmv", "application/json", "[1, 2"), 400),
        (
            "/matrices/{id}",
            Request::delete(format!("/matrices/{id}"))
                .body(Body::empty())
                .unwrap(),
            204,
        ),
        (
            "/matrices/{id}",
            Request::delete(format!("/matrices/{id}"))
                .body(Body::empty())
                .unwrap(),
            404,
        ),
    ];
    for (path, req, want) in cases {
        let what = format!("{} {}", req.method(), req.uri());
        let r = exchange(&app, &spec, path, req).await;
        assert_eq!(
            r.status,
            want,
            "{what}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    // The JSON request bodies sent above match the request schema too.
    spec.request(
        "post",
        "/spmv",
        &json!({"matrix_id": id, "x": [1.0], "precision": "f32", "verify": true}),
    );
    spec.request(
        "post",
        "/spmv",
        &json!({"matrix": mm, "x": [1.0], "expected_calls": 3}),
    );
    spec.request(
        "post",
        "/spmv",
        &json!({"matrix": csr_json(&a), "x": [1.0]}),
    );
    spec.request("post", "/predict", &csr_json(&a));
    // Keys: 401 on a guarded route, open routes stay open.
    let (keyed, _) = test_app(&["--no-device", "--api-keys", "alice:0123456789abcdef"]).await;
    let r = exchange(&keyed, &spec, "/models", get("/models")).await;
    assert_eq!(r.status, 401);
    let r = exchange(&keyed, &spec, "/healthz", get("/healthz")).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn answers_with_a_device_match_the_document() {
    let Some((app, _)) = device_app("answers_with_a_device_match_the_document", &[]).await else {
        return;
    };
    let spec = Spec::fetch(&app).await;
    let (a, x) = random_problem(120, 90, 22);
    for uri in ["/readyz", "/device"] {
        assert_eq!(
            exchange(&app, &spec, uri, get(uri)).await.status,
            200,
            "{uri}"
        );
    }
    let r = exchange(
        &app,
        &spec,
        "/matrices",
        post("/matrices?precision=f32", "text/plain", mm_text(&a)),
    )
    .await;
    assert_eq!(r.status, 201);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let r = exchange(
        &app,
        &spec,
        "/matrices/{id}",
        get(&format!("/matrices/{id}")),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(!r.json()["uploaded"].as_array().unwrap().is_empty());
    let bodies = [
        json!({"matrix_id": id, "x": x, "precision": "f32", "verify": true}),
        json!({"matrix": mm_text(&a), "x": x}),
        json!({"matrix": csr_json(&a), "x": x, "verify": true, "expected_calls": 1000}),
    ];
    for body in &bodies {
        spec.request("post", "/spmv", body);
        let r = exchange(
            &app,
            &spec,
            "/spmv",
            post("/spmv", "application/json", body.to_string()),
        )
        .await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    // Binary x and y: every header sent is documented.
    let xb: Vec<u8> = x.iter().flat_map(|v| (*v as f32).to_le_bytes()).collect();
    let req = Request::post(format!("/spmv?matrix_id={id}&precision=f32&verify=true"))
        .header("content-type", "application/octet-stream")
        .header("accept", "application/octet-stream")
        .body(Body::from(xb))
        .unwrap();
    let r = exchange(&app, &spec, "/spmv", req).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 120 * 4);
    assert_eq!(r.headers["x-verified"], "true");
    // y that JSON cannot carry: 422; a device too small for the matrix: 507.
    let huge = sparse::Csr::<f64>::from_triplets(1, 1, &[0], &[0], &[1e300]).unwrap();
    let body = json!({"matrix": mm_text(&huge), "x": [1e300]});
    let r = exchange(
        &app,
        &spec,
        "/spmv",
        post("/spmv", "application/json", body.to_string()),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.error().0, "non_finite_result");
    let (small, _) = test_app(&["--device-memory-bytes", "1024"]).await;
    let r = exchange(
        &small,
        &spec,
        "/matrices",
        post("/matrices", "text/plain", mm_text(&a)),
    )
    .await;
    assert_eq!(r.status, 507, "{}", String::from_utf8_lossy(&r.body));
}

#[tokio::test]
async fn served_requests_reach_the_results_database() {
    let Some((app, state)) = device_app("served_requests_reach_the_results_database", &[]).await
    else {
        return;
    };
    let (a, x) = random_problem(80, 80, 10);
    send(&app, post("/predict", "text/plain", mm_text(&a))).await;
    let body = json!({"matrix": mm_text(&a), "x": x, "precision": "f32"});
    let r = send(&app, post("/spmv", "application/json", body.to_string())).await;
    assert_eq!(r.status, 200);
    let computed = r.json()["planning"]["features_computed"].as_bool().unwrap();
    let db = state.store().unwrap();
    // Logging is off the request path: wait for both rows to land.
    let mut rows = Vec::new();
    for _ in 0..200 {
        rows = db.requests_since(store::RequestId(0), 10).await.unwrap();
        if rows.len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(rows.len(), 2, "{rows:?}");
    let spmv = rows
        .iter()
        .find(|r| r.record.route == "/spmv")
        .expect("an /spmv row");
    assert_eq!(
        spmv.record.matrix_hash.as_deref(),
        Some(matrix_id(&a).as_str())
    );
    assert!(spmv.record.kernel_ms.unwrap() > 0.0);
    assert!(spmv.record.plan.is_some());
    // Features are logged when the plan needed them (a quick plan does not).
    assert_eq!(spmv.record.features.is_some(), computed);
    assert_eq!(spmv.record.precision, Some(store::Precision::F32));
    assert_eq!(spmv.record.status, 200);
    let predict = rows
        .iter()
        .find(|r| r.record.route == "/predict")
        .expect("a /predict row");
    assert!(predict.record.kernel_ms.is_none());
}

#[tokio::test]
async fn keep_matrices_writes_each_served_matrix_once_for_the_trainer() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("served");
    let keep_s = keep.display().to_string();
    let (app, _state) = test_app(&["--no-device", "--keep-matrices", &keep_s]).await;
    let a = random_matrix(40, 30, 3);
    assert_eq!(
        send(&app, post("/predict", "text/plain", mm_text(&a)))
            .await
            .status,
        200
    );
    let path = keep.join(format!("{}.mtx", matrix_id(&a)));
    for _ in 0..200 {
        if path.exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let back =
        sparse::mm::read_path::<f64>(&path, &Default::default()).expect("kept matrix reads back");
    assert_eq!(back, a);
    // Without the flag nothing is written.
    let (app2, _) = test_app(&["--no-device"]).await;
    assert_eq!(
        send(&app2, post("/predict", "text/plain", mm_text(&a)))
            .await
            .status,
        200
    );
    assert_eq!(std::fs::read_dir(&keep).unwrap().count(), 1);
}

#[tokio::test]
async fn keep_matrices_stops_at_its_byte_quota() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("served");
    let keep_s = keep.display().to_string();
    let a = random_matrix(40, 30, 3);
    let b = random_matrix(40, 30, 4);
    // Room for one of these matrices, not two.
    let mut one = Vec::new();
    sparse::mm::write(&a, &mut one).unwrap();
    let quota = (one.len() * 3 / 2).to_string();
    let (app, state) = test_app(&[
        "--no-device",
        "--keep-matrices",
        &keep_s,
        "--keep-matrices-bytes",
        &quota,
    ])
    .await;
    let first = keep.join(format!("{}.mtx", matrix_id(&a)));
    let r = send(&app, post("/predict", "text/plain", mm_text(&a))).await;
    assert_eq!(r.status, 200);
    for _ in 0..300 {
        if first.exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        first.exists(),
        "the first matrix fits the quota and is kept"
    );
    let r = send(&app, post("/predict", "text/plain", mm_text(&b))).await;
    assert_eq!(r.status, 200, "the quota never fails the request itself");
    for _ in 0..300 {
        if state.keep_skipped() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(state.keep_skipped(), 1);
    let names: Vec<_> = std::fs::read_dir(&keep)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    // Only the first matrix, and no temporary file left behind.
    assert_eq!(names, vec![first.file_name().unwrap().to_owned()]);
}
