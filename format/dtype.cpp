#include "format/dtype.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>

namespace exlr8 {

namespace {
struct DTypeEntry {
  std::string_view name;
  std::size_t size;
};
constexpr std::array<DTypeEntry, kDTypeCount> kTable = {{
    {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2},
    {"F16", 2}, {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"F64", 8}, {"I64", 8}, {"U64", 8},
}};
static_assert(kTable.size() == static_cast<std::size_t>(DType::kU64) + 1);
}  // namespace

std::optional<DType> DTypeFromName(std::string_view name) {
  for (std::size_t i = 0; i < kTable.size(); ++i)
    if (kTable[i].name == name) return static_cast<DType>(i);
  return std::nullopt;
}
std::string_view DTypeName(DType d) { return kTable[static_cast<std::size_t>(d)].name; }
std::size_t DTypeSize(DType d) { return kTable[static_cast<std::size_t>(d)].size; }

bool IsFloatVectorDType(DType d) { return d == DType::kF16 || d == DType::kBF16 || d == DType::kF32; }
bool IsIntegerDType(DType d) {
  switch (d) {
    case DType::kU8: case DType::kI8: case DType::kI16: case DType::kU16:
    case DType::kI32: case DType::kU32: case DType::kI64: case DType::kU64:
      return true;
    default:
      return false;
  }
}

float HalfToFloat(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1F;
  const std::uint32_t man = h & 0x3FF;
  std::uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: value = man * 2^-24, exact in fp32
      float f = std::ldexp(static_cast<float>(man), -24);
      bits = std::bit_cast<std::uint32_t>(f) | sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  return std::bit_cast<float>(bits);
}

float BFloat16ToFloat(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

std::uint16_t FloatToHalf(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) return sign | (ax > 0x7F800000u ? 0x7E00 : 0x7C00);
  if (ax >= 0x477FF000u) return sign | 0x7C00;  // rounds to >= 65520: inf
  if (ax < 0x38800000u) {                      // below 2^-14: subnormal or zero
    // value / 2^-24, rounded to nearest even, as an integer mantissa
    float a = std::bit_cast<float>(ax);
    float q = std::nearbyint(a * 16777216.0f);  // default rounding mode is RNE
    return sign | static_cast<std::uint16_t>(q);
  }
  std::uint32_t m = ax + 0xFFF + ((ax >> 13) & 1);  // RNE on the 13 dropped bits
  m -= 112u << 23;
  return sign | static_cast<std::uint16_t>(m >> 13);
}

std::uint16_t FloatToBFloat16(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40);
  x += 0x7FFF + ((x >> 16) & 1);
  return static_cast<std::uint16_t>(x >> 16);
}

Status ConvertToFloat(DType dtype, std::span<const std::byte> bytes, std::span<float> out) {
  const std::size_t n = bytes.size() / DTypeSize(dtype);
  if (out.size() < n) return InvalidArgumentError("ConvertToFloat: output too small");
  const std::byte* p = bytes.data();
  switch (dtype) {
    case DType::kF16:
      for (std::size_t i = 0; i < n; ++i) out[i] = HalfToFloat(LoadLE16(p + 2 * i));
      return Status::Ok();
    case DType::kBF16:
      for (std::size_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(LoadLE16(p + 2 * i));
      return Status::Ok();
    case DType::kF32:
      for (std::size_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(LoadLE32(p + 4 * i));
      return Status::Ok();
    default:
      return InvalidArgumentError("dtype " + std::string(DTypeName(dtype)) +
                                  " is not a float vector dtype (F16, BF16 or F32)");
  }
}

std::uint64_t ReadIntAsU64(DType dtype, std::span<const std::byte> bytes, std::size_t i) {
  const std::byte* p = bytes.data() + i * DTypeSize(dtype);
  switch (dtype) {
    case DType::kU8: return std::to_integer<std::uint8_t>(*p);
    case DType::kI8: return static_cast<std::uint64_t>(static_cast<std::int64_t>(std::to_integer<std::int8_t>(*p)));
    case DType::kU16: return LoadLE16(p);
    case DType::kI16: return static_cast<std::uint64_t>(static_cast<std::int64_t>(static_cast<std::int16_t>(LoadLE16(p))));
    case DType::kU32: return LoadLE32(p);
    case DType::kI32: return static_cast<std::uint64_t>(static_cast<std::int64_t>(static_cast<std::int32_t>(LoadLE32(p))));
    case DType::kI64: case DType::kU64: return LoadLE64(p);
    default: return 0;
  }
}

std::int64_t ReadIntAsI64(DType dtype, std::span<const std::byte> bytes, std::size_t i) {
  return static_cast<std::int64_t>(ReadIntAsU64(dtype, bytes, i));
}

}  // namespace exlr8
