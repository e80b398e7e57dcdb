#include "format/plan_json.h"

#include "format/checksum.h"
#include "format/json_writer.h"

namespace exlr8 {

std::string PlanToJson(const Plan& plan) {
  JsonWriter w(256 + plan.totals.routed_halves * 120);
  w.BeginObject()
      .Field("schema", "exlr8-plan/1")
      .Field("manifest", plan.manifest)
      .Field("tp", plan.tp)
      .Field("rank", plan.rank)
      .Key("files")
      .BeginArray();
  for (const auto& f : plan.files) {
    w.BeginObject().Field("path", f.path).Field("size", f.size).Field("whole", f.whole);
    if (f.sha256) w.Field("sha256", *f.sha256);
    if (f.git_sha1) w.Field("git_sha1", *f.git_sha1);
    if (!f.whole) {
      w.Field("index", f.index_path).Key("ranges").BeginArray();
      for (const PlanRange& r : f.ranges) {
        w.BeginObject().Field("offset", r.offset).Field("length", r.length);
        if (r.kind == PlanRange::Kind::kHalf) w.Field("xxh64", Hex64(r.xxh64));
        w.Field("what", r.What());
        if (r.kind == PlanRange::Kind::kHalf) {
          w.Key("tail").BeginArray();
          for (const auto& part : r.checksum_tail) w.BeginArray().Uint(part.offset).Uint(part.length).EndArray();
          w.EndArray();
        }
        w.EndObject();
      }
      w.EndArray();
    }
    w.Key("requests").BeginArray();
    for (const auto& q : f.requests) w.BeginArray().Uint(q.offset).Uint(q.length).EndArray();
    w.EndArray().EndObject();
  }
  const PlanTotals& t = plan.totals;
  w.EndArray()
      .Field("bytes", t.bytes)
      .Key("totals")
      .BeginObject()
      .Field("whole_file_bytes", t.whole_file_bytes)
      .Field("header_bytes", t.header_bytes)
      .Field("half_bytes", t.half_bytes)
      .Field("routed_halves", t.routed_halves)
      .Field("shared_halves", t.shared_halves)
      .Field("requests", t.requests)
      .Field("release_bytes", t.release_bytes)
      .Key("rank_bits_per_weight")
      .Fixed(t.rank_bits_per_weight, 6)
      .Key("manifest_bits_per_weight")
      .Fixed(t.manifest_bits_per_weight, 6)
      .EndObject()
      .Key("warnings")
      .BeginArray();
  for (const std::string& warning : plan.warnings) w.String(warning);
  w.EndArray().EndObject();
  return std::move(w).Take();
}

}  // namespace exlr8
