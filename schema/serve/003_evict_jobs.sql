-- exlr8d serve's job queue, version 3: eviction jobs.
--
-- kind 'evict' (POST /v1/evict): evict one fileset of the cache now, as
-- `exlr8d gc --repo` does (refused while it is pinned). Like a verify job it
-- uses repo and revision only, and leaves its report in `result`.
--
-- SQLite cannot change a CHECK constraint in place, so the table is built
-- again with the wider one and every row copied (ids kept).
CREATE TABLE jobs_v3 (
  id        INTEGER PRIMARY KEY,
  repo      TEXT    NOT NULL,
  revision  TEXT    NOT NULL,
  manifest  TEXT    NOT NULL,
  tp        INTEGER NOT NULL CHECK (tp >= 1),
  rank      INTEGER NOT NULL CHECK (rank >= 0 AND rank < tp),
  endpoint  TEXT    NOT NULL DEFAULT '',
  pin       TEXT    NOT NULL DEFAULT '',
  state     TEXT    NOT NULL
            CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
  error     TEXT    NOT NULL DEFAULT '',
  pull_id   INTEGER,
  attempts  INTEGER NOT NULL DEFAULT 0,
  created   INTEGER NOT NULL,
  updated   INTEGER NOT NULL,
  finished  INTEGER,
  kind      TEXT    NOT NULL DEFAULT 'pull' CHECK (kind IN ('pull', 'verify', 'evict')),
  result    TEXT    NOT NULL DEFAULT ''
);
INSERT INTO jobs_v3 (id, repo, revision, manifest, tp, rank, endpoint, pin, state, error, pull_id, attempts,
                     created, updated, finished, kind, result)
  SELECT id, repo, revision, manifest, tp, rank, endpoint, pin, state, error, pull_id, attempts,
         created, updated, finished, kind, result FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_v3 RENAME TO jobs;
CREATE INDEX jobs_by_state ON jobs (state, id);
