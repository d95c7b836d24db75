-- The labelling queue of `trainer worker`: one row per corpus matrix (by its
-- corpus name) of a named queue. A worker claims a row, keeps its heartbeat
-- fresh while it labels the matrix, and marks it done or failed; a claim whose
-- heartbeat is older than the workers' lease has lapsed (its worker stopped)
-- and may be claimed by another worker. The measurements themselves go to
-- `measurements`, as with `trainer label`.
-- (Numbered 0004: 0003 is taken by measurement_context on another branch.)

CREATE TABLE label_queue (
    id           INTEGER PRIMARY KEY,
    -- Several queues can share a database (one per device kind, say).
    queue        TEXT    NOT NULL,
    -- The corpus item's name and source; a worker finds it in its own corpus.
    name         TEXT    NOT NULL,
    source       TEXT    NOT NULL,
    status       TEXT    NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'claimed', 'done', 'failed')),
    -- How many times the row was claimed (a lapsed claim taken over counts).
    attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- host:pid:token of the worker holding (or last holding) the claim.
    worker       TEXT,
    claimed_at   TEXT,
    heartbeat_at TEXT,
    finished_at  TEXT,
    -- Why labelling failed, for status 'failed'.
    error        TEXT,
    enqueued_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (queue, name)
);
CREATE INDEX label_queue_status ON label_queue (queue, status, id);
