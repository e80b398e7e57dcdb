// DriverDeviceLease::HalfWeights: the library's own kernels
// (kernels/half_weights.cu, compiled to a fatbin and embedded at build time
// where EXLR8CLIENT_HAVE_KERNELS is defined) launched through the CUDA
// driver loaded at run time.
#include "client/exlr8client/driver_device_lease.h"

namespace exlr8::cudrv {

Status DriverDeviceLease::HalfWeights(const client::HalfRecordGeometry& g, std::uint64_t record,
                                      std::uint64_t signs, float* out, void* stream) const {
  (void)g;
  (void)record;
  (void)signs;
  (void)out;
  (void)stream;
  return UnavailableError(
      "device lease: not built with CUDA kernels (libexlr8client was built without EXLR8_GPU)");
}

}  // namespace exlr8::cudrv
