// DriverDeviceLease::HalfWeights: the library's own kernel
// (kernels/half_weights.cu, compiled to a fatbin and embedded at build time
// where EXLR8CLIENT_HAVE_KERNELS is defined) loaded into the lease's
// primary context and launched through the CUDA driver loaded at run time.
#include <cstddef>
#include <cstdint>
#include <string>

#include "client/exlr8client/driver_device_lease.h"
#include "client/exlr8client/kernels/half_weights_params.h"

#ifdef EXLR8CLIENT_HAVE_KERNELS
namespace exlr8::client {
extern const unsigned char kHalfWeightsFatbin[];
extern const std::size_t kHalfWeightsFatbin_size;
}  // namespace exlr8::client
#endif

namespace exlr8::cudrv {

Status DriverDeviceLease::HalfWeights(const client::HalfRecordGeometry& g, std::uint64_t record,
                                      std::uint64_t signs, float* out, void* stream) const {
#ifndef EXLR8CLIENT_HAVE_KERNELS
  (void)g;
  (void)record;
  (void)signs;
  (void)out;
  (void)stream;
  return UnavailableError(
      "device lease: not built with CUDA kernels (libexlr8client was built without CUDA)");
#else
  if (driver_ == nullptr || ctx_ == nullptr || ptr_ == 0 || kernels_ == nullptr)
    return FailedPreconditionError("the device lease is not open");
  if (reinterpret_cast<std::uintptr_t>(out) % alignof(float) != 0)
    return InvalidArgumentError("out " + std::to_string(reinterpret_cast<std::uintptr_t>(out)) +
                                " is not 4-byte aligned");
  const Driver& drv = *driver_;
  ContextScope scope(drv, ctx_);
  EXLR8_RETURN_IF_ERROR(scope.status());
  CUfunction fn = nullptr;
  {
    std::lock_guard<std::mutex> lock(kernels_->mu);
    if (kernels_->half_weights == nullptr) {
      CUmodule module = nullptr;
      EXLR8_RETURN_IF_ERROR(CallStatus(drv, drv.ModuleLoadData(&module, client::kHalfWeightsFatbin),
                                       "cuModuleLoadData of libexlr8client's kernels (" +
                                           std::to_string(client::kHalfWeightsFatbin_size) +
                                           " bytes of fatbin; a GPU architecture the build did not target?)",
                                       StatusCode::kInternal));
      CUfunction f = nullptr;
      Status s = CallStatus(drv, drv.ModuleGetFunction(&f, module, client::kHalfWeightsKernelName),
                            std::string("cuModuleGetFunction ") + client::kHalfWeightsKernelName,
                            StatusCode::kInternal);
      if (s.ok())
        s = CallStatus(drv,
                       drv.FuncSetAttribute(f, kFuncAttributeMaxDynamicSharedSizeBytes,
                                            static_cast<int>(client::kHalfWeightsSmemBytes)),
                       "cuFuncSetAttribute (max dynamic shared memory " +
                           std::to_string(client::kHalfWeightsSmemBytes) + ")",
                       StatusCode::kInternal);
      if (!s.ok()) {
        (void)drv.ModuleUnload(module);
        return s;
      }
      kernels_->module = module;
      kernels_->half_weights = f;
    }
    fn = kernels_->half_weights;
  }
  client::HalfWeightsParams p{};
  p.record = reinterpret_cast<const std::uint8_t*>(static_cast<std::uintptr_t>(base() + record));
  p.signs = reinterpret_cast<const std::uint8_t*>(static_cast<std::uintptr_t>(base() + signs));
  p.out = out;
  p.hidden = g.hidden;
  p.slice_offset = g.slice_offset;
  p.block_offset = g.block_offset;
  p.k = static_cast<std::uint32_t>(g.k);
  p.down = g.down ? 1 : 0;
  p.slice_dtype = static_cast<std::uint32_t>(g.slice_dtype);
  p.block_dtype = static_cast<std::uint32_t>(g.block_dtype);
  p.signs_dtype = static_cast<std::uint32_t>(g.signs_dtype);
  void* args[] = {&p};
  const std::uint64_t blocks = g.hidden / 128;
  if (blocks == 0 || blocks > 0x7FFFFFFFu)
    return InvalidArgumentError(g.what + ": hidden " + std::to_string(g.hidden));
  return CallStatus(
      drv,
      drv.LaunchKernel(fn, static_cast<unsigned>(blocks), 1, 1, client::kHalfWeightsThreads, 1, 1,
                       client::kHalfWeightsSmemBytes, static_cast<CUstream>(stream), args, nullptr),
      "cuLaunchKernel " + std::string(client::kHalfWeightsKernelName) + " for " + g.what,
      StatusCode::kInvalidArgument);
#endif
}

}  // namespace exlr8::cudrv
