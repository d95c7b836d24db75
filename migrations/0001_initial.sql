-- Initial schema of the results database: devices, matrices, measurements,
-- plans, models, training runs and the request log of the HTTP service.
-- Timestamps are ISO-8601 UTC text; JSON columns hold serde_json text.

CREATE TABLE devices (
    id                  INTEGER PRIMARY KEY,
    name                TEXT    NOT NULL,
    vendor              TEXT    NOT NULL,
    driver              TEXT    NOT NULL,
    compute_units       INTEGER NOT NULL,
    global_mem_bytes    INTEGER NOT NULL,
    -- Host <-> device copy bandwidth measured at start-up; NULL when not measured.
    copy_bandwidth_gbps REAL,
    created_at          TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (name, vendor, driver)
);

CREATE TABLE matrices (
    id           INTEGER PRIMARY KEY,
    content_hash TEXT    NOT NULL UNIQUE,
    name         TEXT    NOT NULL,
    -- "suitesparse", "generator:<family>", "standin:<group/name>", "request", ...
    source       TEXT    NOT NULL,
    nrows        INTEGER NOT NULL,
    ncols        INTEGER NOT NULL,
    nnz          INTEGER NOT NULL,
    -- {"names": [...], "values": [...]}: the feature vector with its order.
    features     TEXT    NOT NULL,
    created_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX matrices_source ON matrices (source);

CREATE TABLE training_runs (
    id          INTEGER PRIMARY KEY,
    started_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    finished_at TEXT,
    device_id   INTEGER REFERENCES devices (id),
    precision   TEXT    CHECK (precision IN ('f32', 'f64')),
    params      TEXT    NOT NULL,
    -- 'running' until finish_run sets 'finished', 'failed' or 'interrupted'.
    status      TEXT    NOT NULL DEFAULT 'running',
    notes       TEXT    NOT NULL DEFAULT ''
);

CREATE TABLE measurements (
    id          INTEGER PRIMARY KEY,
    matrix_id   INTEGER NOT NULL REFERENCES matrices (id) ON DELETE CASCADE,
    device_id   INTEGER NOT NULL REFERENCES devices (id) ON DELETE CASCADE,
    precision   TEXT    NOT NULL CHECK (precision IN ('f32', 'f64')),
    -- 0 for the single-bin scheme, else the granularity U.
    scheme      INTEGER NOT NULL CHECK (scheme >= 0),
    -- The bin timed alone, or -1 for a whole-plan timing.
    bin         INTEGER NOT NULL CHECK (bin >= -1),
    -- Kernel name for a bin timing, 'plan' for a whole-plan timing.
    kernel      TEXT    NOT NULL,
    -- Canonical plan JSON for a whole-plan timing, '' for a bin timing
    -- (not NULL, so that it takes part in the UNIQUE key).
    plan        TEXT    NOT NULL DEFAULT '',
    median_ms   REAL    NOT NULL,
    spread_ms   REAL    NOT NULL,
    repetitions INTEGER NOT NULL CHECK (repetitions > 0),
    run_id      INTEGER REFERENCES training_runs (id) ON DELETE SET NULL,
    created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CHECK ((bin = -1) = (kernel = 'plan')),
    CHECK ((bin = -1) = (plan <> '')),
    UNIQUE (matrix_id, device_id, precision, scheme, bin, kernel, plan)
);
CREATE INDEX measurements_device ON measurements (device_id, precision);

CREATE TABLE plans (
    id          INTEGER PRIMARY KEY,
    matrix_id   INTEGER NOT NULL REFERENCES matrices (id) ON DELETE CASCADE,
    device_id   INTEGER NOT NULL REFERENCES devices (id) ON DELETE CASCADE,
    precision   TEXT    NOT NULL CHECK (precision IN ('f32', 'f64')),
    scheme      INTEGER NOT NULL CHECK (scheme >= 0),
    plan        TEXT    NOT NULL,
    -- Measured time of the whole plan.
    total_ms    REAL    NOT NULL,
    -- Sum of the plan's bins timed alone, when known.
    bins_sum_ms REAL,
    is_oracle   INTEGER NOT NULL DEFAULT 0 CHECK (is_oracle IN (0, 1)),
    created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (matrix_id, device_id, precision, scheme)
);
-- At most one oracle per matrix, device and precision.
CREATE UNIQUE INDEX plans_one_oracle ON plans (matrix_id, device_id, precision) WHERE is_oracle = 1;

CREATE TABLE models (
    id          INTEGER PRIMARY KEY,
    path        TEXT    NOT NULL,
    device_name TEXT    NOT NULL,
    precision   TEXT    NOT NULL CHECK (precision IN ('f32', 'f64')),
    metrics     TEXT    NOT NULL,
    card        TEXT    NOT NULL,
    created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE TABLE requests (
    id          INTEGER PRIMARY KEY,
    at          TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    route       TEXT    NOT NULL,
    matrix_hash TEXT,
    features    TEXT,
    plan        TEXT,
    precision   TEXT    CHECK (precision IN ('f32', 'f64')),
    -- Device name and model that served the request, when known.
    device      TEXT,
    model       TEXT,
    kernel_ms   REAL,
    e2e_ms      REAL,
    status      INTEGER NOT NULL
);
CREATE INDEX requests_matrix ON requests (matrix_hash);
