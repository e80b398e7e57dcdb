#include "format/status.h"

#include <gtest/gtest.h>

#include "format/checksum.h"
#include "format/dtype.h"

namespace exlr8 {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgumentError("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  EXLR8_ASSIGN_OR_RETURN(int h, Half(x));
  EXLR8_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, PropagatesFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "odd: 3");
  EXPECT_EQ(r.status().WithContext("f.json").ToString(), "InvalidArgument: f.json: odd: 3");
}

TEST(StatusTest, ResultFromOkStatusIsInternalError) {
  Result<int> r{Status::Ok()};
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(ChecksumTest, SpecVectors) {  // spec section 15 item 11
  EXPECT_EQ(Xxh64::Hash({}), 0xEF46DB3751D8E999ull);
  const char abc[] = "abc";
  EXPECT_EQ(Xxh64::Hash(std::as_bytes(std::span(abc, 3))), 0x44BC2CF5AD770999ull);
  std::vector<std::byte> zeros(196608);
  EXPECT_EQ(Xxh64::Hash(zeros), 0xDA1319BB75900657ull);
  // Streaming in odd pieces equals hashing the concatenation.
  Xxh64 h;
  for (size_t i = 0; i < zeros.size(); i += 4097) h.Update(std::span(zeros).subspan(i, std::min<size_t>(4097, zeros.size() - i)));
  std::vector<std::byte> ones;
  for (int i = 0; i < 176; ++i) { ones.push_back(std::byte{0x00}); ones.push_back(std::byte{0x3C}); }
  h.Update(ones);
  EXPECT_EQ(h.Digest(), 0x854BE7974361ABBAull);
  EXPECT_EQ(Hex64(0xEF46DB3751D8E999ull), "ef46db3751d8e999");
}

TEST(DTypeTest, HalfRoundTrip) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const bool nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF);
    if (nan) continue;
    EXPECT_EQ(FloatToHalf(HalfToFloat(h)), h) << b;
  }
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x0001), 5.9604644775390625e-08f);
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048), 0x3C00);  // tie to even
  EXPECT_EQ(BFloat16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(DTypeFromName("BF16"), DType::kBF16);
  EXPECT_FALSE(DTypeFromName("bf16").has_value());
}

}  // namespace
}  // namespace exlr8
