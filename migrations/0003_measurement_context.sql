-- The context a timing was taken in: the hash of the kernel sources, the build
-- options of that precision's program on that device, and the engine version
-- (crate version + timing-semantics version). Measurements and plans reference
-- their context, and it is part of their unique keys, so timings taken with
-- other kernels, options or timing rules are never mixed with current ones.
-- Rows written before this migration get the context 'legacy' (id 1).
-- SQLite cannot change a UNIQUE constraint in place: both tables are rebuilt.

CREATE TABLE measurement_contexts (
    id                  INTEGER PRIMARY KEY,
    -- BLAKE3 of the three fields below (or 'legacy'): what a context is looked up by.
    hash                TEXT    NOT NULL UNIQUE,
    kernel_sources_hash TEXT    NOT NULL,
    build_options       TEXT    NOT NULL,
    engine_version      TEXT    NOT NULL,
    created_at          TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
INSERT INTO measurement_contexts (id, hash, kernel_sources_hash, build_options, engine_version)
VALUES (1, 'legacy', 'legacy', 'legacy', 'legacy');

CREATE TABLE measurements_v3 (
    id          INTEGER PRIMARY KEY,
    matrix_id   INTEGER NOT NULL REFERENCES matrices (id) ON DELETE CASCADE,
    device_id   INTEGER NOT NULL REFERENCES devices (id) ON DELETE CASCADE,
    precision   TEXT    NOT NULL CHECK (precision IN ('f32', 'f64')),
    scheme      INTEGER NOT NULL CHECK (scheme >= 0),
    bin         INTEGER NOT NULL CHECK (bin >= -1),
    kernel      TEXT    NOT NULL,
    plan        TEXT    NOT NULL DEFAULT '',
    median_ms   REAL    NOT NULL,
    spread_ms   REAL    NOT NULL,
    repetitions INTEGER NOT NULL CHECK (repetitions > 0),
    run_id      INTEGER REFERENCES training_runs (id) ON DELETE SET NULL,
    created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    context_id  INTEGER NOT NULL DEFAULT 1 REFERENCES measurement_contexts (id),
    -- Half-width of the median's 95% confidence interval over the median; NULL
    -- when unknown (legacy rows, fewer than 6 repetitions).
    ci_rel      REAL,
    CHECK ((bin = -1) = (kernel = 'plan')),
    CHECK ((bin = -1) = (plan <> '')),
    UNIQUE (matrix_id, device_id, precision, scheme, bin, kernel, plan, context_id)
);
INSERT INTO measurements_v3 (id, matrix_id, device_id, precision, scheme, bin, kernel, plan,
                             median_ms, spread_ms, repetitions, run_id, created_at, context_id)
SELECT id, matrix_id, device_id, precision, scheme, bin, kernel, plan,
       median_ms, spread_ms, repetitions, run_id, created_at, 1
FROM measurements;
DROP TABLE measurements;
ALTER TABLE measurements_v3 RENAME TO measurements;
CREATE INDEX measurements_device ON measurements (device_id, precision);

CREATE TABLE plans_v3 (
    id          INTEGER PRIMARY KEY,
    matrix_id   INTEGER NOT NULL REFERENCES matrices (id) ON DELETE CASCADE,
    device_id   INTEGER NOT NULL REFERENCES devices (id) ON DELETE CASCADE,
    precision   TEXT    NOT NULL CHECK (precision IN ('f32', 'f64')),
    scheme      INTEGER NOT NULL CHECK (scheme >= 0),
    plan        TEXT    NOT NULL,
    total_ms    REAL    NOT NULL,
    bins_sum_ms REAL,
    is_oracle   INTEGER NOT NULL DEFAULT 0 CHECK (is_oracle IN (0, 1)),
    created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    context_id  INTEGER NOT NULL DEFAULT 1 REFERENCES measurement_contexts (id),
    UNIQUE (matrix_id, device_id, precision, scheme, context_id)
);
INSERT INTO plans_v3 (id, matrix_id, device_id, precision, scheme, plan, total_ms, bins_sum_ms,
                      is_oracle, created_at, context_id)
SELECT id, matrix_id, device_id, precision, scheme, plan, total_ms, bins_sum_ms,
       is_oracle, created_at, 1
FROM plans;
DROP TABLE plans;
ALTER TABLE plans_v3 RENAME TO plans;
-- At most one oracle per matrix, device, precision and context.
CREATE UNIQUE INDEX plans_one_oracle ON plans (matrix_id, device_id, precision, context_id)
WHERE is_oracle = 1;
