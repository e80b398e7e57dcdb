#include "gpu/ipc.h"

#include <cuda_runtime.h>

#include <cstring>
#include <utility>

#include "gpu/cuda_check.h"

namespace exlr8 {

namespace {

constexpr char kHex[] = "0123456789abcdef";

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

Result<std::string> ExportIpcHandle(const void* device_ptr) {
  cudaIpcMemHandle_t handle{};
  EXLR8_CUDA_TRY(cudaIpcGetMemHandle(&handle, const_cast<void*>(device_ptr)));
  std::string hex;
  const auto* bytes = reinterpret_cast<const unsigned char*>(&handle);
  for (std::size_t i = 0; i < sizeof handle; ++i) {
    hex += kHex[bytes[i] >> 4];
    hex += kHex[bytes[i] & 15];
  }
  return hex;
}

Result<IpcMapping> IpcMapping::Open(std::string_view hex) {
  cudaIpcMemHandle_t handle{};
  if (hex.size() != 2 * sizeof handle)
    return InvalidArgumentError("an IPC handle is " + std::to_string(2 * sizeof handle) + " hex digits, got " +
                                std::to_string(hex.size()));
  auto* bytes = reinterpret_cast<unsigned char*>(&handle);
  for (std::size_t i = 0; i < sizeof handle; ++i) {
    const int hi = HexValue(hex[2 * i]), lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return InvalidArgumentError("the IPC handle is not lowercase hex");
    bytes[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  void* p = nullptr;
  EXLR8_CUDA_TRY(cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess));
  return IpcMapping(p);
}

IpcMapping::IpcMapping(IpcMapping&& other) noexcept : data_(std::exchange(other.data_, nullptr)) {}

IpcMapping& IpcMapping::operator=(IpcMapping&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) EXLR8_ASSERT_CUDA_SUCCESS(cudaIpcCloseMemHandle(data_));
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

IpcMapping::~IpcMapping() {
  if (data_ != nullptr) EXLR8_ASSERT_CUDA_SUCCESS(cudaIpcCloseMemHandle(data_));
}

}  // namespace exlr8
