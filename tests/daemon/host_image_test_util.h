// Checks a host rank image against the cache's bytes read independently of
// the image plan (format/expert_index, format/safetensors, the manifest):
// shared by host_image_test and the sweep over TP degrees and ranks.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "client/lease/image_layout.h"
#include "daemon/base/posix.h"
#include "daemon/stage/host_image.h"
#include "format/checksum.h"
#include "format/expert_index.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "format/plan.h"
#include "format/safetensors.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/rank_test_util.h"

namespace exlr8 {

inline std::vector<std::byte> ReadFd(int fd) {
  struct stat st {};
  EXPECT_EQ(fstat(fd, &st), 0);
  std::vector<std::byte> bytes(static_cast<std::size_t>(st.st_size));
  EXPECT_TRUE(PreadAll(fd, 0, bytes, "fd").ok());
  return bytes;
}

inline std::vector<std::byte> ReadBytes(const fs::path& p) {
  const std::vector<char> c = ReadAll(p);
  std::vector<std::byte> b(c.size());
  if (!c.empty()) std::memcpy(b.data(), c.data(), c.size());
  return b;
}

inline std::vector<std::byte> Cat(std::span<const std::byte> a, std::span<const std::byte> b) {
  std::vector<std::byte> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

inline std::span<const std::byte> Sub(const std::vector<std::byte>& v, std::uint64_t offset,
                                      std::uint64_t length) {
  EXPECT_LE(offset + length, v.size());
  return std::span<const std::byte>(v).subspan(offset, length);
}

// Checks a built image against the partial mirror `mirror` of the cache
// (<cache>/<repo>/<commit>), for manifest `manifest` at (tp, rank).
inline void ExpectImageHoldsTheCache(const HostRankImage& img, const fs::path& mirror,
                                     const std::string& manifest, int tp, int rank) {
  SCOPED_TRACE("TP " + std::to_string(tp) + " rank " + std::to_string(rank));
  const std::vector<std::byte> image = ReadFd(img.image_fd.get());
  const std::vector<std::byte> tables_bytes = ReadFd(img.tables_fd.get());
  ASSERT_EQ(image.size(), img.layout.allocation_bytes());
  ASSERT_EQ(tables_bytes.size(), img.tables_bytes);
  auto header = ParseImageHeader(image);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  auto tables = ParseImageTables(tables_bytes, header->allocation_bytes);
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  ASSERT_TRUE(CheckImageAgreement(*header, *tables).ok());
  EXPECT_EQ(header->tp, static_cast<std::uint32_t>(tp));
  EXPECT_EQ(header->rank, static_cast<std::uint32_t>(rank));
  EXPECT_EQ(header->commit, img.commit);
  ASSERT_EQ(img.image.bytes().size(), image.size());
  EXPECT_EQ(std::memcmp(img.image.bytes().data(), image.data(), image.size()), 0);
  auto region = [&](const ImageTensor& t) { return Sub(image, t.offset, t.length); };

  // Every region's digest is its bytes' XXH64 (a half record's is its
  // release checksum; the others' are checked below against the cache).
  for (const ImageTensor& t : tables->tensors) EXPECT_EQ(Xxh64::Hash(region(t)), t.xxh64) << t.What();

  // The halves: exactly those the rank owns, at the manifest's widths,
  // each width-file bytes ‖ its index file's checksum tail.
  std::map<int, ExpertIndex> indexes;
  std::map<int, std::vector<std::byte>> index_bytes;
  std::map<int, LayerGeometry> geometry;
  for (const auto& entry : fs::directory_iterator(mirror / "experts")) {
    const ReleasePath rp = ClassifyReleasePath("experts/" + entry.path().filename().string());
    if (rp.kind != ReleaseFileKind::kExpertIndex) continue;
    index_bytes[rp.layer] = ReadBytes(entry.path());
    auto index = ExpertIndex::Read(SpanByteSource(index_bytes[rp.layer], entry.path().string()), rp.layer);
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    geometry[rp.layer] = LayerGeometry::Of(*index);
    indexes.emplace(rp.layer, std::move(*index));
  }
  ASSERT_FALSE(indexes.empty());
  const std::vector<char> manifest_text = ReadAll(mirror / ManifestPath(manifest));
  auto widths =
      ParseManifest(std::string_view(manifest_text.data(), manifest_text.size()), manifest, geometry);
  ASSERT_TRUE(widths.ok()) << widths.status().ToString();
  std::map<std::string, std::vector<std::byte>> width_files;
  std::uint64_t owned = 0, signs = 0;
  std::set<int> widths_seen;
  for (const auto& [layer, index] : indexes) {
    const LayerWidths& lw = widths->layers().at(layer);
    for (int e = -1; e < static_cast<int>(index.experts()); ++e) {
      for (Proj p : {Proj::kGate, Proj::kUp, Proj::kDown}) {
        for (std::uint32_t h = 0; h < index.halves_per_expert(); ++h) {
          const bool mine =
              e == kSharedExpert ||
              RankOfHalf(index.halves_per_expert(), static_cast<std::uint32_t>(e), h, layer, tp) == rank;
          const ImageTensor* t = tables->FindHalf(layer, e, p, h);
          const std::string what = "L" + std::to_string(layer) + " e" + std::to_string(e) + " p" +
                                   std::to_string(static_cast<int>(p)) + " h" + std::to_string(h);
          if (!mine) {
            EXPECT_EQ(t, nullptr) << what << " is another rank's";
            continue;
          }
          ++owned;
          ASSERT_NE(t, nullptr) << what << " is missing";
          const int k = lw.Width(e, p, h);
          widths_seen.insert(k);
          EXPECT_EQ(t->k, k) << what;
          auto entry = index.Half(e, p, h, k);
          ASSERT_TRUE(entry.ok()) << what;
          const std::string wpath = ExpertWidthPath(layer, k);
          auto& wf = width_files[wpath];
          if (wf.empty()) wf = ReadBytes(mirror / wpath);
          std::vector<std::byte> want(Sub(wf, entry->offset, entry->length).begin(),
                                      Sub(wf, entry->offset, entry->length).end());
          for (const ByteRun& run : index.ChecksumTail(e, p, h, k))
            want = Cat(want, Sub(index_bytes.at(layer), run.offset, run.length));
          const auto got = region(*t);
          ASSERT_EQ(got.size(), want.size()) << what;
          EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0) << what;
          EXPECT_EQ(t->xxh64, entry->checksum) << what;
          // The entry tells a kernel where each vector starts and its dtype:
          // the slice (shape[1] of dtype) and then the block row (shape[2] of
          // block_dtype), which the release may store in another dtype.
          const auto tail = index.ChecksumTail(e, p, h, k);
          ASSERT_EQ(tail.size(), 2u) << what;
          const std::uint64_t slice_bytes = std::uint64_t{t->shape[1]} * DTypeSize(t->dtype);
          EXPECT_EQ(slice_bytes, tail[0].length) << what;
          EXPECT_EQ(std::uint64_t{t->shape[2]} * DTypeSize(t->block_dtype), tail[1].length) << what;
          EXPECT_EQ(std::memcmp(got.data() + t->shape[0] + slice_bytes, index_bytes.at(layer).data() + tail[1].offset,
                                tail[1].length),
                    0)
              << what;
        }
      }
    }
    for (bool out : {false, true}) {
      const VectorRef& v = out ? index.signs_out() : index.signs_in();
      const ImageTensor* t = tables->FindSigns(layer, out);
      ASSERT_NE(t, nullptr);
      ++signs;
      const auto want = Sub(index_bytes.at(layer), v.offset, v.rows * v.cols * DTypeSize(v.dtype));
      ASSERT_EQ(region(*t).size(), want.size());
      EXPECT_EQ(std::memcmp(region(*t).data(), want.data(), want.size()), 0) << v.name;
    }
  }
  EXPECT_GT(widths_seen.size(), 0u);

  // Dense and vocabulary files: every tensor but padding, records and
  // checksums, as stored.
  std::uint64_t dense = 0, plain_tensors = 0;
  for (const auto& entry : fs::directory_iterator(mirror / "dense")) {
    const ReleasePath rp = ClassifyReleasePath("dense/" + entry.path().filename().string());
    const std::string prefix =
        rp.kind == ReleaseFileKind::kDense ? "layers." + std::to_string(rp.layer) + "." : "";
    const std::vector<std::byte> file = ReadBytes(entry.path());
    auto n = SafetensorsHeaderSize(file, file.size(), entry.path().string());
    ASSERT_TRUE(n.ok());
    auto h = ParseSafetensorsHeader(file, file.size(), entry.path().string());
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    for (const TensorInfo& ti : h->tensors()) {
      if (IsPaddingName(ti.name) || ti.name.ends_with(".record") || ti.name.ends_with(".checksum")) continue;
      ++dense;
      // A plain tensor is no matrix's data: "{m}.{suffix}" with a "{m}.record"
      // and a data suffix of spec 10.3.
      static const std::set<std::string> kDataSuffixes = {"trellis", "suh",   "svh",  "q4",   "s4",
                                                          "fp8",     "scale", "e8m0", "bf16", "fp32"};
      const std::size_t dot = ti.name.rfind('.');
      const bool plain = dot == std::string::npos || h->Find(ti.name.substr(0, dot) + ".record") == nullptr ||
                         kDataSuffixes.count(ti.name.substr(dot + 1)) == 0;
      plain_tensors += plain ? 1 : 0;
      const ImageTensor* t = tables->FindByName(prefix + ti.name);
      ASSERT_NE(t, nullptr) << prefix + ti.name;
      EXPECT_EQ(t->layer, rp.kind == ReleaseFileKind::kDense ? rp.layer : kImageNoLayer) << ti.name;
      EXPECT_EQ(t->dtype, ti.dtype) << ti.name;
      const auto want = Sub(file, h->AbsoluteOffset(ti), ti.byte_size());
      ASSERT_EQ(region(*t).size(), want.size()) << ti.name;
      EXPECT_EQ(std::memcmp(region(*t).data(), want.data(), want.size()), 0) << ti.name;
    }
  }
  EXPECT_GT(dense, 0u);
  EXPECT_EQ(tables->tensors.size(), owned + signs + dense);
  EXPECT_EQ(img.proof.commit, img.commit);
  EXPECT_EQ(img.proof.hashed_regions, tables->checks.size());
  EXPECT_EQ(img.proof.hashed_mismatches, 0u);
  std::uint64_t check_bytes = 0;
  for (const ImageCheck& c : tables->checks)
    for (const ImageSegment& s : c.segments) check_bytes += s.length;
  EXPECT_EQ(img.proof.hashed_bytes, check_bytes);
  // Only signs and plain tensors are checked against the cache's bytes
  // rather than a release digest, and the proof says so.
  EXPECT_GT(plain_tensors, 0u);
  EXPECT_EQ(img.regions_without_release_digest, signs + plain_tensors);

  // Everything outside the header, the offset table and the regions is zero.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> used = {
      {0, kImageHeaderBytes},
      {header->offset_table.offset, header->offset_table.offset + header->offset_table.bytes}};
  for (const ImageTensor& t : tables->tensors) used.push_back({t.offset, t.offset + t.length});
  std::sort(used.begin(), used.end());
  std::uint64_t at = 0, nonzero = 0;
  for (const auto& [begin, end] : used) {
    for (std::uint64_t i = at; i < begin; ++i) nonzero += image[i] != std::byte{0};
    at = std::max(at, end);
  }
  for (std::uint64_t i = at; i < image.size(); ++i) nonzero += image[i] != std::byte{0};
  EXPECT_EQ(nonzero, 0u) << "padding bytes that are not zero";
  EXPECT_EQ(std::memcmp(image.data() + header->offset_table.offset, img.layout.offset_table_bytes.data(),
                        img.layout.offset_table_bytes.size()),
            0);
}

inline fs::path Mirror(const fs::path& cache, const std::string& commit) {
  return cache / "exlr8/test" / commit;
}

inline void BuildAndCheck(const fs::path& cache, const std::string& commit, const std::string& manifest,
                          int tp, int rank) {
  RankRequest request = TestRankRequest(cache, tp, rank);
  request.manifest = manifest;
  RankReadProgress progress;
  request.progress = &progress;
  auto img = BuildHostRankImage(request);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  // What a build costs, for the record (not asserted: machines differ).
  std::printf("host image TP %d rank %d: %llu bytes, %zu regions, %llu checks, read %.4f s, hash %.4f s\n",
              tp, rank, static_cast<unsigned long long>(img->layout.allocation_bytes()),
              img->layout.tables.tensors.size(), static_cast<unsigned long long>(img->proof.hashed_regions),
              img->proof.seconds_read, img->proof.seconds_hash);
  EXPECT_EQ(progress.bytes_checked.load(), progress.bytes_total.load());
  ExpectImageHoldsTheCache(*img, Mirror(cache, commit), manifest, tp, rank);
  // The description a lessee would get parses and names this image.
  const std::string text = WriteLeaseDescriptionV2(DescribeHostImage(*img, request));
  auto d = ParseLeaseDescriptionV2(text);
  ASSERT_TRUE(d.ok()) << d.status().ToString() << "\n" << text;
  EXPECT_EQ(d->memory_kind, LeaseMemoryKind::kHost);
  EXPECT_EQ(d->proof.hashed_regions, img->layout.tables.checks.size());
  EXPECT_EQ(d->proof.decoded_halves, 0u);
  const std::vector<std::byte> image = ReadFd(img->image_fd.get());
  auto header = ParseImageHeader(image);
  auto tables = ParseImageTables(ReadFd(img->tables_fd.get()), image.size());
  ASSERT_TRUE(header.ok() && tables.ok());
  EXPECT_TRUE(CheckLeaseImage(*d, *header, *tables).ok()) << CheckLeaseImage(*d, *header, *tables).ToString();
}

}  // namespace exlr8
