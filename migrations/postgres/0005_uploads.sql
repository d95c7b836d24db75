-- PostgreSQL twin of ../0005_uploads.sql: matrices uploaded to the HTTP
-- service, shared by every replica; the matrix in binary CSR encoding (BYTEA,
-- at most 1 GB per value).

CREATE TABLE uploads (
    id             TEXT    PRIMARY KEY,
    -- The API key name that uploaded it ("" without keys).
    owner          TEXT    NOT NULL,
    nrows          BIGINT  NOT NULL CHECK (nrows >= 0),
    ncols          BIGINT  NOT NULL CHECK (ncols >= 0),
    nnz            BIGINT  NOT NULL CHECK (nnz >= 0),
    -- How many products the uploader expects (the planners weigh analysis against it).
    expected_calls BIGINT  NOT NULL CHECK (expected_calls >= 1),
    csr            BYTEA   NOT NULL,
    created_at     TEXT    NOT NULL DEFAULT spmv_now()
);
