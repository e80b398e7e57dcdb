#include "client/lease/host_lease.h"

#include <sys/mman.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

namespace exlr8 {

namespace {

// A read-only shared mapping, unmapped unless released.
struct ImageMapping {
  void* addr = MAP_FAILED;
  std::size_t bytes = 0;
  ImageMapping() = default;
  ImageMapping(const ImageMapping&) = delete;
  ImageMapping& operator=(const ImageMapping&) = delete;
  ~ImageMapping() {
    if (addr != MAP_FAILED) ::munmap(addr, bytes);
  }
  const std::byte* data() const { return static_cast<const std::byte*>(addr); }
  void* Release() { return std::exchange(addr, MAP_FAILED); }
};

}  // namespace

HostLease::HostLease(HostLease&& other) noexcept
    : connection_(std::move(other.connection_)),
      allocation_(std::exchange(other.allocation_, nullptr)),
      allocation_bytes_(std::exchange(other.allocation_bytes_, 0)),
      description_(std::move(other.description_)),
      header_(std::move(other.header_)),
      tables_(std::move(other.tables_)) {}

HostLease& HostLease::operator=(HostLease&& other) noexcept {
  if (this != &other) {
    Close();
    connection_ = std::move(other.connection_);
    allocation_ = std::exchange(other.allocation_, nullptr);
    allocation_bytes_ = std::exchange(other.allocation_bytes_, 0);
    description_ = std::move(other.description_);
    header_ = std::move(other.header_);
    tables_ = std::move(other.tables_);
  }
  return *this;
}

void HostLease::Close() {
  // Unmapped first: once the connection closes the holder may free it.
  if (allocation_ != nullptr) ::munmap(const_cast<std::byte*>(allocation_), allocation_bytes_);
  allocation_ = nullptr;
  allocation_bytes_ = 0;
  connection_.Close();
}

Result<HostLease> OpenHostLease(const std::filesystem::path& path, std::chrono::milliseconds timeout) {
  EXLR8_ASSIGN_OR_RETURN(ReceivedLeaseV2 received, ReceiveLeaseV2(path, timeout));
  return OpenHostLease(std::move(received), path);
}

Result<HostLease> OpenHostLease(ReceivedLeaseV2 received, const std::filesystem::path& path) {
  const LeaseDescriptionV2& d = received.description;
  if (d.memory_kind != LeaseMemoryKind::kHost)
    return UnimplementedError("lease description from " + path.string() +
                              ": memory kind device: device memory needs libexlr8client's CUDA part");
  const std::string from = "lease from " + path.string() + ": ";

  // Each descriptor: a sealed regular file of the size named.
  const std::vector<int>& fds = received.fds.fds;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    const bool tables = i + 1 == fds.size();
    const std::uint64_t bytes = tables ? d.tables.bytes : d.allocations[i].bytes;
    const std::string what =
        "file descriptor " + std::to_string(i) + " (" +
        (tables ? std::string("tables.bytes") : "memory.allocations[" + std::to_string(i) + "].bytes") + " " +
        std::to_string(bytes) + ")";
    EXLR8_RETURN_IF_ERROR(CheckLeaseV2Memfd(fds[i], bytes, what, from));
  }

  HostLease lease;
  EXLR8_ASSIGN_OR_RETURN(lease.tables_, ReadLeaseV2Tables(received.tables_fd(), d, from));
  ImageMapping image;
  image.bytes = d.allocations[d.image.allocation].bytes;
  image.addr =
      ::mmap(nullptr, image.bytes, PROT_READ, MAP_SHARED, received.allocation_fd(d.image.allocation), 0);
  if (image.addr == MAP_FAILED)
    return LeaseSocketError(errno, from + "map allocation " + std::to_string(d.image.allocation) + " (" +
                                       std::to_string(image.bytes) + " bytes)");
  const std::byte* base = image.data() + d.image.header_offset;
  EXLR8_ASSIGN_OR_RETURN(lease.header_,
                         CheckLeaseV2Image(d, lease.tables_, {base, d.image.bytes},
                                           {base + d.image.offset_table, d.image.offset_table_bytes}, from));
  lease.allocation_bytes_ = image.bytes;
  lease.allocation_ = static_cast<const std::byte*>(image.Release());
  lease.description_ = std::move(received.description);
  lease.connection_ = std::move(received.connection);
  return lease;
}

}  // namespace exlr8
