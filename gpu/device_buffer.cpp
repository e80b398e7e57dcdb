#include "gpu/device_buffer.h"

#include <string>
#include <utility>

#include "gpu/cuda_check.h"

namespace exlr8 {

namespace {

Status CheckRange(std::size_t offset, std::size_t n, std::size_t size, const char* what) {
  if (offset > size || n > size - offset)
    return InvalidArgumentError(std::string(what) + ": range [" + std::to_string(offset) + ", " + std::to_string(offset) +
                                " + " + std::to_string(n) + ") outside the " + std::to_string(size) +
                                "-byte device buffer");
  return Status::Ok();
}

}  // namespace

// ---- DeviceBuffer ----

Result<DeviceBuffer> DeviceBuffer::Allocate(std::size_t bytes) {
  if (bytes == 0) return DeviceBuffer();
  void* p = nullptr;
  EXLR8_CUDA_TRY(cudaMalloc(&p, bytes));
  return DeviceBuffer(p, bytes);
}

Result<DeviceBuffer> DeviceBuffer::CopyOf(const DeviceBuffer& src, CudaStreamView stream) {
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer dst, Allocate(src.size()));
  if (src.size() != 0)
    EXLR8_CUDA_TRY(cudaMemcpyAsync(dst.data_, src.data_, src.size_, cudaMemcpyDeviceToDevice, stream.value()));
  return dst;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) EXLR8_ASSERT_CUDA_SUCCESS(cudaFree(data_));
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) EXLR8_ASSERT_CUDA_SUCCESS(cudaFree(data_));
}

Status DeviceBuffer::CopyFromHostAsync(std::span<const std::byte> src, std::size_t offset, CudaStreamView stream) {
  EXLR8_RETURN_IF_ERROR(CheckRange(offset, src.size(), size_, "DeviceBuffer::CopyFromHostAsync"));
  if (src.empty()) return Status::Ok();
  EXLR8_CUDA_TRY(cudaMemcpyAsync(static_cast<std::byte*>(data_) + offset, src.data(), src.size(),
                                 cudaMemcpyHostToDevice, stream.value()));
  return Status::Ok();
}

Status DeviceBuffer::CopyToHostAsync(std::size_t offset, std::span<std::byte> dst, CudaStreamView stream) const {
  EXLR8_RETURN_IF_ERROR(CheckRange(offset, dst.size(), size_, "DeviceBuffer::CopyToHostAsync"));
  if (dst.empty()) return Status::Ok();
  EXLR8_CUDA_TRY(cudaMemcpyAsync(dst.data(), static_cast<const std::byte*>(data_) + offset, dst.size(),
                                 cudaMemcpyDeviceToHost, stream.value()));
  return Status::Ok();
}

Status DeviceBuffer::MemsetAsync(int value, CudaStreamView stream) {
  if (size_ == 0) return Status::Ok();
  EXLR8_CUDA_TRY(cudaMemsetAsync(data_, value, size_, stream.value()));
  return Status::Ok();
}

// ---- PinnedHostBuffer ----

Result<PinnedHostBuffer> PinnedHostBuffer::Allocate(std::size_t bytes) {
  if (bytes == 0) return PinnedHostBuffer();
  void* p = nullptr;
  EXLR8_CUDA_TRY(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  return PinnedHostBuffer(p, bytes);
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) EXLR8_ASSERT_CUDA_SUCCESS(cudaFreeHost(data_));
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

PinnedHostBuffer::~PinnedHostBuffer() {
  if (data_ != nullptr) EXLR8_ASSERT_CUDA_SUCCESS(cudaFreeHost(data_));
}

}  // namespace exlr8
