-- Matrices uploaded to the HTTP service (POST /matrices), shared by every
-- replica on this database: one row per matrix id (the keyed hash of owner and
-- content that the service answers with). The matrix is kept in the service's
-- binary CSR encoding (u32 indices, f64 values; see crates/server/src/csr_binary.rs);
-- plans are not kept, since each replica plans for its own device and models.
-- A row lives until DELETE /matrices/{id}; a replica's memory cache only
-- holds copies of rows.

CREATE TABLE uploads (
    id             TEXT    PRIMARY KEY,
    -- The API key name that uploaded it ("" without keys).
    owner          TEXT    NOT NULL,
    nrows          INTEGER NOT NULL CHECK (nrows >= 0),
    ncols          INTEGER NOT NULL CHECK (ncols >= 0),
    nnz            INTEGER NOT NULL CHECK (nnz >= 0),
    -- How many products the uploader expects (the planners weigh analysis against it).
    expected_calls INTEGER NOT NULL CHECK (expected_calls >= 1),
    csr            BLOB    NOT NULL,
    created_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
