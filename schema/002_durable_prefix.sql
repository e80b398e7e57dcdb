-- exlr8d cache index, version 2: resumable whole-file downloads.
--
-- durable_prefix: bytes [0, durable_prefix) of the file arrived in order in a
-- whole-file download and were fdatasync'ed before this value was recorded.
-- They are NOT verified (a whole file is checked only by its complete hash),
-- so they never count as present: no extent covers them. The value is a hint
-- for resuming: a restarted download re-reads and hashes the prefix from
-- disk and fetches only the rest. Set back to 0 once the file is verified.
ALTER TABLE files ADD COLUMN durable_prefix INTEGER NOT NULL DEFAULT 0;
