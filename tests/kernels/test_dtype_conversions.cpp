// The f32 <-> f16 / bf16 conversions of chronos/dtype.h against known bit patterns, exhaustive
// round trips, and (where the CPU has F16C) the hardware's own f32 -> f16 rounding.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <random>

#include "chronos/dtype.h"

namespace chronos {
namespace {

uint32_t bits_of(float v) { return std::bit_cast<uint32_t>(v); }
float float_of(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(DTypeConversion, F32ToBf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(float_of(0x40490FDB)), 0x4049);  // pi: low half below the midpoint
  EXPECT_EQ(f32_to_bf16(float_of(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(float_of(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(float_of(0x3F808001)), 0x3F81);  // just above the tie
  EXPECT_EQ(f32_to_bf16(float_of(0x3F80FFFF)), 0x3F81);
  EXPECT_EQ(f32_to_bf16(float_of(0x7F7FFFFF)), 0x7F80);  // FLT_MAX rounds to inf, as torch
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xFF80);
  EXPECT_EQ(f32_to_bf16(float_of(0x00000001)), 0x0000);  // smallest subnormal
  EXPECT_EQ(f32_to_bf16(float_of(0x7FC00000)), 0x7FC0);
  // A NaN whose payload sits only in the low half must not become inf.
  EXPECT_EQ(f32_to_bf16(float_of(0x7F800001)) & 0x7FFF, 0x7FC0);
  EXPECT_EQ(f32_to_bf16(float_of(0xFF800001)), 0xFFC0);
}

TEST(DTypeConversion, Bf16ToF32IsTheHighHalf) {
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xC049), -3.140625f);
  EXPECT_EQ(bits_of(bf16_to_f32(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isinf(bf16_to_f32(0xFF80)));
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7FC1)));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float v = bf16_to_f32(uint16_t(h));
    if (std::isnan(v)) continue;
    ASSERT_EQ(f32_to_bf16(v), h) << std::hex << h;  // exhaustive round trip
  }
}

TEST(DTypeConversion, F32ToF16KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(0.1f), 0x2E66);
  EXPECT_EQ(f32_to_f16(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);  // largest finite
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);  // below the midpoint to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // the midpoint rounds to even: inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xFC00);
  EXPECT_EQ(f32_to_f16(2049.0f), 0x6800);                   // tie between 2048 and 2050: even
  EXPECT_EQ(f32_to_f16(2051.0f), 0x6802);                   // tie between 2050 and 2052: even
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);     // tie with zero: even
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -24)), 0x0002);     // tie, odd rounds up
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0001f, -25)), 0x0001);  // just above the tie
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.5f, -24)), 0x0400);  // subnormal rounds up to normal
  EXPECT_EQ(f32_to_f16(1e-10f), 0x0000);
  EXPECT_EQ(f32_to_f16(NAN) & 0x7E00, 0x7E00);
}

TEST(DTypeConversion, F16ToF32KnownValuesAndRoundTrip) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0xFC00), -INFINITY);
  EXPECT_EQ(bits_of(f16_to_f32(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7C01)));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float v = f16_to_f32(uint16_t(h));
    if (std::isnan(v)) continue;
    ASSERT_EQ(f32_to_f16(v), h) << std::hex << h;  // exhaustive round trip
  }
}

// The F16C instruction is an independent implementation of the same IEEE rounding.
__attribute__((target("f16c"))) uint16_t hardware_f32_to_f16(float v) {
  return uint16_t(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(v), _MM_FROUND_TO_NEAREST_INT), 0));
}
__attribute__((target("f16c"))) float hardware_f16_to_f32(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

TEST(DTypeConversion, F16MatchesF16cHardware) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "CPU has no F16C";
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float expected = hardware_f16_to_f32(uint16_t(h));
    if (std::isnan(expected)) continue;
    ASSERT_EQ(bits_of(f16_to_f32(uint16_t(h))), bits_of(expected)) << std::hex << h;
  }
  std::mt19937 rng(1234);
  for (int i = 0; i < 2000000; ++i) {
    // Random bit patterns: every exponent, so subnormals, ties and overflow all occur.
    const float v = float_of(uint32_t(rng()));
    if (std::isnan(v)) continue;
    ASSERT_EQ(f32_to_f16(v), hardware_f32_to_f16(v)) << std::hexfloat << v;
  }
  // Values near f16 range, where random bit patterns are sparse.
  std::uniform_real_distribution<float> near(-70000.0f, 70000.0f);
  for (int i = 0; i < 200000; ++i) {
    const float v = near(rng) * std::ldexp(1.0f, -int(rng() % 40));
    ASSERT_EQ(f32_to_f16(v), hardware_f32_to_f16(v)) << std::hexfloat << v;
  }
}

}  // namespace
}  // namespace chronos
