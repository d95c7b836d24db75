-- PostgreSQL twin of ../0002_run_owner_heartbeat.sql: who runs a training run,
-- and when it last showed signs of life. NULL for runs written before this
-- migration and for runs started without an owner.

-- Process id of the trainer that started the run.
ALTER TABLE training_runs ADD COLUMN pid BIGINT;
-- Host name of the machine it ran on (a pid means nothing on another host).
ALTER TABLE training_runs ADD COLUMN host TEXT;
-- A random token of that process, to tell it from a later process given the same pid.
ALTER TABLE training_runs ADD COLUMN token TEXT;
-- Updated while the run makes progress (ISO-8601 UTC text, as spmv_now() writes it).
ALTER TABLE training_runs ADD COLUMN heartbeat_at TEXT;
