// libexlr8client for C++: a header-only RAII wrapper over the C API
// (exlr8client.h, whose comments are the contract; docs/CLIENT.md).
//
//   exlr8client::Lease lease = exlr8client::Lease::Open("/run/exlr8d/stage-7.sock");
//   if (auto t = lease.FindHalf(3, 7, EXLR8_PROJ_UP, 0)) use(t->data, t->length);
//   // ~Lease lets go: unmaps, then closes the connection
//
// Errors are exceptions: every failing call throws exlr8client::Error
// (a std::runtime_error carrying the exlr8_status and the library's
// message), except lookups, which answer std::nullopt for EXLR8_NOT_FOUND.
// Needs C++17; links against libexlr8client (the shared or the static
// library) like the C API. The wrapper adds no state: Lease is one pointer.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "exlr8/exlr8client.h"

namespace exlr8client {

// A failed call: its status and the library's message.
class Error : public std::runtime_error {
 public:
  Error(exlr8_status status, const std::string& message)
      : std::runtime_error(std::string(exlr8_status_name(status)) + ": " + message), status_(status) {}
  exlr8_status status() const noexcept { return status_; }

 private:
  exlr8_status status_;
};

// Throws Error for anything but EXLR8_OK, with the calling thread's message.
inline void Check(exlr8_status s) {
  if (s != EXLR8_OK) throw Error(s, exlr8_last_error_message());
}

enum class MemoryKind : std::uint32_t {
  kAny = EXLR8_MEMORY_ANY,
  kDevice = EXLR8_MEMORY_DEVICE,
  kHost = EXLR8_MEMORY_HOST,
};

struct OpenOptions {
  MemoryKind memory_kind = MemoryKind::kAny;  // a holder of another kind: Error FAILED_PRECONDITION
  std::chrono::milliseconds timeout{30000};   // the wait for the holder's description
};

// The C structures, filled (struct_size set).
using Tensor = exlr8_tensor;
using Info = exlr8_lease_info;
using Proof = exlr8_proof;

// The offset table (exlr8_lease_offset_table): a host copy and the table
// inside the image (device memory for the device kind).
struct OffsetTable {
  const std::uint64_t* host = nullptr;
  const void* image = nullptr;
  std::uint64_t entries = 0;
  std::uint64_t operator[](std::uint64_t i) const { return host[i]; }
};

// The holder's release (exlr8_lease_poll_release).
struct Release {
  std::uint32_t deadline_s = 0;  // let go before this many seconds have passed
  bool holder_gone = false;      // the holder went away instead
};

// An open lease. Move-only; the destructor lets go and frees the handle
// (exlr8_lease_free). A moved-from Lease holds nothing. Const members may
// be called from several threads at once; Close and PollRelease need the
// Lease alone.
class Lease {
 public:
  // exlr8_lease_open. Throws Error (NOT_FOUND: no socket there, ...).
  static Lease Open(const std::string& socket_path, const OpenOptions& options = {}) {
    exlr8_open_options o;
    exlr8_open_options_init(&o);
    o.memory_kind = static_cast<std::uint32_t>(options.memory_kind);
    const auto ms = options.timeout.count();
    o.timeout_ms = ms <= 0 ? 1u : ms > 0xFFFFFFFFll ? 0xFFFFFFFFu : static_cast<std::uint32_t>(ms);
    exlr8_lease* handle = nullptr;
    Check(exlr8_lease_open(socket_path.c_str(), &o, &handle));
    return Lease(handle);
  }

  Lease() noexcept = default;
  // Takes ownership of a handle exlr8_lease_open made.
  explicit Lease(exlr8_lease* handle) noexcept : handle_(handle) {}
  Lease(Lease&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Lease& operator=(Lease&& other) noexcept {
    if (this != &other) {
      exlr8_lease_free(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() { exlr8_lease_free(handle_); }

  // The C handle, still owned by this Lease.
  exlr8_lease* get() const noexcept { return handle_; }
  // Gives the handle up (the caller frees it with exlr8_lease_free).
  exlr8_lease* release() noexcept { return std::exchange(handle_, nullptr); }
  bool is_open() const noexcept { return exlr8_lease_is_open(handle_) != 0; }
  explicit operator bool() const noexcept { return is_open(); }

  // Lets go now (exlr8_lease_close): the image's pointers are invalid
  // afterwards. Throws Error FAILED_PRECONDITION when already closed,
  // INVALID_ARGUMENT for an empty Lease.
  void Close() { Check(exlr8_lease_close(handle_)); }

  Info info() const {
    Info i{};
    i.struct_size = sizeof i;
    Check(exlr8_lease_get_info(handle_, &i));
    return i;
  }
  std::string_view description_json() const {
    const char* s = nullptr;
    std::size_t n = 0;
    Check(exlr8_lease_description_json(handle_, &s, &n));
    return {s, n};
  }
  Proof proof() const {
    Proof p{};
    p.struct_size = sizeof p;
    Check(exlr8_lease_proof(handle_, &p));
    return p;
  }
  std::string_view proof_json() const {
    const char* s = nullptr;
    std::size_t n = 0;
    Check(exlr8_lease_proof_json(handle_, &s, &n));
    return {s, n};
  }

  std::uint64_t tensor_count() const {
    std::uint64_t n = 0;
    Check(exlr8_lease_tensor_count(handle_, &n));
    return n;
  }
  // Tensor entry `index`; throws Error INVALID_ARGUMENT past the count.
  Tensor tensor(std::uint64_t index) const {
    Tensor t{};
    t.struct_size = sizeof t;
    Check(exlr8_lease_tensor(handle_, index, &t));
    return t;
  }
  // Lookups: std::nullopt when the image has no such tensor.
  std::optional<Tensor> Find(const std::string& name) const {
    std::uint64_t i = 0;
    const exlr8_status s = exlr8_lease_find_by_name(handle_, name.c_str(), &i);
    return Found(s, i);
  }
  // `expert`: an expert or EXLR8_SHARED_EXPERT; `proj`: EXLR8_PROJ_*.
  std::optional<Tensor> FindHalf(std::uint32_t layer, std::uint32_t expert, std::uint32_t proj,
                                 std::uint32_t half) const {
    std::uint64_t i = 0;
    const exlr8_status s = exlr8_lease_find_half(handle_, layer, expert, proj, half, &i);
    return Found(s, i);
  }
  std::optional<Tensor> FindSigns(std::uint32_t layer, bool out) const {
    std::uint64_t i = 0;
    const exlr8_status s = exlr8_lease_find_signs(handle_, layer, out ? 1 : 0, &i);
    return Found(s, i);
  }

  OffsetTable offset_table() const {
    OffsetTable t;
    Check(exlr8_lease_offset_table(handle_, &t.host, &t.image, &t.entries));
    return t;
  }

  // exlr8_lease_read: `size` bytes of the image from `offset` into host
  // memory (device kind: copied from the GPU). Throws Error.
  void Read(std::uint64_t offset, void* dst, std::size_t size) const {
    Check(exlr8_lease_read(handle_, offset, dst, size));
  }

  int release_fd() const {
    int fd = -1;
    Check(exlr8_lease_release_fd(handle_, &fd));
    return fd;
  }
  // The holder's release, waiting up to `timeout`; std::nullopt while none
  // came.
  std::optional<Release> PollRelease(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
    int released = 0, gone = 0;
    std::uint32_t deadline = 0;
    const auto ms = timeout.count();
    const std::uint32_t t = ms <= 0 ? 0u : ms > 0xFFFFFFFFll ? 0xFFFFFFFFu : static_cast<std::uint32_t>(ms);
    Check(exlr8_lease_poll_release(handle_, t, &released, &deadline, &gone));
    if (released == 0) return std::nullopt;
    return Release{deadline, gone != 0};
  }

 private:
  // `index` as the lookup set it (called after the lookup: argument
  // evaluation order is unspecified).
  std::optional<Tensor> Found(exlr8_status s, std::uint64_t index) const {
    if (s == EXLR8_NOT_FOUND) return std::nullopt;
    Check(s);
    return tensor(index);
  }

  exlr8_lease* handle_ = nullptr;
};

// The library's version ("0.1.0") and the header's.
inline std::string_view LibraryVersion() { return exlr8_client_version(); }
inline constexpr int kHeaderVersion = EXLR8_CLIENT_VERSION;

}  // namespace exlr8client
