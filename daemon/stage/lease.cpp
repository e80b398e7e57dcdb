#include "daemon/stage/lease.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include <cuda_runtime.h>

#include "daemon/base/posix.h"
#include "format/json.h"

namespace exlr8 {

namespace {

constexpr std::size_t kMaxDescriptionBytes = std::size_t{1} << 30;

Result<std::uint64_t> Uint(const JsonValue& v, const char* field) {
  const JsonValue* f = v.is_object() ? v.Find(field) : nullptr;
  const auto n = f != nullptr && f->is_number() ? f->as_uint64() : std::nullopt;
  if (!n) return CorruptionError("lease description: '" + std::string(field) + "' missing or not a count");
  return *n;
}

Result<std::string> Text(const JsonValue& v, const char* field) {
  const JsonValue* f = v.is_object() ? v.Find(field) : nullptr;
  if (f == nullptr || !f->is_string())
    return CorruptionError("lease description: '" + std::string(field) + "' missing or not a string");
  return f->as_string();
}

}  // namespace

Result<std::string> LeaseDescriptionJson(const RankRequest& request, const RankHalves& rank,
                                         const StagedHalves& staged, int device) {
  if (staged.num_halves() != rank.halves.size())
    return InvalidArgumentError("the staged buffers hold " + std::to_string(staged.num_halves()) + " halves, the rank " +
                                std::to_string(rank.halves.size()));
  EXLR8_ASSIGN_OR_RETURN(std::string data_handle, ExportIpcHandle(staged.device_base()));
  EXLR8_ASSIGN_OR_RETURN(std::string offsets_handle, ExportIpcHandle(staged.device_offsets()));
  std::string o = "{\"version\":1,\"repo\":";
  AppendJsonString(o, request.repo);
  o += ",\"commit\":";
  AppendJsonString(o, rank.commit);
  o += ",\"manifest\":";
  AppendJsonString(o, request.manifest);
  o += ",\"tp\":" + std::to_string(request.tp) + ",\"rank\":" + std::to_string(request.rank) +
       ",\"device\":" + std::to_string(device) + ",\"bytes\":" + std::to_string(rank.total_bytes) +
       ",\"halves_count\":" + std::to_string(rank.halves.size()) + ",\"data_handle\":\"" + data_handle +
       "\",\"offsets_handle\":\"" + offsets_handle + "\",\"halves\":[";
  for (std::size_t i = 0; i < rank.halves.size(); ++i) {
    const RankHalf& h = rank.halves[i];
    o += (i ? ",{\"layer\":" : "{\"layer\":") + std::to_string(h.tag.layer) + ",\"expert\":" +
         std::to_string(h.tag.expert) + ",\"proj\":\"" + std::string(ProjName(h.tag.proj)) + "\",\"half\":" +
         std::to_string(h.tag.half) + ",\"k\":" + std::to_string(h.tag.k) + ",\"hidden\":" +
         std::to_string(h.hidden) + ",\"offset\":" + std::to_string(staged.offsets()[i]) + ",\"length\":" +
         std::to_string(h.length) + "}";
  }
  return o + "]}";
}

// ---- the serving process's side ----

Result<LeasedRank> OpenLease(const std::filesystem::path& path) {
  EXLR8_ASSIGN_OR_RETURN(sockaddr_un addr, UnixSocketAddress(path));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(errno, "socket");
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    return ErrnoStatus(errno, "connect to the lease holder at " + path.string());
  // The holder sends the description, then ends its side of the stream;
  // the connection stays open while the LeasedRank lives (the holder's
  // count of lessees).
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "read the lease description from " + path.string());
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxDescriptionBytes) return CorruptionError("lease description larger than 1 GiB");
  }
  if (text.empty())
    return UnavailableError("the lease holder at " + path.string() +
                            " closed the connection without a description (it is stopping, or holds " +
                            std::to_string(LeaseServer::kMaxLessees) + " lessees already)");
  auto parsed = ParseJson(text);
  if (!parsed.ok()) return CorruptionError("lease description from " + path.string() + ": " + parsed.status().message());
  const JsonValue& v = *parsed;
  LeasedRank out;
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t version, Uint(v, "version"));
  if (version != 1) return CorruptionError("lease description version " + std::to_string(version) + " is unknown");
  EXLR8_ASSIGN_OR_RETURN(out.repo, Text(v, "repo"));
  EXLR8_ASSIGN_OR_RETURN(out.commit, Text(v, "commit"));
  EXLR8_ASSIGN_OR_RETURN(out.manifest, Text(v, "manifest"));
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t tp, Uint(v, "tp"));
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t rank, Uint(v, "rank"));
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t device, Uint(v, "device"));
  out.tp = static_cast<int>(tp);
  out.rank = static_cast<int>(rank);
  out.device = static_cast<int>(device);
  EXLR8_ASSIGN_OR_RETURN(out.bytes, Uint(v, "bytes"));
  const JsonValue* halves = v.Find("halves");
  if (halves == nullptr || !halves->is_array()) return CorruptionError("lease description: no 'halves' array");
  for (const JsonValue& h : halves->as_array()) {
    LeasedHalf lh;
    EXLR8_ASSIGN_OR_RETURN(std::uint64_t layer, Uint(h, "layer"));
    const JsonValue* e = h.Find("expert");
    const auto expert = e != nullptr && e->is_number() ? e->as_int64() : std::nullopt;
    if (!expert) return CorruptionError("lease description: a half without an expert");
    EXLR8_ASSIGN_OR_RETURN(std::string proj, Text(h, "proj"));
    EXLR8_ASSIGN_OR_RETURN(std::uint64_t half, Uint(h, "half"));
    EXLR8_ASSIGN_OR_RETURN(std::uint64_t k, Uint(h, "k"));
    lh.tag.layer = static_cast<int>(layer);
    lh.tag.expert = static_cast<int>(*expert);
    lh.tag.proj = proj == "down" ? Proj::kDown : proj == "up" ? Proj::kUp : Proj::kGate;
    lh.tag.half = static_cast<std::uint32_t>(half);
    lh.tag.k = static_cast<int>(k);
    EXLR8_ASSIGN_OR_RETURN(lh.hidden, Uint(h, "hidden"));
    EXLR8_ASSIGN_OR_RETURN(lh.offset, Uint(h, "offset"));
    EXLR8_ASSIGN_OR_RETURN(lh.length, Uint(h, "length"));
    out.halves.push_back(lh);
  }
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) current = -1;
  if (current != out.device)
    return FailedPreconditionError("the rank is staged on device " + std::to_string(out.device) +
                                   ", this process uses device " + std::to_string(current));
  EXLR8_ASSIGN_OR_RETURN(std::string data_handle, Text(v, "data_handle"));
  EXLR8_ASSIGN_OR_RETURN(std::string offsets_handle, Text(v, "offsets_handle"));
  EXLR8_ASSIGN_OR_RETURN(out.data, IpcMapping::Open(data_handle));
  EXLR8_ASSIGN_OR_RETURN(out.offsets, IpcMapping::Open(offsets_handle));
  out.connection = std::move(fd);
  return out;
}

}  // namespace exlr8
