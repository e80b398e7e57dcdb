#include "gpu/event.h"

#include <utility>

#include "gpu/cuda_check.h"

namespace exlr8 {

Result<CudaEvent> CudaEvent::Create(bool timing) {
  cudaEvent_t e = nullptr;
  EXLR8_CUDA_TRY(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return CudaEvent(e);
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) EXLR8_ASSERT_CUDA_SUCCESS(cudaEventDestroy(event_));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) EXLR8_ASSERT_CUDA_SUCCESS(cudaEventDestroy(event_));
}

Status CudaEvent::Record(CudaStreamView stream) {
  EXLR8_CUDA_TRY(cudaEventRecord(event_, stream.value()));
  return Status::Ok();
}

Status CudaEvent::Synchronize() const {
  EXLR8_CUDA_TRY(cudaEventSynchronize(event_));
  return Status::Ok();
}

Result<double> CudaEvent::ElapsedSeconds(const CudaEvent& start, const CudaEvent& end) {
  float ms = 0;
  EXLR8_CUDA_TRY(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return static_cast<double>(ms) / 1e3;
}

}  // namespace exlr8
