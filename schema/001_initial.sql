-- exlr8d cache index, version 1.
--
-- Applied by daemon/cache/migrations.cpp inside one transaction, which then
-- sets PRAGMA user_version = 1. Never edit a released migration: add
-- 002_<what>.sql instead. Times are Unix milliseconds (UTC). Byte counts and
-- offsets are non-negative 64-bit integers.

-- One fileset = one commit of one repository, stored under
-- <cache>/<org>/<name>/<commit>/.
CREATE TABLE filesets (
  id         INTEGER PRIMARY KEY,
  repo       TEXT    NOT NULL,             -- "org/name"
  revision   TEXT    NOT NULL,             -- the revision last resolved to this commit
  commit_sha TEXT    NOT NULL,             -- 40 or 64 lowercase hex
  created    INTEGER NOT NULL,
  last_used  INTEGER NOT NULL,             -- LRU key for Gc
  UNIQUE (repo, commit_sha)
);

-- Offline mode: which commit a revision (branch, tag or commit) resolved to,
-- the last time we were online.
CREATE TABLE revisions (
  repo       TEXT    NOT NULL,
  revision   TEXT    NOT NULL,
  fileset_id INTEGER NOT NULL REFERENCES filesets (id) ON DELETE CASCADE,
  resolved   INTEGER NOT NULL,
  PRIMARY KEY (repo, revision)
);
CREATE INDEX revisions_by_fileset ON revisions (fileset_id);

-- A fileset is pinned while it has at least one row here; Gc never evicts it.
-- `holder` says who pinned it ("user", a deployment name, ...).
CREATE TABLE pins (
  fileset_id INTEGER NOT NULL REFERENCES filesets (id) ON DELETE CASCADE,
  holder     TEXT    NOT NULL,
  created    INTEGER NOT NULL,
  PRIMARY KEY (fileset_id, holder)
) WITHOUT ROWID;

-- Files of the remote listing. `size` is the remote size, fixed for the life
-- of the row. whole_verified = 1 once the whole file matched its hash.
CREATE TABLE files (
  id             INTEGER PRIMARY KEY,
  fileset_id     INTEGER NOT NULL REFERENCES filesets (id) ON DELETE CASCADE,
  path           TEXT    NOT NULL,
  size           INTEGER NOT NULL CHECK (size >= 0),
  sha256         TEXT,
  git_sha1       TEXT,
  whole_verified INTEGER NOT NULL DEFAULT 0 CHECK (whole_verified IN (0, 1)),
  UNIQUE (fileset_id, path)
);

-- Verified byte ranges [start, start + length) of a file, durable on disk.
-- Invariant (kept by Cache::CommitVerified): per file, extents are disjoint
-- and never adjacent (touching ranges are merged), and lie within the size.
CREATE TABLE extents (
  file_id INTEGER NOT NULL REFERENCES files (id) ON DELETE CASCADE,
  start   INTEGER NOT NULL CHECK (start >= 0),
  length  INTEGER NOT NULL CHECK (length > 0),
  PRIMARY KEY (file_id, start)
) WITHOUT ROWID;

-- One row per pull (plan executed for one manifest, TP degree and rank).
CREATE TABLE pulls (
  id                INTEGER PRIMARY KEY,
  fileset_id        INTEGER NOT NULL REFERENCES filesets (id) ON DELETE CASCADE,
  manifest          TEXT    NOT NULL,
  tp                INTEGER NOT NULL CHECK (tp >= 1),
  rank              INTEGER NOT NULL CHECK (rank >= 0 AND rank < tp),
  plan_summary      TEXT    NOT NULL DEFAULT '{}',   -- JSON
  state             TEXT    NOT NULL
                    CHECK (state IN ('running', 'done', 'failed', 'cancelled')),
  error             TEXT    NOT NULL DEFAULT '',
  bytes_planned     INTEGER NOT NULL DEFAULT 0,
  bytes_fetched     INTEGER NOT NULL DEFAULT 0,
  bytes_reused      INTEGER NOT NULL DEFAULT 0,
  requests          INTEGER NOT NULL DEFAULT 0,
  retries           INTEGER NOT NULL DEFAULT 0,
  checksum_failures INTEGER NOT NULL DEFAULT 0,
  started           INTEGER NOT NULL,
  updated           INTEGER NOT NULL,
  finished          INTEGER                            -- NULL while running
);
CREATE INDEX pulls_by_fileset ON pulls (fileset_id);
