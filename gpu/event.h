// Owning CUDA event: orders work across streams and the host, and times GPU
// work (ElapsedSeconds between two recorded timing events).
//
// Move-only; the destructor destroys the event (non-throwing, logged).
// Thread safety: as CUDA events; one object is not synchronised.
#pragma once

#include <cuda_runtime_api.h>

#include "format/status.h"
#include "gpu/stream.h"

namespace exlr8 {

class CudaEvent {
 public:
  // `timing` false makes a lighter event that cannot be timed (ordering only).
  // Errors: Unavailable without a device, Internal otherwise.
  static Result<CudaEvent> Create(bool timing);

  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent();

  // Enqueues the event on `stream`.
  Status Record(CudaStreamView stream);
  // Blocks until the work before the last Record() is done.
  Status Synchronize() const;
  // Seconds between two completed timing events (start recorded first).
  // Errors: Internal if either was not timing-enabled or has not completed.
  static Result<double> ElapsedSeconds(const CudaEvent& start, const CudaEvent& end);

  cudaEvent_t value() const noexcept { return event_; }

 private:
  explicit CudaEvent(cudaEvent_t e) noexcept : event_(e) {}
  cudaEvent_t event_ = nullptr;  // nullptr only after a move
};

}  // namespace exlr8
