// The v2 lease description (client/lease/description_v2.h): what the holder
// writes reads back the same, each rule refuses a description that breaks
// it naming the field's path and the byte offset of its value, and a
// description is checked against the image it names.
#include "client/lease/description_v2.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace exlr8 {
namespace {

using ::testing::HasSubstr;

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";

// An image of one half, one signs vector and one plain tensor.
ImageLayout OneHalfLayout() {
  ImageLayoutBuilder b({.layers = 2, .experts = 4, .halves = 2, .tp = 4, .rank = 1, .commit = kCommit});
  EXPECT_TRUE(b.AddHalf({.layer = 1,
                         .expert = 2,
                         .proj = Proj::kUp,
                         .half = 1,
                         .k = 2,
                         .trellis_bytes = 4096,
                         .digest = 7})
                  .ok());
  EXPECT_TRUE(b.AddSigns(1, false, {.dtype = DType::kBF16, .shape = {128}, .digest = 8}).ok());
  EXPECT_TRUE(
      b.AddPlain({.name = "model.norm.weight", .dtype = DType::kBF16, .shape = {128}, .digest = 9}).ok());
  auto layout = b.Finish();
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  return *std::move(layout);
}

LeaseDescriptionV2 DescriptionFor(const ImageLayout& layout) {
  LeaseDescriptionV2 d;
  d.repo = "org/glm";
  d.commit = kCommit;
  d.manifest = "home";
  d.tp = 4;
  d.rank = 1;
  d.memory_kind = LeaseMemoryKind::kDevice;
  d.device = LeaseGpu{"GPU-5a1b2c3d-0000-1111-2222-333344445555", "0000:4E:00.0", 0};
  d.allocations = {{layout.allocation_bytes() + 2 * 1024 * 1024, "fd"}};
  d.image = {.allocation = 0,
             .header_offset = 0,
             .bytes = layout.allocation_bytes(),
             .offset_table = layout.header.offset_table.offset,
             .offset_table_bytes = layout.header.offset_table.bytes,
             .layers = layout.header.layers,
             .experts = layout.header.experts,
             .halves = layout.header.halves_per_proj};
  d.tables = {.bytes = SerializeImageTables(layout.tables).size(),
              .tensors = layout.tables.tensors.size(),
              .checks = layout.tables.checks.size(),
              .strings = 18};
  LeaseProof& p = d.proof;
  p.commit = kCommit;
  p.hashed_regions = 3;
  p.hashed_bytes = 4096 + 129 * 4 + 512;
  p.decoded_halves = 1;
  p.decoded_of = 1;
  p.decoded_seed = 12345678901234567890u;
  p.every_layer_width_projection = true;
  p.tiles_bit_exact = true;
  p.max_block_error = 3.1e-7;
  p.dense_decoded_tensors = 0;
  p.seconds_read = 0.25;
  p.seconds_upload = 0.125;
  p.seconds_hash = 0.01;
  p.seconds_decode = 0.5;
  d.release_deadline_s = 30;
  return d;
}

void ExpectSame(const LeaseDescriptionV2& a, const LeaseDescriptionV2& b) {
  EXPECT_EQ(WriteLeaseDescriptionV2(a), WriteLeaseDescriptionV2(b));
  EXPECT_EQ(a.repo, b.repo);
  EXPECT_EQ(a.tp, b.tp);
  EXPECT_EQ(a.memory_kind, b.memory_kind);
  EXPECT_EQ(a.device.has_value(), b.device.has_value());
  ASSERT_EQ(a.allocations.size(), b.allocations.size());
  EXPECT_EQ(a.allocations[0].bytes, b.allocations[0].bytes);
  EXPECT_EQ(a.image.offset_table, b.image.offset_table);
  EXPECT_EQ(a.tables.bytes, b.tables.bytes);
  EXPECT_EQ(a.proof.decoded_seed, b.proof.decoded_seed);
  EXPECT_EQ(a.proof.max_block_error, b.proof.max_block_error);
  EXPECT_EQ(a.proof.mismatch.has_value(), b.proof.mismatch.has_value());
  EXPECT_EQ(a.release_deadline_s, b.release_deadline_s);
}

TEST(LeaseDescriptionV2, RoundTripsDeviceAndHost) {
  const ImageLayout layout = OneHalfLayout();
  const LeaseDescriptionV2 d = DescriptionFor(layout);
  const std::string text = WriteLeaseDescriptionV2(d);
  EXPECT_LT(text.size(), 1500u);
  auto parsed = ParseLeaseDescriptionV2(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString() << "\n" << text;
  ExpectSame(*parsed, d);
  EXPECT_EQ(parsed->device->uuid, d.device->uuid);
  EXPECT_EQ(parsed->device->pci_bus_id, "0000:4E:00.0");

  LeaseDescriptionV2 host = d;
  host.memory_kind = LeaseMemoryKind::kHost;
  host.device.reset();
  auto h = ParseLeaseDescriptionV2(WriteLeaseDescriptionV2(host));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ExpectSame(*h, host);

  LeaseDescriptionV2 ipc = d;
  ipc.allocations = {{d.allocations[0].bytes, "ipc:" + std::string(128, 'a')}, {4096, "fd"}};
  ipc.device->pci_bus_id = "00000000:4e:00.7";
  ipc.proof.tiles_bit_exact = false;
  ipc.proof.mismatch = LeaseMismatch{.tensor = 0,
                                     .offset = 4096 + 77,
                                     .layer = 1,
                                     .expert = kSharedExpert,
                                     .proj = Proj::kDown,
                                     .half = 1,
                                     .name = std::nullopt};
  auto i = ParseLeaseDescriptionV2(WriteLeaseDescriptionV2(ipc));
  ASSERT_TRUE(i.ok()) << i.status().ToString();
  ExpectSame(*i, ipc);
  EXPECT_EQ(i->proof.mismatch->expert, kSharedExpert);
  EXPECT_EQ(i->proof.mismatch->proj, Proj::kDown);
  EXPECT_FALSE(i->proof.mismatch->name.has_value());
}

TEST(LeaseDescriptionV2, AgreesWithTheImageItNames) {
  const ImageLayout layout = OneHalfLayout();
  const LeaseDescriptionV2 d = DescriptionFor(layout);
  auto header = ParseImageHeader(layout.header_bytes);
  auto tables = ParseImageTables(SerializeImageTables(layout.tables), layout.allocation_bytes());
  ASSERT_TRUE(header.ok() && tables.ok());
  EXPECT_TRUE(CheckLeaseImage(d, *header, *tables).ok()) << CheckLeaseImage(d, *header, *tables).ToString();
  LeaseDescriptionV2 other = d;
  other.image.experts = 3;
  EXPECT_THAT(CheckLeaseImage(other, *header, *tables).message(),
              HasSubstr("dimensions 2x3x2 vs header 2x4x2"));
  other = d;
  other.rank = 2;
  EXPECT_THAT(CheckLeaseImage(other, *header, *tables).message(), HasSubstr("rank 2 of 4 vs header 1 of 4"));
  other = d;
  other.commit = "f" + kCommit.substr(1);
  EXPECT_THAT(CheckLeaseImage(other, *header, *tables).message(), HasSubstr("commit"));
  other = d;
  other.tables.checks = 2;
  EXPECT_THAT(CheckLeaseImage(other, *header, *tables).message(), HasSubstr("tables of 3/2/18"));
}

// One rule: replace `from` (its first occurrence) by `to` in the valid
// text; the error names `path` at the offset of the first value in `to`.
struct Rule {
  std::string from, to, path, what;
};

TEST(LeaseDescriptionV2, EachRuleNamesPathAndOffset) {
  const LeaseDescriptionV2 d = DescriptionFor(OneHalfLayout());
  const std::string good = WriteLeaseDescriptionV2(d);
  const std::string table_bytes = "\"bytes\":" + std::to_string(d.tables.bytes);
  const std::string alloc_bytes = "\"bytes\":" + std::to_string(d.allocations[0].bytes);
  const std::string alloc_array = "\"allocations\":[{" + alloc_bytes + ",\"handle\":\"fd\"}]";
  const std::string image_bytes = "\"bytes\":" + std::to_string(d.image.bytes);
  const std::string mismatch =
      "\"mismatch\":{\"tensor\":0,\"offset\":4096,\"layer\":1,\"expert\":2,\"proj\":\"up\","
      "\"half\":1,\"name\":null}";
  const std::vector<Rule> rules = {
      {"\"version\":2", "\"version\":1", "version", "version 1 is not 2"},
      {"\"version\":2", "\"version\":\"2\"", "version", "is not 2"},
      {"\"repo\":", "\"extra\":1,\"repo\":", "extra", "unknown field"},
      {"\"repo\":\"org/glm\"", "\"repo\":\"\"", "repo", "is not a string of 1 to 4096 bytes"},
      {"\"commit\":\"0", "\"commit\":1,\"x\":\"0", "x", "unknown field"},
      {"\"manifest\":\"home\"", "\"manifest\":7", "manifest", "is not a string"},
      {"\"tp\":4", "\"tp\":0", "tp", "0 is not an integer in [1, 2147483647]"},
      {"\"rank\":1", "\"rank\":4", "rank", "4 is not an integer in [0, 3]"},
      {"\"kind\":\"device\"", "\"kind\":\"gpu\"", "memory.kind", "unknown memory kind \"gpu\""},
      {"\"kind\":\"device\"", "\"kind\":\"device\",\"pinned\":true", "memory.pinned", "unknown field"},
      {"\"uuid\":\"GPU-5a1b", "\"uuid\":\"GPX-5a1b", "memory.device.uuid", "is not a GPU UUID"},
      {"\"uuid\":\"GPU-5a1b", "\"uuid\":\"GPU-5a1g", "memory.device.uuid", "is not a GPU UUID"},
      {"\"pci_bus_id\":\"0000:4E:00.0\"", "\"pci_bus_id\":\"0000:4E:00.8\"", "memory.device.pci_bus_id",
       "is not a PCI bus id"},
      {"\"pci_bus_id\":\"0000:4E:00.0\"", "\"pci_bus_id\":\"000:4E:00.0\"", "memory.device.pci_bus_id",
       "is not a PCI bus id"},
      {"\"ordinal_in_holder\":0", "\"ordinal_in_holder\":-1", "memory.device.ordinal_in_holder",
       "not an integer"},
      {"\"ordinal_in_holder\":0", "\"ordinal_in_holder\":0,\"name\":\"H200\"", "memory.device.name",
       "unknown field"},
      {alloc_array, "\"allocations\":{\"a\":1}", "memory.allocations", "is not an array of 1 to 8"},
      {alloc_array, "\"allocations\":[]", "memory.allocations", "is not an array of 1 to 8"},
      {"\"allocations\":[", "\"allocations\":[1,", "memory.allocations[0]", "1, not an object"},
      {alloc_bytes, "\"bytes\":0", "memory.allocations[0].bytes",
       "0 is not an integer in [1, 4611686018427387904]"},
      {"\"handle\":\"fd\"", "\"handle\":\"ipc:12\"", "memory.allocations[0].handle",
       "is neither \"fd\" nor \"ipc:\" and 128 hex digits"},
      {"\"handle\":\"fd\"", "\"handle\":\"fd\",\"kind\":1", "memory.allocations[0].kind", "unknown field"},
      {"\"allocation\":0", "\"allocation\":1", "image.allocation", "1 is not an integer in [0, 0]"},
      {"\"header_offset\":0", "\"header_offset\":100", "image.header_offset", "100 is not a multiple of 256"},
      {"\"header_offset\":0", "\"header_offset\":4194304", "image.bytes", "lies outside allocation 0"},
      {image_bytes, "\"bytes\":4352", "image.offset_table", "lies outside the image of 4352 bytes"},
      {image_bytes, "\"bytes\":4097", "image.bytes", "4097 is not a multiple of 256"},
      {image_bytes, "\"bytes\":256", "image.bytes", "256 is not an integer in [4096,"},
      {"\"offset_table\":", "\"offset_table\":12,\"q\":", "image.q", "unknown field"},
      {"\"layers\":2", "\"layers\":3", "image.offset_table_bytes",
       "expected layers x (experts + 1) x 3 x halves x 8 = 720"},
      {"\"layers\":2", "\"layers\":65535", "image.layers", "is not an integer in [0, 65534]"},
      {"\"halves\":2", "\"halves\":255", "image.halves", "is not an integer in [0, 254]"},
      {table_bytes, "\"bytes\":1", "tables.bytes",
       "1, but the counts and the offset table make " + table_bytes.substr(8)},
      {"\"tensors\":3", "\"tensors\":4", "tables.bytes", "but the counts and the offset table make"},
      {"\"strings\":18", "\"strings\":268435457", "tables.strings", "is not an integer in [0, 268435456]"},
      {"\"proof\":{\"commit\":\"0", "\"proof\":{\"commit\":\"1", "proof.commit",
       "is not the description's commit"},
      {"\"regions\":3", "\"regions\":3,\"x\":0", "proof.hashed.x", "unknown field"},
      {"\"mismatches\":0", "\"mismatches\":4", "proof.hashed.mismatches", "4 is not an integer in [0, 3]"},
      {"\"halves\":1,\"of\":1", "\"halves\":2,\"of\":1", "proof.decoded.halves",
       "2 is not an integer in [0, 1]"},
      {"\"tiles_bit_exact\":true", "\"tiles_bit_exact\":1", "proof.decoded.tiles_bit_exact",
       "is not true or false"},
      {"\"max_block_error\":3.1e-07", "\"max_block_error\":-1", "proof.decoded.max_block_error",
       "is not a finite number >= 0"},
      {"\"read\":0.25", "\"read\":null", "proof.seconds.read", "is not a finite number >= 0"},
      {"\"decode\":0.5", "\"decode\":0.5,\"total\":1", "proof.seconds.total", "unknown field"},
      {"\"tensors\":0,\"mismatches\":0", "\"tensors\":0,\"mismatches\":1", "proof.dense_decoded.mismatches",
       "1 is not an integer in [0, 0]"},
      {"\"tiles_bit_exact\":true", "\"tiles_bit_exact\":false", "proof.mismatch",
       "null, but the proof reports a mismatch"},
      {"\"mismatch\":null", mismatch, "proof.mismatch", "names a mismatch, but the proof reports none"},
      {"\"release_deadline_s\":30", "\"release_deadline_s\":0", "release_deadline_s",
       "0 is not an integer in [1, 3600]"},
      {"\"release_deadline_s\":30", "\"release_deadline_s\":3601", "release_deadline_s",
       "not an integer in [1, 3600]"},
  };
  for (const Rule& r : rules) {
    const std::size_t at = good.find(r.from);
    ASSERT_NE(at, std::string::npos) << r.from;
    std::string text = good;
    text.replace(at, r.from.size(), r.to);
    // The offset of the value named: the first value in `to`, or, for a
    // field added before another, that field's value.
    const std::size_t key = r.to.find("\"" + r.path.substr(r.path.rfind('.') + 1) + "\":");
    std::size_t value = at + r.to.find(':') + 1;
    if (key != std::string::npos) value = at + r.to.find(':', key) + 1;
    auto p = ParseLeaseDescriptionV2(text, "test");
    ASSERT_FALSE(p.ok()) << r.to;
    EXPECT_EQ(p.status().code(), StatusCode::kCorruption);
    const std::string want_path = "lease description from test: '" + r.path + "' at byte ";
    EXPECT_THAT(p.status().message(), HasSubstr(want_path)) << r.to;
    EXPECT_THAT(p.status().message(), HasSubstr(r.what)) << r.to;
    // Offsets are exact where the rule names the value it changed.
    if (r.path != "image.bytes" && r.path != "image.offset_table" && r.path != "image.offset_table_bytes" &&
        r.path != "tables.bytes" && r.path != "proof.mismatch" &&
        r.path.find("allocations") == std::string::npos) {
      EXPECT_THAT(p.status().message(), HasSubstr(want_path + std::to_string(value) + ":")) << r.to;
    }
  }
  // Rules about the mismatch object, on a proof that reports one.
  LeaseDescriptionV2 bad = d;
  bad.proof.tiles_bit_exact = false;
  const std::string base = WriteLeaseDescriptionV2(bad);
  ASSERT_THAT(base, HasSubstr("\"mismatch\":null"));
  const auto with = [&](const std::string& m) {
    std::string t = base;
    t.replace(t.find("\"mismatch\":null"), 15, "\"mismatch\":" + m);
    return ParseLeaseDescriptionV2(t).status().message();
  };
  EXPECT_THAT(with("7"), HasSubstr("'proof.mismatch' at byte"));
  EXPECT_THAT(with("{\"tensor\":3,\"offset\":0,\"layer\":null,\"expert\":null,\"proj\":null,\"half\":null,"
                   "\"name\":null}"),
              HasSubstr("'proof.mismatch.tensor' at byte"));
  EXPECT_THAT(with("{\"tensor\":0,\"offset\":0,\"layer\":null,\"expert\":-2,\"proj\":null,\"half\":null,"
                   "\"name\":null}"),
              HasSubstr("'proof.mismatch.expert' at byte"));
  EXPECT_THAT(with("{\"tensor\":0,\"offset\":0,\"layer\":null,\"expert\":null,\"proj\":\"left\",\"half\":"
                   "null,\"name\":null}"),
              HasSubstr("'proof.mismatch.proj' at byte"));
  EXPECT_THAT(with("{\"tensor\":0,\"offset\":0,\"layer\":null,\"expert\":null,\"proj\":null,\"name\":null}"),
              HasSubstr("'proof.mismatch' at byte"));  // no 'half'
  EXPECT_THAT(with("{\"tensor\":0,\"offset\":99999999,\"layer\":null,\"expert\":null,\"proj\":null,\"half\":"
                   "null,\"name\":null}"),
              HasSubstr("'proof.mismatch.offset' at byte"));
  EXPECT_TRUE(ParseLeaseDescriptionV2([&] {
                std::string t = base;
                t.replace(
                    t.find("\"mismatch\":null"), 15,
                    "\"mismatch\":{\"tensor\":2,\"offset\":5000,\"layer\":null,\"expert\":null,\"proj\":null,"
                    "\"half\":null,\"name\":\"model.norm.weight\"}");
                return t;
              }())
                  .ok());
  // Host memory travels as descriptors; device is required for device memory.
  LeaseDescriptionV2 host = d;
  host.memory_kind = LeaseMemoryKind::kHost;
  host.allocations[0].handle = "ipc:" + std::string(128, '0');
  EXPECT_THAT(ParseLeaseDescriptionV2(WriteLeaseDescriptionV2(host)).status().message(),
              HasSubstr("'memory.allocations[0].handle' at byte"));
  LeaseDescriptionV2 nodev = d;
  nodev.device.reset();
  EXPECT_THAT(ParseLeaseDescriptionV2(WriteLeaseDescriptionV2(nodev)).status().message(),
              HasSubstr("'memory' at byte"));
  EXPECT_THAT(ParseLeaseDescriptionV2(WriteLeaseDescriptionV2(nodev)).status().message(),
              HasSubstr("no 'device'"));
  // Sizes and shapes bounded before anything is built.
  EXPECT_THAT(ParseLeaseDescriptionV2(std::string(kMaxLeaseDescriptionV2Bytes + 1, ' ')).status().message(),
              HasSubstr("larger than 65536 bytes"));
  EXPECT_THAT(ParseLeaseDescriptionV2("[[[[[[1]]]]]]").status().message(), HasSubstr("lease description: "));
  EXPECT_THAT(ParseLeaseDescriptionV2("[]").status().message(), HasSubstr("not an object"));
  EXPECT_THAT(ParseLeaseDescriptionV2("{\"version\":2,\"version\":2}").status().message(),
              HasSubstr("duplicate"));
  std::string nine = good;
  const std::string one = "{" + alloc_bytes + ",\"handle\":\"fd\"}";
  std::string many = one;
  for (int i = 0; i < 8; ++i) many += "," + one;
  nine.replace(nine.find(one), one.size(), many);
  EXPECT_THAT(ParseLeaseDescriptionV2(nine).status().message(), HasSubstr("lease description: "));
}

}  // namespace
}  // namespace exlr8
