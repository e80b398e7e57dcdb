// The record index of a structured whole file: for an LVQ5 container
// (format/lvq5/index.h), every matrix record, raw tensor and blob with its
// kind, shape, byte range and XXH64, as the cache keeps them
// (FileRecord, schema 004_lvq5_records.sql). The pull computes it once the
// file's SHA-256 matched; `exlr8d verify` rechecks each record against it.
//
// Pure apart from reading the ByteSource; any thread.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "daemon/cache/cache_types.h"
#include "format/byte_source.h"
#include "format/status.h"

namespace exlr8 {

// Whether `path` is a file whose structure the pull checks when it starts
// with the LVQ5 magic: a `.bin` file.
bool MayBeLvq5(std::string_view path);

// Whether the source starts with the LVQ5 magic ("LVQ5"). IOError if the
// read fails; false for a file shorter than the magic.
Result<bool> HasLvq5Magic(const ByteSource& file);

// Walks an LVQ5 file (lvq5::ReadIndex: every structural rule, errors name
// the record, field and byte offset: Corruption) and hashes each record's
// bytes, in file order: matrix records, raw tensors, blobs.
// REQUIRES: HasLvq5Magic(file).
Result<std::vector<FileRecord>> IndexLvq5File(const ByteSource& file);

// XXH64 (seed 0) of [offset, offset + length) of `file`, read in bounded
// chunks.
Result<std::uint64_t> HashRange(const ByteSource& file, std::uint64_t offset, std::uint64_t length);

}  // namespace exlr8
