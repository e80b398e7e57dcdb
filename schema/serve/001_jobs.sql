-- exlr8d serve's job queue, version 1: <cache>/exlr8d.jobs.db.
--
-- Kept apart from the cache index (exlr8d.db) on purpose: the server takes
-- requests while another process (an `exlr8d pull`, a systemd unit) owns the
-- cache, and records them here without its lock. Applied by
-- daemon/serve/job_store.cpp like the cache's migrations (PRAGMA
-- user_version). Never edit a released migration: add 002_<what>.sql.
-- Times are Unix milliseconds (UTC).

-- One row per pull asked of the server (POST /v1/pulls). A job runs as one
-- or more attempts, each a pull of the cache (pulls.id in exlr8d.db): a job
-- interrupted by a restart of the server is queued again and resumes, the
-- cache keeping every byte its earlier attempts verified.
CREATE TABLE jobs (
  id        INTEGER PRIMARY KEY,
  repo      TEXT    NOT NULL,             -- "org/name"
  revision  TEXT    NOT NULL,             -- branch, tag or commit
  manifest  TEXT    NOT NULL,             -- name or repo path
  tp        INTEGER NOT NULL CHECK (tp >= 1),
  rank      INTEGER NOT NULL CHECK (rank >= 0 AND rank < tp),
  endpoint  TEXT    NOT NULL DEFAULT '',  -- '' = the server's hub
  pin       TEXT    NOT NULL DEFAULT '',  -- pin holder once done; '' = none
  state     TEXT    NOT NULL
            CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
  error     TEXT    NOT NULL DEFAULT '',
  pull_id   INTEGER,                      -- the latest attempt's pull; NULL before
  attempts  INTEGER NOT NULL DEFAULT 0,
  created   INTEGER NOT NULL,
  updated   INTEGER NOT NULL,
  finished  INTEGER                       -- NULL until done, failed or cancelled
);
CREATE INDEX jobs_by_state ON jobs (state, id);
