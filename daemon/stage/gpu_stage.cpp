#include "daemon/stage/gpu_stage.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <span>
#include <tuple>
#include <vector>

#include "gpu/check.h"
#include "gpu/device.h"
#include "gpu/stream.h"

namespace exlr8 {

namespace {

// `want` indices spread evenly over [0, n): the first, the last, and evenly
// between (all of them when want >= n).
std::vector<std::size_t> Sample(std::size_t n, std::size_t want) {
  std::vector<std::size_t> out;
  if (n == 0 || want == 0) return out;
  if (want >= n) {
    for (std::size_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  for (std::size_t j = 0; j < want; ++j)
    out.push_back(want == 1 ? 0 : static_cast<std::size_t>(static_cast<long double>(j) * (n - 1) / (want - 1)));
  return out;
}

}  // namespace

Result<GpuStageReport> StageOnGpu(const RankHalves& rank, const GpuStageOptions& o, StagedHalves* keep) {
  if (rank.halves.empty()) return InvalidArgumentError("the rank has no halves to stage");
  EXLR8_RETURN_IF_ERROR(RequireCudaDevice());
  CudaSetDeviceGuard guard;
  EXLR8_RETURN_IF_ERROR(guard.Set(o.device));
  GpuStageReport report;
  EXLR8_ASSIGN_OR_RETURN(report.device, DescribeCudaDevice(o.device));
  EXLR8_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());

  // One allocation, table entry i = half i of the rank (plan order).
  std::vector<std::span<const std::byte>> spans;
  spans.reserve(rank.halves.size());
  for (const RankHalf& h : rank.halves) spans.push_back(rank.Bytes(h));
  UploadOptions upload = o.upload;
  if (o.cancel != nullptr) upload.cancel = o.cancel;
  EXLR8_ASSIGN_OR_RETURN(StagedHalves staged, UploadHalves(spans, 1, stream.view(), upload, &report.upload));
  auto stopped = [&](const char* while_doing) -> Status {
    if (o.cancel == nullptr || !o.cancel->load(std::memory_order_relaxed)) return Status::Ok();
    return CancelledError(std::string("stopped while ") + while_doing + " (the rank's device memory is freed)");
  };
  report.halves = staged.num_halves();

  const std::vector<std::size_t> sample = Sample(rank.halves.size(), o.check_halves);
  report.checked_halves = sample.size();
  // Round trip: the device holds exactly the verified bytes.
  std::vector<std::byte> back;
  for (std::size_t i : sample) {
    EXLR8_RETURN_IF_ERROR(stopped("checking the round trip"));
    back.assign(spans[i].size(), std::byte{0});
    EXLR8_RETURN_IF_ERROR(staged.CopyHalfToHostAsync(i, back, stream.view()));
    EXLR8_RETURN_IF_ERROR(stream.Synchronize());
    if (std::memcmp(back.data(), spans[i].data(), back.size()) != 0) {
      if (report.round_trip_mismatches++ == 0)
        report.first_mismatch = rank.halves[i].tag.What() + ": the device copy differs from the cache's bytes";
    }
  }
  // Decode: grouped by what CheckGpuDecode takes at once, in batches (each
  // batch is uploaded again and decoded on both sides: with --check all a
  // group would be a third of the rank; batches bound that memory and how
  // long a stop waits).
  constexpr std::size_t kCheckBatch = 256;
  std::map<std::tuple<int, int, std::uint64_t>, std::vector<std::size_t>> groups;
  for (std::size_t i : sample) {
    const RankHalf& h = rank.halves[i];
    groups[{h.tag.k, static_cast<int>(h.layout), h.hidden}].push_back(i);
  }
  for (const auto& [key, members] : groups) {
    const auto [k, layout, hidden] = key;
    for (std::size_t from = 0; from < members.size(); from += kCheckBatch) {
      EXLR8_RETURN_IF_ERROR(stopped("checking the GPU decode"));
      const std::span<const std::size_t> batch =
          std::span(members).subspan(from, std::min(kCheckBatch, members.size() - from));
      std::vector<std::span<const std::byte>> group;
      for (std::size_t i : batch) group.push_back(spans[i]);
      EXLR8_ASSIGN_OR_RETURN(GpuCheckReport check, CheckGpuDecode(group, k, static_cast<HalfLayout>(layout), hidden,
                                                                  stream.view()));
      report.checked_weights += check.weights;
      report.decode_mismatches += check.f32_mismatches + check.e4m3_mismatches;
      report.gpu_decode_seconds += check.gpu_decode_seconds;
      report.cpu_decode_seconds += check.cpu_decode_seconds;
      if (!check.ok() && report.first_mismatch.empty())
        report.first_mismatch = rank.halves[batch[check.first ? check.first->half : 0]].tag.What() + ": " +
                                check.ToString();
    }
  }
  if (keep != nullptr) *keep = std::move(staged);
  return report;
}

}  // namespace exlr8
