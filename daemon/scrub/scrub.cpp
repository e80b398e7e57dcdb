#include "daemon/scrub/scrub.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "daemon/cache/extent_set.h"
#include "daemon/pull/digest.h"
#include "format/checksum.h"
#include "format/expert_index.h"
#include "format/json.h"
#include "format/layout.h"
#include "format/plan.h"  // HalfTag
#include "format/safetensors.h"

namespace exlr8 {

namespace {

constexpr std::size_t kReadChunk = 4 << 20;
// The same bound a pull puts on a width file's header.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// A recorded file of the fileset, opened for reading its verified bytes.
struct ScrubFile {
  FileInfo info;
  std::vector<Extent> recorded;
  std::unique_ptr<ByteSource> source;  // null when it could not be opened
  Status open_error;
};

// One check and the bytes it vouches for (forgotten when it fails).
struct Unit {
  enum class Kind : std::uint8_t { kWhole, kHalf, kHeader };
  Kind kind = Kind::kWhole;
  std::size_t file = 0;  // into the ScrubFile table
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::string what;
  // kWhole
  StreamDigest::Kind digest = StreamDigest::Kind::kSha256;
  std::string expected;
  // kHalf: XXH64 over the bytes, then the index file's runs
  std::uint64_t xxh64 = 0;
  std::array<ByteRun, 2> tail{};
  const ByteSource* index = nullptr;
  // kHeader: where the index says the halves of this width lie (nullopt:
  // it stores none at this width)
  std::optional<WidthFileSpan> span;
};

struct Outcome {
  Status status;
  std::uint64_t accounted = 0;  // bytes from `offset` the check covered
};

class Checker {
 public:
  Checker(const std::vector<ScrubFile>& files, const ScrubOptions& options) : files_(files), options_(options) {}

  bool cancelled() const { return options_.cancel != nullptr && options_.cancel->load(std::memory_order_relaxed); }

  // Runs `units` on the option's threads; outcomes in the same order.
  std::vector<Outcome> Run(const std::vector<Unit>& units) {
    std::size_t n = options_.threads > 0 ? static_cast<std::size_t>(options_.threads)
                                         : std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 16);
    n = std::min(n, std::max<std::size_t>(units.size(), 1));
    std::vector<Outcome> out(units.size());
    // Longest first: whole files (a dense file is GBs at full scale, hashed
    // by one thread) must not be the last ones started.
    std::vector<std::size_t> order(units.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return units[a].length > units[b].length; });
    std::atomic<std::size_t> next{0};
    auto work = [&] {
      std::vector<std::byte> buffer;
      for (std::size_t k; !cancelled() && (k = next.fetch_add(1)) < units.size();) {
        const std::size_t i = order[k];
        out[i] = Check(units[i], buffer);
        if (!out[i].status.ok() && out[i].status.code() != StatusCode::kCancelled && options_.counters)
          options_.counters->failures.fetch_add(1, std::memory_order_relaxed);
      }
    };
    std::vector<std::thread> pool;
    for (std::size_t t = 1; t < n; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    return out;
  }

 private:
  void Checked(std::uint64_t bytes) {
    if (options_.counters) options_.counters->bytes_checked.fetch_add(bytes, std::memory_order_relaxed);
  }

  Outcome Check(const Unit& u, std::vector<std::byte>& buffer) {
    const ScrubFile& f = files_[u.file];
    if (!f.source) return {f.open_error, u.length};
    switch (u.kind) {
      case Unit::Kind::kWhole: return {CheckWhole(*f.source, u, buffer), u.length};
      case Unit::Kind::kHalf: return {CheckHalf(*f.source, u, buffer), u.length};
      case Unit::Kind::kHeader: return CheckHeader(*f.source, f.info, u, buffer);
    }
    return {InternalError("unknown check"), 0};
  }

  Status CheckWhole(const ByteSource& src, const Unit& u, std::vector<std::byte>& buffer) {
    EXLR8_ASSIGN_OR_RETURN(StreamDigest digest, StreamDigest::Create(u.digest, u.length));
    buffer.resize(static_cast<std::size_t>(std::min<std::uint64_t>(kReadChunk, u.length)));
    for (std::uint64_t at = 0; at < u.length;) {
      if (cancelled()) return CancelledError("scrub cancelled");
      const std::span<std::byte> piece(buffer.data(), static_cast<std::size_t>(std::min<std::uint64_t>(
                                                          buffer.size(), u.length - at)));
      EXLR8_RETURN_IF_ERROR(src.ReadAt(at, piece));
      digest.Update(piece);
      at += piece.size();
      Checked(piece.size());
    }
    const std::string got = digest.FinishHex();
    if (got != u.expected)
      return CorruptionError(src.name() + ": " + (u.digest == StreamDigest::Kind::kSha256 ? "SHA-256 " : "git SHA-1 ") +
                             got + ", expected " + u.expected);
    return Status::Ok();
  }

  Status CheckHalf(const ByteSource& src, const Unit& u, std::vector<std::byte>& buffer) {
    buffer.resize(static_cast<std::size_t>(u.length));
    EXLR8_RETURN_IF_ERROR(src.ReadAt(u.offset, buffer));
    Xxh64 xxh;
    xxh.Update(buffer);
    for (const ByteRun& piece : u.tail) {
      if (piece.length == 0) continue;
      std::vector<std::byte> tail(piece.length);
      EXLR8_RETURN_IF_ERROR(u.index->ReadAt(piece.offset, tail));
      xxh.Update(tail);
    }
    Checked(u.length);
    if (xxh.Digest() != u.xxh64)
      return CorruptionError(u.what + " (" + src.name() + " at byte " + std::to_string(u.offset) + "): XXH64 " +
                             Hex64(xxh.Digest()) + ", expected " + Hex64(u.xxh64));
    return Status::Ok();
  }

  Outcome CheckHeader(const ByteSource& src, const FileInfo& info, const Unit& u, std::vector<std::byte>& buffer) {
    Checked(u.length);
    if (u.length < 8)
      return {CorruptionError(src.name() + ": only " + std::to_string(u.length) + " bytes of its header are recorded"),
              u.length};
    std::array<std::byte, 8> first{};
    if (Status s = src.ReadAt(0, first); !s.ok()) return {s, u.length};
    Result<std::uint64_t> n = SafetensorsHeaderSize(first, info.size, src.name());
    if (!n.ok()) return {n.status(), u.length};
    if (*n > u.length || *n > kMaxHeaderBytes)
      return {CorruptionError(src.name() + ": its header claims " + std::to_string(*n) + " bytes, but " +
                              std::to_string(u.length) + " are recorded before its first half"),
              u.length};
    buffer.resize(static_cast<std::size_t>(*n));
    if (Status s = src.ReadAt(0, buffer); !s.ok()) return {s, u.length};
    Result<SafetensorsHeader> header = ParseSafetensorsHeader(buffer, info.size, src.name());
    if (!header.ok()) return {header.status(), u.length};
    if (u.span) {
      if (Status s = u.span->Validate(*header, info.size, src.name()); !s.ok()) return {s, u.length};
    }
    return {Status::Ok(), *n};
  }

  const std::vector<ScrubFile>& files_;
  const ScrubOptions& options_;
};

std::uint64_t UnitBytes(const std::vector<Unit>& units) {
  std::uint64_t total = 0;
  for (const Unit& u : units) total += u.length;
  return total;
}

Unit WholeUnit(std::size_t index, const ScrubFile& f) {
  Unit u;
  u.kind = Unit::Kind::kWhole;
  u.file = index;
  u.length = f.info.size;
  u.what = "whole file";
  if (f.info.sha256) {
    u.expected = *f.info.sha256;
  } else {
    u.digest = StreamDigest::Kind::kGitBlobSha1;
    u.expected = *f.info.git_sha1;
  }
  return u;
}

// The checks of one width file: its header, if recorded, and every half of
// the index stored at its width that is recorded.
Status AddWidthUnits(std::size_t index, const ScrubFile& f, int k, const ExpertIndex& ix, const ByteSource& ix_source,
                     std::vector<Unit>* units) {
  EXLR8_ASSIGN_OR_RETURN(WidthFileSpan span, ix.SpanOfWidth(k));
  if (!f.recorded.empty() && f.recorded.front().offset == 0) {
    Unit u;
    u.kind = Unit::Kind::kHeader;
    u.file = index;
    // Everything recorded before the first half can only be the header.
    const std::uint64_t limit = span.empty ? f.info.size : span.lowest_offset;
    u.length = std::min(f.recorded.front().end(), limit);
    u.what = "header";
    if (!span.empty) u.span = span;
    if (u.length > 0) units->push_back(std::move(u));
  }
  for (const bool shared : {false, true}) {
    const WidthTables* tables = ix.Tables(k, shared);
    if (tables == nullptr) continue;
    for (std::uint32_t e = 0; e < tables->experts; ++e) {
      const int expert = shared ? kSharedExpert : static_cast<int>(e);
      for (int p = 0; p < kProjCount; ++p) {
        for (std::uint32_t h = 0; h < ix.halves_per_expert(); ++h) {
          EXLR8_ASSIGN_OR_RETURN(HalfEntry entry, ix.Half(expert, static_cast<Proj>(p), h, k));
          if (!ExtentsCover(f.recorded, {entry.offset, entry.length})) continue;
          Unit u;
          u.kind = Unit::Kind::kHalf;
          u.file = index;
          u.offset = entry.offset;
          u.length = entry.length;
          u.what = HalfTag{ix.layer(), expert, static_cast<Proj>(p), h, k}.What();
          u.xxh64 = entry.checksum;
          u.tail = ix.ChecksumTail(expert, static_cast<Proj>(p), h, k);
          u.index = &ix_source;
          units->push_back(std::move(u));
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<ScrubReport> ScrubFileset(Cache& cache, FilesetId fileset, const ScrubOptions& options) {
  if (options.repair && cache.read_only())
    return FailedPreconditionError("repairing " + cache.dir().string() +
                                   " needs its lock, and this is a read-only view (another process owns the cache)");
  const auto t0 = std::chrono::steady_clock::now();
  ScrubReport report;
  report.fileset = fileset;
  EXLR8_ASSIGN_OR_RETURN(FilesetInfo set, cache.GetFileset(fileset));
  report.repo = set.repo;
  report.commit = set.commit;

  EXLR8_ASSIGN_OR_RETURN(std::vector<FileInfo> infos, cache.ListFiles(fileset));
  std::vector<ScrubFile> files;
  for (FileInfo& info : infos) {
    if (info.bytes_cached == 0) continue;
    ScrubFile f;
    EXLR8_ASSIGN_OR_RETURN(f.recorded, cache.VerifiedExtents(info.id));
    report.bytes_recorded += TotalLength(f.recorded);
    Result<std::unique_ptr<ByteSource>> source = cache.OpenVerified(info.id);
    if (source.ok()) {
      f.source = std::move(source).value();
    } else {
      f.open_error = source.status();  // a missing data file fails every check of it
    }
    f.info = std::move(info);
    files.push_back(std::move(f));
  }

  Checker checker(files, options);
  std::vector<Unit> units;
  std::vector<Outcome> outcomes;
  auto run = [&](std::vector<Unit> batch) {
    if (options.counters) options.counters->bytes_total.fetch_add(UnitBytes(batch), std::memory_order_relaxed);
    std::vector<Outcome> done = checker.Run(batch);
    units.insert(units.end(), std::make_move_iterator(batch.begin()), std::make_move_iterator(batch.end()));
    outcomes.insert(outcomes.end(), std::make_move_iterator(done.begin()), std::make_move_iterator(done.end()));
  };
  auto whole_checkable = [](const ScrubFile& f) {
    return f.info.whole_verified && f.info.size > 0 && (f.info.sha256 || f.info.git_sha1);
  };

  // 1. The expert index files, whose tables check the halves.
  std::vector<Unit> batch;
  for (std::size_t i = 0; i < files.size(); ++i)
    if (ClassifyReleasePath(files[i].info.path).kind == ReleaseFileKind::kExpertIndex && whole_checkable(files[i]))
      batch.push_back(WholeUnit(i, files[i]));
  const std::size_t index_units = batch.size();
  run(std::move(batch));
  batch.clear();
  std::map<int, std::pair<ExpertIndex, const ByteSource*>> indexes;  // by layer, the ones that passed
  for (std::size_t u = 0; u < index_units; ++u) {
    if (!outcomes[u].status.ok()) continue;
    const ScrubFile& f = files[units[u].file];
    const int layer = ClassifyReleasePath(f.info.path).layer;
    Result<ExpertIndex> ix = ExpertIndex::Read(*f.source, layer);
    if (!ix.ok()) {
      outcomes[u].status = ix.status();  // its hash matches, yet it no longer parses: fetch it again
      continue;
    }
    indexes.emplace(layer, std::make_pair(*std::move(ix), f.source.get()));
  }

  // 2. Everything else.
  std::vector<bool> unchecked(files.size(), false);
  for (std::size_t i = 0; i < files.size(); ++i) {
    const ScrubFile& f = files[i];
    const ReleasePath rp = ClassifyReleasePath(f.info.path);
    if (rp.kind == ReleaseFileKind::kExpertIndex) continue;
    if (whole_checkable(f)) {
      batch.push_back(WholeUnit(i, f));
    } else if (rp.kind == ReleaseFileKind::kExpertWidth) {
      auto ix = indexes.find(rp.layer);
      Status added = ix == indexes.end() ? NotFoundError("no index")
                                         : AddWidthUnits(i, f, rp.k, ix->second.first, *ix->second.second, &batch);
      if (!added.ok()) unchecked[i] = true;
    }
    // Anything else recorded is counted as unaccounted below.
  }
  run(std::move(batch));
  if (checker.cancelled()) return CancelledError("scrub of " + set.repo + "@" + set.commit + " cancelled");

  // 3. The report: failures, coverage.
  std::vector<std::vector<Extent>> accounted(files.size());
  for (std::size_t u = 0; u < units.size(); ++u) {
    const Unit& unit = units[u];
    const Outcome& outcome = outcomes[u];
    switch (unit.kind) {
      case Unit::Kind::kWhole: ++report.whole_files; break;
      case Unit::Kind::kHalf: ++report.halves; break;
      case Unit::Kind::kHeader: ++report.headers; break;
    }
    accounted[unit.file].push_back({unit.offset, outcome.status.ok() ? outcome.accounted : unit.length});
    report.bytes_checked += unit.length;
    if (outcome.status.ok()) continue;
    if (outcome.status.code() == StatusCode::kCancelled) return outcome.status;
    const ScrubFile& f = files[unit.file];
    report.failures.push_back({f.info.path, unit.offset, unit.length, unit.what, outcome.status.message()});
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::uint64_t rest = TotalLength(SubtractExtents(files[i].recorded, std::move(accounted[i])));
    (unchecked[i] ? report.bytes_unchecked : report.bytes_unaccounted) += rest;
  }
  std::sort(report.failures.begin(), report.failures.end(), [](const ScrubFailure& a, const ScrubFailure& b) {
    return a.file != b.file ? a.file < b.file : a.offset < b.offset;
  });

  // 4. Repair: one transaction un-records every failed check's bytes.
  if (options.repair && !report.failures.empty()) {
    std::map<std::string, FileId> ids;
    for (const ScrubFile& f : files) ids[f.info.path] = f.info.id;
    std::vector<VerifiedExtent> forget;
    for (const ScrubFailure& bad : report.failures) forget.push_back({ids.at(bad.file), bad.offset, bad.length});
    EXLR8_ASSIGN_OR_RETURN(report.bytes_forgotten, cache.ForgetExtents(forget));
    report.repaired = true;
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

JsonValue ScrubReportJson(const ScrubReport& r) {
  JsonValue failures = JsonValue::Array();
  for (const ScrubFailure& f : r.failures)
    failures.Push(JsonValue::Object({{"file", JsonValue::String(f.file)},
                                     {"offset", JsonValue::UInt(f.offset)},
                                     {"length", JsonValue::UInt(f.length)},
                                     {"what", JsonValue::String(f.what)},
                                     {"error", JsonValue::String(f.error)}}));
  return JsonValue::Object({{"repo", JsonValue::String(r.repo)},
                            {"commit", JsonValue::String(r.commit)},
                            {"clean", JsonValue::Bool(r.clean())},
                            {"bytes_recorded", JsonValue::UInt(r.bytes_recorded)},
                            {"bytes_checked", JsonValue::UInt(r.bytes_checked)},
                            {"whole_files", JsonValue::UInt(r.whole_files)},
                            {"halves", JsonValue::UInt(r.halves)},
                            {"headers", JsonValue::UInt(r.headers)},
                            {"bytes_unchecked", JsonValue::UInt(r.bytes_unchecked)},
                            {"bytes_unaccounted", JsonValue::UInt(r.bytes_unaccounted)},
                            {"failures", std::move(failures)},
                            {"repaired", JsonValue::Bool(r.repaired)},
                            {"bytes_forgotten", JsonValue::UInt(r.bytes_forgotten)},
                            {"seconds", JsonValue::Double(r.seconds)}});
}

}  // namespace exlr8
