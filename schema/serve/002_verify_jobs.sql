-- exlr8d serve's job queue, version 2: jobs that are not pulls.
--
-- kind 'verify' (POST /v1/verify): scrub one fileset of the cache, as
-- `exlr8d verify` does, forgetting what no longer matches. Such a job uses
-- repo and revision only (manifest '', tp 1, rank 0, endpoint and pin '')
-- and leaves its report, a JSON object, in `result` once done. Rows of
-- version 1 are pulls.
ALTER TABLE jobs ADD COLUMN kind TEXT NOT NULL DEFAULT 'pull' CHECK (kind IN ('pull', 'verify'));
ALTER TABLE jobs ADD COLUMN result TEXT NOT NULL DEFAULT '';
