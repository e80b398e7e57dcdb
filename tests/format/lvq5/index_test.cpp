// ReadIndex (format/lvq5/index.h): the fixture, written files of other
// geometries, and a catalogue of broken files made from a written one, each
// refused with a Corruption naming the file, the field and a byte offset.
#include "format/lvq5/index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "format/lvq5/writer.h"
#include "tests/format/lvq5/lvq5_files.h"

namespace exlr8::lvq5 {
namespace {

using ::testing::HasSubstr;
using namespace exlr8::lvq5::testing;

constexpr char kName[] = "broken.bin";

Result<FileIndex> Read(const std::vector<std::byte>& bytes) {
  SpanByteSource src(bytes, kName);
  return ReadIndex(src);
}

std::vector<std::byte> Small() {
  auto f = WriteFile(SmallSpec());
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return *f;
}

// Expects a Corruption that names the file and contains every fragment.
void ExpectCorrupt(const std::vector<std::byte>& bytes, const std::vector<std::string>& fragments) {
  auto r = Read(bytes);
  ASSERT_FALSE(r.ok()) << "accepted a broken file; expected: " << fragments[0];
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr(kName));
  EXPECT_THAT(r.status().message(), HasSubstr(" at byte "));
  for (const auto& f : fragments) EXPECT_THAT(r.status().message(), HasSubstr(f));
}

TEST(Lvq5Index, ReadsTheFixture) {
  const auto bytes = ReadBytes(FixtureDir() / "tiny-sealed.bin");
  ASSERT_EQ(bytes.size(), 284529u);
  auto ix = Read(bytes);
  ASSERT_TRUE(ix.ok()) << ix.status().ToString();
  EXPECT_EQ(ix->header.matrices, 10u);
  EXPECT_EQ(ix->header.ball_fingerprint, kBallFingerprint);
  EXPECT_EQ(ix->header.tetra_fingerprint, 0x9c3060086c7a13e6ULL);
  EXPECT_EQ(ix->header.default_kind, 1u);
  EXPECT_EQ(ix->header.kinds_mask, 6u);
  ASSERT_EQ(ix->matrices.size(), 10u);
  EXPECT_EQ(ix->raw.size(), 3u);
  ASSERT_EQ(ix->blobs.size(), 1u);
  EXPECT_EQ(ix->blobs[0].name, "config.json");
  EXPECT_EQ(ix->blobs[0].end, bytes.size());
  EXPECT_EQ(ix->matrices[0].offset, kHeaderSize);
  int tetra = 0;
  for (std::size_t i = 0; i < ix->matrices.size(); ++i) {
    const auto& m = ix->matrices[i];
    if (i + 1 < ix->matrices.size()) {
      EXPECT_EQ(m.end, ix->matrices[i + 1].offset);
    }
    if (m.kind == Kind::kTetra) {
      ++tetra;
      EXPECT_EQ(m.codes_length, 6ull * m.d_out * (m.d_in / 24));
      EXPECT_EQ(m.end, m.codes_offset + m.codes_length);
      // Spec 1.10's skip formula.
      EXPECT_EQ(m.codes_offset,
                m.offset + 36 + m.name.size() + 16 + 8ull * m.d_out + 4ull * m.d_out * (m.d_in % 24) + 8);
    } else {
      EXPECT_EQ(m.payload_offset, m.offset + 36 + m.name.size() + 8);
      EXPECT_EQ(m.packed_offset, m.payload_offset + 16);
      EXPECT_EQ(m.end, m.payload_offset + m.payload_length);
    }
  }
  EXPECT_EQ(tetra, 6);
  const RawTensor* emb = ix->FindRaw("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->tag, RawTag::kQuant);
  EXPECT_EQ(emb->dims, (std::vector<std::uint64_t>{100, 200}));
  EXPECT_EQ(emb->groups, 100u * 4);
  const MatrixRecord* gate = ix->FindMatrix("model.layers.0.mlp.gate_proj.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->tail_cols, 16u);
  EXPECT_EQ(gate->nblocks, 10u);
}

struct Geometry {
  std::uint32_t d_out, d_in;
};

TEST(Lvq5Index, WrittenFilesOfOtherGeometriesReadBack) {
  for (Geometry g : {Geometry{1, 1}, Geometry{1, 23}, Geometry{1, 24}, Geometry{7, 25}, Geometry{5, 47},
                     Geometry{2, 48}, Geometry{9, 130}}) {
    FileSpec s;
    s.tetra.push_back(RandomTetra("t", g.d_out, g.d_in, g.d_in));
    auto bytes = WriteFile(s);
    ASSERT_TRUE(bytes.ok());
    auto ix = Read(*bytes);
    ASSERT_TRUE(ix.ok()) << g.d_out << "x" << g.d_in << ": " << ix.status().ToString();
    ASSERT_EQ(ix->matrices.size(), 1u);
    EXPECT_EQ(ix->matrices[0].nblocks, g.d_in / 24);
    EXPECT_EQ(ix->matrices[0].tail_cols, g.d_in % 24);
    EXPECT_TRUE(ix->raw.empty());
    EXPECT_TRUE(ix->blobs.empty());
    EXPECT_EQ(ix->blobs_offset + 4, bytes->size());
  }
  // Only Int4G128, rows of 1; an empty file body.
  FileSpec s;
  s.int4.push_back(RandomInt4G128("i", 1, 128, 5));
  auto bytes = WriteFile(s);
  ASSERT_TRUE(bytes.ok());
  auto ix = Read(*bytes);
  ASSERT_TRUE(ix.ok()) << ix.status().ToString();
  EXPECT_EQ(ix->header.default_kind, 2u);
  auto empty = WriteFile(FileSpec{});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(Read(*empty).ok());
}

TEST(Lvq5Index, EveryTruncationIsACorruptionNamingAField) {
  const auto full = Small();
  ASSERT_TRUE(Read(full).ok()) << Read(full).status().ToString();
  for (std::size_t n = 0; n < full.size(); ++n) {
    std::vector<std::byte> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    auto r = Read(cut);
    ASSERT_FALSE(r.ok()) << "accepted a file cut to " << n << " bytes";
    ASSERT_EQ(r.status().code(), StatusCode::kCorruption) << n << ": " << r.status().ToString();
    ASSERT_THAT(r.status().message(), HasSubstr(kName));
    ASSERT_THAT(r.status().message(), HasSubstr("at byte"));
  }
}

TEST(Lvq5Index, TruncationsNameTheFieldTheyCut) {
  const auto full = Small();
  auto ix = Read(full);
  ASSERT_TRUE(ix.ok());
  const MatrixRecord& t = ix->matrices[0];
  const MatrixRecord& q = ix->matrices[1];
  auto cut = [&](std::uint64_t n) { return std::vector<std::byte>(full.begin(), full.begin() + n); };
  // Every byte of the header.
  const char* header_fields[] = {
      "magic",        "matrix record count", "ball map fingerprint", "Tetra map fingerprint",
      "default kind", "kinds mask"};
  const std::uint64_t field_start[] = {0, 4, 8, 16, 24, 28, 32};
  for (std::uint64_t n = 0; n < kHeaderSize; ++n) {
    int f = 0;
    while (field_start[f + 1] <= n) ++f;
    ExpectCorrupt(cut(n), {header_fields[f], "at byte " + std::to_string(field_start[f])});
  }
  const std::uint64_t L = t.name.size();
  ExpectCorrupt(cut(t.offset + 2), {"matrix record 0", "name length"});
  ExpectCorrupt(cut(t.offset + 4 + L - 1), {"matrix record 0", "name at byte"});
  ExpectCorrupt(cut(t.offset + 4 + L), {"'" + t.name + "'", "d_out"});
  ExpectCorrupt(cut(t.offset + 8 + L), {"d_in"});
  ExpectCorrupt(cut(t.offset + 12 + L), {"shell_cap"});
  ExpectCorrupt(cut(t.offset + 16 + L), {"kind tag"});
  ExpectCorrupt(cut(t.offset + 20 + L), {"n_centroids"});
  ExpectCorrupt(cut(t.offset + 24 + L), {"rotation_seed"});
  ExpectCorrupt(cut(t.offset + 32 + L), {"has_rotation"});
  ExpectCorrupt(cut(t.centroids_offset + 15), {"centroids"});
  ExpectCorrupt(cut(t.row_scales_offset + 1), {"row scales"});
  ExpectCorrupt(cut(t.tail_offset + 1), {"tail"});
  ExpectCorrupt(cut(t.codes_offset - 8), {"code_len"});
  ExpectCorrupt(cut(t.codes_offset), {"code stream", "at byte " + std::to_string(t.codes_offset)});
  ExpectCorrupt(cut(t.end - 1), {"code stream"});
  ExpectCorrupt(cut(q.payload_offset - 8), {"matrix record 1", "payload_len"});
  ExpectCorrupt(cut(q.payload_offset), {"payload"});
  ExpectCorrupt(cut(ix->raw_offset), {"n_raw"});
  ExpectCorrupt(cut(ix->raw[0].offset), {"raw tensor 0", "tag"});
  ExpectCorrupt(cut(ix->raw[0].data_offset - 8), {"raw tensor 0 '" + ix->raw[0].name + "'", "n at byte"});
  ExpectCorrupt(cut(ix->raw[0].data_offset + 1), {"values"});
  ExpectCorrupt(cut(ix->raw[1].data_offset - 8), {"raw tensor 1", "packed_len"});
  ExpectCorrupt(cut(ix->raw[1].scales_offset - 8), {"groups"});
  ExpectCorrupt(cut(ix->raw[1].scales_offset), {"scales"});
  ExpectCorrupt(cut(ix->raw[1].biases_offset), {"biases"});
  ExpectCorrupt(cut(ix->blobs_offset), {"n_blobs"});
  ExpectCorrupt(cut(ix->blobs[0].data_offset - 8), {"blob 0 'config.json'", "length"});
  ExpectCorrupt(cut(ix->blobs[0].data_offset), {"blob 0", "bytes"});
}

// One broken file: `patch` applied to the small written file.
struct Breakage {
  const char* what;
  std::function<void(std::vector<std::byte>&, const FileIndex&)> patch;
  std::vector<std::string> fragments;
};

TEST(Lvq5Index, CatalogueOfBrokenFiles) {
  const auto full = Small();
  auto ixr = Read(full);
  ASSERT_TRUE(ixr.ok());
  const FileIndex ix = *ixr;
  auto head = [](const MatrixRecord& m, std::uint64_t field) { return m.offset + 4 + m.name.size() + field; };
  const std::vector<Breakage> cases = {
      {"matrix count 2^32-1",
       [](auto& b, auto&) { PatchU32(b, 4, 0xFFFFFFFFu); },
       {"matrix record count at byte 4", "4294967295"}},
      {"matrix count + 1", [](auto& b, auto&) { PatchU32(b, 4, 3); }, {"matrix record 2"}},
      {"matrix count - 1", [](auto& b, auto&) { PatchU32(b, 4, 1); }, {"raw tensor 0", "tag"}},
      {"ball fingerprint",
       [](auto& b, auto&) { PatchU64(b, 8, kBallFingerprint ^ 1); },
       {"ball map fingerprint at byte 8", "0x338f420f11866318"}},
      {"Tetra fingerprint (trio v1 domain)",
       [](auto& b, auto&) { PatchU64(b, 16, 0xebc752638c8db088ULL); },
       {"Tetra map fingerprint at byte 16", "0xebc752638c8db088", "0x9c3060086c7a13e6"}},
      {"unknown kind bit",
       [](auto& b, auto&) { PatchU32(b, 28, 6 | 8); },
       {"kinds mask at byte 28", "unknown"}},
      {"kind bit 31", [](auto& b, auto&) { PatchU32(b, 28, 6 | 0x80000000u); }, {"kinds mask", "unknown"}},
      {"ball in the mask", [](auto& b, auto&) { PatchU32(b, 28, 7); }, {"kinds mask", "ball"}},
      {"default kind outside the mask",
       [](auto& b, auto&) { PatchU32(b, 24, 0); },
       {"default kind at byte 24"}},
      {"default kind 3", [](auto& b, auto&) { PatchU32(b, 24, 3); }, {"default kind"}},
      {"default kind 2^32-1", [](auto& b, auto&) { PatchU32(b, 24, 0xFFFFFFFFu); }, {"default kind"}},
      {"default kind Tetra, mask Int4G128 only",
       [](auto& b, auto&) { PatchU32(b, 28, 4); },
       {"default kind"}},
      {"Tetra record not in the mask",
       [](auto& b, auto&) {
         PatchU32(b, 24, 2);
         PatchU32(b, 28, 4);
       },
       {"matrix record 0", "kind tag", "not in the header's kinds mask"}},
      {"ball record",
       [&](auto& b, auto& x) { PatchU32(b, head(x.matrices[0], 12), 0); },
       {"matrix record 0 'layers.0.q_proj.weight'", "kind tag", "ball"}},
      {"kind 3 record",
       [&](auto& b, auto& x) { PatchU32(b, head(x.matrices[1], 12), 3); },
       {"matrix record 1", "kind tag", "not a known kind"}},
      {"Tetra shell_cap 13",
       [&](auto& b, auto& x) { PatchU32(b, head(x.matrices[0], 8), 13); },
       {"shell_cap at byte " + std::to_string(head(ix.matrices[0], 8)), "expected 12"}},
      {"Tetra shell_cap sentinel of Int4G128",
       [&](auto& b, auto& x) { PatchU32(b, head(x.matrices[0], 8), 0xFFFFFFFFu); },
       {"shell_cap"}},
      {"Int4G128 shell_cap 12",
       [&](auto& b, auto& x) { PatchU32(b, head(x.matrices[1], 8), 12); },
       {"matrix record 1", "shell_cap", "4294967295"}},
      {"n_centroids 1",
       [&](auto& b, auto& x) { PatchU32(b, head(x.matrices[0], 16), 1); },
       {"n_centroids", "is 1, expected 2"}},
      {"n_centroids 3",
       [&](auto& b, auto& x) { PatchU32(b, head(x.matrices[0], 16), 3); },
       {"n_centroids", "is 3, expected 2"}},
      {"n_centroids 2^32-1",
       [&](auto& b, auto& x) { PatchU32(b, head(x.matrices[0], 16), 0xFFFFFFFFu); },
       {"n_centroids"}},
      {"Int4G128 n_centroids 2",
       [&](auto& b, auto& x) { PatchU32(b, head(x.matrices[1], 16), 2); },
       {"matrix record 1", "n_centroids"}},
      {"Int4G128 rotation seed",
       [&](auto& b, auto& x) { PatchU64(b, head(x.matrices[1], 20), 7); },
       {"rotation_seed"}},
      {"has_rotation 2",
       [&](auto& b, auto& x) { PatchU32(b, head(x.matrices[0], 28), 2); },
       {"has_rotation"}},
      {"d_out 0", [&](auto& b, auto& x) { PatchU32(b, head(x.matrices[0], 0), 0); }, {"d_out", "is 0"}},
      {"d_out 2^32-1",
       [&](auto& b, auto& x) { PatchU32(b, head(x.matrices[0], 0), 0xFFFFFFFFu); },
       {"row scales"}},
      {"d_in 2^32-1",
       [&](auto& b, auto& x) { PatchU32(b, head(x.matrices[0], 4), 0xFFFFFFFFu); },
       {"matrix record 0"}},
      {"code_len + 1",
       [&](auto& b, auto& x) { PatchU64(b, x.matrices[0].codes_offset - 8, 37); },
       {"code_len at byte " + std::to_string(ix.matrices[0].codes_offset - 8), "is 37, expected exactly",
        "= 36"}},
      {"code_len - 1",
       [&](auto& b, auto& x) { PatchU64(b, x.matrices[0].codes_offset - 8, 35); },
       {"code_len", "is 35"}},
      {"code_len 2^64-1",
       [&](auto& b, auto& x) { PatchU64(b, x.matrices[0].codes_offset - 8, ~0ULL); },
       {"code_len", "18446744073709551615"}},
      {"Int4G128 d_in not a multiple of 128",
       [&](auto& b, auto& x) { PatchU32(b, head(x.matrices[1], 4), 200); },
       {"d_in", "multiple of 128"}},
      {"payload_len 2^64-1",
       [&](auto& b, auto& x) { PatchU64(b, x.matrices[1].payload_offset - 8, ~0ULL); },
       {"matrix record 1", "payload at byte"}},
      {"payload_len + 1",
       [&](auto& b, auto& x) {
         PatchU64(b, x.matrices[1].payload_offset - 8, x.matrices[1].payload_length + 1);
       },
       {"payload_len", "its parts take"}},
      {"payload_len - 1",
       [&](auto& b, auto& x) {
         PatchU64(b, x.matrices[1].payload_offset - 8, x.matrices[1].payload_length - 1);
       },
       {"payload_len"}},
      {"Int4G128 bits 8",
       [&](auto& b, auto& x) { PatchU32(b, x.matrices[1].payload_offset, 8); },
       {"payload bits", "expected 4"}},
      {"Int4G128 group 64",
       [&](auto& b, auto& x) { PatchU32(b, x.matrices[1].payload_offset + 4, 64); },
       {"payload group", "expected 128"}},
      {"Int4G128 packed_len + 1",
       [&](auto& b, auto& x) {
         PatchU64(b, x.matrices[1].packed_offset - 8, x.matrices[1].packed_length + 1);
       },
       {"packed_len", "expected d_out * d_in / 2"}},
      {"Int4G128 packed_len 2^64-1",
       [&](auto& b, auto& x) { PatchU64(b, x.matrices[1].packed_offset - 8, ~0ULL); },
       {"packed_len"}},
      {"Int4G128 groups - 1",
       [&](auto& b, auto& x) { PatchU64(b, x.matrices[1].scales_offset - 8, x.matrices[1].groups - 1); },
       {"groups", "d_out * d_in / 128"}},
      {"n_raw 2^32-1",
       [&](auto& b, auto& x) { PatchU32(b, x.raw_offset, 0xFFFFFFFFu); },
       {"n_raw at byte " + std::to_string(ix.raw_offset), "4294967295"}},
      {"raw tag 2",
       [&](auto& b, auto& x) { PatchU32(b, x.raw[0].offset, 2); },
       {"raw tensor 0", "tag", "is 2"}},
      {"raw f16 read as quant", [&](auto& b, auto& x) { PatchU32(b, x.raw[0].offset, 1); }, {"raw tensor 0"}},
      {"raw rank 2^32-1",
       [&](auto& b, auto& x) { PatchU32(b, x.raw[0].offset + 8 + x.raw[0].name.size(), 0xFFFFFFFFu); },
       {"raw tensor 0", "dims"}},
      {"raw dim 2^64-1",
       [&](auto& b, auto& x) { PatchU64(b, x.raw[0].data_offset - 16, ~0ULL); },
       {"raw tensor 0", "n at byte", "18446744073709551615"}},
      {"raw dims overflow",
       [&](auto& b, auto& x) {
         PatchU64(b, x.raw[1].data_offset - 16 - 16, 1ULL << 40);
         PatchU64(b, x.raw[1].data_offset - 16 - 8, 1ULL << 40);
       },
       {"raw tensor 1", "dims[1]", "overflows"}},
      {"raw f16 n + 1",
       [&](auto& b, auto& x) { PatchU64(b, x.raw[0].data_offset - 8, 6); },
       {"n at byte", "dims hold 5"}},
      {"raw f16 n 2^64-1",
       [&](auto& b, auto& x) { PatchU64(b, x.raw[0].data_offset - 8, ~0ULL); },
       {"n at byte"}},
      {"raw quant bits 3",
       [&](auto& b, auto& x) { PatchU32(b, x.raw[1].data_offset - 16, 3); },
       {"raw tensor 1", "bits", "expected 4 or 8"}},
      {"raw quant bits 8",
       [&](auto& b, auto& x) { PatchU32(b, x.raw[1].data_offset - 16, 8); },
       {"packed_len", "expected ceil(30 * 8 / 8) = 30"}},
      {"raw quant group 0",
       [&](auto& b, auto& x) { PatchU32(b, x.raw[1].data_offset - 12, 0); },
       {"group", "is 0"}},
      {"raw quant group 5",
       [&](auto& b, auto& x) { PatchU32(b, x.raw[1].data_offset - 12, 5); },
       {"groups", "expected rows * ceil(row_len / group) = 3 * 2"}},
      {"raw quant groups 2^64-1",
       [&](auto& b, auto& x) { PatchU64(b, x.raw[1].scales_offset - 8, ~0ULL); },
       {"groups"}},
      {"n_blobs 2^32-1", [&](auto& b, auto& x) { PatchU32(b, x.blobs_offset, 0xFFFFFFFFu); }, {"n_blobs"}},
      {"n_blobs 0",
       [&](auto& b, auto& x) { PatchU32(b, x.blobs_offset, 0); },
       {"end of file", "after n_blobs", "more bytes follow"}},
      {"blob length 2^64-1",
       [&](auto& b, auto& x) { PatchU64(b, x.blobs[0].data_offset - 8, ~0ULL); },
       {"blob 0 'config.json'", "bytes at byte"}},
      {"blob length - 1",
       [&](auto& b, auto& x) { PatchU64(b, x.blobs[0].data_offset - 8, x.blobs[0].length - 1); },
       {"end of file", "1 more bytes follow"}},
      {"name length 2^32-1",
       [&](auto& b, auto& x) { PatchU32(b, x.matrices[1].offset, 0xFFFFFFFFu); },
       {"matrix record 1", "name length", "4294967295"}},
      {"name length 0",
       [&](auto& b, auto& x) { PatchU32(b, x.matrices[1].offset, 0); },
       {"matrix record 1", "name length", "is 0"}},
      {"name not UTF-8",
       [&](auto& b, auto& x) { b[x.matrices[0].offset + 5] = std::byte{0xC0}; },
       {"matrix record 0", "name at byte " + std::to_string(ix.matrices[0].offset + 4), "UTF-8"}},
      {"blob name not UTF-8",
       [&](auto& b, auto& x) { b[x.blobs[0].offset + 4] = std::byte{0xFF}; },
       {"blob 0", "UTF-8"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto b = full;
    c.patch(b, ix);
    ExpectCorrupt(b, c.fragments);
  }
  // Trailing bytes.
  for (int extra : {1, 8, 4096}) {
    auto b = full;
    b.resize(b.size() + extra);
    ExpectCorrupt(b, {"end of file at byte " + std::to_string(full.size()), "after the last blob"});
  }
}

TEST(Lvq5Index, DuplicateNamesAreRefused) {
  FileSpec s;
  s.tetra.push_back(RandomTetra("w", 1, 24, 1));
  s.int4.push_back(RandomInt4G128("w", 1, 128, 2));
  auto b = WriteFile(s);
  ASSERT_TRUE(b.ok());
  ExpectCorrupt(*b, {"matrix record 1 'w'", "used by an earlier record"});
  FileSpec r;
  r.tetra.push_back(RandomTetra("w", 1, 24, 1));
  r.raw.push_back(RandomRawF16("w", {2}, 3));
  b = WriteFile(r);
  ASSERT_TRUE(b.ok());
  ExpectCorrupt(*b, {"raw tensor 0 'w'", "used by an earlier"});
  FileSpec bl;
  bl.blobs = {{"a", "1"}, {"a", "2"}};
  b = WriteFile(bl);
  ASSERT_TRUE(b.ok());
  ExpectCorrupt(*b, {"blob 1 'a'", "earlier blob"});
}

TEST(Lvq5Index, OlderAndForeignMagicsAreRefusedClearly) {
  for (char v : {'1', '2', '3', '4'}) {
    auto b = Small();
    b[3] = static_cast<std::byte>(v);
    ExpectCorrupt(b,
                  {std::string("version ") + v + " is not supported: exlr8d reads LVQ5", "magic at byte 0"});
  }
  auto b = Small();
  b[0] = std::byte{'G'};
  b[1] = std::byte{'G'};
  b[2] = std::byte{'U'};
  b[3] = std::byte{'F'};
  ExpectCorrupt(b, {"magic", "0x47475546", "not an LVQ5 file"});
  b[0] = std::byte{'L'};
  b[1] = std::byte{'V'};
  b[2] = std::byte{'Q'};
  b[3] = std::byte{'6'};
  ExpectCorrupt(b, {"not an LVQ5 file"});
}

}  // namespace
}  // namespace exlr8::lvq5
