#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <utility>

#include "format/tetra/served.h"
#include "format/tetra/tables.h"
#include "gpu/cuda_check.h"
#include "gpu/tetra_decode.cuh"
#include "gpu/tetra_word.cuh"

namespace exlr8 {

namespace {

// Device table layout (byte offsets into DeviceTetraTables' buffer).
constexpr std::size_t kTetraRowsOff = 0;
constexpr std::size_t kTetraBranchesOff = kTetraRowsOff + sizeof(tetra::Tables::rows);
constexpr std::size_t kTetraPrefixesOff = kTetraBranchesOff + sizeof(tetra::Tables::branches);
constexpr std::size_t kTetraSuffixesOff = kTetraPrefixesOff + sizeof(tetra::Tables::prefixes);
constexpr std::size_t kTetraInvnormOff = kTetraSuffixesOff + sizeof(tetra::Tables::suffixes);
constexpr std::size_t kTetraOrderOff = kTetraInvnormOff + sizeof(tetra::Tables::invnorm);
static_assert(kTetraOrderOff == tetra::kDecodeTableBytes);
static_assert(kTetraOrderOff + sizeof(tetra::Tables::order) <= kTetraDeviceTableBytes &&
              kTetraDeviceTableBytes % 16 == 0 && kTetraDeviceTableBytes - 16 < kTetraOrderOff + 24);

constexpr int kTetraThreads = 256;
constexpr int kTetraWarps = kTetraThreads / 32;
constexpr int kTetraStageWords = 32 * 6;  // one warp's 32 decoded words as u32
// Words per launch: keeps the word index and the row division in 32 bits.
constexpr std::uint64_t kTetraMaxLaunchWords = std::uint64_t{1} << 31;
constexpr std::uint64_t kTetraMaxBlocks = std::uint64_t{1} << 26;

struct TetraDecodeParams {
  const std::byte* codes;    // the launch's first row
  std::uint64_t row_stride;  // bytes
  std::uint32_t nblocks;
  std::uint32_t words;  // rows * nblocks of this launch, < 2^31
  const uint4* tables;
  std::int8_t* out;  // the launch's first word's coordinates
};

// Copies the device tables into the block's shared memory `tables` and
// returns the view of them. A barrier: every thread of the block calls it.
__device__ tetra_gpu::TetraTableView LoadTetraTables(const uint4* src, unsigned char* tables) {
  for (int i = threadIdx.x; i < static_cast<int>(kTetraDeviceTableBytes / 16); i += blockDim.x)
    reinterpret_cast<uint4*>(tables)[i] = __ldg(src + i);
  __syncthreads();
  return {reinterpret_cast<const std::uint32_t*>(tables + kTetraRowsOff),
          reinterpret_cast<const std::uint16_t*>(tables + kTetraBranchesOff),
          reinterpret_cast<const std::uint8_t*>(tables + kTetraPrefixesOff),
          reinterpret_cast<const std::uint8_t*>(tables + kTetraSuffixesOff)};
}

// W of block j of `row` (spec 2.7: the two aligned u32 at index (3j) >> 1).
__device__ __forceinline__ void LoadTetraWord(const std::byte* codes, std::uint64_t row_stride,
                                              std::uint32_t row, std::uint32_t j, std::uint32_t& lo,
                                              std::uint32_t& hi16) {
  const auto* r32 = reinterpret_cast<const std::uint32_t*>(codes + row * row_stride) + ((3 * j) >> 1);
  tetra_gpu::ServedWindow(__ldg(r32), __ldg(r32 + 1), j, lo, hi16);
}

__global__ void __launch_bounds__(kTetraThreads) TetraDecodeKernel(const TetraDecodeParams p) {
  __shared__ __align__(16) unsigned char tables[kTetraDeviceTableBytes];
  __shared__ __align__(16) std::uint32_t stage[kTetraWarps][kTetraStageWords];
  const tetra_gpu::TetraTableView view = LoadTetraTables(p.tables, tables);

  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  std::uint32_t* st = stage[warp];
  const std::uint64_t step = static_cast<std::uint64_t>(gridDim.x) * kTetraWarps * 32;
  // Warp-uniform loop: every lane runs the same iterations (__syncwarp below).
  for (std::uint64_t base = (static_cast<std::uint64_t>(blockIdx.x) * kTetraWarps + warp) * 32;
       base < p.words; base += step) {
    const std::uint64_t g = base + lane;
    if (g < p.words) {
      const std::uint32_t gi = static_cast<std::uint32_t>(g);
      const std::uint32_t row = gi / p.nblocks;
      const std::uint32_t j = gi - row * p.nblocks;
      std::uint32_t lo, hi16;
      LoadTetraWord(p.codes, p.row_stride, row, j, lo, hi16);
      std::uint32_t natural[6];
      tetra_gpu::DecodeTetraWord(view, lo, hi16, natural);
      std::uint32_t* mine = st + 6 * lane;
#pragma unroll
      for (int k = 0; k < 6; ++k) mine[k] = natural[k];
    }
    __syncwarp();
    // The warp's words are 24 * valid contiguous output bytes: coalesced
    // 8-byte stores.
    const std::uint64_t valid = std::min<std::uint64_t>(32, p.words - base);
    auto* dst = reinterpret_cast<uint2*>(p.out + 24 * base);
    const auto* src = reinterpret_cast<const uint2*>(st);
    for (std::uint32_t u = lane; u < 3 * valid; u += 32) dst[u] = src[u];
    __syncwarp();
  }
}

struct TetraReconstructParams {
  TetraDecodeParams d;  // out unused
  std::uint64_t first_row;
  TetraScales scales;
  std::uint64_t d_in;  // floats per output row
  float* out;          // the launch's first row
};

// One thread per word: decode, then the f64 scale of spec 2.4 / golden.json.
__global__ void __launch_bounds__(kTetraThreads) TetraReconstructKernel(const TetraReconstructParams p) {
  __shared__ __align__(16) unsigned char tables[kTetraDeviceTableBytes];
  const tetra_gpu::TetraTableView view = LoadTetraTables(p.d.tables, tables);
  for (std::uint64_t g = static_cast<std::uint64_t>(blockIdx.x) * kTetraThreads + threadIdx.x; g < p.d.words;
       g += static_cast<std::uint64_t>(gridDim.x) * kTetraThreads) {
    const std::uint32_t gi = static_cast<std::uint32_t>(g);
    const std::uint32_t row = gi / p.d.nblocks;
    const std::uint32_t j = gi - row * p.d.nblocks;
    std::uint32_t lo, hi16;
    LoadTetraWord(p.d.codes, p.d.row_stride, row, j, lo, hi16);
    std::uint32_t natural[6];
    tetra_gpu::DecodeTetraWord(view, lo, hi16, natural);
    const std::uint32_t m = tetra_gpu::TetraShell(natural);
    float* o = p.out + row * p.d_in + 24 * static_cast<std::uint64_t>(j);
    if (m == 0) {
#pragma unroll
      for (int c = 0; c < 24; ++c) o[c] = 0.0F;
      continue;
    }
    const double scale =
        tetra_gpu::TetraBlockScale(p.scales.centroids[hi16 >> 15], p.scales.row_scales[p.first_row + row], m);
#pragma unroll
    for (int c = 0; c < 24; ++c)
      o[c] = tetra_gpu::TetraScaledCoord(static_cast<std::int8_t>(natural[c / 4] >> (8 * (c % 4)) & 0xFF),
                                         scale);
  }
}

// The tail columns: out[i * d_in + 24 * nblocks + c] = tail[i * tail_cols + c].
__global__ void TetraTailKernel(const float* tail, std::uint64_t rows, std::uint64_t tail_cols,
                                std::uint64_t d_in, float* out) {
  const std::uint64_t n = rows * tail_cols;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t row = i / tail_cols, c = i - row * tail_cols;
    out[row * d_in + (d_in - tail_cols) + c] = tail[i];
  }
}

__global__ void TetraResetKernel(CompareResult* out) { *out = CompareResult{}; }

// Each thread counts its differing bytes and keeps its first (its chunks
// ascend), then adds them with one atomic pair at the end.
__global__ void TetraCompareBytesKernel(const std::uint8_t* a, const std::uint8_t* b, std::uint64_t n,
                                        bool vec, CompareResult* out) {
  const std::uint64_t tid = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long count = 0, first = ~0ull;
  std::uint64_t tail = 0;
  if (vec) {
    const std::uint64_t chunks = n / 16;
    const auto* a4 = reinterpret_cast<const uint4*>(a);
    const auto* b4 = reinterpret_cast<const uint4*>(b);
    for (std::uint64_t i = tid; i < chunks; i += stride) {
      const uint4 x = __ldg(a4 + i), y = __ldg(b4 + i);
      const std::uint32_t d[4] = {__vcmpne4(x.x, y.x), __vcmpne4(x.y, y.y), __vcmpne4(x.z, y.z),
                                  __vcmpne4(x.w, y.w)};
      if ((d[0] | d[1] | d[2] | d[3]) == 0) continue;
      for (int k = 0; k < 4; ++k) {
        if (d[k] == 0) continue;
        count += static_cast<unsigned>(__popc(d[k])) / 8;
        const unsigned long long at = 16 * i + 4 * k + static_cast<unsigned>(__ffs(d[k]) - 1) / 8;
        if (at < first) first = at;
      }
    }
    tail = chunks * 16;
  }
  for (std::uint64_t i = tail + tid; i < n; i += stride)
    if (a[i] != b[i]) {
      ++count;
      if (i < first) first = i;
    }
  if (count != 0) {
    atomicAdd(&out->mismatches, count);
    atomicMin(&out->first, first);
  }
}

Result<int> TetraSmCount() {
  int device = 0, sms = 0;
  EXLR8_CUDA_TRY(cudaGetDevice(&device));
  EXLR8_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

}  // namespace

Result<DeviceTetraTables> DeviceTetraTables::Upload(CudaStreamView stream) {
  EXLR8_RETURN_IF_ERROR(tetra::TablesStatus());
  const tetra::Tables& t = tetra::BuiltTables();
  if (t.order != tetra_gpu::kTetraOrder)
    return InternalError(
        "DeviceTetraTables: the built trio order differs from the kernel's (compiled from "
        "tetra::kTrioOctads)");
  if (t.n0 != tetra::kN0)
    return InternalError("DeviceTetraTables: built n0 " + std::to_string(t.n0) + " is not " +
                         std::to_string(tetra::kN0));
  std::array<std::byte, kTetraDeviceTableBytes> host{};
  std::memcpy(host.data() + kTetraRowsOff, t.rows.data(), sizeof t.rows);
  std::memcpy(host.data() + kTetraBranchesOff, t.branches.data(), sizeof t.branches);
  std::memcpy(host.data() + kTetraPrefixesOff, t.prefixes.data(), sizeof t.prefixes);
  std::memcpy(host.data() + kTetraSuffixesOff, t.suffixes.data(), sizeof t.suffixes);
  std::memcpy(host.data() + kTetraInvnormOff, t.invnorm.data(), sizeof t.invnorm);
  std::memcpy(host.data() + kTetraOrderOff, t.order.data(), sizeof t.order);
  DeviceTetraTables out;
  EXLR8_ASSIGN_OR_RETURN(out.buf_, DeviceBuffer::Allocate(kTetraDeviceTableBytes));
  EXLR8_RETURN_IF_ERROR(out.buf_.CopyFromHostAsync(host, 0, stream));
  EXLR8_RETURN_IF_ERROR(stream.Synchronize());
  return std::move(out);  // nvcc's front end does not apply C++20 implicit move here
}

namespace {

// The checks LaunchTetraDecode and LaunchTetraReconstruct share. `out_align`
// is the output's required alignment.
Status CheckTetraMatrix(const char* what, const TetraServedMatrix& m, const void* out, std::size_t out_align,
                        const DeviceTetraTables& tables) {
  if (m.nblocks == 0 || m.nblocks > kTetraMaxBlocks)
    return InvalidArgumentError(std::string(what) + ": nblocks " + std::to_string(m.nblocks) +
                                " is outside 1..2^26");
  const std::uint64_t min_stride = tetra::ServedRowStride(m.nblocks);
  if (m.row_stride < min_stride || m.row_stride % 4 != 0)
    return InvalidArgumentError(std::string(what) + ": row stride " + std::to_string(m.row_stride) +
                                " is below " + std::to_string(min_stride) + " or not a multiple of 4");
  // 96 bytes per word covers both outputs (24 int8 or 24 f32 + the tail).
  if (m.d_out > (UINT64_MAX / 128) / m.nblocks || (m.d_out != 0 && m.d_out - 1 > UINT64_MAX / m.row_stride))
    return InvalidArgumentError(std::string(what) + ": " + std::to_string(m.d_out) + " rows of " +
                                std::to_string(m.nblocks) + " blocks overflow the address range");
  if (m.d_out == 0) return Status::Ok();
  if (m.codes == nullptr || out == nullptr || tables.data() == nullptr)
    return InvalidArgumentError(std::string(what) + ": null codes, output or tables");
  if (reinterpret_cast<std::uintptr_t>(m.codes) % 4 != 0 ||
      reinterpret_cast<std::uintptr_t>(out) % out_align != 0)
    return InvalidArgumentError(std::string(what) + ": codes must be 4-byte and the output " +
                                std::to_string(out_align) + "-byte aligned");
  return Status::Ok();
}

}  // namespace

Status LaunchTetraDecode(const TetraServedMatrix& m, std::int8_t* out, const DeviceTetraTables& tables,
                         CudaStreamView stream) {
  EXLR8_RETURN_IF_ERROR(CheckTetraMatrix("LaunchTetraDecode", m, out, 8, tables));
  if (m.d_out == 0) return Status::Ok();
  EXLR8_ASSIGN_OR_RETURN(const int sms, TetraSmCount());
  int per_sm = 0;
  EXLR8_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, TetraDecodeKernel, kTetraThreads, 0));
  if (per_sm < 1) return InternalError("TetraDecodeKernel: no block fits on a multiprocessor");
  const std::uint64_t rows_per_launch = std::max<std::uint64_t>(1, kTetraMaxLaunchWords / m.nblocks);
  for (std::uint64_t first = 0; first < m.d_out; first += rows_per_launch) {
    const std::uint64_t rows = std::min(rows_per_launch, m.d_out - first);
    TetraDecodeParams p{};
    p.codes = m.codes + first * m.row_stride;
    p.row_stride = m.row_stride;
    p.nblocks = static_cast<std::uint32_t>(m.nblocks);
    p.words = static_cast<std::uint32_t>(rows * m.nblocks);
    p.tables = reinterpret_cast<const uint4*>(tables.data());
    p.out = out + first * m.nblocks * 24;
    const std::uint64_t wanted = (p.words + kTetraThreads - 1) / kTetraThreads;
    const std::uint64_t grid = std::min<std::uint64_t>(wanted, static_cast<std::uint64_t>(sms) * per_sm);
    TetraDecodeKernel<<<static_cast<unsigned>(grid), kTetraThreads, 0, stream.value()>>>(p);
    EXLR8_CUDA_TRY(cudaGetLastError());
  }
  return Status::Ok();
}

Status LaunchTetraReconstruct(const TetraServedMatrix& m, const TetraScales& scales, float* out,
                              const DeviceTetraTables& tables, CudaStreamView stream) {
  EXLR8_RETURN_IF_ERROR(CheckTetraMatrix("LaunchTetraReconstruct", m, out, 4, tables));
  if (scales.tail_cols > 23)
    return InvalidArgumentError("LaunchTetraReconstruct: tail_cols " + std::to_string(scales.tail_cols) +
                                " is above 23");
  if (m.d_out == 0) return Status::Ok();
  if (scales.centroids == nullptr || scales.row_scales == nullptr ||
      (scales.tail_cols > 0 && scales.tail == nullptr))
    return InvalidArgumentError("LaunchTetraReconstruct: null centroids, row scales or tail");
  EXLR8_ASSIGN_OR_RETURN(const int sms, TetraSmCount());
  int per_sm = 0;
  EXLR8_CUDA_TRY(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, TetraReconstructKernel, kTetraThreads, 0));
  if (per_sm < 1) return InternalError("TetraReconstructKernel: no block fits on a multiprocessor");
  const std::uint64_t d_in = 24 * m.nblocks + scales.tail_cols;
  const std::uint64_t rows_per_launch = std::max<std::uint64_t>(1, kTetraMaxLaunchWords / m.nblocks);
  for (std::uint64_t first = 0; first < m.d_out; first += rows_per_launch) {
    const std::uint64_t rows = std::min(rows_per_launch, m.d_out - first);
    TetraReconstructParams p{};
    p.d.codes = m.codes + first * m.row_stride;
    p.d.row_stride = m.row_stride;
    p.d.nblocks = static_cast<std::uint32_t>(m.nblocks);
    p.d.words = static_cast<std::uint32_t>(rows * m.nblocks);
    p.d.tables = reinterpret_cast<const uint4*>(tables.data());
    p.first_row = first;
    p.scales = scales;
    p.d_in = d_in;
    p.out = out + first * d_in;
    const std::uint64_t wanted = (p.d.words + kTetraThreads - 1) / kTetraThreads;
    const std::uint64_t grid = std::min<std::uint64_t>(wanted, static_cast<std::uint64_t>(sms) * per_sm);
    TetraReconstructKernel<<<static_cast<unsigned>(grid), kTetraThreads, 0, stream.value()>>>(p);
    EXLR8_CUDA_TRY(cudaGetLastError());
  }
  if (scales.tail_cols > 0) {
    const std::uint64_t n = m.d_out * scales.tail_cols;
    const std::uint64_t grid =
        std::clamp<std::uint64_t>((n + 255) / 256, 1, static_cast<std::uint64_t>(sms) * 8);
    TetraTailKernel<<<static_cast<unsigned>(grid), 256, 0, stream.value()>>>(scales.tail, m.d_out,
                                                                             scales.tail_cols, d_in, out);
    EXLR8_CUDA_TRY(cudaGetLastError());
  }
  return Status::Ok();
}

Status LaunchCompareBytes(const std::byte* a, const std::byte* b, std::uint64_t n, CompareResult* out,
                          CudaStreamView stream) {
  if (out == nullptr) return InvalidArgumentError("LaunchCompareBytes: null result");
  if (n != 0 && (a == nullptr || b == nullptr))
    return InvalidArgumentError("LaunchCompareBytes: null pointer");
  TetraResetKernel<<<1, 1, 0, stream.value()>>>(out);
  EXLR8_CUDA_TRY(cudaGetLastError());
  if (n == 0) return Status::Ok();
  const bool vec =
      reinterpret_cast<std::uintptr_t>(a) % 16 == 0 && reinterpret_cast<std::uintptr_t>(b) % 16 == 0;
  EXLR8_ASSIGN_OR_RETURN(const int sms, TetraSmCount());
  constexpr unsigned kCompareThreads = 256;
  const std::uint64_t units = vec ? n / 16 + 16 : n;
  const std::uint64_t grid = std::clamp<std::uint64_t>((units + kCompareThreads - 1) / kCompareThreads, 1,
                                                       static_cast<std::uint64_t>(sms) * 8);
  TetraCompareBytesKernel<<<static_cast<unsigned>(grid), kCompareThreads, 0, stream.value()>>>(
      reinterpret_cast<const std::uint8_t*>(a), reinterpret_cast<const std::uint8_t*>(b), n, vec, out);
  EXLR8_CUDA_TRY(cudaGetLastError());
  return Status::Ok();
}

}  // namespace exlr8
