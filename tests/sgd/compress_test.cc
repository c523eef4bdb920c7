// Compressors (sgd/compress.h): the wire formats byte for byte on hand-worked examples (bf16 ties
// to even, NaN and overflow; int8 scales and half-even rounding), the int8 error bound s/2 as a
// closed form, block-aligned slices compressing to slices of the bytes, decompress_add's single
// rounding, error feedback's invariant and its 1/T convergence, non-finite input, validation.
#include "sgd/compress.h"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/random.h"
#include "tests/sgd/compression_spec.h"

namespace gossip::sgd {
namespace {

std::vector<std::byte> encode(const CompressionSpec& spec, const std::vector<float>& x) {
  std::vector<std::byte> out(compressed_bytes(spec, x.size()));
  compress(spec, x, out);
  return out;
}

std::vector<float> decode(const CompressionSpec& spec, const std::vector<std::byte>& in,
                          std::size_t n) {
  std::vector<float> out(n);
  decompress(spec, in, out);
  return out;
}

std::uint16_t bf16_word(float v) {
  std::vector<std::byte> out = encode(spec_of(CompressionKind::kBf16), {v});
  std::uint16_t w;
  std::memcpy(&w, out.data(), 2);
  return w;
}

float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }

float scale_of(const std::vector<std::byte>& bytes, std::size_t block, std::size_t b) {
  float s;
  std::memcpy(&s, bytes.data() + b * (4 + block), 4);
  return s;
}

int q_at(const std::vector<std::byte>& bytes, std::size_t block, std::size_t k) {
  return static_cast<std::int8_t>(bytes[(k / block) * (4 + block) + 4 + k % block]);
}

std::vector<float> randn(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

TEST_CASE("compressed_bytes: 4n, 2n, n + 4 per started block") {
  CHECK(compressed_bytes(spec_of(CompressionKind::kNone), 10) == 40);
  CHECK(compressed_bytes(spec_of(CompressionKind::kBf16), 10) == 20);
  const CompressionSpec i8 = spec_of(CompressionKind::kInt8, 256);
  CHECK(compressed_bytes(i8, 0) == 0);
  CHECK(compressed_bytes(i8, 1) == 5);
  CHECK(compressed_bytes(i8, 256) == 260);
  CHECK(compressed_bytes(i8, 257) == 265);
  CHECK(compressed_bytes(i8, 1000) == 1000 + 4 * 4);
}

TEST_CASE("gossip_message_bytes: compressed_bytes in whole floats") {
  CHECK(gossip_message_bytes(spec_of(CompressionKind::kNone), 10) == 40);
  CHECK(gossip_message_bytes(spec_of(CompressionKind::kBf16), 10) == 20);
  CHECK(gossip_message_bytes(spec_of(CompressionKind::kBf16), 3) == 8);  // 6 bytes + 2 of padding
  const CompressionSpec i8 = spec_of(CompressionKind::kInt8, 256);
  CHECK(gossip_message_bytes(i8, 256) == 260);
  CHECK(gossip_message_bytes(i8, 9) == 16);               // 13 bytes + 3
  CHECK(gossip_message_bytes(i8, 235146) == 238822 + 2);  // the demo MLP: 919 blocks
}

TEST_CASE("bf16: round to nearest even on the upper half, NaN stays NaN, overflow to inf") {
  CHECK(bf16_word(1.0f) == 0x3f80);
  CHECK(bf16_word(-2.5f) == 0xc020);
  CHECK(bf16_word(from_bits(0x3f808000)) == 0x3f80);  // tie, 0x3f80 even: down
  CHECK(bf16_word(from_bits(0x3f818000)) == 0x3f82);  // tie, 0x3f81 odd: up
  CHECK(bf16_word(from_bits(0x3f808001)) == 0x3f81);  // above the tie: up
  CHECK(bf16_word(from_bits(0x3f807fff)) == 0x3f80);  // below the tie: down
  CHECK(bf16_word(-0.0f) == 0x8000);
  CHECK(bf16_word(from_bits(0x00000001)) == 0x0000);  // smallest subnormal rounds to zero
  CHECK(bf16_word(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(bf16_word(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(bf16_word(std::numeric_limits<float>::max()) == 0x7f80);  // beyond bf16's max: inf
  CHECK(bf16_word(from_bits(0x7f7f7fff)) == 0x7f7f);              // bf16's max stays finite
  CHECK(bf16_word(from_bits(0x7fc00000)) == 0x7fc0);              // quiet NaN
  CHECK(bf16_word(from_bits(0x7f800001)) == 0x7fc0);  // payload in the low half: NaN, not inf
  CHECK(bf16_word(from_bits(0xff800001)) == 0xffc0);
  // Decoding shifts the word up: exact.
  const std::vector<std::byte> w = encode(spec_of(CompressionKind::kBf16), {from_bits(0x40490fdb)});
  CHECK(std::bit_cast<std::uint32_t>(decode(spec_of(CompressionKind::kBf16), w, 1)[0]) ==
        0x40490000u);
}

TEST_CASE("int8: the scale and half-even quantisation of a worked block, little-endian") {
  const CompressionSpec spec = spec_of(CompressionKind::kInt8, 16);
  // max |x| = 127: s = 1 exactly, and q = round_half_even(x).
  std::vector<float> x = {127, -63.5f, 0.5f, 1.5f, 2.5f, -0.5f, 0, 126.6f, -127, 3.49f};
  x.resize(16, 0.0f);
  x.push_back(-2.54f);  // second block, one element: q = −127, s = fl(2.54 / 127)
  const std::vector<std::byte> bytes = encode(spec, x);
  REQUIRE(bytes.size() == 4 + 16 + 4 + 1);
  const std::uint8_t want_head[] = {0x00, 0x00, 0x80, 0x3f,  // 1.0f, little-endian
                                    0x7f, 0xc0, 0x00, 0x02, 0x02, 0x00, 0x00, 0x7f, 0x81, 0x03};
  CHECK(std::memcmp(bytes.data(), want_head, sizeof want_head) == 0);
  CHECK(scale_of(bytes, 16, 1) == 2.54f / 127.0f);
  CHECK(static_cast<std::int8_t>(bytes[24]) == -127);
  const std::vector<float> d = decode(spec, bytes, x.size());
  const float want[] = {127, -64, 0, 2, 2, 0, 0, 127, -127, 3};
  for (int k = 0; k < 10; ++k) CHECK(d[k] == want[k]);
  CHECK(d[16] == -127.0f * (2.54f / 127.0f));
}

TEST_CASE("int8: an all-zero block has scale 0 and decodes to zeros, tiny blocks too") {
  const CompressionSpec spec = spec_of(CompressionKind::kInt8, 16);
  std::vector<float> x(32, 0.0f);
  x[20] = from_bits(0x00000005);  // 5 · 2⁻¹⁴⁹: s = fl(that / 127) = 0
  const std::vector<std::byte> bytes = encode(spec, x);
  CHECK(scale_of(bytes, 16, 0) == 0.0f);
  CHECK(scale_of(bytes, 16, 1) == 0.0f);
  for (float v : decode(spec, bytes, x.size())) CHECK(v == 0.0f);
}

TEST_CASE("int8: a subnormal scale rounds down, and the clamp holds |q| at 127") {
  const CompressionSpec spec = spec_of(CompressionKind::kInt8, 16);
  // max = 190 · 2⁻¹⁴⁹: s = fl(1.496 · 2⁻¹⁴⁹) = 2⁻¹⁴⁹, so max/s = 190 and −95 · 2⁻¹⁴⁹ / s = −95.
  std::vector<float> x(16, 0.0f);
  x[0] = from_bits(190);
  x[1] = -from_bits(95);
  const std::vector<std::byte> bytes = encode(spec, x);
  CHECK(scale_of(bytes, 16, 0) == from_bits(1));
  CHECK(q_at(bytes, 16, 0) == 127);
  CHECK(q_at(bytes, 16, 1) == -95);
  const std::vector<float> d = decode(spec, bytes, 16);
  CHECK(d[0] == from_bits(127));
  CHECK(d[1] == -from_bits(95));
}

TEST_CASE("int8: |D(C(x)) − x| ≤ s/2 (plus rounding), the block max maps to ±127") {
  const CompressionSpec spec = spec_of(CompressionKind::kInt8, 64);
  for (const double scale : {1e-30, 1e-3, 1.0, 1e20}) {
    CAPTURE(scale);
    const std::vector<float> x = randn(64 * 7 + 13, 3, scale);
    const std::vector<std::byte> bytes = encode(spec, x);
    const std::vector<float> d = decode(spec, bytes, x.size());
    for (std::size_t b = 0; b * 64 < x.size(); ++b) {
      float max_abs = 0;
      std::size_t arg = 0;
      for (std::size_t k = b * 64; k < std::min(x.size(), (b + 1) * 64); ++k) {
        if (std::fabs(x[k]) > max_abs) max_abs = std::fabs(x[k]), arg = k;
      }
      const float s = scale_of(bytes, 64, b);
      CHECK(s == max_abs / 127.0f);
      CHECK(q_at(bytes, 64, arg) == (x[arg] > 0 ? 127 : -127));
      // r = fl(x/s) is within 127.5·2⁻²⁴ of x/s, and fl(q·s) within |q·s|·2⁻²⁴ of q·s.
      for (std::size_t k = b * 64; k < std::min(x.size(), (b + 1) * 64); ++k) {
        CHECK(std::fabs(static_cast<double>(d[k]) - x[k]) <= 0.50002 * s);
      }
    }
  }
}

TEST_CASE("a block-aligned slice compresses to the matching slice of the bytes") {
  const std::vector<float> x = randn(16 * 9 + 5, 4);
  for (CompressionKind kind :
       {CompressionKind::kNone, CompressionKind::kBf16, CompressionKind::kInt8}) {
    const CompressionSpec spec = spec_of(kind, 16);
    const std::vector<std::byte> whole = encode(spec, x);
    const std::size_t begin = 16 * 3;
    const std::vector<float> tail(x.begin() + begin, x.end());
    const std::vector<std::byte> part = encode(spec, tail);
    const std::size_t offset = compressed_bytes(spec, begin);
    REQUIRE(offset + part.size() == whole.size());
    CHECK(std::memcmp(whole.data() + offset, part.data(), part.size()) == 0);
  }
}

TEST_CASE("decompress_add: int8 rounds q·s + out once (fma), bf16 and none add the decoded value") {
  // base of the size of the decoded values: a second rounding (fl(base + fl(q·s))) would show.
  const std::vector<float> x = randn(1000, 5), base = randn(1000, 6);
  for (CompressionKind kind :
       {CompressionKind::kNone, CompressionKind::kBf16, CompressionKind::kInt8}) {
    CAPTURE(kCompressionKinds.name(kind));
    const CompressionSpec spec = spec_of(kind, 32);
    const std::vector<std::byte> bytes = encode(spec, x);
    const std::vector<float> d = decode(spec, bytes, x.size());
    std::vector<float> out = base;
    decompress_add(spec, bytes, out);
    for (std::size_t k = 0; k < x.size(); ++k) {
      if (kind == CompressionKind::kInt8) {
        const double qs = static_cast<double>(q_at(bytes, 32, k)) * scale_of(bytes, 32, k / 32);
        // The exact sum q·s + base (a double holds it) rounded once to float.
        CHECK(out[k] == static_cast<float>(qs + base[k]));
      } else {
        CHECK(out[k] == base[k] + d[k]);
      }
    }
  }
}

TEST_CASE("error feedback: e = v − D(out) exactly as stated, decoded sums track Σx like 1/T") {
  const std::size_t n = 48;
  const std::vector<float> x = randn(n, 7);
  for (CompressionKind kind :
       {CompressionKind::kNone, CompressionKind::kBf16, CompressionKind::kInt8}) {
    CAPTURE(kCompressionKinds.name(kind));
    const CompressionSpec spec = spec_of(kind, 16);
    std::vector<float> e(n, 0.0f), sum_d(n, 0.0f);
    std::vector<double> sum_decoded(n, 0.0);
    std::vector<std::byte> out(compressed_bytes(spec, n));
    const int rounds = 200;
    for (int t = 0; t < rounds; ++t) {
      const std::vector<float> e_before = e;
      compress_with_feedback(spec, x, e, out);
      const std::vector<float> d = decode(spec, out, n);
      for (std::size_t k = 0; k < n; ++k) {
        const float v = x[k] + e_before[k];
        if (kind == CompressionKind::kInt8) {
          // v − q·s in exact arithmetic (a double holds it: |v − q·s| ≤ s), rounded once.
          const double qs = static_cast<double>(q_at(out, 16, k)) * scale_of(out, 16, k / 16);
          CHECK(e[k] == static_cast<float>(static_cast<double>(v) - qs));
        } else {
          CHECK(v == d[k] + e[k]);  // exact: e holds what rounding dropped (0 for none)
        }
        sum_decoded[k] += d[k];
      }
    }
    // Σ_t D_t = T·x − e_T up to the rounding of each e: the mean of what was sent converges to x.
    double worst = 0, plain_worst = 0;
    const std::vector<float> plain = decode(spec, encode(spec, x), n);
    for (std::size_t k = 0; k < n; ++k) {
      worst = std::max(worst, std::fabs(sum_decoded[k] / rounds - x[k]));
      plain_worst = std::max(plain_worst, std::fabs(static_cast<double>(plain[k]) - x[k]));
    }
    if (kind == CompressionKind::kNone) {
      CHECK(worst == 0.0);
    } else {
      // |e_T| ≤ s/2 ≤ max|x + e|/254, so the error of the mean is about that over T.
      CHECK(worst <= 0.02 / rounds + 1e-6);
      CHECK(worst < plain_worst / 20);  // without feedback the bias stays
    }
  }
}

TEST_CASE("non-finite input: none and bf16 carry it, an int8 block decodes to NaN") {
  std::vector<float> x = randn(48, 8);
  x[20] = std::numeric_limits<float>::infinity();
  x[40] = std::numeric_limits<float>::quiet_NaN();
  const CompressionSpec i8 = spec_of(CompressionKind::kInt8, 16);
  const std::vector<std::byte> bytes = encode(i8, x);
  CHECK(std::isnan(scale_of(bytes, 16, 1)));
  const std::vector<float> d = decode(i8, bytes, x.size());
  for (std::size_t k = 0; k < 16; ++k) CHECK(std::isfinite(d[k]));
  for (std::size_t k = 16; k < 48; ++k) CHECK(std::isnan(d[k]));
  const CompressionSpec bf = spec_of(CompressionKind::kBf16);
  const std::vector<float> db = decode(bf, encode(bf, x), x.size());
  CHECK(std::isinf(db[20]));
  CHECK(std::isnan(db[40]));
}

TEST_CASE("compression specs: names parse, bad block sizes and kinds name the field") {
  CHECK(kCompressionKinds.parse("int8").value() == CompressionKind::kInt8);
  CHECK(kCompressionKinds.parse("bf16").value() == CompressionKind::kBf16);
  CHECK(kCompressionKinds.parse("none").value() == CompressionKind::kNone);
  const Status bad = kCompressionKinds.parse("fp8").status();
  CHECK(bad.message() == "compression 'fp8': expected none, bf16 or int8");
  CompressionSpec s;
  for (std::size_t b : {0, 8, 15, 17, 24, 1000, 131072}) {
    CAPTURE(b);
    s.block_floats = b;
    CHECK(s.validate().message().find("compression.block_floats") != std::string::npos);
  }
  for (std::size_t b : {16, 256, 65536}) {
    s.block_floats = b;
    CHECK(s.validate().is_ok());
  }
  s.kind = static_cast<CompressionKind>(7);
  CHECK(s.validate().message().find("compression.kind") != std::string::npos);
}

}  // namespace
}  // namespace gossip::sgd
