// exlr8 verify ROOT [--manifest M --tp N --rank R]
// exlr8 verify FILE.bin [--list] [--quiet]   (an LVQ5 sealed file)
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>

#include "client/cli/args.h"
#include "client/cli/cli.h"
#include "client/commands.h"
#include "client/file_source.h"
#include "client/local_release.h"
#include "client/lvq5_cli.h"
#include "format/checksum.h"
#include "format/dense.h"
#include "format/layout.h"
#include "format/lvq5/index.h"
#include "format/safetensors.h"

namespace exlr8 {

namespace {

constexpr const char* kUsage = R"(usage: exlr8 verify ROOT [--manifest NAME|PATH --tp N --rank R] [--quiet]
       exlr8 verify FILE.bin [--list] [--quiet]

Checks every checksum it can in the release at ROOT: each width file's header
(parsed, and every indexed half inside its data section), every expert half's
XXH64 (trellis bytes, channel-vector slice, block-vector row; spec 5.3), and
every dense and vocab matrix block (spec 5.4). With --manifest/--tp/--rank,
only what that rank's plan holds. Mismatches are named with file, offset and
what the bytes are. Exit status 1 if anything does not verify.

FILE.bin, an LVQ5 sealed file (docs/LVQ5.md): walks every record, raw
tensor and blob and checks the structure (counts, sentinels, kinds, exact
lengths, nothing after the last blob) and the header's map fingerprints
against the Tetra tables exlr8 builds. LVQ5 files carry no checksums: the
whole-file SHA-256 is checked by whoever downloads them (exlr8d pull).
Prints a summary (--list: one line per part). Exit status 1 naming the
first problem (file, record, field, byte offset).
)";

constexpr const char* kLvq5Usage = kUsage;

struct HalfCheck {
  std::string width_path;
  std::string index_path;
  std::uint64_t offset, length, expected;
  std::array<ByteRun, 2> tail;
  std::string what;
};

class SourceCache {
 public:
  explicit SourceCache(std::filesystem::path root) : root_(std::move(root)) {}
  Result<const ByteSource*> Get(const std::string& rel) {
    auto it = open_.find(rel);
    if (it != open_.end()) return static_cast<const ByteSource*>(it->second.get());
    EXLR8_ASSIGN_OR_RETURN(auto src, FileByteSource::Open(root_ / rel, rel));
    const ByteSource* p = src.get();
    open_.emplace(rel, std::move(src));
    return p;
  }

 private:
  std::filesystem::path root_;
  std::map<std::string, std::unique_ptr<FileByteSource>> open_;
};

}  // namespace

int RunLvq5Verify(const std::vector<std::string>& argv) {
  Args args;
  if (auto exit = ParseCommandLine("exlr8 verify", kLvq5Usage, argv, {}, {"list", "quiet"}, 1, &args))
    return *exit;
  const std::string& path = args.positional()[0];
  auto src = FileByteSource::Open(path);
  if (!src.ok()) return ReportError("exlr8 verify", src.status());
  auto ix = lvq5::ReadIndex(**src);
  if (!ix.ok()) {
    if (ix.status().code() != StatusCode::kCorruption) return ReportError("exlr8 verify", ix.status());
    std::printf("MISMATCH %s\n", ix.status().message().c_str());
    return kExitVerifyFailed;
  }
  std::uint64_t tetra = 0, int4 = 0, blocks = 0, code_bytes = 0;
  for (const auto& m : ix->matrices) {
    if (m.kind == lvq5::Kind::kTetra) {
      ++tetra;
      blocks += std::uint64_t{m.d_out} * m.nblocks;
      code_bytes += m.codes_length;
    } else {
      ++int4;
    }
    if (args.Flag("list"))
      std::printf("matrix %s %s %ux%u at %llu, %llu bytes\n", m.name.c_str(),
                  lvq5::KindName(static_cast<std::uint32_t>(m.kind)).c_str(), m.d_out, m.d_in,
                  static_cast<unsigned long long>(m.offset),
                  static_cast<unsigned long long>(m.end - m.offset));
  }
  if (args.Flag("list")) {
    for (const auto& t : ix->raw) {
      std::string dims;
      for (auto d : t.dims) dims += (dims.empty() ? "" : "x") + std::to_string(d);
      std::printf("raw %s %s [%s] at %llu, %llu bytes\n", t.name.c_str(),
                  t.tag == lvq5::RawTag::kF16
                      ? "f16"
                      : ("q" + std::to_string(t.bits) + "g" + std::to_string(t.group)).c_str(),
                  dims.c_str(), static_cast<unsigned long long>(t.offset),
                  static_cast<unsigned long long>(t.end - t.offset));
    }
    for (const auto& b : ix->blobs)
      std::printf("blob %s at %llu, %llu bytes\n", b.name.c_str(), static_cast<unsigned long long>(b.offset),
                  static_cast<unsigned long long>(b.length));
  }
  if (!args.Flag("quiet"))
    std::printf(
        "verified LVQ5 %s: %llu matrix records (%llu Tetra, %llu Int4G128), %llu Tetra blocks (%s of codes), "
        "%zu raw tensors, %zu blobs, %s; map fingerprints tetra %s ball %s ok; 0 failures\n",
        path.c_str(), static_cast<unsigned long long>(ix->matrices.size()),
        static_cast<unsigned long long>(tetra), static_cast<unsigned long long>(int4),
        static_cast<unsigned long long>(blocks), HumanBytes(code_bytes).c_str(), ix->raw.size(),
        ix->blobs.size(), HumanBytes(ix->size).c_str(), ("0x" + Hex64(ix->header.tetra_fingerprint)).c_str(),
        ("0x" + Hex64(ix->header.ball_fingerprint)).c_str());
  return kExitOk;
}

int RunVerify(const std::vector<std::string>& argv) {
  if (ArgsNameLvqFile(argv, {"manifest", "tp", "rank"})) return RunLvq5Verify(argv);
  Args parsed;
  if (auto exit =
          ParseCommandLine("exlr8 verify", kUsage, argv, {"manifest", "tp", "rank"}, {"quiet"}, 1, &parsed))
    return *exit;
  const Args* args = &parsed;
  const bool quiet = args->Flag("quiet");
  std::uint64_t failures = 0, halves_ok = 0, half_bytes = 0, headers_ok = 0, dense_blocks_ok = 0;
  auto fail = [&](const std::string& line) {
    ++failures;
    std::printf("MISMATCH %s\n", line.c_str());
  };

  auto run = [&]() -> Status {
    EXLR8_ASSIGN_OR_RETURN(LocalRelease rel, OpenLocalRelease(args->positional()[0]));
    SourceCache sources(rel.root);
    std::vector<HalfCheck> checks;
    std::vector<std::string> width_files, dense_files;
    const bool by_rank = args->Has("manifest") || args->Has("tp") || args->Has("rank");
    if (by_rank) {
      EXLR8_ASSIGN_OR_RETURN(std::string manifest_arg, args->Require("manifest"));
      EXLR8_ASSIGN_OR_RETURN(std::int64_t tp, args->GetInt("tp", -1, 1, 1 << 20));
      EXLR8_ASSIGN_OR_RETURN(std::int64_t rank, args->GetInt("rank", -1, 0, tp - 1));
      if (tp < 0 || rank < 0) return InvalidArgumentError("--manifest needs --tp and --rank");
      EXLR8_ASSIGN_OR_RETURN(Manifest manifest, LoadManifest(rel, manifest_arg));
      EXLR8_ASSIGN_OR_RETURN(Plan plan,
                             MakePlan(rel.inputs, manifest, {static_cast<int>(tp), static_cast<int>(rank)}));
      for (const auto& w : plan.warnings) std::printf("warning: %s\n", w.c_str());
      for (const auto& f : plan.files) {
        const auto kind = ClassifyReleasePath(f.path).kind;
        if (kind == ReleaseFileKind::kDense || kind == ReleaseFileKind::kVocab) dense_files.push_back(f.path);
        if (f.whole) continue;
        width_files.push_back(f.path);
        for (const auto& r : f.ranges)
          if (r.kind == PlanRange::Kind::kHalf)
            checks.push_back({f.path, f.index_path, r.offset, r.length, r.xxh64, r.checksum_tail, r.What()});
      }
    } else {
      for (const auto& [layer, ix] : rel.inputs.indexes)
        for (bool shared : {false, true})
          for (int k : shared ? ix.shared_widths() : ix.widths()) {
            const std::string wpath = ExpertWidthPath(layer, k);
            // Once per file, also a file that holds only the shared expert.
            if (std::find(width_files.begin(), width_files.end(), wpath) == width_files.end())
              width_files.push_back(wpath);
            const std::uint32_t experts = shared ? 1 : ix.experts();
            for (std::uint32_t e = 0; e < experts; ++e)
              for (Proj p : {Proj::kGate, Proj::kUp, Proj::kDown})
                for (std::uint32_t h = 0; h < ix.halves_per_expert(); ++h) {
                  const int ex = shared ? kSharedExpert : static_cast<int>(e);
                  EXLR8_ASSIGN_OR_RETURN(HalfEntry he, ix.Half(ex, p, h, k));
                  checks.push_back({wpath, ExpertIndexPath(layer), he.offset, he.length, he.checksum,
                                    ix.ChecksumTail(ex, p, h, k), HalfTag{layer, ex, p, h, k}.What()});
                }
          }
      for (const auto& f : rel.inputs.files) {
        const auto kind = ClassifyReleasePath(f.path).kind;
        if (kind == ReleaseFileKind::kDense || kind == ReleaseFileKind::kVocab) dense_files.push_back(f.path);
      }
    }

    // width-file headers
    for (const auto& wpath : width_files) {
      const ReleasePath rp = ClassifyReleasePath(wpath);
      auto src = sources.Get(wpath);
      if (!src.ok()) {
        fail(src.status().message());
        continue;
      }
      auto hb = rel.inputs.width_header_bytes.find(wpath);
      if (hb == rel.inputs.width_header_bytes.end()) {
        fail(wpath + ": header not read");
        continue;
      }
      std::vector<std::byte> bytes(hb->second);
      EXLR8_RETURN_IF_ERROR((*src)->ReadAt(0, bytes));
      auto header = ParseSafetensorsHeader(bytes, (*src)->size(), wpath);
      if (!header.ok()) {
        fail(header.status().message());
        continue;
      }
      Status s = rel.inputs.indexes.at(rp.layer).ValidateWidthFile(rp.k, *header, (*src)->size(), wpath);
      if (!s.ok())
        fail(s.message());
      else
        ++headers_ok;
    }

    // halves
    std::vector<std::byte> buf;
    for (const auto& c : checks) {
      auto wsrc = sources.Get(c.width_path);
      auto isrc = sources.Get(c.index_path);
      if (!wsrc.ok() || !isrc.ok()) {
        fail(c.what + ": " + (wsrc.ok() ? isrc.status() : wsrc.status()).message());
        continue;
      }
      Xxh64 h;
      // Bounds first: the index says how long a half is, and a damaged one
      // must not make this allocate more than the file holds.
      const std::uint64_t size = (*wsrc)->size();
      if (c.offset > size || c.length > size - c.offset) {
        fail(c.what + ": " + c.width_path + " bytes [" + std::to_string(c.offset) + ", " +
             std::to_string(c.offset + c.length) + ") lie past its end (" + std::to_string(size) + " bytes)");
        continue;
      }
      buf.resize(c.length);
      Status s = (*wsrc)->ReadAt(c.offset, buf);
      if (s.ok()) {
        h.Update(buf);
        for (const ByteRun& piece : c.tail) {
          buf.resize(piece.length);
          s = (*isrc)->ReadAt(piece.offset, buf);
          if (!s.ok()) break;
          h.Update(buf);
        }
      }
      if (!s.ok()) {
        fail(c.what + ": " + s.message());
        continue;
      }
      if (h.Digest() != c.expected) {
        fail(c.width_path + " offset " + std::to_string(c.offset) + " (" + c.what + "): xxh64 " +
             Hex64(h.Digest()) + ", expected " + Hex64(c.expected));
        continue;
      }
      ++halves_ok;
      half_bytes += c.length;
    }

    // dense and vocab matrices
    for (const auto& dpath : dense_files) {
      EXLR8_ASSIGN_OR_RETURN(const ByteSource* src, sources.Get(dpath));
      auto report = VerifyDenseFile(*src);
      if (!report.ok()) {
        fail(report.status().message());
        continue;
      }
      dense_blocks_ok += report->blocks_ok;
      for (const auto& m : report->mismatches) fail(m);
    }
    return Status::Ok();
  };
  Status s = run();
  if (!s.ok()) return ReportError("exlr8 verify", s);
  if (!quiet || failures)
    std::printf("verified %llu width-file headers, %llu halves (%s), %llu dense blocks; %llu failures\n",
                static_cast<unsigned long long>(headers_ok), static_cast<unsigned long long>(halves_ok),
                HumanBytes(half_bytes).c_str(), static_cast<unsigned long long>(dense_blocks_ok),
                static_cast<unsigned long long>(failures));
  return failures ? kExitVerifyFailed : 0;
}

}  // namespace exlr8
