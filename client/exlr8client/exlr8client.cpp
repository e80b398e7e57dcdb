// libexlr8client's C API (client/include/exlr8/exlr8client.h) over the
// lessee of lease protocol v2 (client/lease/): each function catches what
// C++ may throw, turns a Status into an exlr8_status and the calling
// thread's message, and hands out pointers the lease owns.
#include "exlr8/exlr8client.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/exlr8client/c_api_errors.h"
#include "client/exlr8client/driver_device_lease.h"
#include "client/exlr8client/half_weights.h"
#include "client/lease/description_v2.h"
#include "client/lease/host_lease.h"
#include "client/lease/image_layout.h"
#include "client/lease/lease_v2_opening.h"
#include "format/status.h"
#include "format/trellis.h"

#define XXH_INLINE_ALL  // the hash compiled in: the library needs no libxxhash
#include <xxhash.h>

// What the lease owns: a host lease (mapped) or a device lease (imported
// through the CUDA driver loaded at run time), whichever the holder has.
struct exlr8_lease {
  std::string socket_path;
  bool device_kind = false;
  exlr8::HostLease host;                   // the host kind
  exlr8::cudrv::DriverDeviceLease device;  // the device kind
  bool open = false;
  std::string description_json;
  std::string proof_json;
};


namespace {

using exlr8::Status;
using exlr8::StatusCode;
using exlr8::capi::CodeOf;
using exlr8::capi::Fail;
using exlr8::capi::Guard;

exlr8_status Fail(const Status& s) { return Fail(CodeOf(s.code()), s.message()); }

// The open lease behind `lease`, or the error for a NULL or closed one.
exlr8_status Usable(const exlr8_lease* lease, const char* what) {
  if (lease == nullptr) return Fail(EXLR8_INVALID_ARGUMENT, std::string(what) + ": the lease is NULL");
  if (!lease->open)
    return Fail(EXLR8_FAILED_PRECONDITION,
                std::string(what) + ": the lease from " + lease->socket_path + " is closed");
  return EXLR8_OK;
}

// A caller's struct_size: at least the first version's size of T (whose
// fields are filled up to `struct_size`).
template <typename T>
exlr8_status CheckStructSize(const T* out, std::size_t first_version_size, const char* what) {
  if (out == nullptr) return Fail(EXLR8_INVALID_ARGUMENT, std::string(what) + ": the output is NULL");
  if (out->struct_size < first_version_size)
    return Fail(EXLR8_INVALID_ARGUMENT,
                std::string(what) + ": struct_size " + std::to_string(out->struct_size) + " is less than " +
                    std::to_string(first_version_size) + " (set it to sizeof the structure)");
  return EXLR8_OK;
}

// Copies the first min(struct_size, sizeof(T)) bytes of `full` to `out`,
// keeping the caller's struct_size.
template <typename T>
void CopyOut(const T& full, T* out) {
  const std::uint32_t size = out->struct_size;
  std::memcpy(static_cast<void*>(out), &full, std::min<std::size_t>(size, sizeof(T)));
  out->struct_size = size;
}

// The open lease's parts, whichever its kind.
const exlr8::ImageTables& Tables(const exlr8_lease* lease) {
  return lease->device_kind ? lease->device.tables() : lease->host.tables();
}
const exlr8::LeaseDescriptionV2& Description(const exlr8_lease* lease) {
  return lease->device_kind ? lease->device.description() : lease->host.description();
}
// The image's allocation and first byte: host or device addresses.
std::uintptr_t AllocationAddress(const exlr8_lease* lease) {
  return lease->device_kind ? static_cast<std::uintptr_t>(lease->device.allocation())
                            : reinterpret_cast<std::uintptr_t>(lease->host.allocation());
}
std::uintptr_t ImageAddress(const exlr8_lease* lease) {
  return lease->device_kind ? static_cast<std::uintptr_t>(lease->device.base())
                            : reinterpret_cast<std::uintptr_t>(lease->host.base());
}
const void* ImagePointer(const exlr8_lease* lease, std::uint64_t offset) {
  return reinterpret_cast<const void*>(ImageAddress(lease) + offset);
}
void CloseLease(exlr8_lease* lease) {
  lease->host.Close();    // unmaps, then closes the connection
  lease->device.Close();  // unmaps and releases, closes the connection, releases the context
}

exlr8_status Found(const exlr8_lease* lease, const exlr8::ImageTensor* t, std::uint64_t* index,
                   const std::string& what) {
  if (t == nullptr) return Fail(EXLR8_NOT_FOUND, "lease from " + lease->socket_path + ": no " + what);
  *index = static_cast<std::uint64_t>(t - Tables(lease).tensors.data());
  return EXLR8_OK;
}

}  // namespace

extern "C" {

void exlr8_open_options_init(exlr8_open_options* options) {
  if (options == nullptr) return;
  *options = exlr8_open_options{};
  options->struct_size = sizeof(exlr8_open_options);
  options->memory_kind = EXLR8_MEMORY_ANY;
  options->timeout_ms = 0;
}

exlr8_status exlr8_lease_open(const char* socket_path, const exlr8_open_options* options, exlr8_lease** out) {
  return Guard("exlr8_lease_open", [&]() -> exlr8_status {
    if (socket_path == nullptr || out == nullptr)
      return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_open: socket_path and out must not be NULL");
    exlr8_open_options o;
    exlr8_open_options_init(&o);
    if (options != nullptr) {
      if (options->struct_size < sizeof(std::uint32_t) * 3)
        return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_open: options.struct_size " +
                                                std::to_string(options->struct_size) +
                                                " (call exlr8_open_options_init first)");
      o.memory_kind = options->memory_kind;
      o.timeout_ms = options->timeout_ms;
    }
    if (o.memory_kind > EXLR8_MEMORY_HOST)
      return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_open: options.memory_kind " +
                                              std::to_string(o.memory_kind) + " is not a kind");
    const std::filesystem::path path(socket_path);
    const std::chrono::milliseconds timeout(o.timeout_ms == 0 ? 30000 : o.timeout_ms);

    exlr8::Result<exlr8::ReceivedLeaseV2> received = exlr8::ReceiveLeaseV2(path, timeout);
    if (!received.ok()) return Fail(received.status());
    const exlr8::LeaseDescriptionV2& d = received->description;
    const std::string from = "lease from " + path.string() + ": ";
    const bool device = d.memory_kind == exlr8::LeaseMemoryKind::kDevice;
    const std::uint32_t kind = device ? EXLR8_MEMORY_DEVICE : EXLR8_MEMORY_HOST;
    if (o.memory_kind != EXLR8_MEMORY_ANY && o.memory_kind != kind)
      return Fail(EXLR8_FAILED_PRECONDITION,
                  from + "the holder's image is in " + exlr8_memory_kind_name(kind) +
                      " memory, the caller asked for " + exlr8_memory_kind_name(o.memory_kind) + " memory");
    if (device) {
      exlr8::Result<exlr8::cudrv::DriverDeviceLease> dev =
          exlr8::cudrv::OpenDriverDeviceLease(std::move(*received), path);
      if (!dev.ok()) return Fail(dev.status());
      auto lease = std::make_unique<exlr8_lease>();
      lease->socket_path = path.string();
      lease->device_kind = true;
      lease->device = std::move(*dev);
      lease->open = true;
      lease->description_json = exlr8::WriteLeaseDescriptionV2(lease->device.description());
      lease->proof_json = exlr8::WriteLeaseProof(lease->device.description().proof);
      *out = lease.release();
      return EXLR8_OK;
    }
    exlr8::Result<exlr8::HostLease> host = exlr8::OpenHostLease(std::move(*received), path);
    if (!host.ok()) return Fail(host.status());
    auto lease = std::make_unique<exlr8_lease>();
    lease->socket_path = path.string();
    lease->host = std::move(*host);
    lease->open = true;
    lease->description_json = exlr8::WriteLeaseDescriptionV2(lease->host.description());
    lease->proof_json = exlr8::WriteLeaseProof(lease->host.proof());
    *out = lease.release();
    return EXLR8_OK;
  });
}

exlr8_status exlr8_lease_close(exlr8_lease* lease) {
  return Guard("exlr8_lease_close", [&]() -> exlr8_status {
    if (lease == nullptr) return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_close: the lease is NULL");
    if (!lease->open)
      return Fail(EXLR8_FAILED_PRECONDITION,
                  "exlr8_lease_close: the lease from " + lease->socket_path + " is already closed");
    CloseLease(lease);
    lease->open = false;
    return EXLR8_OK;
  });
}

void exlr8_lease_free(exlr8_lease* lease) {
  if (lease == nullptr) return;
  CloseLease(lease);
  delete lease;
}

int exlr8_lease_is_open(const exlr8_lease* lease) { return lease != nullptr && lease->open ? 1 : 0; }

exlr8_status exlr8_lease_get_info(const exlr8_lease* lease, exlr8_lease_info* info) {
  return Guard("exlr8_lease_get_info", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(lease, "exlr8_lease_get_info"); s != EXLR8_OK) return s;
    if (exlr8_status s = CheckStructSize(info, sizeof(exlr8_lease_info), "exlr8_lease_get_info");
        s != EXLR8_OK)
      return s;
    const exlr8::LeaseDescriptionV2& d = Description(lease);
    exlr8_lease_info v{};
    v.socket_path = lease->socket_path.c_str();
    v.repo = d.repo.c_str();
    v.commit = d.commit.c_str();
    v.manifest = d.manifest.c_str();
    v.tp = d.tp;
    v.rank = d.rank;
    v.memory_kind =
        d.memory_kind == exlr8::LeaseMemoryKind::kDevice ? EXLR8_MEMORY_DEVICE : EXLR8_MEMORY_HOST;
    v.gpu_uuid = d.device ? d.device->uuid.c_str() : "";
    v.gpu_pci_bus_id = d.device ? d.device->pci_bus_id.c_str() : "";
    v.gpu_ordinal_in_holder = d.device ? d.device->ordinal_in_holder : -1;
    v.cuda_device = lease->device_kind ? lease->device.device() : -1;
    v.allocation_count = static_cast<std::uint32_t>(d.allocations.size());
    for (std::size_t i = 0; i < d.allocations.size() && i < EXLR8_MAX_ALLOCATIONS; ++i)
      v.allocation_bytes[i] = d.allocations[i].bytes;
    v.image_allocation = d.image.allocation;
    v.image_header_offset = d.image.header_offset;
    v.image_bytes = d.image.bytes;
    v.offset_table_offset = d.image.offset_table;
    v.offset_table_bytes = d.image.offset_table_bytes;
    v.layers = d.image.layers;
    v.experts = d.image.experts;
    v.halves = d.image.halves;
    v.tensor_count = d.tables.tensors;
    v.check_count = d.tables.checks;
    v.tables_bytes = d.tables.bytes;
    v.release_deadline_s = d.release_deadline_s;
    v.allocation = reinterpret_cast<const void*>(AllocationAddress(lease));
    v.image = ImagePointer(lease, 0);
    CopyOut(v, info);
    return EXLR8_OK;
  });
}

exlr8_status exlr8_lease_description_json(const exlr8_lease* lease, const char** json, size_t* size) {
  if (exlr8_status s = Usable(lease, "exlr8_lease_description_json"); s != EXLR8_OK) return s;
  if (json == nullptr) return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_description_json: json is NULL");
  *json = lease->description_json.c_str();
  if (size != nullptr) *size = lease->description_json.size();
  return EXLR8_OK;
}

exlr8_status exlr8_lease_proof(const exlr8_lease* lease, exlr8_proof* proof) {
  return Guard("exlr8_lease_proof", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(lease, "exlr8_lease_proof"); s != EXLR8_OK) return s;
    if (exlr8_status s = CheckStructSize(proof, sizeof(exlr8_proof), "exlr8_lease_proof"); s != EXLR8_OK)
      return s;
    const exlr8::LeaseProof& p = Description(lease).proof;
    exlr8_proof v{};
    v.commit = p.commit.c_str();
    v.hashed_regions = p.hashed_regions;
    v.hashed_bytes = p.hashed_bytes;
    v.hashed_mismatches = p.hashed_mismatches;
    v.decoded_halves = p.decoded_halves;
    v.decoded_of = p.decoded_of;
    v.decoded_seed = p.decoded_seed;
    v.every_layer_width_projection = p.every_layer_width_projection ? 1 : 0;
    v.tiles_bit_exact = p.tiles_bit_exact ? 1 : 0;
    v.max_block_error = p.max_block_error;
    v.dense_decoded_tensors = p.dense_decoded_tensors;
    v.dense_decoded_mismatches = p.dense_decoded_mismatches;
    v.seconds_read = p.seconds_read;
    v.seconds_upload = p.seconds_upload;
    v.seconds_hash = p.seconds_hash;
    v.seconds_decode = p.seconds_decode;
    v.has_mismatch = p.mismatch ? 1 : 0;
    v.mismatch_tensor = p.mismatch ? p.mismatch->tensor : 0;
    v.mismatch_offset = p.mismatch ? p.mismatch->offset : 0;
    CopyOut(v, proof);
    return EXLR8_OK;
  });
}

exlr8_status exlr8_lease_proof_json(const exlr8_lease* lease, const char** json, size_t* size) {
  if (exlr8_status s = Usable(lease, "exlr8_lease_proof_json"); s != EXLR8_OK) return s;
  if (json == nullptr) return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_proof_json: json is NULL");
  *json = lease->proof_json.c_str();
  if (size != nullptr) *size = lease->proof_json.size();
  return EXLR8_OK;
}

exlr8_status exlr8_lease_tensor_count(const exlr8_lease* lease, uint64_t* count) {
  if (exlr8_status s = Usable(lease, "exlr8_lease_tensor_count"); s != EXLR8_OK) return s;
  if (count == nullptr) return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_tensor_count: count is NULL");
  *count = Tables(lease).tensors.size();
  return EXLR8_OK;
}

exlr8_status exlr8_lease_tensor(const exlr8_lease* lease, uint64_t index, exlr8_tensor* tensor) {
  return Guard("exlr8_lease_tensor", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(lease, "exlr8_lease_tensor"); s != EXLR8_OK) return s;
    if (exlr8_status s = CheckStructSize(tensor, sizeof(exlr8_tensor), "exlr8_lease_tensor"); s != EXLR8_OK)
      return s;
    const auto& tensors = Tables(lease).tensors;
    if (index >= tensors.size())
      return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_tensor: index " + std::to_string(index) +
                                              " is past the lease's " + std::to_string(tensors.size()) +
                                              " tensors");
    const exlr8::ImageTensor& t = tensors[index];
    exlr8_tensor v{};
    v.kind = static_cast<std::uint32_t>(t.kind);
    v.index = index;
    v.name = t.name.c_str();
    v.layer = t.layer;
    v.expert = t.expert;
    v.proj = t.proj;
    v.half = t.half;
    v.format = t.format;
    v.dtype = static_cast<std::uint32_t>(t.dtype);
    v.block_dtype = static_cast<std::uint32_t>(t.block_dtype);
    v.k = t.k;
    v.side = t.side;
    v.shape_rank = t.rank;
    for (int i = 0; i < 4; ++i) v.shape[i] = t.shape[i];
    v.out = t.out;
    v.inp = t.inp;
    v.offset = t.offset;
    v.length = t.length;
    v.xxh64 = t.xxh64;
    v.data = ImagePointer(lease, t.offset);
    CopyOut(v, tensor);
    return EXLR8_OK;
  });
}

exlr8_status exlr8_lease_find_by_name(const exlr8_lease* lease, const char* name, uint64_t* index) {
  return Guard("exlr8_lease_find_by_name", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(lease, "exlr8_lease_find_by_name"); s != EXLR8_OK) return s;
    if (name == nullptr || index == nullptr)
      return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_find_by_name: name and index must not be NULL");
    return Found(lease, Tables(lease).FindByName(name), index, "tensor named '" + std::string(name) + "'");
  });
}

exlr8_status exlr8_lease_find_half(const exlr8_lease* lease, uint32_t layer, uint32_t expert, uint32_t proj,
                                   uint32_t half, uint64_t* index) {
  return Guard("exlr8_lease_find_half", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(lease, "exlr8_lease_find_half"); s != EXLR8_OK) return s;
    if (index == nullptr) return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_find_half: index is NULL");
    if (proj > EXLR8_PROJ_DOWN)
      return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_find_half: proj " + std::to_string(proj) +
                                              " is not EXLR8_PROJ_GATE, _UP or _DOWN");
    const std::string what =
        "half (layer " + std::to_string(layer) + ", " +
        (expert == EXLR8_SHARED_EXPERT ? std::string("shared expert") : "expert " + std::to_string(expert)) +
        ", " + exlr8_proj_name(proj) + ", half " + std::to_string(half) + ")";
    // Values past int's range are outside any image's dimensions.
    if (layer > exlr8::kImageMaxLayers || (expert > exlr8::kImageMaxExperts && expert != EXLR8_SHARED_EXPERT))
      return Found(lease, nullptr, index, what);
    const int e = expert == EXLR8_SHARED_EXPERT ? exlr8::kSharedExpert : static_cast<int>(expert);
    return Found(lease,
                 Tables(lease).FindHalf(static_cast<int>(layer), e, static_cast<exlr8::Proj>(proj), half),
                 index, what);
  });
}

exlr8_status exlr8_lease_find_signs(const exlr8_lease* lease, uint32_t layer, int out, uint64_t* index) {
  return Guard("exlr8_lease_find_signs", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(lease, "exlr8_lease_find_signs"); s != EXLR8_OK) return s;
    if (index == nullptr) return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_find_signs: index is NULL");
    const std::string what =
        std::string(out != 0 ? "signs.out" : "signs.in") + " of layer " + std::to_string(layer);
    if (layer > exlr8::kImageMaxLayers) return Found(lease, nullptr, index, what);
    return Found(lease, Tables(lease).FindSigns(static_cast<int>(layer), out != 0), index, what);
  });
}

exlr8_status exlr8_lease_offset_table(const exlr8_lease* lease, const uint64_t** host_table,
                                      const void** image_table, uint64_t* entries) {
  if (exlr8_status s = Usable(lease, "exlr8_lease_offset_table"); s != EXLR8_OK) return s;
  const std::vector<std::uint64_t>& table = Tables(lease).offset_table;
  if (host_table != nullptr) *host_table = table.data();
  if (image_table != nullptr) *image_table = ImagePointer(lease, Description(lease).image.offset_table);
  if (entries != nullptr) *entries = table.size();
  return EXLR8_OK;
}

exlr8_status exlr8_lease_release_fd(const exlr8_lease* lease, int* fd) {
  if (exlr8_status s = Usable(lease, "exlr8_lease_release_fd"); s != EXLR8_OK) return s;
  if (fd == nullptr) return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_release_fd: fd is NULL");
  *fd = lease->device_kind ? lease->device.release_fd() : lease->host.release_fd();
  return EXLR8_OK;
}

exlr8_status exlr8_lease_poll_release(exlr8_lease* lease, uint32_t timeout_ms, int* released,
                                      uint32_t* deadline_s, int* holder_gone) {
  return Guard("exlr8_lease_poll_release", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(lease, "exlr8_lease_poll_release"); s != EXLR8_OK) return s;
    if (released == nullptr)
      return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_poll_release: released is NULL");
    const std::chrono::milliseconds timeout(timeout_ms);
    auto r = lease->device_kind
                 ? (timeout_ms == 0 ? lease->device.PollRelease() : lease->device.WaitRelease(timeout))
                 : (timeout_ms == 0 ? lease->host.PollRelease() : lease->host.WaitRelease(timeout));
    if (!r.ok()) return Fail(r.status());
    *released = r->has_value() ? 1 : 0;
    if (deadline_s != nullptr) *deadline_s = r->has_value() ? (*r)->deadline_s : 0;
    if (holder_gone != nullptr) *holder_gone = r->has_value() && (*r)->holder_gone ? 1 : 0;
    return EXLR8_OK;
  });
}

exlr8_status exlr8_lease_read(const exlr8_lease* lease, uint64_t offset, void* dst, size_t size) {
  return Guard("exlr8_lease_read", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(lease, "exlr8_lease_read"); s != EXLR8_OK) return s;
    if (dst == nullptr && size != 0) return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_read: dst is NULL");
    const std::uint64_t image_bytes = Description(lease).image.bytes;
    if (offset > image_bytes || size > image_bytes - offset)
      return Fail(EXLR8_INVALID_ARGUMENT, "exlr8_lease_read: bytes [" + std::to_string(offset) + ", " +
                                              std::to_string(offset) + " + " + std::to_string(size) +
                                              ") are not inside the image of " + std::to_string(image_bytes) +
                                              " bytes");
    if (size == 0) return EXLR8_OK;
    if (!lease->device_kind) {
      std::memcpy(dst, lease->host.base() + offset, size);
      return EXLR8_OK;
    }
    if (exlr8::Status s = lease->device.Read(offset, dst, size); !s.ok())
      return Fail(s.WithContext("exlr8_lease_read: lease from " + lease->socket_path));
    return EXLR8_OK;
  });
}

exlr8_status exlr8_lease_half_weights(exlr8_lease* lease, uint64_t index, float* out, uint64_t out_elems,
                                      void* stream) {
  return Guard("exlr8_lease_half_weights", [&]() -> exlr8_status {
    if (exlr8_status s = Usable(lease, "exlr8_lease_half_weights"); s != EXLR8_OK) return s;
    const exlr8::ImageTables& tables = Tables(lease);
    const std::string ctx = "exlr8_lease_half_weights: lease from " + lease->socket_path;
    const std::string what = ctx + ": ";
    if (index >= tables.tensors.size())
      return Fail(EXLR8_INVALID_ARGUMENT, what + "index " + std::to_string(index) + " is past the " +
                                              std::to_string(tables.tensors.size()) + " tensors");
    const exlr8::ImageTensor& t = tables.tensors[index];
    if (t.kind != exlr8::ImageRegionKind::kHalfRecord)
      return Fail(EXLR8_INVALID_ARGUMENT, what + "tensors[" + std::to_string(index) + "] (" + t.What() +
                                              ") is a " + std::string(exlr8::ImageRegionKindName(t.kind)) +
                                              ", not a half record");
    if (out == nullptr) return Fail(EXLR8_INVALID_ARGUMENT, what + "out is NULL");
    // The element count first (from the entry alone): a caller's wrong size
    // is its own error, whatever else the record holds.
    if (t.k >= exlr8::kMinTrellisK && t.k <= exlr8::kMaxTrellisK) {
      const std::uint64_t want = 128 * (t.shape[0] / (16 * static_cast<std::uint64_t>(t.k)));
      if (out_elems != want)
        return Fail(EXLR8_INVALID_ARGUMENT,
                    what + t.What() + ": out_elems " + std::to_string(out_elems) +
                        ", the half's weights are 128 x hidden = " + std::to_string(want));
    }
    const exlr8::ImageTensor* signs =
        tables.FindSigns(t.layer, t.proj == static_cast<std::uint8_t>(exlr8::Proj::kDown));
    exlr8::Result<exlr8::client::HalfRecordGeometry> g = exlr8::client::HalfWeightsGeometry(t, signs);
    if (!g.ok()) return Fail(g.status().WithContext(ctx));
    if (lease->device_kind) {
      if (Status s = lease->device.HalfWeights(*g, t.offset, signs->offset, out, stream); !s.ok())
        return Fail(s.WithContext(ctx));
      return EXLR8_OK;
    }
    const std::byte* base = lease->host.base();
    if (Status s =
            exlr8::client::HostHalfWeights(*g, base + t.offset, base + signs->offset, {out, out_elems});
        !s.ok())
      return Fail(s.WithContext(ctx));
    return EXLR8_OK;
  });
}

uint64_t exlr8_xxh64(const void* data, size_t size) { return XXH64(data, size, 0); }

}  // extern "C"
