-- exlr8d serve's job queue, version 4: pulls that make room.
--
-- make_room = 1 (POST /v1/pulls {"make_room": true}): when the pull's bytes
-- do not fit (disk or budget), it evicts what `exlr8d gc` would, least
-- recently used first, only as much as it needs (`exlr8d pull --make-room`).
-- Kept with the job, so a pull resumed after a restart still makes room.
ALTER TABLE jobs ADD COLUMN make_room INTEGER NOT NULL DEFAULT 0 CHECK (make_room IN (0, 1));
