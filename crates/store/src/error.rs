//! The one error type of the store.

use std::path::PathBuf;

/// Everything that can go wrong between the program and the results database.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `DATABASE_URL` (or the URL given to [`crate::Store::connect`]) is not a
    /// SQLite or PostgreSQL location this crate understands.
    #[error("invalid database URL '{url}': {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The folder that should hold the database file could not be created.
    #[error("cannot create the folder for the database {path}: {source}")]
    Io {
        /// The folder.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Opening the database failed (unreadable file, not a database, ...).
    #[error("cannot open the database {location}: {source}")]
    Connect {
        /// Where the database is (a path or `:memory:`).
        location: String,
        /// The underlying error.
        source: sqlx::Error,
    },
    /// Applying the embedded migrations failed (for example, the file was written
    /// by a newer version of this program, or a landed migration was edited).
    #[error("cannot migrate the database: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A statement failed.
    #[error("database query '{operation}' failed: {source}")]
    Query {
        /// Which store function was running.
        operation: &'static str,
        /// The underlying error.
        source: sqlx::Error,
    },
    /// A row holds a value this program cannot read back: bad JSON, an unknown
    /// precision, kernel or scheme, a negative count.
    #[error("cannot decode {column} of a {table} row: {message}")]
    Decode {
        /// The table.
        table: &'static str,
        /// The column.
        column: String,
        /// What is wrong.
        message: String,
    },
    /// A value given to the store cannot be stored (a count above `i64::MAX`, a
    /// non-finite time, a plan that cannot be serialised).
    #[error("cannot store {what}: {message}")]
    InvalidValue {
        /// Which field.
        what: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The operation exists for one backend only (SQLite's journal mode asked
    /// of a PostgreSQL store).
    #[error("'{operation}' is not available on a {backend} database")]
    Unsupported {
        /// Which store function.
        operation: &'static str,
        /// The backend of the store.
        backend: &'static str,
    },
    /// A row named by id does not exist.
    #[error("no {table} row with id {id}")]
    NotFound {
        /// The table.
        table: &'static str,
        /// The id asked for.
        id: i64,
    },
}

/// Attaches the operation name to a sqlx error.
pub(crate) trait QueryContext<T> {
    /// Wraps the error as [`StoreError::Query`].
    fn op(self, operation: &'static str) -> Result<T, StoreError>;

    /// Wraps the error of a statement that reads rows of `table`: a column
    /// that cannot be read back is [`StoreError::Decode`], anything else
    /// [`StoreError::Query`].
    fn read(self, table: &'static str, operation: &'static str) -> Result<T, StoreError>;
}

impl<T> QueryContext<T> for Result<T, sqlx::Error> {
    fn op(self, operation: &'static str) -> Result<T, StoreError> {
        self.map_err(|source| StoreError::Query { operation, source })
    }

    fn read(self, table: &'static str, operation: &'static str) -> Result<T, StoreError> {
        self.map_err(|e| match e {
            // A row type built from several columns says which one itself.
            sqlx::Error::ColumnDecode { index, source } => match source.downcast::<StoreError>() {
                Ok(inner) => *inner,
                Err(source) => StoreError::Decode {
                    table,
                    // `try_get` quotes the name (Debug of `&str`); the
                    // `try_from` conversions of a derived `FromRow` do not.
                    column: index.trim_matches('"').to_string(),
                    message: source.to_string(),
                },
            },
            source => StoreError::Query { operation, source },
        })
    }
}
