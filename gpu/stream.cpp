#include "gpu/stream.h"

#include <utility>

#include "gpu/cuda_check.h"

namespace exlr8 {

Status CudaStreamView::Synchronize() const {
  EXLR8_CUDA_TRY(cudaStreamSynchronize(stream_));
  return Status::Ok();
}

Result<CudaStream> CudaStream::Create() {
  cudaStream_t s = nullptr;
  EXLR8_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return CudaStream(s);
}

CudaStream::CudaStream(CudaStream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) EXLR8_ASSERT_CUDA_SUCCESS(cudaStreamDestroy(stream_));
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) EXLR8_ASSERT_CUDA_SUCCESS(cudaStreamDestroy(stream_));
}

}  // namespace exlr8
