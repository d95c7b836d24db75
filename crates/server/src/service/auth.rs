//! Who may do what: the API keys, the caller they make a [`Principal`], and
//! keyed matrix ids (the HTTP layer that reads keys is `http::auth`).
//!
//! API keys are optional: off by default on a loopback address, required
//! (unless explicitly waived) on any other. With keys, every route but the
//! liveness, readiness and API-description ones needs one (`Authorization:
//! Bearer KEY` or `X-API-Key: KEY`), an uploaded matrix belongs to the key that
//! uploaded it and is invisible (404) to every other, and only keys marked
//! `contribute` feed served matrices to retraining.
//!
//! Keys are compared by their BLAKE3 digests, so the comparison time does not
//! depend on how much of a guessed key is right. Matrix ids are a keyed hash of
//! the owner and the content (BLAKE3 keyed by a per-service secret), so an id cannot be
//! derived from a matrix's content alone.

use crate::domain::config::Config;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;

/// The caller of a request, as the auth layer established it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The key's name; `None` when the service runs without keys.
    pub key: Option<String>,
    /// Whether matrices served for this caller may be kept for retraining.
    pub contribute: bool,
}

impl Principal {
    /// The caller when the service has no keys.
    pub fn anonymous() -> Principal {
        Principal {
            key: None,
            contribute: true,
        }
    }

    /// The owner name recorded with an uploaded matrix.
    pub fn owner(&self) -> &str {
        self.key.as_deref().unwrap_or("")
    }
}

/// A key as configured.
#[derive(Debug, Clone)]
struct KeyEntry {
    name: String,
    contribute: bool,
}

/// The configured keys, by the BLAKE3 digest of the key text.
#[derive(Debug, Clone, Default)]
pub struct Keys {
    by_digest: HashMap<[u8; 32], KeyEntry>,
}

/// A keys file or variable that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    /// The keys file could not be read.
    #[error("cannot read the API keys file: {0}")]
    Read(#[from] std::io::Error),
    /// A line is not `NAME:KEY[:contribute]`.
    #[error("API keys, entry {entry}: {why}")]
    Malformed {
        /// 1-based entry number.
        entry: usize,
        /// What is wrong.
        why: String,
    },
    /// Keys are needed and none were given.
    #[error(
        "the service is bound to the non-loopback address {0} without API keys: give --api-keys-file or SPMV_API_KEYS, or pass --allow-anonymous to serve anyone who can reach it"
    )]
    Required(SocketAddr),
}

fn digest(key: &str) -> [u8; 32] {
    *blake3::hash(key.as_bytes()).as_bytes()
}

impl Keys {
    /// Parses entries `NAME:KEY` or `NAME:KEY:contribute`, one per line or
    /// separated by commas; blank lines and `#` comments are ignored. Keys must
    /// be at least 16 characters.
    pub fn parse(text: &str) -> Result<Keys, KeysError> {
        let mut by_digest = HashMap::new();
        let entries = text
            .lines()
            .flat_map(|l| l.split(','))
            .map(str::trim)
            .filter(|e| !e.is_empty() && !e.starts_with('#'));
        for (i, e) in entries.enumerate() {
            let bad = |why: &str| KeysError::Malformed {
                entry: i + 1,
                why: why.to_string(),
            };
            let mut parts = e.split(':');
            let name = parts.next().unwrap_or("").trim();
            let key = parts.next().ok_or_else(|| bad("expected NAME:KEY"))?.trim();
            let contribute = match parts.next().map(str::trim) {
                None => false,
                Some("contribute") => true,
                Some(_) => return Err(bad("the third field may only be 'contribute'")),
            };
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(bad("the name must be letters, digits, '-', '_' or '.'"));
            }
            if key.len() < 16 {
                return Err(bad("keys must be at least 16 characters"));
            }
            let entry = KeyEntry {
                name: name.to_string(),
                contribute,
            };
            if by_digest.insert(digest(key), entry).is_some() {
                return Err(bad("the same key is listed twice"));
            }
        }
        Ok(Keys { by_digest })
    }

    /// Reads a keys file.
    pub fn from_file(path: &Path) -> Result<Keys, KeysError> {
        Keys::parse(&std::fs::read_to_string(path)?)
    }

    /// Whether no key is configured.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// The caller holding `key`, if it is a configured key.
    pub fn principal(&self, key: &str) -> Option<Principal> {
        self.by_digest.get(&digest(key)).map(|e| Principal {
            key: Some(e.name.clone()),
            contribute: e.contribute,
        })
    }
}

/// The keys from the configuration, checked against the bind address.
pub fn keys_for(config: &Config) -> Result<Keys, KeysError> {
    let mut text = String::new();
    if let Some(path) = &config.api_keys_file {
        text.push_str(&std::fs::read_to_string(path)?);
        text.push('\n');
    }
    if let Some(inline) = &config.api_keys {
        text.push_str(inline);
    }
    let keys = Keys::parse(&text)?;
    if keys.is_empty() && !config.bind.ip().is_loopback() && !config.allow_anonymous {
        return Err(KeysError::Required(config.bind));
    }
    Ok(keys)
}

/// The id of a matrix for an owner: a keyed hash of the service secret, the
/// owner and the content hash, as 64 hex digits.
pub fn matrix_id(secret: &[u8; 32], owner: &str, content_hash: &str) -> String {
    let mut h = blake3::Hasher::new_keyed(secret);
    h.update(&(owner.len() as u64).to_le_bytes());
    h.update(owner.as_bytes());
    h.update(content_hash.as_bytes());
    h.finalize().to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_names_contribution_and_refuse_bad_entries() {
        let k = Keys::parse("# team keys\nalice:0123456789abcdef:contribute\n\nbob:fedcba9876543210, carol:aaaaaaaaaaaaaaaa").unwrap();
        assert_eq!(
            k.principal("0123456789abcdef"),
            Some(Principal {
                key: Some("alice".into()),
                contribute: true
            })
        );
        assert_eq!(
            k.principal("fedcba9876543210").unwrap().key.as_deref(),
            Some("bob")
        );
        assert!(!k.principal("fedcba9876543210").unwrap().contribute);
        assert!(k.principal("aaaaaaaaaaaaaaaa").is_some());
        assert!(k.principal("fedcba987654321").is_none());
        assert!(k.principal("").is_none());
        for bad in [
            "alice",
            "alice:short",
            ":0123456789abcdef",
            "a b:0123456789abcdef",
            "a:0123456789abcdef:admin",
            "a:0123456789abcdef,b:0123456789abcdef",
        ] {
            assert!(Keys::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ids_depend_on_secret_owner_and_content() {
        let s1 = [1u8; 32];
        let s2 = [2u8; 32];
        let a = matrix_id(&s1, "alice", "c0ffee");
        assert_eq!(a, matrix_id(&s1, "alice", "c0ffee"));
        assert_eq!(a.len(), 64);
        assert_ne!(a, matrix_id(&s2, "alice", "c0ffee"));
        assert_ne!(a, matrix_id(&s1, "bob", "c0ffee"));
        assert_ne!(a, matrix_id(&s1, "alice", "c0ffef"));
        // The owner's length is part of the input: no ambiguity at the boundary.
        assert_ne!(matrix_id(&s1, "ab", "c"), matrix_id(&s1, "a", "bc"));
    }
}
