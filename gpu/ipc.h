// CUDA IPC: device memory of one process opened by another on the same
// machine (cudaIpcGetMemHandle / cudaIpcOpenMemHandle). The handle is 64
// opaque bytes, carried as 128 hex digits in the lease description
// (client/lease/description.h). The memory stays valid while the exporting
// process keeps it allocated: using a mapping after the exporter freed it
// (or died) is undefined, so the exporter holds it until told to stop.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "format/status.h"

namespace exlr8 {

// The handle of the cudaMalloc allocation starting at `device_ptr`, as hex.
// InvalidArgument for a pointer that is not the start of such an allocation.
Result<std::string> ExportIpcHandle(const void* device_ptr);

// Another process's allocation, mapped into this one on the current device.
class IpcMapping {
 public:
  // InvalidArgument for a malformed handle; the runtime's error when it
  // cannot be opened (the exporter is gone, another device, MIG).
  static Result<IpcMapping> Open(std::string_view hex_handle);
  IpcMapping() = default;
  IpcMapping(IpcMapping&& other) noexcept;
  IpcMapping& operator=(IpcMapping&& other) noexcept;
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;
  ~IpcMapping();

  const void* data() const { return data_; }

 private:
  explicit IpcMapping(void* data) : data_(data) {}
  void* data_ = nullptr;
};

}  // namespace exlr8
