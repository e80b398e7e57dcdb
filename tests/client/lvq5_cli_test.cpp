// `exlr8 verify|decode|synth` on LVQ5 sealed files, run as a real process:
// every golden digest of lvq5-tiny reproduced from the command line, broken
// files refused with exit 1 naming the field, synth output read back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "format/json.h"
#include "tests/client/exlr8_command.h"
#include "tests/support/files.h"

namespace exlr8 {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kFixture = fs::path(EXLR8_SHARED_DIR) / "fixtures" / "lvq5-tiny";

std::string Sha256File(const fs::path& p) {
  const std::string data = testing::ReadFileText(p);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  std::string hex;
  char b[3];
  for (unsigned i = 0; i < len; ++i) {
    std::snprintf(b, sizeof b, "%02x", md[i]);
    hex += b;
  }
  return hex;
}


TEST(Lvq5Cli, VerifyTheFixture) {
  auto r = Exlr8("verify " + (kFixture / "tiny-sealed.bin").string());
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("10 matrix records (6 Tetra, 4 Int4G128)"));
  EXPECT_THAT(r.out, HasSubstr("3 raw tensors, 1 blobs"));
  EXPECT_THAT(r.out, HasSubstr("tetra 0x9c3060086c7a13e6"));
}

TEST(Lvq5Cli, DecodeReproducesEveryGoldenDigest) {
  TempDir tmp;
  auto golden = ParseJson(testing::ReadFileText(kFixture / "golden.json"));
  ASSERT_TRUE(golden.ok());
  const std::string file = (kFixture / "tiny-sealed.bin").string();
  int checked = 0;
  for (const auto& [name, entry] : golden->as_object()) {
    if (name == "_file") continue;
    SCOPED_TRACE(name);
    const fs::path out = tmp.path() / "w.f32";
    auto r = Exlr8("decode " + file + " --record " + name + " --out " + out.string());
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(Sha256File(out), entry.Find("weights_sha256")->as_string());
    ++checked;
    if (const JsonValue* coords = entry.Find("coords_sha256")) {
      const fs::path c = tmp.path() / "c.i8";
      r = Exlr8("decode " + file + " --record " + name + " --coords --out " + c.string());
      ASSERT_EQ(r.status, 0) << r.out;
      EXPECT_EQ(Sha256File(c), coords->as_string());
      ++checked;
    }
  }
  EXPECT_EQ(checked, 19);
  const fs::path blob = tmp.path() / "config.json";
  auto r = Exlr8("decode " + file + " --blob config.json --out " + blob.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(ParseJson(testing::ReadFileText(blob)).ok());
}

TEST(Lvq5Cli, BrokenFilesFailVerifyNamingTheField) {
  TempDir tmp;
  const std::string bytes = testing::ReadFileText(kFixture / "tiny-sealed.bin");
  auto write = [&](const std::string& name, const std::string& data) {
    std::ofstream(tmp.path() / name, std::ios::binary) << data;
    return (tmp.path() / name).string();
  };
  auto r = Exlr8("verify " + write("cut.bin", bytes.substr(0, bytes.size() - 1)));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("blob 0 'config.json'"));
  r = Exlr8("verify " + write("trailing.bin", bytes + "x"));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("end of file at byte " + std::to_string(bytes.size())));
  std::string v4 = bytes;
  v4[3] = '4';
  r = Exlr8("verify " + write("v4.bin", v4));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("version 4 is not supported: exlr8d reads LVQ5"));
  std::string fp = bytes;
  fp[16] ^= 1;
  r = Exlr8("verify " + write("fp.bin", fp));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Tetra map fingerprint at byte 16"));
  // decode checks the structure first: exit 3 (corrupt input).
  r = Exlr8("decode " + (tmp.path() / "fp.bin").string() + " --record x --out " +
            (tmp.path() / "o").string());
  EXPECT_EQ(r.status, 3) << r.out;
}

TEST(Lvq5Cli, DecodeRefusesWrongRequests) {
  TempDir tmp;
  const std::string file = (kFixture / "tiny-sealed.bin").string();
  const std::string out = " --out " + (tmp.path() / "o").string();
  auto r = Exlr8("decode " + file + " --record no.such.weight" + out);
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("no matrix record or raw tensor named 'no.such.weight'"));
  r = Exlr8("decode " + file + " --record model.layers.0.mlp.down_proj.weight --coords" + out);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("not Tetra"));
  EXPECT_FALSE(fs::exists(tmp.path() / "o"));
}

TEST(Lvq5Cli, SynthWritesFilesThatVerifyAndDecode) {
  TempDir tmp;
  const fs::path a = tmp.path() / "a.bin", b = tmp.path() / "b.bin";
  auto r =
      Exlr8("synth --lvq5 " + a.string() +
            " --seed 5 --tetra 1x1,3x23,2x50 --int4g128 1x128 --raw-f16 2x3 --raw-q4 3x7/3 --raw-q8 2x5/4");
  ASSERT_EQ(r.status, 0) << r.out;
  r = Exlr8("synth --lvq5 " + b.string() +
            " --seed 5 --tetra 1x1,3x23,2x50 --int4g128 1x128 --raw-f16 2x3 --raw-q4 3x7/3 --raw-q8 2x5/4");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(testing::ReadFileText(a), testing::ReadFileText(b));  // same seed, same bytes
  r = Exlr8("verify " + a.string());
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("4 matrix records (3 Tetra, 1 Int4G128)"));
  const fs::path o = tmp.path() / "o";
  r = Exlr8("decode " + a.string() + " --record tetra.2.weight --out " + o.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(fs::file_size(o), 2u * 50 * 4);
  r = Exlr8("decode " + a.string() + " --record tetra.2.weight --coords --out " + o.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(fs::file_size(o), 2u * 2 * 24);
  r = Exlr8("decode " + a.string() + " --record raw_q4.0 --out " + o.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(fs::file_size(o), 21u * 4);
  r = Exlr8("synth --lvq5 " + (tmp.path() / "c.bin").string() + " --seed 6");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(testing::ReadFileText(a), testing::ReadFileText(tmp.path() / "c.bin"));
  EXPECT_EQ(Exlr8("verify " + (tmp.path() / "c.bin").string()).status, 0);
}

}  // namespace
}  // namespace exlr8
