#include "daemon/scrub/scrub.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "daemon/cache/digest.h"
#include "daemon/cache/extent_set.h"
#include "format/checksum.h"
#include "format/dense.h"
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
  // Width files: where the index says the halves of this width lie, which
  // the header is checked against (nullopt: none stored at this width).
  std::optional<WidthFileSpan> span;
  // A whole-verified LVQ5 file's record index (Cache::Records): each
  // record's XXH64 is checked in the same pass as the file's hash.
  std::vector<FileRecord> records;
};

// One check and the bytes it vouches for (forgotten when it fails). Kept
// small: a width file of GLM-5.3 holds 12,288 halves.
struct Unit {
  enum class Kind : std::uint8_t { kWhole, kHalf, kHeader };
  Kind kind = Kind::kWhole;
  // kWhole of a dense or vocab file: the format's checks too (CheckDenseFile).
  bool dense = false;
  std::uint32_t file = 0;  // into the ScrubFile table
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  // kHalf: what it is, and its XXH64 over the bytes, then the index file's runs
  HalfTag tag;
  std::uint64_t xxh64 = 0;
  std::array<ByteRun, 2> tail{};
  const ByteSource* index = nullptr;

  std::string What() const {
    switch (kind) {
      case Kind::kHalf: return tag.What();
      case Kind::kHeader: return "header";
      case Kind::kWhole: break;
    }
    return "whole file";
  }
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
      case Unit::Kind::kWhole:
        return {CheckWhole(*f.source, f.info, f.records, u, buffer), u.length};
      case Unit::Kind::kHalf: return {CheckHalf(*f.source, u, buffer), u.length};
      case Unit::Kind::kHeader: return CheckHeader(*f.source, f, u, buffer);
    }
    return {InternalError("unknown check"), 0};
  }

  Status CheckWhole(const ByteSource& src, const FileInfo& info, const std::vector<FileRecord>& records,
                    const Unit& u, std::vector<std::byte>& buffer) {
    const StreamDigest::Kind kind = info.sha256 ? StreamDigest::Kind::kSha256 : StreamDigest::Kind::kGitBlobSha1;
    const std::string& expected = info.sha256 ? *info.sha256 : *info.git_sha1;
    EXLR8_ASSIGN_OR_RETURN(StreamDigest digest, StreamDigest::Create(kind, u.length));
    // The records' XXH64s, fed in the same pass, by offset.
    std::vector<std::size_t> by_offset(records.size());
    for (std::size_t i = 0; i < by_offset.size(); ++i) by_offset[i] = i;
    std::sort(by_offset.begin(), by_offset.end(),
              [&](std::size_t a, std::size_t b) { return records[a].offset < records[b].offset; });
    std::vector<Xxh64> record_hash(records.size());
    std::size_t first_open = 0;  // into by_offset: records ending before `at` are done
    buffer.resize(static_cast<std::size_t>(std::min<std::uint64_t>(kReadChunk, u.length)));
    for (std::uint64_t at = 0; at < u.length;) {
      if (cancelled()) return CancelledError("scrub cancelled");
      const std::span<std::byte> piece(buffer.data(), static_cast<std::size_t>(std::min<std::uint64_t>(
                                                          buffer.size(), u.length - at)));
      EXLR8_RETURN_IF_ERROR(src.ReadAt(at, piece));
      digest.Update(piece);
      const std::uint64_t end = at + piece.size();
      while (first_open < by_offset.size() &&
             records[by_offset[first_open]].offset + records[by_offset[first_open]].length <= at)
        ++first_open;
      for (std::size_t k = first_open; k < by_offset.size() && records[by_offset[k]].offset < end; ++k) {
        const FileRecord& r = records[by_offset[k]];
        const std::uint64_t lo = std::max(at, r.offset), hi = std::min(end, r.offset + r.length);
        if (lo < hi)
          record_hash[by_offset[k]].Update(std::span<const std::byte>(piece).subspan(lo - at, hi - lo));
      }
      at = end;
      Checked(piece.size());
    }
    const std::string got = digest.FinishHex();
    // Which records changed: named in the failure (at most a few).
    std::string changed;
    std::size_t n_changed = 0;
    for (std::size_t i = 0; i < records.size(); ++i) {
      const FileRecord& r = records[i];
      if (r.offset + r.length > u.length || record_hash[i].Digest() != r.xxh64) {
        if (++n_changed <= 3)
          changed += (changed.empty() ? "" : ", ") + std::string("'") + r.name + "' [" +
                     std::to_string(r.offset) + ", " + std::to_string(r.offset + r.length) + ")";
      }
    }
    if (n_changed > 3) changed += " and " + std::to_string(n_changed - 3) + " more";
    // The failure is reported with its file and range: the message says only what differs.
    if (got != expected)
      return CorruptionError(std::string(info.sha256 ? "SHA-256 " : "git SHA-1 ") + got + ", expected " +
                             expected + (changed.empty() ? "" : "; records whose XXH64 changed: " + changed));
    // The hash matches but the record index does not: the index is what is
    // wrong; forgetting the file makes the next pull check and index it anew.
    if (!changed.empty())
      return CorruptionError("the record index disagrees with the verified bytes: records " + changed);
    // A dense or vocab file must also be what the format says, as the pull
    // checked before it recorded it (one recorded by an exlr8d that did not
    // check, say): its hash alone vouches for the hub's bytes, not for them
    // being valid.
    if (u.dense) return CheckDenseFile(src);
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
      return CorruptionError("XXH64 " + Hex64(xxh.Digest()) + ", expected " + Hex64(u.xxh64) +
                             " (with its index-file tail)");
    return Status::Ok();
  }

  Outcome CheckHeader(const ByteSource& src, const ScrubFile& f, const Unit& u, std::vector<std::byte>& buffer) {
    const FileInfo& info = f.info;
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
    if (f.span) {
      if (Status s = f.span->Validate(*header, info.size, src.name()); !s.ok()) return {s, u.length};
    }
    return {Status::Ok(), *n};
  }

  const std::vector<ScrubFile>& files_;
  const ScrubOptions& options_;
};

Unit WholeUnit(std::size_t index, const ScrubFile& f) {
  Unit u;
  u.kind = Unit::Kind::kWhole;
  const ReleaseFileKind kind = ClassifyReleasePath(f.info.path).kind;
  u.dense = kind == ReleaseFileKind::kDense || kind == ReleaseFileKind::kVocab;
  u.file = static_cast<std::uint32_t>(index);
  u.length = f.info.size;
  return u;
}

// The checks of one width file: its header, if recorded, and every half of
// the index stored at its width that is recorded.
Status AddWidthUnits(std::size_t index, ScrubFile& f, int k, const ExpertIndex& ix, const ByteSource& ix_source,
                     std::vector<Unit>* units) {
  EXLR8_ASSIGN_OR_RETURN(WidthFileSpan span, ix.SpanOfWidth(k));
  if (!f.recorded.empty() && f.recorded.front().offset == 0) {
    Unit u;
    u.kind = Unit::Kind::kHeader;
    u.file = static_cast<std::uint32_t>(index);
    // Everything recorded before the first half can only be the header.
    const std::uint64_t limit = span.empty ? f.info.size : span.lowest_offset;
    u.length = std::min(f.recorded.front().end(), limit);
    if (u.length > 0) units->push_back(u);
  }
  if (!span.empty) f.span = std::move(span);
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
          u.file = static_cast<std::uint32_t>(index);
          u.offset = entry.offset;
          u.length = entry.length;
          u.tag = HalfTag{ix.layer(), expert, static_cast<Proj>(p), h, k};
          u.xxh64 = entry.checksum;
          u.tail = ix.ChecksumTail(expert, static_cast<Proj>(p), h, k);
          u.index = &ix_source;
          units->push_back(u);
        }
      }
    }
  }
  return Status::Ok();
}

// Runs the checks batch by batch (all whole files; then one width file at a
// time, so memory stays that of one file's halves however large the
// fileset) and adds what they found to the report.
class BatchRunner {
 public:
  BatchRunner(std::vector<ScrubFile>& files, const ScrubOptions& options, ScrubReport& report)
      : files_(files), checker_(files, options), report_(report), accounted_(files.size()) {}

  bool cancelled() const { return checker_.cancelled(); }

  // Runs `batch`; `review` may turn an outcome into a failure before it is
  // recorded (an index file that matches its hash but does not parse).
  Status Run(std::vector<Unit>& batch,
             const std::function<void(const Unit&, Outcome&)>& review = {}) {
    std::vector<Outcome> outcomes = checker_.Run(batch);
    if (cancelled()) return CancelledError("scrub cancelled");
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const Unit& u = batch[i];
      Outcome& o = outcomes[i];
      if (review) review(u, o);
      switch (u.kind) {
        case Unit::Kind::kWhole: ++report_.whole_files; break;
        case Unit::Kind::kHalf: ++report_.halves; break;
        case Unit::Kind::kHeader: ++report_.headers; break;
      }
      report_.bytes_checked += u.length;
      accounted_[u.file].push_back({u.offset, o.status.ok() ? o.accounted : u.length});
      if (o.status.ok()) continue;
      ++report_.checks_failed;
      forget_.push_back({files_[u.file].info.id, u.offset, u.length});
      if (report_.failures.size() < ScrubReport::kMaxFailureDetails)
        report_.failures.push_back({files_[u.file].info.path, u.offset, u.length, u.What(), o.status.message()});
    }
    batch.clear();
    return Status::Ok();
  }

  // The bytes of every failed check.
  const std::vector<VerifiedExtent>& failed() const { return forget_; }

  // File `i` is done: what no check covered goes into the report.
  void Account(std::size_t i, bool unchecked) {
    const std::uint64_t rest = TotalLength(SubtractExtents(files_[i].recorded, std::move(accounted_[i])));
    (unchecked ? report_.bytes_unchecked : report_.bytes_unaccounted) += rest;
    std::vector<Extent>().swap(accounted_[i]);
  }

 private:
  std::vector<ScrubFile>& files_;
  Checker checker_;
  ScrubReport& report_;
  std::vector<std::vector<Extent>> accounted_;  // by file: the bytes its checks covered
  std::vector<VerifiedExtent> forget_;
};

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
    // A data file longer than its recorded size: the recorded bytes are
    // intact, but exlr8d-stage refuses the file. A writable open (this
    // scrub repairing, the next pull) cuts it back, so only a check-only
    // scrub still sees it: reported, nothing to forget, never "clean" for a
    // file the stage refuses.
    if (f.source) {
      std::error_code ec;
      const auto path = cache.DataPath(info.id);
      std::uintmax_t on_disk = path.ok() ? std::filesystem::file_size(*path, ec) : 0;
      // Repairing: cut back here (a file this process had open already was
      // not cut back by opening it).
      if (path.ok() && !ec && on_disk > info.size && options.repair && cache.CutToListedSize(info.id).ok())
        on_disk = std::filesystem::file_size(*path, ec);
      if (path.ok() && !ec && on_disk > info.size) {
        ++report.checks_failed;
        if (report.failures.size() < ScrubReport::kMaxFailureDetails)
          report.failures.push_back({info.path, info.size, on_disk - info.size, "size",
                                     "the data file has " + std::to_string(on_disk) + " bytes, the listing " +
                                         std::to_string(info.size) + " (exlr8d-stage refuses it; a repairing verify "
                                         "or the next pull cuts it back)"});
      }
    }
    if (info.whole_verified) {
      EXLR8_ASSIGN_OR_RETURN(f.records, cache.Records(info.id));
    }
    f.info = std::move(info);
    files.push_back(std::move(f));
  }
  if (options.counters) options.counters->bytes_total.fetch_add(report.bytes_recorded, std::memory_order_relaxed);

  BatchRunner runner(files, options, report);
  auto whole_checkable = [](const ScrubFile& f) {
    if (f.info.size == 0 || !(f.info.sha256 || f.info.git_sha1)) return false;
    if (f.info.whole_verified) return true;
    // Recorded whole but never flagged (an exlr8d that set the flag after
    // the commit, killed between the two): its hash checks it all the same.
    return ClassifyReleasePath(f.info.path).kind != ReleaseFileKind::kExpertWidth && f.recorded.size() == 1 &&
           f.recorded[0].offset == 0 && f.recorded[0].length == f.info.size;
  };
  auto kind_of = [&](std::size_t i) { return ClassifyReleasePath(files[i].info.path); };

  // 1. The expert index files, whose tables check the halves: hashed and
  // parsed here; parsed again, one layer at a time, for its width files
  // (a GLM-5.3 layer's tables are about a megabyte; 75 layers at once
  // would be most of the scrub's memory).
  std::map<int, std::size_t> index_file;  // by layer, the ones that passed: into `files`
  std::vector<Unit> batch;
  for (std::size_t i = 0; i < files.size(); ++i)
    if (kind_of(i).kind == ReleaseFileKind::kExpertIndex && whole_checkable(files[i]))
      batch.push_back(WholeUnit(i, files[i]));
  EXLR8_RETURN_IF_ERROR(runner.Run(batch, [&](const Unit& u, Outcome& o) {
    if (!o.status.ok()) return;
    const int layer = kind_of(u.file).layer;
    if (Status parsed = ExpertIndex::Read(*files[u.file].source, layer).status(); !parsed.ok()) {
      o.status = parsed;  // its hash matches, yet it no longer parses: fetch it again
      return;
    }
    index_file[layer] = u.file;
  }));

  // 2. The other whole files (the largest: dense and vocab files).
  for (std::size_t i = 0; i < files.size(); ++i)
    if (kind_of(i).kind != ReleaseFileKind::kExpertIndex && whole_checkable(files[i])) {
      batch.push_back(WholeUnit(i, files[i]));
      report.records += files[i].records.size();
    }
  EXLR8_RETURN_IF_ERROR(runner.Run(batch));

  // 3. Width files, one at a time; then what no check covered, file by file.
  std::optional<ExpertIndex> ix;  // the layer of the last width file
  for (std::size_t i = 0; i < files.size(); ++i) {
    const ReleasePath rp = kind_of(i);
    bool unchecked = false;
    if (rp.kind == ReleaseFileKind::kExpertWidth && !whole_checkable(files[i])) {
      auto found = index_file.find(rp.layer);
      Status added = found == index_file.end() ? NotFoundError("no index") : Status::Ok();
      if (added.ok() && (!ix || ix->layer() != rp.layer)) {
        ix.reset();
        Result<ExpertIndex> parsed = ExpertIndex::Read(*files[found->second].source, rp.layer);
        added = parsed.status();
        if (parsed.ok()) ix = *std::move(parsed);
      }
      if (added.ok()) added = AddWidthUnits(i, files[i], rp.k, *ix, *files[found->second].source, &batch);
      unchecked = !added.ok();
      if (unchecked) batch.clear();
      EXLR8_RETURN_IF_ERROR(runner.Run(batch));
    }
    runner.Account(i, unchecked);
  }
  if (runner.cancelled()) return CancelledError("scrub of " + set.repo + "@" + set.commit + " cancelled");
  std::sort(report.failures.begin(), report.failures.end(), [](const ScrubFailure& a, const ScrubFailure& b) {
    return a.file != b.file ? a.file < b.file : a.offset < b.offset;
  });

  // 4. Repair: one transaction un-records every failed check's bytes.
  if (options.repair && !runner.failed().empty()) {
    EXLR8_ASSIGN_OR_RETURN(report.bytes_forgotten, cache.ForgetExtents(runner.failed()));
    report.repaired = true;
  }
  // ... and the fileset remembers when it was last checked (`exlr8d list`).
  // A check-only scrub changed nothing, and records nothing either.
  if (options.repair) EXLR8_RETURN_IF_ERROR(cache.RecordVerified(set.id, report.checks_failed));
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
                            {"records", JsonValue::UInt(r.records)},
                            {"bytes_unchecked", JsonValue::UInt(r.bytes_unchecked)},
                            {"bytes_unaccounted", JsonValue::UInt(r.bytes_unaccounted)},
                            {"checks_failed", JsonValue::UInt(r.checks_failed)},
                            {"failures", std::move(failures)},
                            {"repaired", JsonValue::Bool(r.repaired)},
                            {"bytes_forgotten", JsonValue::UInt(r.bytes_forgotten)},
                            {"seconds", JsonValue::Double(r.seconds)}});
}

}  // namespace exlr8
