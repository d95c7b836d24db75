-- Who runs a training run, and when it last showed signs of life, so that the
-- next trainer can tell a run that is still going from one whose process was
-- killed (and mark that one 'interrupted'). NULL for runs written before this
-- migration and for runs started without an owner.

-- Process id of the trainer that started the run.
ALTER TABLE training_runs ADD COLUMN pid INTEGER;
-- Host name of the machine it ran on (a pid means nothing on another host).
ALTER TABLE training_runs ADD COLUMN host TEXT;
-- A random token of that process, to tell it from a later process given the same pid.
ALTER TABLE training_runs ADD COLUMN token TEXT;
-- Updated while the run makes progress (ISO-8601 UTC).
ALTER TABLE training_runs ADD COLUMN heartbeat_at TEXT;
