-- exlr8d cache index, version 4: the record index of LVQ5 files.
--
-- One row per record of a whole-verified file whose structure the pull
-- checked (an LVQ5 container: matrix records, raw tensors, blobs), written
-- in the same transaction that sets the file's whole_verified, and only
-- after its SHA-256 matched. kind: 'ball', 'tetra', 'int4g128' (matrices),
-- 'f16', 'quant' (raw tensors), 'blob'. shape: "d_out x d_in" as
-- "256x264", raw tensors' dims joined by 'x', '' for blobs. [start,
-- start + length) is the record's bytes in the file; xxh64 their XXH64
-- (seed 0), stored as the signed 64-bit pattern. Rows of a file that is
-- not whole_verified mean nothing: the file is rechecked when fetched again,
-- which replaces them. Deleted with the file.
CREATE TABLE records (
  file_id INTEGER NOT NULL REFERENCES files (id) ON DELETE CASCADE,
  seq     INTEGER NOT NULL CHECK (seq >= 0),   -- order in the file's index
  name    TEXT    NOT NULL,
  kind    TEXT    NOT NULL,
  shape   TEXT    NOT NULL,
  start   INTEGER NOT NULL CHECK (start >= 0),
  length  INTEGER NOT NULL CHECK (length >= 0),
  xxh64   INTEGER NOT NULL,
  PRIMARY KEY (file_id, seq)
) WITHOUT ROWID;
