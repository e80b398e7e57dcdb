// RAII device memory and pinned host memory.
//
// DeviceBuffer owns `size()` bytes of device memory from cudaMalloc on the
// device current at Allocate() (plain allocations only: never managed
// memory, which can hang the GPU when oversubscribed). PinnedHostBuffer owns
// page-locked host memory, the staging area that lets cudaMemcpyAsync run
// truly asynchronously at full link speed: from 2 MiB up, anonymous huge
// pages registered with cudaHostRegister (twice as fast to pin), else (or
// where that fails) cudaHostAlloc.
//
// Both are move-only; a moved-from buffer is empty (data() == nullptr,
// size() == 0). There is no copy constructor: a device copy is a queued
// operation, so it is spelt with an explicit stream (CopyOf, Copy*Async).
// Destructors free synchronously (cudaFree / cudaFreeHost wait for the device
// to finish with the memory) and never throw; failures are logged.
//
// Stream rules: *Async functions only enqueue; the caller keeps both sides of
// a copy alive and unmodified until the stream has passed it (Synchronize, or
// an event). Thread safety: distinct buffers may be used from distinct
// threads; one buffer is not synchronised.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "format/status.h"
#include "gpu/stream.h"

namespace exlr8 {

class DeviceBuffer {
 public:
  // `bytes` of uninitialised device memory (0 gives an empty buffer without
  // calling CUDA). Errors: ResourceExhausted when the device is out of memory,
  // Unavailable without a device, Internal otherwise.
  static Result<DeviceBuffer> Allocate(std::size_t bytes);
  // A new buffer holding a copy of `src`, enqueued on `stream`.
  static Result<DeviceBuffer> CopyOf(const DeviceBuffer& src, CudaStreamView stream);

  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() noexcept { return data_; }
  const void* data() const noexcept { return data_; }
  template <typename T>
  T* data_as() noexcept { return static_cast<T*>(data_); }
  template <typename T>
  const T* data_as() const noexcept { return static_cast<const T*>(data_); }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

  // Enqueues host -> device: `src` into bytes [offset, offset + src.size()).
  // `src` may be pageable (then CUDA stages it and the call may block) or
  // pinned. Errors: InvalidArgument when the range does not fit.
  Status CopyFromHostAsync(std::span<const std::byte> src, std::size_t offset, CudaStreamView stream);
  // Enqueues device -> host: bytes [offset, offset + dst.size()) into `dst`.
  Status CopyToHostAsync(std::size_t offset, std::span<std::byte> dst, CudaStreamView stream) const;
  // Enqueues memset of the whole buffer to `value`.
  Status MemsetAsync(int value, CudaStreamView stream);

 private:
  DeviceBuffer(void* p, std::size_t n) noexcept : data_(p), size_(n) {}
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

class PinnedHostBuffer {
 public:
  // `bytes` of page-locked host memory (portable across devices). 0 gives an
  // empty buffer. Errors: ResourceExhausted / Unavailable / Internal.
  static Result<PinnedHostBuffer> Allocate(std::size_t bytes);

  PinnedHostBuffer() = default;
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  ~PinnedHostBuffer();

  std::span<std::byte> bytes() noexcept { return {static_cast<std::byte*>(data_), size_}; }
  std::span<const std::byte> bytes() const noexcept { return {static_cast<const std::byte*>(data_), size_}; }
  std::size_t size() const noexcept { return size_; }

 private:
  PinnedHostBuffer(void* p, std::size_t n, std::size_t mapped, bool registered) noexcept
      : data_(p), size_(n), mapped_(mapped), registered_(registered) {}
  void* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_ = 0;   // bytes mapped (registered) or allocated
  bool registered_ = false;  // mmap + cudaHostRegister, else cudaHostAlloc
};

}  // namespace exlr8
