//! Where the database lives: parsing `DATABASE_URL` and its defaults.

use crate::StoreError;
use std::fmt;
use std::path::PathBuf;

/// The environment variable that overrides the database location.
pub const DATABASE_URL_ENV: &str = "DATABASE_URL";

/// The database file used when neither an explicit URL nor `DATABASE_URL` is given,
/// relative to the working directory.
pub const DEFAULT_DATABASE_FILE: &str = "spmv.db";

/// A parsed database location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbLocation {
    /// A database file (created when missing).
    File(PathBuf),
    /// A private in-memory database, gone when the store is dropped.
    Memory,
    /// A PostgreSQL database, by its `postgres://` (or `postgresql://`) URL.
    Postgres(String),
}

impl DbLocation {
    /// Parses a location: `postgres://...` or `postgresql://...` (a PostgreSQL
    /// server, passed to the driver as given), `sqlite://path`, `sqlite:path`, or
    /// a plain path.
    ///
    /// `sqlite:///abs/file.db` and `sqlite:/abs/file.db` give `/abs/file.db`;
    /// `sqlite://rel.db` and `sqlite:rel.db` give `rel.db` (relative to the working
    /// directory); `sqlite::memory:`, `sqlite://:memory:` and `:memory:` give
    /// [`DbLocation::Memory`]. A query string (`?mode=rwc`) is ignored: the file is
    /// always opened read-write and created when missing. Other schemes
    /// (`mysql://...`) and empty paths are errors.
    pub fn parse(url: &str) -> Result<DbLocation, StoreError> {
        let invalid = |reason: &str| StoreError::InvalidUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let trimmed = url.trim();
        if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
            return Ok(DbLocation::Postgres(trimmed.to_string()));
        }
        let rest = if let Some(r) = trimmed.strip_prefix("sqlite://") {
            r
        } else if let Some(r) = trimmed.strip_prefix("sqlite:") {
            r
        } else if let Some((scheme, _)) = trimmed.split_once("://") {
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '+')
            {
                return Err(invalid(&format!(
                    "scheme '{scheme}' is not supported; use postgres://..., sqlite://PATH or a plain path"
                )));
            }
            trimmed
        } else {
            trimmed
        };
        let path = match rest.split_once('?') {
            Some((p, _query)) => p,
            None => rest,
        };
        if path == ":memory:" {
            return Ok(DbLocation::Memory);
        }
        if path.is_empty() {
            return Err(invalid("no file path"));
        }
        Ok(DbLocation::File(PathBuf::from(path)))
    }

    /// The location to use: `explicit` when given, else `DATABASE_URL` when set and
    /// non-empty, else [`DEFAULT_DATABASE_FILE`] in the working directory.
    pub fn resolve(explicit: Option<&str>) -> Result<DbLocation, StoreError> {
        if let Some(url) = explicit {
            return DbLocation::parse(url);
        }
        match std::env::var(DATABASE_URL_ENV) {
            Ok(url) if !url.trim().is_empty() => DbLocation::parse(&url),
            _ => Ok(DbLocation::File(PathBuf::from(DEFAULT_DATABASE_FILE))),
        }
    }
}

impl fmt::Display for DbLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbLocation::File(p) => write!(f, "{}", p.display()),
            DbLocation::Memory => f.write_str(":memory:"),
            DbLocation::Postgres(url) => f.write_str(&without_password(url)),
        }
    }
}

/// A URL with the password of its user part, if any, replaced by `***`, so
/// that messages and logs can show where the database is.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let file = |s: &str| DbLocation::File(PathBuf::from(s));
        for (given, expected) in [
            ("sqlite://results.db", file("results.db")),
            ("sqlite:results.db", file("results.db")),
            ("results.db", file("results.db")),
            ("sqlite:///tmp/a.db", file("/tmp/a.db")),
            ("sqlite:/tmp/a.db", file("/tmp/a.db")),
            ("/tmp/a.db", file("/tmp/a.db")),
            ("sqlite://a.db?mode=rwc", file("a.db")),
            (" data/x.sqlite ", file("data/x.sqlite")),
            ("sqlite::memory:", DbLocation::Memory),
            ("sqlite://:memory:", DbLocation::Memory),
            (":memory:", DbLocation::Memory),
        ] {
            assert_eq!(DbLocation::parse(given).unwrap(), expected, "{given:?}");
        }
    }

    #[test]
    fn rejected() {
        for bad in [
            "mysql://h/db",
            "sqlite://",
            "sqlite:",
            "",
            "sqlite:?mode=ro",
        ] {
            match DbLocation::parse(bad) {
                Err(StoreError::InvalidUrl { url, .. }) => assert_eq!(url, bad),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn postgres_urls_are_kept_and_shown_without_password() {
        let url = "postgres://spmv:s3cret@db.example:5432/results?sslmode=disable";
        let loc = DbLocation::parse(url).unwrap();
        assert_eq!(loc, DbLocation::Postgres(url.to_string()));
        assert_eq!(
            loc.to_string(),
            "postgres://spmv:***@db.example:5432/results?sslmode=disable"
        );
        let plain = "postgresql://u@h/db";
        assert_eq!(DbLocation::parse(plain).unwrap().to_string(), plain);
        assert_eq!(
            DbLocation::parse("postgres://h/db").unwrap().to_string(),
            "postgres://h/db"
        );
    }

    #[test]
    fn explicit_wins() {
        // Does not touch the environment (tests run in parallel); an explicit URL
        // must be used as given whatever DATABASE_URL says.
        assert_eq!(
            DbLocation::resolve(Some("sqlite:x.db")).unwrap(),
            DbLocation::File(PathBuf::from("x.db"))
        );
    }
}
