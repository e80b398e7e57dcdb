// Building the Tetra tables once, and checking any Tables against the spec's
// pinned values (TETRA-LVQ5.md 2.5, 2.6 and 3 checks 1-2).
#include "format/tetra/tables.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "format/tetra/internal.h"

namespace exlr8::tetra {

namespace {

using internal::RankClass;
using internal::RankCost;
using internal::RankLexKey;

// Spec 2.5 step 4: the 12 F2 columns of (s8, b1, b2, b3) -> c1|c2<<8|c3<<16.
constexpr std::array<std::uint32_t, 12> kPinnedColumns = {0x2d002e, 0x3a005a, 0x740033, 0x03061e,
                                                          0x050963, 0x090578, 0x0000ff, 0x2d1d00,
                                                          0x3a2b00, 0x744700, 0x638e00, 0xff0000};

// Spec 2.5 step 5: pinned rows, as (cost, rho_0..rho_7).
struct PinnedRow {
  const char* what;
  int cost;
  std::array<std::uint32_t, 8> rho;
};
constexpr PinnedRow kLastClass0 = {"the last class-0 row (rows[2047])", 88, {1, 1, 0, 3, 0, 0, 1, 1}};
constexpr PinnedRow kLastClass1 = {"the last class-1 row (rows[4095])", 96, {0, 0, 2, 2, 2, 0, 1, 1}};
constexpr PinnedRow kLastCheapest = {"the 2048th cheapest row of both classes", 72, {3, 0, 0, 0, 1, 0, 1, 0}};
constexpr int kMaxRank = 4;

std::string Hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

Status Fail(const std::string& what) { return InternalError("tetra tables: " + what); }

Status CheckPinnedRow(const PinnedRow& pin, std::uint32_t row) {
  std::uint32_t want = 0;
  for (int j = 0; j < 8; ++j) want |= pin.rho[j] << (4 * j);
  if (row != want || RankCost(row) != pin.cost)
    return Fail(std::string(pin.what) + " is " + Hex(row) + " (cost " + std::to_string(RankCost(row)) +
                "), expected " + Hex(want) + " (cost " + std::to_string(pin.cost) + ")");
  return Status::Ok();
}

Status CheckTrio(const Tables& t) {
  if (t.octads != kTrioOctads) return Fail("octads differ from the spec's trio");
  const auto order = internal::OrderFromOctads(t.octads);
  for (int i = 0; i < kDim; ++i)
    if (t.order[i] != order[i])
      return Fail("order[" + std::to_string(i) + "] is " + std::to_string(t.order[i]) + ", the octads give " +
                  std::to_string(order[i]));
  return Status::Ok();
}

Status CheckTrellis(const Tables& t) {
  for (int i = 0; i < 12; ++i)
    if (t.columns[i] != kPinnedColumns[i])
      return Fail("columns[" + std::to_string(i) + "] is " + Hex(t.columns[i]) + ", pinned " +
                  Hex(kPinnedColumns[i]));
  for (std::size_t i = 0; i < 128; i += 2)
    if (t.prefixes[i] >= t.prefixes[i + 1] || (t.prefixes[i] ^ t.prefixes[i + 1]) != 0xFF)
      return Fail("prefixes[" + std::to_string(i) + "], prefixes[" + std::to_string(i + 1) +
                  "] are not an ascending complementary pair");
  for (std::size_t i = 0; i < t.branches.size(); ++i) {
    if (t.branches[i] >> 8 >= 64)
      return Fail("branches[" + std::to_string(i) + "] names state " + std::to_string(t.branches[i] >> 8));
    if (i % 16 != 0 && (t.branches[i] & 0xFF) <= (t.branches[i - 1] & 0xFF))
      return Fail("branches[" + std::to_string(i) + "] is not above its predecessor's byte");
  }
  for (std::size_t i = 0; i < 128; i += 2)
    if (t.suffixes[i] >= t.suffixes[i + 1])
      return Fail("suffixes[" + std::to_string(i) + "], suffixes[" + std::to_string(i + 1) +
                  "] are not ascending");
  // Every path is the linear image of the pinned columns, and a codeword.
  for (std::uint32_t x = 0; x < 4096; ++x) {
    std::uint32_t want = 0;
    for (int i = 0; i < 12; ++i)
      if ((x >> i & 1) != 0) want ^= kPinnedColumns[i];
    const std::uint32_t got = internal::TrellisPath(t, x);
    const std::string path = "trellis path (s8 " + std::to_string(x & 63) + ", b1 " +
                             std::to_string(x >> 6 & 1) + ", b2 " + std::to_string(x >> 7 & 15) + ", b3 " +
                             std::to_string(x >> 11) + ")";
    if (got != want) return Fail(path + " gives " + Hex(got) + ", the pinned columns give " + Hex(want));
    std::uint32_t natural = 0;
    for (int pos = 0; pos < kDim; ++pos) natural |= (got >> pos & 1) << (t.order[pos] % kDim);
    if (!internal::IsGolayCodeword(natural)) return Fail(path + " is not a Golay codeword");
  }
  return Status::Ok();
}

Status CheckRows(const Tables& t) {
  int max_rank = 0;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    const std::uint32_t row = t.rows[i];
    const std::string at = "rows[" + std::to_string(i) + "] = " + Hex(row);
    for (int j = 0; j < 8; ++j) max_rank = std::max(max_rank, static_cast<int>(row >> (4 * j) & 0xF));
    if ((row & 0x88888888U) != 0) return Fail(at + " has a rank above 7");
    if (RankClass(row) != (i >= 2048 ? 1 : 0)) return Fail(at + " is in the wrong class");
    if (RankCost(row) >= 128) return Fail(at + " costs " + std::to_string(RankCost(row)) + ", not under 128");
    if (i % 2048 != 0 && std::pair(RankCost(row), RankLexKey(row)) <=
                             std::pair(RankCost(t.rows[i - 1]), RankLexKey(t.rows[i - 1])))
      return Fail(at + " is not after rows[" + std::to_string(i - 1) + "] in (cost, rho) order");
  }
  if (max_rank != kMaxRank)
    return Fail("the largest rank is " + std::to_string(max_rank) + ", expected " + std::to_string(kMaxRank));
  EXLR8_RETURN_IF_ERROR(CheckPinnedRow(kLastClass0, t.rows[2047]));
  EXLR8_RETURN_IF_ERROR(CheckPinnedRow(kLastClass1, t.rows[4095]));
  // The 2048 cheapest of both classes: merge the two sorted halves.
  std::size_t a = 0, b = 2048;
  std::uint32_t last = 0, n0 = 0;
  for (int n = 0; n < 2048; ++n) {
    const bool take0 = std::pair(RankCost(t.rows[a]), RankLexKey(t.rows[a])) <
                       std::pair(RankCost(t.rows[b]), RankLexKey(t.rows[b]));
    last = take0 ? t.rows[a++] : t.rows[b++];
    n0 += take0 ? 1 : 0;
  }
  EXLR8_RETURN_IF_ERROR(CheckPinnedRow(kLastCheapest, last));
  if (n0 != kN0 || t.n0 != kN0)
    return Fail("n0 is " + std::to_string(t.n0) + " and the rows give " + std::to_string(n0) + ", expected " +
                std::to_string(kN0));
  return Status::Ok();
}

std::array<float, 32> InvNorms() {
  std::array<float, 32> inv{};
  for (int m = 1; m < 32; ++m) inv[m] = static_cast<float>(1.0 / std::sqrt(16.0 * m));
  return inv;
}

Status CheckInvNorm(const Tables& t) {
  const auto want = InvNorms();
  for (int m = 0; m < 32; ++m)
    if (std::bit_cast<std::uint32_t>(t.invnorm[m]) != std::bit_cast<std::uint32_t>(want[m]))
      return Fail("invnorm[" + std::to_string(m) + "] is not (float)(1/sqrt(16*" + std::to_string(m) + "))");
  return Status::Ok();
}

struct Built {
  Tables tables;
  Status status;
};

const Built& BuiltOnce() {
  static const Built built = [] {
    Built b;
    b.status = internal::BuildTrellisTables(b.tables);
    if (b.status.ok()) b.status = internal::BuildRankTable(b.tables);
    b.tables.invnorm = InvNorms();
    if (b.status.ok()) b.status = CheckTables(b.tables);
    return b;
  }();
  return built;
}

}  // namespace

const Tables& BuiltTables() { return BuiltOnce().tables; }

Status TablesStatus() { return BuiltOnce().status; }

Status CheckTables(const Tables& t) {
  EXLR8_RETURN_IF_ERROR(CheckTrio(t));
  EXLR8_RETURN_IF_ERROR(CheckTrellis(t));
  EXLR8_RETURN_IF_ERROR(CheckRows(t));
  EXLR8_RETURN_IF_ERROR(CheckInvNorm(t));
  const std::uint64_t fp = MapFingerprint(t);
  if (fp != kTetraMapFingerprint)
    return Fail("map fingerprint " + Hex(fp) + ", expected " + Hex(kTetraMapFingerprint));
  return Status::Ok();
}

}  // namespace exlr8::tetra
