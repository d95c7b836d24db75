//! The OpenAPI 3 document served at `/openapi.json`, written by hand in
//! `openapi.json` next to this crate's manifest and checked by the tests
//! (valid JSON, and every path it lists is a route of the app).

/// The document, as served.
pub const DOCUMENT: &str = include_str!("../openapi.json");
