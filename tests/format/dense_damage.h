// Structurally bad dense files made from good ones, for the tests that check
// what `exlr8 verify`, a pull and `exlr8d verify` say of them. Each damage
// is one the format forbids but a SHA-256 of the bad bytes happily vouches
// for (a hub lists the hash of whatever file it was given).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/byte_source.h"
#include "format/dense.h"
#include "format/safetensors.h"
#include "format/status.h"

namespace exlr8::testing {

enum class DenseDamage {
  kPastEnd,        // cut short: the last tensor's data_offsets run past the file's end
  kOverlap,        // one tensor's data_offsets made another's (same byte size)
  kBlockChecksum,  // one byte of a matrix's data changed: its block checksum fails (spec 5.4)
};

inline const char* DenseDamageName(DenseDamage d) {
  switch (d) {
    case DenseDamage::kPastEnd:
      return "PastEnd";
    case DenseDamage::kOverlap:
      return "Overlap";
    case DenseDamage::kBlockChecksum:
      return "BlockChecksum";
  }
  return "?";
}

// What the error for each damage must mention.
inline const char* DenseDamageMessage(DenseDamage d) {
  switch (d) {
    case DenseDamage::kPastEnd:
      return "run past the end";
    case DenseDamage::kOverlap:
      return "overlap tensor";
    case DenseDamage::kBlockChecksum:
      return "checksum mismatch";
  }
  return "?";
}

// `good`, a valid dense or vocab file written compactly (as the release
// writer does), damaged as `d` says. InvalidArgument if it has no place for
// that damage (no two tensors of one size, no matrix).
inline Result<std::vector<std::byte>> DamageDenseFile(std::vector<std::byte> good, DenseDamage d) {
  SpanByteSource src(good, "good");
  std::array<std::byte, 8> first{};
  if (good.size() < first.size()) return InvalidArgumentError("too short");
  std::copy_n(good.begin(), 8, first.begin());
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t header_size, SafetensorsHeaderSize(first, good.size(), "good"));
  EXLR8_ASSIGN_OR_RETURN(SafetensorsHeader header, ParseSafetensorsHeader(good, good.size(), "good"));
  EXLR8_ASSIGN_OR_RETURN(DenseFile dense, DenseFile::Parse(header, src));
  const std::vector<TensorInfo>& tensors = header.tensors();  // by begin offset
  if (tensors.empty()) return InvalidArgumentError("no tensors");
  switch (d) {
    case DenseDamage::kPastEnd: {
      const TensorInfo& last = tensors.back();
      good.resize(header.AbsoluteOffset(last) + std::max<std::uint64_t>(last.byte_size() / 2, 1) - 1);
      return good;
    }
    case DenseDamage::kOverlap: {
      // The tensor at data offset 0 lends its offsets to a later one of the
      // same size; the shorter text is padded with spaces (JSON whitespace).
      const TensorInfo& lender = tensors.front();
      for (std::size_t i = 1; i < tensors.size(); ++i) {
        if (tensors[i].byte_size() != lender.byte_size() || lender.begin != 0) continue;
        auto offsets = [](const TensorInfo& t) {
          return "\"data_offsets\":[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]";
        };
        const std::string from = offsets(tensors[i]);
        std::string to = offsets(lender);
        if (to.size() > from.size()) continue;
        to.append(from.size() - to.size(), ' ');
        std::string_view text(reinterpret_cast<const char*>(good.data()), header_size);
        const std::size_t at = text.find(from);
        if (at == std::string_view::npos) return InvalidArgumentError("not written compactly: " + from);
        for (std::size_t k = 0; k < to.size(); ++k) good[at + k] = static_cast<std::byte>(to[k]);
        return good;
      }
      return InvalidArgumentError("no two tensors of one size");
    }
    case DenseDamage::kBlockChecksum: {
      if (dense.matrices().empty() || dense.matrices().front().data.empty())
        return InvalidArgumentError("no matrix");
      const DenseTensor& t = dense.matrices().front().data.front();
      good[t.offset + t.length / 2] ^= std::byte{0x5a};
      return good;
    }
  }
  return InvalidArgumentError("unknown damage");
}

}  // namespace exlr8::testing
