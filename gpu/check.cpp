#include "gpu/check.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/device_buffer.h"
#include "gpu/event.h"
#include "gpu/upload.h"

namespace exlr8 {

namespace {

Status CheckArguments(std::span<const std::span<const std::byte>> halves, int k, std::uint64_t hidden) {
  if (k < kMinTrellisK || k > kMaxTrellisK)
    return InvalidArgumentError("CheckGpuDecode: width K=" + std::to_string(k) + " outside 1..8");
  if (hidden == 0 || hidden % kBlock != 0 || hidden > (std::uint64_t{1} << 31))
    return InvalidArgumentError("CheckGpuDecode: length " + std::to_string(hidden) +
                                " is not a positive multiple of 128 (max 2^31)");
  if (halves.empty()) return InvalidArgumentError("CheckGpuDecode: no halves");
  const std::uint64_t want = 16 * static_cast<std::uint64_t>(k) * hidden;
  for (std::size_t i = 0; i < halves.size(); ++i)
    if (halves[i].size() != want)
      return InvalidArgumentError("CheckGpuDecode: half " + std::to_string(i) + " has " +
                                  std::to_string(halves[i].size()) + " bytes, expected 16*K*length = " +
                                  std::to_string(want) + " (K=" + std::to_string(k) +
                                  ", length=" + std::to_string(hidden) + ")");
  return Status::Ok();
}

}  // namespace

std::string GpuCheckReport::ToString() const {
  std::string s = std::to_string(halves) + " halves, " + std::to_string(weights) + " weights: " +
                  std::to_string(f32_mismatches) + " fp32 and " + std::to_string(e4m3_mismatches) +
                  " E4M3 mismatches";
  if (first.has_value()) {
    const GpuDecodeMismatch& m = *first;
    char buf[256];
    std::snprintf(buf, sizeof buf, "; first: half %llu element %llu (row %llu, col %llu) %s gpu 0x%08x (%g) cpu 0x%08x (%g)",
                  static_cast<unsigned long long>(m.half), static_cast<unsigned long long>(m.index),
                  static_cast<unsigned long long>(m.row), static_cast<unsigned long long>(m.col),
                  m.in_e4m3 ? "e4m3" : "fp32", m.gpu_bits, static_cast<double>(m.gpu_value), m.cpu_bits,
                  static_cast<double>(m.cpu_value));
    s += buf;
  }
  return s;
}

Result<GpuCheckReport> CheckGpuDecode(std::span<const std::span<const std::byte>> halves, int k, HalfLayout layout,
                                      std::uint64_t hidden, CudaStreamView stream, const GpuCheckOptions& options) {
  EXLR8_RETURN_IF_ERROR(CheckArguments(halves, k, hidden));
  EXLR8_RETURN_IF_ERROR(RequireCudaDevice());

  GpuCheckReport report;
  report.halves = halves.size();
  report.weights = halves.size() * kBlock * hidden;

  // upload
  UploadStats up;
  EXLR8_ASSIGN_OR_RETURN(StagedHalves staged, UploadHalves(halves, 1, stream, UploadOptions{}, &up));
  report.upload_seconds = up.seconds;
  EXLR8_ASSIGN_OR_RETURN(DeviceCodebook codebook, DeviceCodebook::Upload(stream));

  // batches of whole halves
  const std::uint64_t half_elems = kBlock * hidden;
  const std::uint64_t per_batch =
      std::min<std::uint64_t>(halves.size(), std::max<std::uint64_t>(1, options.max_batch_weights / half_elems));
  const std::uint64_t batch_elems = per_batch * half_elems;
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_f32, DeviceBuffer::Allocate(batch_elems * sizeof(float)));
  DeviceBuffer d_e4m3;
  if (options.check_e4m3) {
    EXLR8_ASSIGN_OR_RETURN(d_e4m3, DeviceBuffer::Allocate(batch_elems));
  }
  std::vector<float> gpu_f32(batch_elems), cpu_f32(half_elems);
  std::vector<std::uint8_t> gpu_e4m3(options.check_e4m3 ? batch_elems : 0);
  EXLR8_ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create(/*timing=*/true));
  EXLR8_ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::Create(/*timing=*/true));

  const std::uint64_t cols = layout == HalfLayout::kGateUp ? kBlock : hidden;
  auto note = [&](std::uint64_t half, std::uint64_t idx, bool e4m3, std::uint32_t g, std::uint32_t c, float gv,
                  float cv) {
    if (report.first.has_value()) return;
    report.first = GpuDecodeMismatch{half, idx, idx / cols, idx % cols, e4m3, g, c, gv, cv};
  };

  for (std::uint64_t first = 0; first < halves.size(); first += per_batch) {
    const std::uint64_t count = std::min<std::uint64_t>(per_batch, halves.size() - first);
    // decode
    EXLR8_RETURN_IF_ERROR(d_f32.MemsetAsync(0xFF, stream));
    if (options.check_e4m3) EXLR8_RETURN_IF_ERROR(d_e4m3.MemsetAsync(0xFF, stream));
    HalfBatch batch{staged.device_base(), staged.device_offsets(), first, count, k, layout, hidden};
    DecodeOutputs out{d_f32.data_as<float>(), options.check_e4m3 ? d_e4m3.data_as<std::uint8_t>() : nullptr};
    EXLR8_RETURN_IF_ERROR(start.Record(stream));
    EXLR8_RETURN_IF_ERROR(LaunchDecodeHalves(batch, out, codebook, options.mode, stream));
    EXLR8_RETURN_IF_ERROR(stop.Record(stream));
    const std::uint64_t n = count * half_elems;
    EXLR8_RETURN_IF_ERROR(
        d_f32.CopyToHostAsync(0, {reinterpret_cast<std::byte*>(gpu_f32.data()), n * sizeof(float)}, stream));
    if (options.check_e4m3)
      EXLR8_RETURN_IF_ERROR(d_e4m3.CopyToHostAsync(0, {reinterpret_cast<std::byte*>(gpu_e4m3.data()), n}, stream));
    EXLR8_RETURN_IF_ERROR(stream.Synchronize());
    EXLR8_ASSIGN_OR_RETURN(const double secs, CudaEvent::ElapsedSeconds(start, stop));
    report.gpu_decode_seconds += secs;

    // compare
    for (std::uint64_t j = 0; j < count; ++j) {
      const std::uint64_t h = first + j;
      const auto t0 = std::chrono::steady_clock::now();
      EXLR8_RETURN_IF_ERROR(DecodeHalfTiles(halves[h], k, layout, hidden, cpu_f32));
      report.cpu_decode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const float* g = gpu_f32.data() + j * half_elems;
      if (std::memcmp(g, cpu_f32.data(), half_elems * sizeof(float)) != 0) {
        for (std::uint64_t i = 0; i < half_elems; ++i) {
          const std::uint32_t gb = std::bit_cast<std::uint32_t>(g[i]);
          const std::uint32_t cb = std::bit_cast<std::uint32_t>(cpu_f32[i]);
          if (gb != cb) {
            ++report.f32_mismatches;
            note(h, i, false, gb, cb, g[i], cpu_f32[i]);
          }
        }
      }
      if (options.check_e4m3) {
        const std::uint8_t* ge = gpu_e4m3.data() + j * half_elems;
        for (std::uint64_t i = 0; i < half_elems; ++i) {
          const std::uint8_t want = FloatToE4M3(cpu_f32[i]);
          if (ge[i] != want) {
            ++report.e4m3_mismatches;
            note(h, i, true, ge[i], want, E4M3ToFloat(ge[i]), cpu_f32[i]);
          }
        }
      }
    }
  }
  return report;
}

}  // namespace exlr8
