// An LVQ5 writer for tests and benchmarks: any geometry, any seed, streamed
// to a sink so a multi-GB synthetic file never sits in memory.
//
// The writer lays out bytes exactly as spec 1 describes and computes every
// length field from the data it is given; it does not enforce the reader's
// rules (a test may write a header that the reader must refuse). Call, in
// order: WriteHeader, the header's count of Write*Record, BeginRaw(n), n
// Write*Raw, BeginBlobs(n), n WriteBlob. Finish() checks that the counts
// were honoured (InvalidArgument otherwise).
//
// Not thread-safe; one writer per sink.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "format/lvq5/index.h"
#include "format/status.h"

namespace exlr8::lvq5 {

// Receives the file's bytes in order. A non-OK status stops the writer.
using ByteSink = std::function<Status(std::span<const std::byte>)>;

struct TetraRecordSpec {
  std::string name;
  std::uint32_t d_out = 0;
  std::uint32_t d_in = 0;
  std::uint64_t rotation_seed = 0;
  bool has_rotation = true;
  double centroids[2] = {0.5, 1.0};
  std::vector<double> row_scales;  // d_out values
  std::vector<float> tail;         // d_out * (d_in mod 24), row-major
  // Kernel words W = label | gain << 47 (bits 48.. ignored), d_out *
  // floor(d_in/24) of them, row-major. Written MSB-first as spec 1.4 says.
  std::vector<std::uint64_t> words;
};

struct Int4G128RecordSpec {
  std::string name;
  std::uint32_t d_out = 0;
  std::uint32_t d_in = 0;             // a multiple of 128
  std::vector<std::uint8_t> packed;   // d_out * d_in / 2, low nibble first
  std::vector<std::uint16_t> scales;  // f16 bits, d_out * d_in / 128
  std::vector<std::uint16_t> biases;
};

struct RawTensorSpec {
  std::string name;
  RawTag tag = RawTag::kF16;
  std::vector<std::uint64_t> dims;
  std::vector<std::uint16_t> f16;  // kF16: product(dims) values
  std::uint32_t bits = 4;          // kQuant
  std::uint32_t group = 64;
  std::vector<std::uint8_t> packed;   // ceil(n * bits / 8)
  std::vector<std::uint16_t> scales;  // rows * ceil(row_len / group)
  std::vector<std::uint16_t> biases;
};

// Random contents with a fixed seed (SplitMix64): words uniform over all
// 48-bit values, row scales in [0.5, 2), tails in [-1, 1), int4 scales and
// biases small f16 values. Same seed, same bytes, on every platform.
TetraRecordSpec RandomTetra(std::string name, std::uint32_t d_out, std::uint32_t d_in, std::uint64_t seed);
Int4G128RecordSpec RandomInt4G128(std::string name, std::uint32_t d_out, std::uint32_t d_in,
                                  std::uint64_t seed);
RawTensorSpec RandomRawF16(std::string name, std::vector<std::uint64_t> dims, std::uint64_t seed);
RawTensorSpec RandomRawQuant(std::string name, std::vector<std::uint64_t> dims, std::uint32_t bits,
                             std::uint32_t group, std::uint64_t seed);

class Writer {
 public:
  explicit Writer(ByteSink sink) : sink_(std::move(sink)) {}

  // Header fields as given; `magic` lets tests write LVQ1..LVQ4 or junk.
  Status WriteHeader(const Header& h, const char magic[4] = kMagic);
  Status WriteTetraRecord(const TetraRecordSpec& r);
  // A Tetra record whose words are drawn from SplitMix64(seed) row by row
  // while writing (for bench-sized records; the other fields as RandomTetra).
  Status WriteRandomTetraRecord(const std::string& name, std::uint32_t d_out, std::uint32_t d_in,
                                std::uint64_t seed);
  Status WriteInt4G128Record(const Int4G128RecordSpec& r);
  Status BeginRaw(std::uint32_t n);
  Status WriteRaw(const RawTensorSpec& t);
  Status BeginBlobs(std::uint32_t n);
  Status WriteBlob(const std::string& name, std::span<const std::byte> bytes);
  Status Finish();

  std::uint64_t bytes_written() const { return written_; }

 private:
  Status Put(std::span<const std::byte> b);
  Status U32(std::uint32_t v);
  Status U64(std::uint64_t v);
  Status Str(const std::string& s);
  Status Head(const std::string& name, std::uint32_t d_out, std::uint32_t d_in, std::uint32_t shell_cap,
              Kind kind, std::uint32_t n_centroids, std::uint64_t seed, bool rot);

  ByteSink sink_;
  std::uint64_t written_ = 0;
  std::uint32_t matrices_left_ = 0;
  std::int64_t raw_left_ = -1;
  std::int64_t blobs_left_ = -1;
};

// The whole file in memory (tests): a header with `matrices` = the count of
// records given, default kind Tetra (or Int4G128 if there is no Tetra
// record) and kinds mask 6.
struct FileSpec {
  std::vector<TetraRecordSpec> tetra;
  std::vector<Int4G128RecordSpec> int4;  // written after the Tetra records
  std::vector<RawTensorSpec> raw;
  std::vector<std::pair<std::string, std::string>> blobs;
};
Result<std::vector<std::byte>> WriteFile(const FileSpec& spec);

// 48-bit kernel word W <-> the 6 disk bytes (big-endian V = label << 1 | gain).
void WordToDiskBytes(std::uint64_t w, std::byte* six);

}  // namespace exlr8::lvq5
