// Trellis tile decode: the bit-exact reference of spec sections 7 and 8.
//
// A tile is 16 x 16 weights coded with K bits each, exactly 32*K bytes; every
// byte string of that length is a valid tile and decodes to 256 E4M3 values.
//
//   bytes      : 8*K LE u32 words, concatenated, each read bit 31 -> bit 0
//                (first stream bit = bit 7 of byte 3)                   (7.1)
//   values     : v[i] = stream bits [iK, iK+K), first bit most significant (7.2)
//   states     : S[i] = stream bits [(i+1)K-16, (i+1)K) mod 256K, MSB first
//                (tail-biting: early states borrow bits from the end)    (7.3)
//   codebook   : x = (S * 0xCBAC1FED) mod 2^32; x = (x & 0x8FFF8FFF) ^ 0x3B603B60;
//                f = RNE_fp16(fp16(lo16) + fp16(hi16))                   (7.4)
//                t = RNE_e4m3fn(clamp(f, -448, 448))  (double rounding!) (7.5)
//   placement  : stream i = 8t + m -> (row, col) with row = input side,
//                col = output side:
//                row = 2(t%4) + (m&1) + 8((m>>1)&1), col = t/4 + 8(m>>2) (7.6)
//
// A run (a half, or one dense TRELLIS entry) is tiles back to back, tile n at
// byte 32*K*n, placed in T (input, output) row-major (spec 8):
//   kGateUp: T is `length` x 128; tile n -> rows 16(n/8), cols 16(n%8)     (8.1)
//   kDown  : T is 128 x `length`; tile n -> rows 16((n/8)%8),
//            cols 128(n/64) + 16(n%8)                                       (8.2)
// For experts `length` is the hidden size; for dense TRELLIS entries (8.3) it
// is `inp` (side 0/1, gate/up layout) or `out` (side 2, down layout).
//
// Thread safety: every function here is pure and may be called from any
// thread concurrently. The codebook tables are built once, on first use,
// under C++ static-initialisation guarantees, and are immutable afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "format/status.h"

namespace exlr8 {

inline constexpr int kTileSide = 16;
inline constexpr int kTileWeights = 256;
inline constexpr int kMinTrellisK = 1;
inline constexpr int kMaxTrellisK = 8;
inline constexpr std::size_t kCodebookSize = 65536;
// Channels per half / per Hadamard block.
inline constexpr std::uint64_t kBlock = 128;

// Bytes of one tile at width k (32 * k).
inline constexpr std::size_t TileBytes(int k) { return 32 * static_cast<std::size_t>(k); }

// ---- E4M3 ("fn" variant: bias 7, no infinities, max 448, NaN = S.1111.111) ----

// Exact value of an E4M3 bit pattern; NaN for 0x7F and 0xFF.
float E4M3ToFloat(std::uint8_t bits);
// fp32 -> E4M3 with round-to-nearest-even, saturating to +-448 (also for
// +-inf); NaN -> 0x7F. The sign is kept when the result is zero.
std::uint8_t FloatToE4M3(float f);
// Whether the byte is an E4M3 NaN (0x7F / 0xFF); dense decoders reject those.
inline bool IsE4M3NaN(std::uint8_t bits) { return (bits & 0x7F) == 0x7F; }

// ---- codebook (spec 7.4 / 7.5) ----

// The 65,536-entry table state -> decoded value (an exact E4M3 value, as
// fp32). Built on first call; the pointer stays valid for the program's life.
// SHA-256 of the table as LE fp32: 44e78f7a...877c624d (spec 15.5).
const float* CodebookF32();
// The same table as E4M3 bit patterns (for FP8 kernels, e.g. the GPU path).
const std::uint8_t* CodebookE4M3Bytes();
// The fp16 intermediate of state s (spec 7.4 step 4), as binary16 bits.
// Exposed for tests of the double rounding.
std::uint16_t CodebookFp16Bits(std::uint16_t state);

// Position in the 16x16 tile (row * 16 + col) of stream element i (7.6).
// REQUIRES: 0 <= i < 256.
int TilePositionOfStreamIndex(int i);

// ---- tile and run decode ----

// Decodes one tile of 32*k bytes at `tile` into `out`, row-major 16 x 16 with
// row = input side, col = output side.
// REQUIRES: 1 <= k <= 8; `tile` points at 32*k readable bytes.
void DecodeTile(const std::byte* tile, int k, float out[256]);

// Like DecodeTile but writes element (row, col) to out[row * row_stride + col].
// REQUIRES: as DecodeTile; row_stride >= 16.
void DecodeTileStrided(const std::byte* tile, int k, float* out, std::size_t row_stride);

enum class HalfLayout { kGateUp, kDown };

// Decodes an expert half (spec 8.1 / 8.2) into T, (input, output) row-major:
// kGateUp -> hidden x 128, kDown -> 128 x hidden.
// Errors: InvalidArgument if k is outside 1..8, hidden is 0 or not a multiple
// of 128, half.size() != 16 * k * hidden, or out.size() != 128 * hidden.
// (Half bytes of the wrong length are a caller bug: the index validation is
// where a wrong `length` becomes a Corruption.)
Status DecodeHalfTiles(std::span<const std::byte> half, int k, HalfLayout layout,
                       std::uint64_t hidden, std::span<float> out);

// Dense TRELLIS entry (spec 8.3): one run whose long side is `length`
// (= inp for side 0/1, laid out like a gate/up half: length x 128; = out for
// side 2, laid out like a down half: 128 x length). Same errors as
// DecodeHalfTiles; this is the same computation under its dense name.
inline Status DecodeTrellisRun(std::span<const std::byte> run, int k, HalfLayout layout,
                               std::uint64_t length, std::span<float> out) {
  return DecodeHalfTiles(run, k, layout, length, out);
}

}  // namespace exlr8
