#include "format/plan_json.h"

#include <cstdio>

#include "format/checksum.h"
#include "format/json.h"

namespace exlr8 {

namespace {


void AppendDouble(std::string& out, double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", d);
  out += buf;
}

}  // namespace

std::string PlanToJson(const Plan& plan) {
  std::string o;
  o.reserve(256 + plan.totals.routed_halves * 120);
  o += "{\"schema\":\"exlr8-plan/1\",\"manifest\":";
  AppendJsonString(o, plan.manifest);
  o += ",\"tp\":" + std::to_string(plan.tp) + ",\"rank\":" + std::to_string(plan.rank) + ",\"files\":[";
  bool first_file = true;
  for (const auto& f : plan.files) {
    if (!first_file) o += ',';
    first_file = false;
    o += "{\"path\":";
    AppendJsonString(o, f.path);
    o += ",\"size\":" + std::to_string(f.size) + ",\"whole\":" + (f.whole ? "true" : "false");
    if (f.sha256) {
      o += ",\"sha256\":";
      AppendJsonString(o, *f.sha256);
    }
    if (f.git_sha1) {
      o += ",\"git_sha1\":";
      AppendJsonString(o, *f.git_sha1);
    }
    if (!f.whole) {
      o += ",\"index\":";
      AppendJsonString(o, f.index_path);
      o += ",\"ranges\":[";
      for (size_t i = 0; i < f.ranges.size(); ++i) {
        const PlanRange& r = f.ranges[i];
        if (i) o += ',';
        o += "{\"offset\":" + std::to_string(r.offset) + ",\"length\":" + std::to_string(r.length);
        if (r.kind == PlanRange::Kind::kHalf) {
          o += ",\"xxh64\":\"" + Hex64(r.xxh64) + "\"";
        }
        o += ",\"what\":";
        AppendJsonString(o, r.What());
        if (r.kind == PlanRange::Kind::kHalf) {
          o += ",\"tail\":[[" + std::to_string(r.checksum_tail[0].offset) + "," +
               std::to_string(r.checksum_tail[0].length) + "],[" + std::to_string(r.checksum_tail[1].offset) + "," +
               std::to_string(r.checksum_tail[1].length) + "]]";
        }
        o += '}';
      }
      o += ']';
    }
    o += ",\"requests\":[";
    for (size_t i = 0; i < f.requests.size(); ++i) {
      if (i) o += ',';
      o += "[" + std::to_string(f.requests[i].offset) + "," + std::to_string(f.requests[i].length) + "]";
    }
    o += "]}";
  }
  const PlanTotals& t = plan.totals;
  o += "],\"bytes\":" + std::to_string(t.bytes) + ",\"totals\":{";
  o += "\"whole_file_bytes\":" + std::to_string(t.whole_file_bytes);
  o += ",\"header_bytes\":" + std::to_string(t.header_bytes);
  o += ",\"half_bytes\":" + std::to_string(t.half_bytes);
  o += ",\"routed_halves\":" + std::to_string(t.routed_halves);
  o += ",\"shared_halves\":" + std::to_string(t.shared_halves);
  o += ",\"requests\":" + std::to_string(t.requests);
  o += ",\"release_bytes\":" + std::to_string(t.release_bytes);
  o += ",\"rank_bits_per_weight\":";
  AppendDouble(o, t.rank_bits_per_weight);
  o += ",\"manifest_bits_per_weight\":";
  AppendDouble(o, t.manifest_bits_per_weight);
  o += "},\"warnings\":[";
  for (size_t i = 0; i < plan.warnings.size(); ++i) {
    if (i) o += ',';
    AppendJsonString(o, plan.warnings[i]);
  }
  o += "]}";
  return o;
}

}  // namespace exlr8
