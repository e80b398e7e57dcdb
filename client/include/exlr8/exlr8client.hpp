// libexlr8client for C++: a header-only RAII wrapper over the C API
// (exlr8client.h, whose comments are the contract; docs/CLIENT.md).
//
//   exlr8client::Lease lease = exlr8client::Lease::Open("/run/exlr8d/stage-7.sock");
//   if (auto t = lease.FindHalf(3, 7, EXLR8_PROJ_UP, 0)) use(t->data, t->length);
//   // ~Lease lets go: unmaps, then closes the connection
//
//   exlr8client::Api api = exlr8client::Api::Open("unix:/var/cache/exlr8/exlr8d.sock");
//   exlr8client::StageInfo s = api.WaitStage(api.StartStage(request).id);  // the REST API
//
// Errors are exceptions: every failing call throws exlr8client::Error
// (a std::runtime_error carrying the exlr8_status and the library's
// message), except lookups, which answer std::nullopt for EXLR8_NOT_FOUND.
// Needs C++17; links against libexlr8client (the shared or the static
// library) like the C API. The wrapper adds no state: Lease is one pointer.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

  // exlr8_lease_half_weights: half record `index`'s weights, fp32, (input,
  // output) row-major, 128 * hidden elements, into `out` (host memory for a
  // host lease; device memory on the lease's GPU for a device lease,
  // enqueued on `stream`). Throws Error.
  void HalfWeights(std::uint64_t index, float* out, std::uint64_t out_elems, void* stream = nullptr) const {
    Check(exlr8_lease_half_weights(handle_, index, out, out_elems, stream));
  }
  // The same into a new host vector: host leases only (a device lease is
  // Error FAILED_PRECONDITION: give it device memory).
  std::vector<float> HalfWeights(std::uint64_t index) const {
    if (info().memory_kind != EXLR8_MEMORY_HOST)
      throw Error(EXLR8_FAILED_PRECONDITION,
                  "Lease::HalfWeights(index): the lease is in device memory; pass a device buffer");
    const Tensor t = tensor(index);
    std::uint64_t elems = 0;
    if (t.kind == EXLR8_TENSOR_HALF_RECORD && t.k != 0) elems = 128 * (t.shape[0] / (16ull * t.k));
    std::vector<float> w(elems == 0 ? 1 : elems);  // not a half record: the C API names the error
    Check(exlr8_lease_half_weights(handle_, index, w.data(), elems, nullptr));
    return w;
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

// ---- the REST API of exlr8d serve (exlr8_api_*) ----------------------------

// A string the library allocated, freed with exlr8_free_string.
class OwnedString {
 public:
  OwnedString() noexcept = default;
  OwnedString(const OwnedString&) = delete;
  OwnedString& operator=(const OwnedString&) = delete;
  ~OwnedString() { exlr8_free_string(p_); }
  char** out() noexcept { return &p_; }
  std::string str() const { return p_ != nullptr ? std::string(p_) : std::string(); }

 private:
  char* p_ = nullptr;
};

// The answer of Api::Request: its status and body.
struct ApiAnswer {
  int status = 0;
  std::string body;
};

// A job or a stage: its id, state and the whole object as JSON.
struct JobInfo {
  std::uint64_t id = 0;
  std::string state;  // queued, running, done, failed, cancelled
  std::string json;
};
struct StageInfo {
  std::uint64_t id = 0;
  std::string state;  // starting ... holding, releasing, released, failed, died
  std::string json;
};

// Requests of SubmitPull and StartStage: empty strings and std::nullopt
// are left to the server.
struct PullRequest {
  std::string repo, manifest;
  int tp = 0, rank = 0;
  std::string revision, endpoint, pin;
  std::optional<bool> make_room;
};
struct StageRequest {
  std::string repo, manifest;
  int tp = 0, rank = 0;
  std::string revision;
  std::string memory;  // "device" or "host"
  std::string lease;   // "v2" or "v1"
  std::optional<int> device;
  std::string check;
  std::optional<int> release_wait_s;
};

// A client of exlr8d serve's REST API (exlr8_api_open). Move-only. Every
// call throws Error (NOT_FOUND for a 404, PERMISSION_DENIED for 401/403,
// UNAVAILABLE with no server, ...: exlr8client.h's mapping), whose message
// is "METHOD PATH: STATUS: the server's message".
class Api {
 public:
  // `endpoint`: "unix:/var/cache/exlr8/exlr8d.sock" or "http://127.0.0.1:8478";
  // `token`: the API token for TCP ("" none).
  static Api Open(const std::string& endpoint, const std::string& token = "",
                  std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) {
    exlr8_api* handle = nullptr;
    Check(exlr8_api_open(endpoint.c_str(), token.empty() ? nullptr : token.c_str(), &handle));
    Api api(handle);
    api.set_timeout(timeout);
    return api;
  }

  Api() noexcept = default;
  explicit Api(exlr8_api* handle) noexcept : handle_(handle) {}
  Api(Api&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Api& operator=(Api&& other) noexcept {
    if (this != &other) {
      exlr8_api_close(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Api(const Api&) = delete;
  Api& operator=(const Api&) = delete;
  ~Api() { exlr8_api_close(handle_); }
  exlr8_api* get() const noexcept { return handle_; }

  void set_timeout(std::chrono::milliseconds timeout) {
    const auto ms = timeout.count();
    Check(exlr8_api_set_timeout(handle_, ms <= 0             ? 1u
                                         : ms > 0xFFFFFFFFll ? 0xFFFFFFFFu
                                                             : static_cast<std::uint32_t>(ms)));
  }

  // Any request; throws Error for an error status (the answer's body is
  // in the message), returns the 2xx answer.
  ApiAnswer Request(const std::string& method, const std::string& path,
                    const std::string& json_body = "") const {
    int status = 0;
    OwnedString body;
    Check(exlr8_api_request(handle_, method.c_str(), path.c_str(),
                            json_body.empty() ? nullptr : json_body.c_str(), &status, body.out()));
    return {status, body.str()};
  }

  // The cache's filesets: a JSON array.
  std::string Filesets() const {
    OwnedString json;
    Check(exlr8_api_filesets(handle_, json.out(), nullptr));
    return json.str();
  }
  // The rank's status object (JSON); `*complete` (may be null) whether complete.
  std::string RankStatus(const std::string& repo, const std::string& manifest, int tp, int rank,
                         bool* complete = nullptr, const std::string& revision = "") const {
    OwnedString json;
    int c = 0;
    Check(exlr8_api_rank_status(handle_, repo.c_str(), manifest.c_str(), tp, rank,
                                revision.empty() ? nullptr : revision.c_str(), &c, json.out()));
    if (complete != nullptr) *complete = c != 0;
    return json.str();
  }

  // Queues a pull; the job as GET /v1/jobs/{id} reads right after (its state).
  JobInfo SubmitPull(const PullRequest& r) const {
    exlr8_pull_request c;
    exlr8_pull_request_init(&c);
    c.repo = r.repo.c_str();
    c.manifest = r.manifest.c_str();
    c.tp = r.tp;
    c.rank = r.rank;
    c.revision = OrNull(r.revision);
    c.endpoint = OrNull(r.endpoint);
    c.pin = OrNull(r.pin);
    if (r.make_room) c.make_room = *r.make_room ? 1 : 0;
    std::uint64_t id = 0;
    Check(exlr8_api_submit_pull(handle_, &c, &id, nullptr));
    return Job(id);
  }
  JobInfo Job(std::uint64_t id) const {
    OwnedString state, json;
    Check(exlr8_api_get_job(handle_, id, state.out(), json.out()));
    return {id, state.str(), json.str()};
  }
  // Cancels a queued or running job (Error FAILED_PRECONDITION once ended); the job's JSON.
  std::string CancelJob(std::uint64_t id) const {
    OwnedString json;
    Check(exlr8_api_cancel_job(handle_, id, json.out()));
    return json.str();
  }
  // Follows the job until it ends (exlr8_api_follow_job); `progress(job)`
  // after each poll returns true to stop following (Error CANCELLED).
  // `timeout` 0: no limit.
  JobInfo FollowJob(std::uint64_t id, std::chrono::milliseconds period = std::chrono::milliseconds(200),
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(0),
                    const std::function<bool(const JobInfo&)>& progress = nullptr) const {
    struct Ctx {
      const std::function<bool(const JobInfo&)>* f;
      std::exception_ptr error;
    } ctx{&progress, nullptr};
    auto trampoline = [](void* user, std::uint64_t job_id, const char* state, const char* json) -> int {
      auto* c = static_cast<Ctx*>(user);
      try {
        return (*c->f)(JobInfo{job_id, state, json}) ? 1 : 0;
      } catch (...) {
        c->error = std::current_exception();
        return 1;
      }
    };
    OwnedString state, json;
    const exlr8_status s =
        exlr8_api_follow_job(handle_, id, Ms(period), Ms(timeout), progress ? +trampoline : nullptr, &ctx,
                             state.out(), json.out());
    if (ctx.error) std::rethrow_exception(ctx.error);
    Check(s);
    return {id, state.str(), json.str()};
  }

  // Starts a holder; the stage as GET /v1/stages/{id} reads right after.
  StageInfo StartStage(const StageRequest& r) const {
    exlr8_stage_request c;
    exlr8_stage_request_init(&c);
    c.repo = r.repo.c_str();
    c.manifest = r.manifest.c_str();
    c.tp = r.tp;
    c.rank = r.rank;
    c.revision = OrNull(r.revision);
    c.memory = OrNull(r.memory);
    c.lease = OrNull(r.lease);
    if (r.device) c.device = *r.device;
    c.check = OrNull(r.check);
    if (r.release_wait_s) c.release_wait_s = *r.release_wait_s;
    std::uint64_t id = 0;
    Check(exlr8_api_start_stage(handle_, &c, &id, nullptr));
    return Stage(id);
  }
  StageInfo Stage(std::uint64_t id) const {
    OwnedString state, json;
    Check(exlr8_api_get_stage(handle_, id, state.out(), json.out()));
    return {id, state.str(), json.str()};
  }
  // Waits until the stage has settled (holding, releasing, released, failed, died).
  StageInfo WaitStage(std::uint64_t id, std::chrono::milliseconds period = std::chrono::milliseconds(200),
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) const {
    OwnedString state, json;
    Check(exlr8_api_wait_stage(handle_, id, Ms(period), Ms(timeout), state.out(), json.out()));
    return {id, state.str(), json.str()};
  }
  // DELETE /v1/stages/{id}: the answer's JSON.
  std::string DeleteStage(std::uint64_t id) const {
    OwnedString json;
    Check(exlr8_api_delete_stage(handle_, id, json.out()));
    return json.str();
  }

 private:
  static const char* OrNull(const std::string& s) { return s.empty() ? nullptr : s.c_str(); }
  static std::uint32_t Ms(std::chrono::milliseconds d) {
    const auto ms = d.count();
    return ms <= 0 ? 0u : ms > 0xFFFFFFFFll ? 0xFFFFFFFFu : static_cast<std::uint32_t>(ms);
  }

  exlr8_api* handle_ = nullptr;
};

// The library's version ("0.1.0") and the header's.
inline std::string_view LibraryVersion() { return exlr8_client_version(); }
inline constexpr int kHeaderVersion = EXLR8_CLIENT_VERSION;

}  // namespace exlr8client
