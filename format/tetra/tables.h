// The tables of the Tetra codec (docs/TETRA.md; TETRA-LVQ5.md sections 2.5,
// 2.6 and 3): the Golay trellis in trio order, the rank table and the norm
// table. They are built at first use from the spec's definitions (generator
// 0xC75, the trio octads, cost and class of a rank vector); no table is
// pasted. The map they define (48-bit word -> Leech lattice point) is named
// by its FNV-1a-64 fingerprint, the value in every LVQ5 file's header.
//
// Layout (device packing, 18,816 bytes of decode tables):
//   prefixes[2*s8 + b1]   u8    low byte (trio positions 0..7) of the codeword
//   branches[16*s8 + b2]  u16   middle byte | s16 << 8
//   suffixes[2*s16 + b3]  u8    top byte (trio positions 16..23)
//   rows[4096]            u32   rank vector rho, rho_j in bits 4j..4j+3;
//                               0..2047 class 0, 2048..4095 class 1
//   invnorm[32]           f32   (float)(1/sqrt(16m)), invnorm[0] = 0
// plus what names the map: order (trio position t holds natural coordinate
// order[t]), the three octads, n0 and the 12 F2 columns of the trellis map.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "format/status.h"

namespace exlr8::tetra {

inline constexpr int kDim = 24;        // coordinates per block
inline constexpr int kWordBits = 48;   // bits per word, gain included
inline constexpr int kLabelBits = 47;  // bits of the label (the map's input)
inline constexpr int kRankRows = 4096;
inline constexpr std::uint32_t kN0 = 1240;  // class-0 rows among the 2048 cheapest

// The trio (spec 2.5 step 2): three disjoint weight-8 Golay codewords.
inline constexpr std::array<std::uint32_t, 3> kTrioOctads = {0x0000149fU, 0x000f6840U, 0x00f08320U};
// The Golay generator polynomial x^11+x^10+x^6+x^5+x^4+x^2+1 (spec 2.5 step 1).
inline constexpr std::uint32_t kGolayGenerator = 0xC75;

inline constexpr std::string_view kFingerprintDomain = "llvq codebook fingerprint tetra v1";
// The map's older name: the same tables hash to kTrioMapFingerprint under it.
inline constexpr std::string_view kTrioFingerprintDomain = "llvq codebook fingerprint trio v1";
inline constexpr std::uint64_t kTetraMapFingerprint = 0x9c3060086c7a13e6ULL;
inline constexpr std::uint64_t kTrioMapFingerprint = 0xebc752638c8db088ULL;
// The v1 ball map's fingerprint (LVQ5 header bytes 8..15). Only a constant:
// recomputing it needs the ball indexer, which exlr8d does not implement.
inline constexpr std::uint64_t kBallMapFingerprint = 0x338f420f11866319ULL;

struct Tables {
  std::array<std::uint8_t, 128> prefixes{};
  std::array<std::uint16_t, 1024> branches{};
  std::array<std::uint8_t, 128> suffixes{};
  std::array<std::uint32_t, kRankRows> rows{};
  std::array<float, 32> invnorm{};
  std::array<std::uint8_t, kDim> order{};
  std::array<std::uint32_t, 3> octads{};
  std::uint32_t n0 = 0;
  // Column i is the image of input bit i of (s8 bits 0..5, b1 bit 6, b2 bits
  // 7..10, b3 bit 11) -> c1 | c2 << 8 | c3 << 16 (the trellis map is F2-linear).
  std::array<std::uint32_t, 12> columns{};
};

// The decode tables' size in bytes (prefixes, branches, suffixes, rows,
// invnorm): 18,816 by spec 2.5 step 6.
inline constexpr std::size_t kDecodeTableBytes = sizeof(Tables::prefixes) + sizeof(Tables::branches) +
                                                 sizeof(Tables::suffixes) + sizeof(Tables::rows) +
                                                 sizeof(Tables::invnorm);
static_assert(kDecodeTableBytes == 18816);

// The tables, built from the spec once (thread-safe) at first use. Never
// aborts or throws: if the build or its self-check fails (a bug in exlr8d),
// the tables are unusable and TablesStatus() says why; callers that decode
// must check TablesStatus() first. The reference lives for the process.
const Tables& BuiltTables();

// OK when BuiltTables() was built without error and passes CheckTables;
// otherwise kInternal with the failed check. Computed once.
Status TablesStatus();

// Checks `t` against spec section 3 checks 1-2: the order matches the octads
// (disjoint weight-8 Golay codewords covering all 24 coordinates), every one
// of the 4096 trellis paths decodes to the F2-linear image of the 12 pinned
// columns and to a Golay codeword, the rank table's classes, sort order, cost
// bound, pinned rows, N0 = 1240 and maximum rank 4, invnorm, and finally the
// map fingerprint 0x9c3060086c7a13e6. kInternal naming the first failed
// check and the entry ("rows[17] ..."), else OK. Takes a few milliseconds.
Status CheckTables(const Tables& t);

// FNV-1a-64 of the map defined by `t` (spec 2.6): the domain tag, the
// dimensions, the octads, the rows, the columns and the decodes of 66 probe
// words. Does not check `t` first.
std::uint64_t MapFingerprint(const Tables& t, std::string_view domain = kFingerprintDomain);

}  // namespace exlr8::tetra
