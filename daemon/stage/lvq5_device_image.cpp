#include "daemon/stage/lvq5_device_image.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "daemon/stage/image_common.h"
#include "format/checksum.h"
#include "format/tetra/served.h"
#include "format/tetra/word.h"
#include "gpu/cuda_check.h"
#include "gpu/device.h"
#include "gpu/region_hash.h"
#include "gpu/stream.h"
#include "gpu/tetra_decode.cuh"

namespace exlr8 {

namespace {

using SteadyClock = std::chrono::steady_clock;

// int8 coordinates per Tetra word.
constexpr std::uint64_t kCoords = 24;

// Decoded bytes per GPU launch and comparison (rows of a record at a time).
constexpr std::uint64_t kDecodeBatchBytes = std::uint64_t{64} << 20;

// The rows of a record to check: all, or a seeded sample of
// ceil(fraction * d_out) distinct rows (at least one), sorted.
std::vector<std::uint64_t> SampleRows(std::uint64_t d_out, double fraction, std::uint64_t seed,
                                      const std::string& name) {
  std::uint64_t n = static_cast<std::uint64_t>(std::ceil(fraction * static_cast<double>(d_out)));
  n = std::clamp<std::uint64_t>(n, 1, d_out);
  std::mt19937_64 rng(seed ^ Xxh64::Hash({reinterpret_cast<const std::byte*>(name.data()), name.size()}));
  std::vector<std::uint64_t> rows;
  if (n * 2 >= d_out) {
    rows.resize(d_out);
    for (std::uint64_t i = 0; i < d_out; ++i) rows[i] = i;
    std::shuffle(rows.begin(), rows.end(), rng);
    rows.resize(n);
  } else {
    std::vector<bool> taken(d_out, false);
    while (rows.size() < n) {
      const std::uint64_t r = rng() % d_out;
      if (!taken[r]) {
        taken[r] = true;
        rows.push_back(r);
      }
    }
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

// Runs [first, first + count) of consecutive rows, each at most `batch`.
std::vector<std::pair<std::uint64_t, std::uint64_t>> RowRuns(const std::vector<std::uint64_t>& rows,
                                                             std::uint64_t batch) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> runs;
  for (std::uint64_t r : rows) {
    if (!runs.empty() && runs.back().first + runs.back().second == r && runs.back().second < batch) {
      ++runs.back().second;
    } else {
      runs.push_back({r, 1});
    }
  }
  return runs;
}

}  // namespace

Status CheckLvq5TetraDecode(Lvq5DeviceImage& img, const Lvq5DeviceOptions& o) {
  const auto t0 = SteadyClock::now();
  CudaSetDeviceGuard guard;
  EXLR8_RETURN_IF_ERROR(guard.Set(img.image.device));
  EXLR8_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
  EXLR8_ASSIGN_OR_RETURN(DeviceTetraTables tables, DeviceTetraTables::Upload(stream.view()));
  const tetra::Tables& cpu_tables = tetra::BuiltTables();
  const ImageTables& t = img.plan.layout.tables;
  const std::byte* base = img.image.data();

  std::uint64_t max_row_bytes = 0;
  for (const Lvq5RegionSource& s : img.plan.sources)
    max_row_bytes = std::max<std::uint64_t>(max_row_bytes, s.tetra_nblocks * kCoords);
  if (max_row_bytes == 0) return Status::Ok();  // no Tetra codes
  const std::uint64_t buffer_bytes = std::max(kDecodeBatchBytes, max_row_bytes);
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_decoded, DeviceBuffer::Allocate(buffer_bytes));
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_ref, DeviceBuffer::Allocate(buffer_bytes));
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_cmp, DeviceBuffer::Allocate(sizeof(CompareResult)));
  std::vector<std::int8_t> ref(buffer_bytes);

  img.tetra_records_full = img.tetra_records_sampled = 0;
  img.tetra_rows_checked = img.tetra_words_checked = 0;
  std::uint64_t full_bytes = 0;
  for (std::uint32_t i = 0; i < img.plan.sources.size(); ++i) {
    const Lvq5RegionSource& s = img.plan.sources[i];
    if (s.tetra_nblocks == 0) continue;
    const ImageTensor& region = t.tensors[i];
    const std::uint64_t nblocks = s.tetra_nblocks;
    const std::uint64_t d_out = s.length / (6 * nblocks);
    const std::uint64_t stride = tetra::ServedRowStride(nblocks);
    const std::uint64_t row_out = nblocks * kCoords;
    std::vector<std::uint64_t> rows;
    if (o.image.check_all || full_bytes + s.length <= o.full_check_code_bytes) {
      full_bytes += s.length;
      rows.resize(d_out);
      for (std::uint64_t r = 0; r < d_out; ++r) rows[r] = r;
      ++img.tetra_records_full;
    } else {
      rows = SampleRows(d_out, o.sample_fraction, o.image.seed, region.name);
      ++img.tetra_records_sampled;
    }
    const std::span<const std::byte> disk = img.plan.maps[s.map]->bytes().subspan(s.offset, s.length);
    for (const auto& run : RowRuns(rows, buffer_bytes / row_out)) {
      const std::uint64_t first = run.first, count = run.second;  // named, so that a lambda may capture them
      if (ImageBuildCancelled(o.image.cancel)) return CancelledError("stopped while checking Tetra decodes");
      const std::uint64_t n = count * row_out;
      // CPU reference of the file's disk words, split between threads.
      const std::uint64_t per = std::max<std::uint64_t>(1, count / ImageThreadCount(o.image.threads, count));
      const std::uint64_t parts = (count + per - 1) / per;
      ImageParallelFor(parts, o.image.threads, nullptr, [&](std::size_t p) {
        const std::uint64_t r0 = p * per, rn = std::min(per, count - r0);
        tetra::DecodeDiskWords(cpu_tables, disk.subspan((first + r0) * 6 * nblocks, rn * 6 * nblocks),
                               std::span(ref).subspan(r0 * row_out, rn * row_out));
      });
      const TetraServedMatrix m{base + region.offset + first * stride, count, nblocks, stride};
      EXLR8_RETURN_IF_ERROR(LaunchTetraDecode(m, d_decoded.data_as<std::int8_t>(), tables, stream.view()));
      EXLR8_RETURN_IF_ERROR(
          d_ref.CopyFromHostAsync({reinterpret_cast<const std::byte*>(ref.data()), n}, 0, stream.view()));
      EXLR8_RETURN_IF_ERROR(LaunchCompareBytes(d_decoded.data_as<std::byte>(), d_ref.data_as<std::byte>(), n,
                                               d_cmp.data_as<CompareResult>(), stream.view()));
      CompareResult cmp;
      EXLR8_RETURN_IF_ERROR(
          d_cmp.CopyToHostAsync(0, {reinterpret_cast<std::byte*>(&cmp), sizeof cmp}, stream.view()));
      EXLR8_RETURN_IF_ERROR(stream.Synchronize());
      if (cmp.mismatches != 0) {
        const std::uint64_t row = first + cmp.first / row_out;
        const std::uint64_t block = cmp.first % row_out / kCoords;
        const std::uint64_t coord = cmp.first % kCoords;
        return CorruptionError(
            "Tetra record '" + region.name + "': the GPU decode of row " + std::to_string(row) + " block " +
            std::to_string(block) + " coordinate " + std::to_string(coord) + " (image offset " +
            std::to_string(region.offset + row * stride + 6 * block) + ", from " + img.plan.map_files[s.map] +
            " at byte " + std::to_string(s.offset + (row * nblocks + block) * 6) +
            ") differs from the CPU reference (" + std::to_string(cmp.mismatches) +
            " byte(s) of this batch differ)");
      }
      img.tetra_rows_checked += count;
      img.tetra_words_checked += count * nblocks;
    }
  }
  LeaseProof& proof = img.image.proof;
  proof.dense_decoded_tensors = img.tetra_records_full + img.tetra_records_sampled;
  proof.dense_decoded_mismatches = 0;
  proof.decoded_seed = o.image.seed;
  proof.seconds_decode = SecondsSince(t0);
  return Status::Ok();
}

Result<Lvq5DeviceImage> StageDeviceLvq5Image(const RankRequest& r, const Lvq5DeviceOptions& o) {
  const auto t0 = SteadyClock::now();
  Lvq5DeviceImage out;
  EXLR8_ASSIGN_OR_RETURN(HostRankImage host, BuildHostLvq5Image(r, &out.plan));
  EXLR8_RETURN_IF_ERROR(RequireCudaDevice());
  DeviceRankImage& img = out.image;
  img.commit = host.commit;
  img.device = o.image.device;
  EXLR8_ASSIGN_OR_RETURN(img.identity, GetCudaDeviceIdentity(o.image.device));
  img.plan.commit = host.commit;
  img.plan.layout = host.layout;
  img.plan.pin = std::move(host.pin);
  img.plan.pin_error = std::move(host.pin_error);
  img.regions_without_release_digest = host.regions_without_release_digest;
  img.bytes_without_release_digest = host.bytes_without_release_digest;
  img.proof = host.proof;  // hashed on the CPU; the GPU's result replaces it below
  img.proof.seconds_read = SecondsSince(t0);
  if (ImageBuildCancelled(o.image.cancel))
    return CancelledError("stopped before the image was copied to the GPU");
  const std::uint64_t size = host.layout.allocation_bytes();

  CudaSetDeviceGuard guard;
  EXLR8_RETURN_IF_ERROR(guard.Set(o.image.device));
  EXLR8_RETURN_IF_ERROR(AllocateDeviceImageMemory(img, o.image.device, size, o.image.force_ipc));
  std::byte* base = const_cast<std::byte*>(img.data());
  if (img.allocation_bytes() > size)
    EXLR8_CUDA_TRY(cudaMemset(base + size, 0, img.allocation_bytes() - size));
  // The sealed host image, copied up whole (pageable: LVQ5 files are a few
  // GB; the copy is not the bottleneck next to the decode check).
  const auto t1 = SteadyClock::now();
  EXLR8_CUDA_TRY(cudaMemcpy(base, host.image.bytes().data(), size, cudaMemcpyHostToDevice));
  img.proof.seconds_upload = SecondsSince(t1);

  // Every check entry hashed on the GPU over the device bytes.
  const auto t2 = SteadyClock::now();
  const ImageTables& tables = img.plan.layout.tables;
  std::vector<RegionCheck> checks(tables.checks.size());
  std::uint64_t check_bytes = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const ImageCheck& c = tables.checks[i];
    checks[i] = RegionCheck{};
    checks[i].digest = c.digest;
    checks[i].segment_count = static_cast<std::uint32_t>(c.segments.size());
    for (std::size_t k = 0; k < c.segments.size(); ++k) {
      checks[i].segments[k] = {c.segments[k].offset, c.segments[k].length};
      check_bytes += c.segments[k].length;
    }
  }
  EXLR8_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
  EXLR8_ASSIGN_OR_RETURN(RegionHashReport report, HashRegions(base, size, checks, stream.view()));
  if (report.summary.mismatches != 0) {
    const std::uint64_t i = report.summary.first_mismatch;
    const ImageTensor& tensor = tables.tensors[i];
    return CorruptionError("'" + tensor.name + "' (region " + std::to_string(i) + " at image offset " +
                           std::to_string(tensor.offset) + "): XXH64 of the device bytes differs from the " +
                           "staged digest (" + std::to_string(report.summary.mismatches) +
                           " check(s) failed on the GPU)");
  }
  img.proof.hashed_regions = checks.size();
  img.proof.hashed_bytes = check_bytes;
  img.proof.hashed_mismatches = 0;
  img.proof.seconds_hash = SecondsSince(t2);

  EXLR8_RETURN_IF_ERROR(CheckLvq5TetraDecode(out, o));
  img.tables_fd = std::move(host.tables_fd);
  img.tables_bytes = host.tables_bytes;
  img.proof.commit = img.commit;
  // No half records: none decoded, none differed (the parser ties a false
  // tiles_bit_exact to a named mismatch).
  img.proof.decoded_halves = img.proof.decoded_of = 0;
  img.proof.tiles_bit_exact = true;
  return out;
}

}  // namespace exlr8
