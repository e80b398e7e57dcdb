#include "format/plan.h"

#include <algorithm>

#include "format/layout.h"

namespace exlr8 {

std::string HalfTag::What() const {
  std::string s = "L" + std::to_string(layer) + " ";
  s += expert == kSharedExpert ? std::string("shared") : "e" + std::to_string(expert);
  s += " ";
  s += ProjName(proj);
  s += " h" + std::to_string(half) + " K" + std::to_string(k);
  return s;
}

std::string PlanRange::What() const { return kind == Kind::kHeader ? std::string("header") : tag.What(); }

PlanFile WholePlanFile(std::string path, std::uint64_t size, std::optional<std::string> sha256,
                       std::optional<std::string> git_sha1) {
  PlanFile pf;
  pf.path = std::move(path);
  pf.size = size;
  pf.whole = true;
  pf.sha256 = std::move(sha256);
  pf.git_sha1 = std::move(git_sha1);
  if (size > 0) pf.requests.push_back({0, size});
  return pf;
}

std::uint64_t PlanFile::bytes() const {
  if (whole) return size;
  std::uint64_t n = 0;
  for (const auto& r : requests) n += r.length;
  return n;
}

std::vector<ByteRun> CoalesceRuns(std::vector<ByteRun> runs, std::uint64_t gap) {
  std::sort(runs.begin(), runs.end(), [](const ByteRun& a, const ByteRun& b) { return a.offset < b.offset; });
  std::vector<ByteRun> out;
  for (const ByteRun& r : runs) {
    if (!out.empty() && r.offset >= out.back().end() && r.offset - out.back().end() <= gap) {
      out.back().length = r.end() - out.back().offset;
    } else if (!out.empty() && r.offset < out.back().end()) {  // overlap: extend
      out.back().length = std::max(out.back().end(), r.end()) - out.back().offset;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

namespace {

// Sorts each width file's ranges, coalesces them into requests, and sums
// the totals that depend on them.
void BuildRequestsAndTotals(Plan& plan) {
  PlanTotals& t = plan.totals;
  t.bytes = t.needed_bytes = t.requests = t.header_bytes = t.half_bytes = 0;
  for (PlanFile& pf : plan.files) {
    if (!pf.whole) {
      std::sort(pf.ranges.begin(), pf.ranges.end(),
                [](const PlanRange& a, const PlanRange& b) { return a.offset < b.offset; });
      std::vector<ByteRun> runs;
      runs.reserve(pf.ranges.size());
      for (const auto& r : pf.ranges) {
        runs.push_back({r.offset, r.length});
        (r.kind == PlanRange::Kind::kHeader ? t.header_bytes : t.half_bytes) += r.length;
        t.needed_bytes += r.length;
      }
      pf.requests = CoalesceRuns(std::move(runs), plan.coalesce_gap);
    }
    t.bytes += pf.bytes();
    if (pf.whole) t.needed_bytes += pf.size;
    t.requests += pf.requests.size();
  }
}

}  // namespace

Result<Plan> MakePlan(const ReleaseInputs& in, const Manifest& manifest, const PlanOptions& opt) {
  if (opt.tp < 1) return InvalidArgumentError("--tp must be >= 1, got " + std::to_string(opt.tp));
  if (opt.rank < 0 || opt.rank >= opt.tp)
    return InvalidArgumentError("--rank must be in [0, " + std::to_string(opt.tp - 1) + "], got " +
                                std::to_string(opt.rank));
  Plan plan;
  plan.tp = opt.tp;
  plan.rank = opt.rank;
  plan.coalesce_gap = opt.coalesce_gap;
  plan.manifest = manifest.name();
  plan.warnings = manifest.warnings();

  std::map<std::string, const ReleaseFile*> by_path;
  for (const auto& f : in.files) by_path[f.path] = &f;
  std::map<std::string, PlanFile> width_files;

  double rank_bits = 0, rank_halves = 0;
  for (const auto& layer_entry : manifest.layers()) {
    // (named, not a structured binding: clang 14 cannot capture those in lambdas)
    const int layer = layer_entry.first;
    const LayerWidths& lw = layer_entry.second;
    auto ix_it = in.indexes.find(layer);
    if (ix_it == in.indexes.end())
      return CorruptionError("manifest " + manifest.name() + " names layer " + std::to_string(layer) +
                             " but its index file was not read");
    const ExpertIndex& ix = ix_it->second;
    const std::string index_path = ExpertIndexPath(layer);

    auto add_half = [&](int expert, Proj p, std::uint32_t h) -> Status {
      const int k = lw.Width(expert, p, h);
      EXLR8_ASSIGN_OR_RETURN(HalfEntry he, ix.Half(expert, p, h, k));
      const std::string wpath = ExpertWidthPath(layer, k);
      PlanFile& pf = width_files[wpath];
      if (pf.path.empty()) {
        auto f = by_path.find(wpath);
        if (f == by_path.end())
          return CorruptionError("release has no file " + wpath + " (needed for " +
                                 HalfTag{layer, expert, p, h, k}.What() + ")");
        pf.path = wpath;
        pf.size = f->second->size;
        pf.sha256 = f->second->sha256;
        pf.git_sha1 = f->second->git_sha1;
        pf.index_path = index_path;
      }
      // Inside the file here; inside its data section once the header's
      // length is known (AddWidthHeaders).
      if (he.offset > pf.size || he.length > pf.size - he.offset)
        return CorruptionError(wpath + ": " + HalfTag{layer, expert, p, h, k}.What() + " at [" +
                               std::to_string(he.offset) + ", " + std::to_string(he.offset + he.length) +
                               ") lies outside the file (" + std::to_string(pf.size) + " bytes)");
      PlanRange r;
      r.offset = he.offset;
      r.length = he.length;
      r.tag = {layer, expert, p, h, k};
      r.xxh64 = he.checksum;
      r.checksum_tail = ix.ChecksumTail(expert, p, h, k);
      pf.ranges.push_back(r);
      if (expert == kSharedExpert) {
        ++plan.totals.shared_halves;
      } else {
        ++plan.totals.routed_halves;
        rank_bits += k;
        rank_halves += 1;
      }
      return Status::Ok();
    };

    for (std::uint32_t e = 0; e < lw.experts; ++e)
      for (std::uint32_t h = 0; h < lw.halves; ++h) {
        if (RankOfHalf(lw.halves, e, h, layer, opt.tp) != opt.rank) continue;
        for (Proj p : {Proj::kGate, Proj::kUp, Proj::kDown})
          EXLR8_RETURN_IF_ERROR(add_half(static_cast<int>(e), p, h));
      }
    if (lw.has_shared)  // replicated on every rank (U-11)
      for (std::uint32_t h = 0; h < lw.halves; ++h)
        for (Proj p : {Proj::kGate, Proj::kUp, Proj::kDown}) EXLR8_RETURN_IF_ERROR(add_half(kSharedExpert, p, h));
  }

  for (const auto& f : in.files) {
    plan.totals.release_bytes += f.size;
    if (ClassifyReleasePath(f.path).kind == ReleaseFileKind::kExpertWidth) continue;
    plan.totals.whole_file_bytes += f.size;
    plan.files.push_back(WholePlanFile(f.path, f.size, f.sha256, f.git_sha1));
  }
  for (auto& [path, pf] : width_files) plan.files.push_back(std::move(pf));
  std::sort(plan.files.begin(), plan.files.end(), [](const PlanFile& a, const PlanFile& b) { return a.path < b.path; });
  plan.totals.rank_bits_per_weight = rank_halves > 0 ? rank_bits / rank_halves : 0;
  plan.totals.manifest_bits_per_weight = manifest.BitsPerWeight();
  plan.headers_pending = true;
  if (opt.defer_headers) {
    BuildRequestsAndTotals(plan);
    return plan;
  }
  EXLR8_RETURN_IF_ERROR(AddWidthHeaders(plan, in.width_header_bytes));
  return plan;
}

Status AddWidthHeaders(Plan& plan, const std::map<std::string, std::uint64_t>& width_header_bytes) {
  if (!plan.headers_pending) return InternalError("AddWidthHeaders: the plan already has its headers");
  for (PlanFile& pf : plan.files) {
    if (pf.whole) continue;
    auto hb = width_header_bytes.find(pf.path);
    if (hb == width_header_bytes.end()) return CorruptionError(pf.path + ": header length not known to the planner");
    const std::uint64_t header_end = hb->second;
    if (header_end > pf.size)
      return CorruptionError(pf.path + ": header length " + std::to_string(header_end) + " exceeds the file size " +
                             std::to_string(pf.size));
    for (const PlanRange& r : pf.ranges)
      if (r.kind == PlanRange::Kind::kHalf && r.offset < header_end)
        return CorruptionError(pf.path + ": " + r.tag.What() + " at [" + std::to_string(r.offset) + ", " +
                               std::to_string(r.offset + r.length) + ") lies outside the data section [" +
                               std::to_string(header_end) + ", " + std::to_string(pf.size) + ")");
    PlanRange hr;
    hr.kind = PlanRange::Kind::kHeader;
    hr.offset = 0;
    hr.length = header_end;
    pf.ranges.insert(pf.ranges.begin(), hr);
  }
  plan.headers_pending = false;
  BuildRequestsAndTotals(plan);
  return Status::Ok();
}

}  // namespace exlr8
