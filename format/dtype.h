// Element types of safetensors tensors and exact conversions to fp32.
//
// The names are safetensors' own ("U8", "F16", "BF16", ...). EXLR8 uses a
// subset (spec 3.2); the reader accepts every dtype safetensors defines so
// that it can describe any file, and the EXLR8 layer above it checks which
// dtype each tensor may have.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "format/status.h"

namespace exlr8 {

enum class DType : std::uint8_t {
  kBool, kU8, kI8, kF8E4M3, kF8E5M2, kI16, kU16, kF16, kBF16,
  kI32, kU32, kF32, kF64, kI64, kU64,
};
inline constexpr int kDTypeCount = 15;

// "U8" -> kU8 ...; nullopt for anything else (names are case-sensitive).
std::optional<DType> DTypeFromName(std::string_view name);
std::string_view DTypeName(DType dtype);
// Bytes per element (1, 2, 4 or 8).
std::size_t DTypeSize(DType dtype);

bool IsFloatVectorDType(DType d);   // F16, BF16, F32: the dtypes a scale/sign vector may have
bool IsIntegerDType(DType d);       // I8..I64, U8..U64

// IEEE binary16 / bfloat16 bit patterns -> fp32 (exact; NaN and inf kept).
float HalfToFloat(std::uint16_t bits);
float BFloat16ToFloat(std::uint16_t bits);
// fp32 -> binary16 with round-to-nearest-even (the writer uses it).
std::uint16_t FloatToHalf(float f);
std::uint16_t FloatToBFloat16(float f);

// Converts `count` elements of a float dtype (F16, BF16, F32) stored
// little-endian at `bytes` into `out`. REQUIRES: bytes.size() == count *
// DTypeSize(dtype), out.size() >= count. Returns InvalidArgument for a
// non-float dtype.
Status ConvertToFloat(DType dtype, std::span<const std::byte> bytes, std::span<float> out);

// Reads element `i` of an integer tensor (any I*/U* dtype) as int64 / uint64.
// For U64 values >= 2^63, ReadIntAsI64 returns the two's-complement wrap; use
// ReadIntAsU64 for checksums (spec 5.2: I64 digests are reinterpreted).
// REQUIRES: (i + 1) * DTypeSize(dtype) <= bytes.size() and IsIntegerDType.
std::int64_t ReadIntAsI64(DType dtype, std::span<const std::byte> bytes, std::size_t i);
std::uint64_t ReadIntAsU64(DType dtype, std::span<const std::byte> bytes, std::size_t i);

// Little-endian loads/stores.
inline std::uint16_t LoadLE16(const std::byte* p) {
  return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) | (std::to_integer<unsigned>(p[1]) << 8));
}
inline std::uint32_t LoadLE32(const std::byte* p) {
  return static_cast<std::uint32_t>(LoadLE16(p)) | (static_cast<std::uint32_t>(LoadLE16(p + 2)) << 16);
}
inline std::uint64_t LoadLE64(const std::byte* p) {
  return static_cast<std::uint64_t>(LoadLE32(p)) | (static_cast<std::uint64_t>(LoadLE32(p + 4)) << 32);
}
inline void StoreLE16(std::byte* p, std::uint16_t v) {
  p[0] = std::byte(v & 0xFF); p[1] = std::byte(v >> 8);
}
inline void StoreLE32(std::byte* p, std::uint32_t v) {
  StoreLE16(p, static_cast<std::uint16_t>(v)); StoreLE16(p + 2, static_cast<std::uint16_t>(v >> 16));
}
inline void StoreLE64(std::byte* p, std::uint64_t v) {
  StoreLE32(p, static_cast<std::uint32_t>(v)); StoreLE32(p + 4, static_cast<std::uint32_t>(v >> 32));
}

}  // namespace exlr8
