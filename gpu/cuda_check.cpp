#include "gpu/cuda_check.h"

#include <cstdio>
#include <string>

namespace exlr8 {

namespace {

StatusCode CodeFor(cudaError_t err) {
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorCudartUnloading:
    case cudaErrorSystemNotReady:
    case cudaErrorStubLibrary:
      return StatusCode::kUnavailable;
    case cudaErrorMemoryAllocation:
      return StatusCode::kResourceExhausted;
    default:
      return StatusCode::kInternal;
  }
}

std::string Describe(cudaError_t err, const char* expr, const char* file, int line) {
  std::string m = std::string(file) + ":" + std::to_string(line) + ": " + expr + " failed: ";
  m += cudaGetErrorName(err);
  m += " (";
  m += cudaGetErrorString(err);
  m += ")";
  return m;
}

}  // namespace

Status CudaErrorToStatus(cudaError_t err, const char* expr, const char* file, int line) {
  if (err == cudaSuccess) return Status::Ok();
  return Status(CodeFor(err), Describe(err, expr, file, line));
}

void LogCudaFailure(cudaError_t err, const char* expr, const char* file, int line) noexcept {
  try {
    std::fprintf(stderr, "exlr8d: %s\n", Describe(err, expr, file, line).c_str());
  } catch (...) {  // allocation failure while formatting: say less
    std::fprintf(stderr, "exlr8d: %s:%d: CUDA call failed: %s\n", file, line, cudaGetErrorName(err));
  }
}

}  // namespace exlr8
