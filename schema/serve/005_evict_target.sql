-- exlr8d serve's job queue, version 5: the commit an evict job chose.
--
-- An evict job names a repo and a revision; its first attempt resolves the
-- revision to a commit and records it here before it evicts. An attempt
-- after a restart evicts that commit, or finds it gone (evicted by the
-- attempt a crash cut short) and is done: it never resolves the revision
-- again, which by then may name another commit, one a pull has just
-- fetched. '' until chosen, and for other jobs.
ALTER TABLE jobs ADD COLUMN target_commit TEXT NOT NULL DEFAULT '';
