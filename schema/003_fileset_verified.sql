-- exlr8d cache index, version 3: when the fileset was last checked again.
--
-- verified: ms since the epoch when `exlr8d verify` (or a verify job of
-- `exlr8d serve`) last finished checking every recorded byte of the fileset
-- and forgot what failed; NULL = never. verify_failures: how many checks
-- failed then (their bytes were forgotten, so the next pull fetches them).
-- A check-only scrub records nothing: it changes nothing in the cache.
ALTER TABLE filesets ADD COLUMN verified INTEGER;
ALTER TABLE filesets ADD COLUMN verify_failures INTEGER NOT NULL DEFAULT 0;
