#include "format/trellis.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "format/dtype.h"

namespace exlr8 {

namespace {

// Big-endian (stream order) loads from a byte buffer.
inline std::uint64_t LoadBE64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap64(v);
  return v;
}

std::array<float, 256> BuildE4M3Table() {
  std::array<float, 256> t{};
  for (int b = 0; b < 256; ++b) {
    const int exp = (b >> 3) & 0xF;
    const int man = b & 0x7;
    float mag;
    if (exp == 0xF && man == 0x7) {
      mag = std::numeric_limits<float>::quiet_NaN();
    } else if (exp == 0) {
      mag = std::ldexp(static_cast<float>(man), -9);  // subnormal: man * 2^-9
    } else {
      mag = std::ldexp(static_cast<float>(8 + man), exp - 10);  // (1 + man/8) * 2^(exp-7)
    }
    t[b] = (b & 0x80) ? -mag : mag;
  }
  return t;
}

const std::array<float, 256>& E4M3Table() {
  static const std::array<float, 256> table = BuildE4M3Table();
  return table;
}

std::uint16_t CodebookFp16(std::uint32_t state) {
  std::uint32_t x = state * 0xCBAC1FEDu;
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  // Both halves have magnitude in [0.125, 2): their sum is exact in fp32, so
  // one FloatToHalf is exactly the RNE half-precision add.
  const float sum = HalfToFloat(static_cast<std::uint16_t>(x & 0xFFFF)) +
                    HalfToFloat(static_cast<std::uint16_t>(x >> 16));
  return FloatToHalf(sum);
}

struct Codebook {
  std::unique_ptr<float[]> f32{new float[kCodebookSize]};
  std::unique_ptr<std::uint8_t[]> e4m3{new std::uint8_t[kCodebookSize]};
  Codebook() {
    const auto& e4 = E4M3Table();
    for (std::uint32_t s = 0; s < kCodebookSize; ++s) {
      const std::uint8_t b = FloatToE4M3(HalfToFloat(CodebookFp16(s)));  // double rounding (7.5)
      e4m3[s] = b;
      f32[s] = e4[b];
    }
  }
};

const Codebook& GetCodebook() {
  static const Codebook codebook;  // thread-safe one-time init
  return codebook;
}

// Element (row, col) offset for stream index i = 8t + j, split as
// RowBase(t) * stride + ColBase(t) + (row/col part that depends on j only).
constexpr int kJRow[8] = {0, 1, 8, 9, 0, 1, 8, 9};
constexpr int kJCol[8] = {0, 0, 0, 0, 8, 8, 8, 8};

// Decodes one tile at width K. The stream is copied once into a byte-swapped
// buffer with the last 16 bits prepended (tail-biting), so state i is the 16
// bits at buffer bit (i+1)K; groups of 8 states share one 64-bit window
// (two windows for K > 6, where 8K + 16 bits exceed 64).
template <int K>
void DecodeTileK(const std::byte* tile, float* out, std::size_t stride, const float* cb) {
  constexpr int kBytes = 32 * K;
  alignas(8) std::uint8_t ext[2 + 32 * kMaxTrellisK + 16];
  // Stream order: the bytes of each LE u32 word from most significant down.
  for (int q = 0; q < 8 * K; ++q) {
    for (int j = 0; j < 4; ++j) ext[2 + 4 * q + j] = std::to_integer<std::uint8_t>(tile[4 * q + 3 - j]);
  }
  ext[0] = ext[2 + kBytes - 2];
  ext[1] = ext[2 + kBytes - 1];
  std::memset(ext + 2 + kBytes, 0, 16);

  std::size_t joff[8];
  for (int j = 0; j < 8; ++j) joff[j] = static_cast<std::size_t>(kJRow[j]) * stride + kJCol[j];

  for (int g = 0; g < 32; ++g) {
    float* base = out + static_cast<std::size_t>(2 * (g & 3)) * stride + (g >> 2);
    const std::uint64_t w1 = LoadBE64(ext + g * K);
    [[maybe_unused]] std::uint64_t w2 = 0;
    if constexpr (8 * K > 48) w2 = LoadBE64(ext + g * K + 4);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const int bitpos = (j + 1) * K;
      std::uint32_t s;
      if (bitpos <= 48) {
        s = static_cast<std::uint32_t>(w1 >> (48 - bitpos)) & 0xFFFFu;
      } else {
        s = static_cast<std::uint32_t>(w2 >> (48 - (bitpos - 32))) & 0xFFFFu;
      }
      base[joff[j]] = cb[s];
    }
  }
}

using TileFn = void (*)(const std::byte*, float*, std::size_t, const float*);

TileFn TileFnFor(int k) {
  switch (k) {
    case 1: return &DecodeTileK<1>;
    case 2: return &DecodeTileK<2>;
    case 3: return &DecodeTileK<3>;
    case 4: return &DecodeTileK<4>;
    case 5: return &DecodeTileK<5>;
    case 6: return &DecodeTileK<6>;
    case 7: return &DecodeTileK<7>;
    case 8: return &DecodeTileK<8>;
    default: return nullptr;
  }
}

}  // namespace

float E4M3ToFloat(std::uint8_t bits) { return E4M3Table()[bits]; }

std::uint8_t FloatToE4M3(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint8_t sign = static_cast<std::uint8_t>((x >> 24) & 0x80);
  const std::uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return 0x7F;               // NaN
  if (ax >= 0x43E00000u) return sign | 0x7E;        // >= 448 (and inf): saturate
  if (ax < 0x3C800000u) {                           // below 2^-6: subnormal grid 2^-9
    const float q = std::nearbyint(std::bit_cast<float>(ax) * 512.0f);  // RNE (default mode)
    return sign | static_cast<std::uint8_t>(q);     // q = 8 is the smallest normal, bits 0x08
  }
  // Normal: keep 3 of the 23 mantissa bits, RNE on the 20 dropped ones; a
  // carry moves into the exponent as it should.
  std::uint32_t m = ax + 0x7FFFFu + ((ax >> 20) & 1u);
  m >>= 20;                    // exponent (8 bits, bias 127) and 3 mantissa bits
  m -= (127u - 7u) << 3;       // rebias to 7
  if (m > 0x7E) m = 0x7E;      // rounding up from just below 448 cannot pass 448, but be safe
  return sign | static_cast<std::uint8_t>(m);
}

const float* CodebookF32() { return GetCodebook().f32.get(); }
const std::uint8_t* CodebookE4M3Bytes() { return GetCodebook().e4m3.get(); }
std::uint16_t CodebookFp16Bits(std::uint16_t state) { return CodebookFp16(state); }

int TilePositionOfStreamIndex(int i) {
  const int t = i >> 3;
  const int m = i & 7;
  const int row = 2 * (t & 3) + (m & 1) + 8 * ((m >> 1) & 1);
  const int col = (t >> 2) + 8 * (m >> 2);
  return row * kTileSide + col;
}

void DecodeTileStrided(const std::byte* tile, int k, float* out, std::size_t row_stride) {
  TileFnFor(k)(tile, out, row_stride, CodebookF32());
}

void DecodeTile(const std::byte* tile, int k, float out[256]) { DecodeTileStrided(tile, k, out, kTileSide); }

Status DecodeHalfTiles(std::span<const std::byte> half, int k, HalfLayout layout, std::uint64_t hidden,
                       std::span<float> out) {
  const TileFn fn = TileFnFor(k);
  if (fn == nullptr) return InvalidArgumentError("trellis run: width K=" + std::to_string(k) + " outside 1..8");
  // The cap keeps 16 * 8 * hidden and 128 * hidden far from overflow.
  if (hidden == 0 || hidden % kBlock != 0 || hidden > (std::uint64_t{1} << 40))
    return InvalidArgumentError("trellis run: length " + std::to_string(hidden) +
                                " is not a positive multiple of 128 (max 2^40)");
  const std::uint64_t want_bytes = 16 * static_cast<std::uint64_t>(k) * hidden;
  if (half.size() != want_bytes)
    return InvalidArgumentError("trellis run: " + std::to_string(half.size()) + " bytes, expected 16*K*length = " +
                                std::to_string(want_bytes) + " (K=" + std::to_string(k) +
                                ", length=" + std::to_string(hidden) + ")");
  if (out.size() != kBlock * hidden)
    return InvalidArgumentError("trellis run: output holds " + std::to_string(out.size()) +
                                " floats, expected 128*length = " + std::to_string(kBlock * hidden));

  const float* cb = CodebookF32();
  const std::size_t tile_bytes = TileBytes(k);
  const std::size_t tiles = static_cast<std::size_t>(hidden / 2);  // 128 * hidden / 256
  const std::byte* src = half.data();
  float* dst = out.data();
  if (layout == HalfLayout::kGateUp) {
    for (std::size_t n = 0; n < tiles; ++n, src += tile_bytes) {
      fn(src, dst + (n >> 3) * 16 * kBlock + (n & 7) * 16, kBlock, cb);
    }
  } else {
    // Each 128-column block (64 tiles) is decoded into a contiguous buffer
    // and copied out row by row: writing tiles straight into rows `hidden`
    // floats apart (a power of two for real models) thrashes a few L1 sets.
    const std::size_t stride = static_cast<std::size_t>(hidden);
    static thread_local float block[kBlock * kBlock];
    for (std::size_t beta = 0; beta < tiles / 64; ++beta) {
      for (std::size_t n = 0; n < 64; ++n, src += tile_bytes) {
        const std::size_t rho = n >> 3, c = n & 7;
        fn(src, block + rho * 16 * kBlock + c * 16, kBlock, cb);
      }
      for (std::size_t r = 0; r < kBlock; ++r)
        std::memcpy(dst + r * stride + beta * kBlock, block + r * kBlock, sizeof(float) * kBlock);
    }
  }
  return Status::Ok();
}

}  // namespace exlr8
