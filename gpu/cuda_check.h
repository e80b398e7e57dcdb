// Checked CUDA runtime calls: every cudaError_t becomes a Status that names
// the call, file:line and the CUDA error name, so a failure on the device
// machine reads like any other exlr8d error.
//
//   EXLR8_CUDA_TRY(cudaMemcpyAsync(...));      // in a function returning Status
//                                              // or Result<T>: returns on error
//   EXLR8_ASSERT_CUDA_SUCCESS(cudaFree(p));    // destructors: never returns,
//                                              // never throws; logs to stderr
//
// Code mapping (CudaErrorToStatus):
//   cudaErrorNoDevice, cudaErrorInsufficientDriver, cudaErrorDevicesUnavailable,
//   cudaErrorCudartUnloading, cudaErrorSystemNotReady, cudaErrorStubLibrary
//       -> Unavailable   (no usable GPU here: tests skip, callers fall back)
//   cudaErrorMemoryAllocation        -> ResourceExhausted (device or pinned OOM)
//   cudaErrorInvalidValue and other programming errors, sticky kernel faults
//                                    -> Internal (a bug in exlr8d)
//
// Thread safety: the functions are stateless; the macros may be used from any
// thread (the CUDA runtime is thread safe).
#pragma once

#include <cuda_runtime_api.h>

#include "format/status.h"

namespace exlr8 {

// The Status for `err` (OK for cudaSuccess). `expr` is the call's text, shown
// in the message with file:line, e.g.
// "gpu/upload.cpp:88: cudaMemcpyAsync(...) failed: cudaErrorInvalidValue (invalid argument)".
Status CudaErrorToStatus(cudaError_t err, const char* expr, const char* file, int line);

// Non-throwing check for destructors and other paths that cannot return a
// Status: logs the failure (call, file:line, error name) to stderr and goes on.
void LogCudaFailure(cudaError_t err, const char* expr, const char* file, int line) noexcept;

}  // namespace exlr8

// Evaluates `call` (a cudaError_t expression) once; returns a non-OK Status
// from the enclosing function on failure.
#define EXLR8_CUDA_TRY(call)                                                          \
  do {                                                                                \
    const cudaError_t exlr8_cuda_err_ = (call);                                       \
    if (exlr8_cuda_err_ != cudaSuccess)                                               \
      return ::exlr8::CudaErrorToStatus(exlr8_cuda_err_, #call, __FILE__, __LINE__);  \
  } while (0)

// Evaluates `call` once; on failure logs it (never throws, never aborts).
#define EXLR8_ASSERT_CUDA_SUCCESS(call)                                               \
  do {                                                                                \
    const cudaError_t exlr8_cuda_err_ = (call);                                       \
    if (exlr8_cuda_err_ != cudaSuccess)                                               \
      ::exlr8::LogCudaFailure(exlr8_cuda_err_, #call, __FILE__, __LINE__);            \
  } while (0)
