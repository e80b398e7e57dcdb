#include "client/lease/description.h"

#include <optional>

#include "format/json.h"

namespace exlr8 {

namespace {

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

std::string WriteLeaseDescription(const LeaseDescription& d) {
  std::string o = "{\"version\":1,\"repo\":";
  AppendJsonString(o, d.repo);
  o += ",\"commit\":";
  AppendJsonString(o, d.commit);
  o += ",\"manifest\":";
  AppendJsonString(o, d.manifest);
  o += ",\"tp\":" + std::to_string(d.tp) + ",\"rank\":" + std::to_string(d.rank) +
       ",\"device\":" + std::to_string(d.device) + ",\"bytes\":" + std::to_string(d.bytes) +
       ",\"halves_count\":" + std::to_string(d.halves.size()) + ",\"data_handle\":";
  AppendJsonString(o, d.data_handle);
  o += ",\"offsets_handle\":";
  AppendJsonString(o, d.offsets_handle);
  o += ",\"halves\":[";
  for (std::size_t i = 0; i < d.halves.size(); ++i) {
    const LeasedHalf& h = d.halves[i];
    o += (i ? ",{\"layer\":" : "{\"layer\":") + std::to_string(h.tag.layer) +
         ",\"expert\":" + std::to_string(h.tag.expert) + ",\"proj\":\"" + std::string(ProjName(h.tag.proj)) +
         "\",\"half\":" + std::to_string(h.tag.half) + ",\"k\":" + std::to_string(h.tag.k) +
         ",\"hidden\":" + std::to_string(h.hidden) + ",\"offset\":" + std::to_string(h.offset) +
         ",\"length\":" + std::to_string(h.length) + "}";
  }
  return o + "]}";
}

Result<LeaseDescription> ParseLeaseDescription(std::string_view text, std::string_view source) {
  auto parsed = ParseJson(text);
  if (!parsed.ok())
    return CorruptionError("lease description" +
                           (source.empty() ? std::string() : " from " + std::string(source)) + ": " +
                           parsed.status().message());
  const JsonValue& v = *parsed;
  LeaseDescription out;
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t version, Uint(v, "version"));
  if (version != 1)
    return CorruptionError("lease description version " + std::to_string(version) + " is unknown");
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
  if (halves == nullptr || !halves->is_array())
    return CorruptionError("lease description: no 'halves' array");
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
  EXLR8_ASSIGN_OR_RETURN(out.data_handle, Text(v, "data_handle"));
  EXLR8_ASSIGN_OR_RETURN(out.offsets_handle, Text(v, "offsets_handle"));
  return out;
}

}  // namespace exlr8
