// A synthetic rank image in host memory for the tests of lease protocol v2:
// random regions laid out by ImageLayoutBuilder, each entry's digest the
// XXH64 of its random bytes, the image and the tables each in a sealed
// memfd, and the v2 description a holder sends with them.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "client/lease/description_v2.h"
#include "client/lease/image_layout.h"
#include "format/checksum.h"

namespace exlr8::testing {

inline const std::string kV2Commit = "0123456789abcdef0123456789abcdef01234567";

// Open descriptors of this process (/proc/self/fd, less the directory's own).
inline int CountOpenFds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.' ? 1 : 0;
  ::closedir(d);
  return n - 1;
}

// Mappings of memfds in this process (/proc/self/maps lines naming one).
inline int CountMemfdMappings() {
  int n = 0;
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return -1;
  char line[4096];
  while (std::fgets(line, sizeof line, f) != nullptr) n += std::strstr(line, "/memfd:") != nullptr ? 1 : 0;
  std::fclose(f);
  return n;
}

// A memfd of `bytes` holding `data` at 0 (the rest zero), sealed with
// `seals` (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE unless told).
inline int SealedMemfd(const char* name, std::uint64_t bytes, const std::vector<std::byte>& data,
                       int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) {
  const int fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(bytes)), 0);
  std::size_t done = 0;
  while (done < std::min<std::size_t>(data.size(), bytes)) {
    const ssize_t n = ::pwrite(fd, data.data() + done, std::min<std::size_t>(data.size(), bytes) - done,
                               static_cast<off_t>(done));
    EXPECT_GT(n, 0);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  if (seals != 0) {
    EXPECT_EQ(::fcntl(fd, F_ADD_SEALS, seals), 0);
  }
  return fd;
}

struct V2Image {
  ImageLayout layout;
  std::vector<std::byte> image;   // the allocation's bytes
  std::vector<std::byte> tables;  // the tables file
  LeaseDescriptionV2 description;
};

// An image of 3 layers × 4 experts × 2 halves with 7 half records (one of
// the shared expert), 3 signs vectors and 2 plain tensors, random bytes
// from `seed`.
inline V2Image MakeV2Image(std::uint64_t seed = 1) {
  V2Image out;
  ImageLayoutBuilder b({.layers = 3, .experts = 4, .halves = 2, .tp = 4, .rank = 1, .commit = kV2Commit});
  const struct {
    int layer, expert;
    Proj proj;
    std::uint32_t half;
  } halves[] = {{0, 0, Proj::kGate, 0},
                {0, 0, Proj::kUp, 1},
                {0, 3, Proj::kDown, 0},
                {1, 2, Proj::kUp, 1},
                {1, kSharedExpert, Proj::kGate, 0},
                {2, 1, Proj::kDown, 1},
                {2, 3, Proj::kGate, 0}};
  for (const auto& h : halves)
    EXPECT_TRUE(b.AddHalf({.layer = h.layer,
                           .expert = h.expert,
                           .proj = h.proj,
                           .half = h.half,
                           .k = 2,
                           .trellis_bytes = 2048})
                    .ok());
  for (int layer = 0; layer < 3; ++layer)
    EXPECT_TRUE(b.AddSigns(layer, layer % 2 == 1, {.dtype = DType::kBF16, .shape = {128}}).ok());
  EXPECT_TRUE(b.AddPlain({.name = "model.norm.weight", .dtype = DType::kBF16, .shape = {256}}).ok());
  EXPECT_TRUE(b.AddPlain({.name = "lm_head.weight", .dtype = DType::kF32, .shape = {16, 33}}).ok());
  auto layout = b.Finish();
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  out.layout = *std::move(layout);
  ImageLayout& l = out.layout;

  out.image.assign(l.allocation_bytes(), std::byte{0});
  std::copy(l.header_bytes.begin(), l.header_bytes.end(), out.image.begin());
  std::copy(l.offset_table_bytes.begin(), l.offset_table_bytes.end(),
            out.image.begin() + static_cast<std::ptrdiff_t>(l.header.offset_table.offset));
  std::mt19937_64 rng(seed);
  std::uint64_t strings = 0;
  for (ImageTensor& t : l.tables.tensors) {
    for (std::uint64_t i = 0; i < t.length; ++i) out.image[t.offset + i] = static_cast<std::byte>(rng());
    t.xxh64 = Xxh64::Hash({out.image.data() + t.offset, t.length});
    if (!t.name.empty()) strings += t.name.size() + 1;
  }
  for (ImageCheck& c : l.tables.checks) {
    Xxh64 h;
    for (const ImageSegment& s : c.segments) h.Update({out.image.data() + s.offset, s.length});
    c.digest = h.Digest();
  }
  out.tables = SerializeImageTables(l.tables);

  LeaseDescriptionV2& d = out.description;
  d.repo = "org/glm";
  d.commit = kV2Commit;
  d.manifest = "home";
  d.tp = 4;
  d.rank = 1;
  d.memory_kind = LeaseMemoryKind::kHost;
  d.allocations = {{l.allocation_bytes(), "fd"}};
  d.image = {.allocation = 0,
             .header_offset = 0,
             .bytes = l.allocation_bytes(),
             .offset_table = l.header.offset_table.offset,
             .offset_table_bytes = l.header.offset_table.bytes,
             .layers = l.header.layers,
             .experts = l.header.experts,
             .halves = l.header.halves_per_proj};
  d.tables = {.bytes = out.tables.size(),
              .tensors = l.tables.tensors.size(),
              .checks = l.tables.checks.size(),
              .strings = strings};
  d.proof.commit = kV2Commit;
  d.proof.hashed_regions = l.tables.tensors.size();
  d.proof.tiles_bit_exact = true;
  d.release_deadline_s = 30;
  EXPECT_TRUE(ParseLeaseDescriptionV2(WriteLeaseDescriptionV2(d)).ok())
      << ParseLeaseDescriptionV2(WriteLeaseDescriptionV2(d)).status().ToString();
  return out;
}

// The image's and the tables' sealed memfds, closed on destruction.
struct V2Fds {
  int image = -1, tables = -1;
  explicit V2Fds(const V2Image& im)
      : image(SealedMemfd("exlr8-test-image", im.image.size(), im.image)),
        tables(SealedMemfd("exlr8-test-tables", im.tables.size(), im.tables)) {}
  ~V2Fds() {
    if (image >= 0) ::close(image);
    if (tables >= 0) ::close(tables);
  }
  V2Fds(const V2Fds&) = delete;
  V2Fds& operator=(const V2Fds&) = delete;
};

}  // namespace exlr8::testing
