// exlr8 plan ROOT --manifest NAME|PATH --tp N --rank R [--json] [--coalesce-gap BYTES]
#include <cstdio>
#include <iostream>

#include "client/cli/args.h"
#include "client/cli/cli.h"
#include "client/commands.h"
#include "client/local_release.h"
#include "format/plan_json.h"

namespace exlr8 {

namespace {

constexpr const char* kUsage =
    R"(usage: exlr8 plan ROOT --manifest NAME|PATH --tp N --rank R [--json] [--coalesce-gap BYTES]

Prints the files and byte ranges TP rank R of N needs from the release at
ROOT under a manifest: whole small files (manifests, index, dense, vocab,
config), each used width file's header, and exactly the rank's expert halves
at the manifest's widths, each with its XXH64.

  --manifest NAME|PATH   a manifest name (home, down1, up1, ...) or a JSON path
  --tp N                 tensor-parallel degree, N >= 1
  --rank R               0 <= R < N
  --json                 print the plan as JSON (schema/plan.schema.json)
  --coalesce-gap BYTES   merge ranges of one file whose gap is <= BYTES (default 0)
)";

void PrintSummary(const Plan& plan, const LocalRelease& rel) {
  const PlanTotals& t = plan.totals;
  std::size_t whole = 0, partial = 0;
  for (const auto& f : plan.files) (f.whole ? whole : partial)++;
  std::printf("plan for %s: manifest %s, TP %d, rank %d\n", rel.root.c_str(), plan.manifest.c_str(), plan.tp,
              plan.rank);
  std::printf("  whole files      %6zu  %s\n", whole, HumanBytes(t.whole_file_bytes).c_str());
  std::printf("  width files      %6zu  headers %s\n", partial, HumanBytes(t.header_bytes).c_str());
  std::printf("  routed halves    %6llu  \n", static_cast<unsigned long long>(t.routed_halves));
  std::printf("  shared halves    %6llu  (shared expert replicated on every rank)\n",
              static_cast<unsigned long long>(t.shared_halves));
  std::printf("  half bytes               %s\n", HumanBytes(t.half_bytes).c_str());
  std::printf("  requests         %6llu\n", static_cast<unsigned long long>(t.requests));
  std::printf(
      "  total            %s of %s in the release (%.1f%%)\n", HumanBytes(t.bytes).c_str(),
      HumanBytes(t.release_bytes).c_str(),
      t.release_bytes ? 100.0 * static_cast<double>(t.bytes) / static_cast<double>(t.release_bytes) : 0.0);
  std::printf(
      "  bits per weight  %.4f on this rank's routed halves, %.4f over the manifest's routed halves\n",
      t.rank_bits_per_weight, t.manifest_bits_per_weight);
  for (const auto& w : plan.warnings) std::printf("  warning: %s\n", w.c_str());
}

}  // namespace

int RunPlan(const std::vector<std::string>& argv) {
  Args parsed;
  if (auto exit = ParseCommandLine("exlr8 plan", kUsage, argv, {"manifest", "tp", "rank", "coalesce-gap"},
                                   {"json"}, 1, &parsed))
    return *exit;
  const Args* args = &parsed;
  auto run = [&]() -> Status {
    EXLR8_ASSIGN_OR_RETURN(std::string manifest_arg, args->Require("manifest"));
    EXLR8_ASSIGN_OR_RETURN(std::int64_t tp, args->GetInt("tp", -1, 1, 1 << 20));
    if (tp < 0) return InvalidArgumentError("missing --tp");
    EXLR8_ASSIGN_OR_RETURN(std::int64_t rank, args->GetInt("rank", -1, 0, tp - 1));
    if (rank < 0) return InvalidArgumentError("missing --rank");
    // A byte count, as exlr8d pull takes it ("1M").
    EXLR8_ASSIGN_OR_RETURN(const std::optional<std::uint64_t> gap, args->GetBytes("coalesce-gap"));
    EXLR8_ASSIGN_OR_RETURN(LocalRelease rel, OpenLocalRelease(args->positional()[0]));
    EXLR8_ASSIGN_OR_RETURN(Manifest manifest, LoadManifest(rel, manifest_arg));
    PlanOptions opt;
    opt.tp = static_cast<int>(tp);
    opt.rank = static_cast<int>(rank);
    opt.coalesce_gap = gap.value_or(0);
    EXLR8_ASSIGN_OR_RETURN(Plan plan, MakePlan(rel.inputs, manifest, opt));
    if (args->Flag("json")) {
      std::string json = PlanToJson(plan);
      std::fwrite(json.data(), 1, json.size(), stdout);
      std::fputc('\n', stdout);
    } else {
      PrintSummary(plan, rel);
    }
    return Status::Ok();
  };
  Status s = run();
  return s.ok() ? 0 : ReportError("exlr8 plan", s);
}

}  // namespace exlr8
