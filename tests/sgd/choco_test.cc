// CHOCO-SGD's edge copies (sgd/choco.h): sender and receiver copies stay bit-identical over many
// rounds of a moving x; with none the copy is x after the first round (from zero); with int8 one
// encode leaves |x − ĉ| ≤ s/2 (closed form) and a fixed x is approached by about 254× per round.
#include "sgd/choco.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/random.h"
#include "tests/sgd/compression_spec.h"

namespace gossip::sgd {
namespace {

std::vector<float> randn(std::size_t n, Rng& rng, double scale = 1.0) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t k = 0; k < a.size(); ++k) m = std::max(m, std::fabs(double{a[k]} - b[k]));
  return m;
}

// One round from a zero copy: x ~ N(0, 1) of `n` entries from Rng(seed), its copy after one
// choco_encode of `kind`, and the message.
struct FirstRound {
  std::vector<float> x, copy;
  std::vector<std::byte> msg;
};
FirstRound first_round(CompressionKind kind, std::size_t n, std::uint64_t seed) {
  const CompressionSpec spec = spec_of(kind);
  Rng rng(seed);
  FirstRound r{randn(n, rng), std::vector<float>(n, 0.0f),
               std::vector<std::byte>(compressed_bytes(spec, n))};
  choco_encode(spec, r.x, r.copy, r.msg);
  return r;
}

TEST_CASE("sender and receiver copies stay bit-identical over 200 rounds of a moving x") {
  for (CompressionKind kind :
       {CompressionKind::kNone, CompressionKind::kBf16, CompressionKind::kInt8}) {
    CAPTURE(kCompressionKinds.name(kind));
    const CompressionSpec spec = spec_of(kind, 32);
    const std::size_t n = 32 * 5 + 7;
    Rng rng(1);
    std::vector<float> x = randn(n, rng), sender(n, 0.0f), receiver(n, 0.0f);
    std::vector<std::byte> msg(compressed_bytes(spec, n));
    for (int round = 0; round < 200; ++round) {
      const std::vector<float> step = randn(n, rng, 0.01);  // an SGD-like drift
      for (std::size_t k = 0; k < n; ++k) x[k] += step[k];
      choco_encode(spec, x, sender, msg);
      choco_decode_apply(spec, msg, receiver);
      REQUIRE(std::memcmp(sender.data(), receiver.data(), n * sizeof(float)) == 0);
    }
    // The copy tracks x: within int8's or bf16's resolution of the per-round change.
    CHECK(max_abs_diff(sender, x) < (kind == CompressionKind::kNone ? 1e-6 : 0.01));
  }
}

TEST_CASE("none: the copy is x after one round from zero, and the message is x") {
  const FirstRound r = first_round(CompressionKind::kNone, 100, 2);
  CHECK(std::memcmp(r.copy.data(), r.x.data(), 100 * sizeof(float)) == 0);
  CHECK(std::memcmp(r.msg.data(), r.x.data(), 100 * sizeof(float)) == 0);
}

TEST_CASE("int8: one encode leaves |x − ĉ| ≤ s/2, a fixed x is approached ~254× per round") {
  const std::size_t block = 64, n = block * 6;
  const CompressionSpec spec = spec_of(CompressionKind::kInt8, block);
  Rng rng(3);
  const std::vector<float> x = randn(n, rng);
  std::vector<float> copy = randn(n, rng, 0.5);
  std::vector<std::byte> msg(compressed_bytes(spec, n));
  double previous = max_abs_diff(x, copy);
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    std::vector<double> s(n / block, 0);  // s = max |x − ĉ| / 127 per block, before the encode
    for (std::size_t k = 0; k < n; ++k) {
      s[k / block] = std::max(s[k / block], std::fabs(double{x[k]} - copy[k]) / 127);
    }
    choco_encode(spec, x, copy, msg);
    double now = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const double err = std::fabs(double{x[k]} - copy[k]);
      // s/2, plus the roundings of x − ĉ, x/s and the fma: a few ulps of |x| and of s.
      CHECK(err <= 0.50002 * s[k / block] + 2 * std::ldexp(std::fabs(x[k]), -24));
      now = std::max(now, err);
    }
    // Until float resolution (|x| ≈ 3: ulp 2.4e-7) is reached.
    if (previous > 1e-4) CHECK(now <= previous / 250);
    previous = now;
  }
  CHECK(previous < 1e-6);
}

TEST_CASE("bf16: the copy is within 2^-8 relative of the difference per round") {
  FirstRound r = first_round(CompressionKind::kBf16, 200, 4);
  const std::vector<float>& x = r.x;
  std::vector<float>& copy = r.copy;
  for (std::size_t k = 0; k < 200; ++k) {
    CHECK(std::fabs(double{x[k]} - copy[k]) <= std::ldexp(std::fabs(x[k]), -8));  // half a bf16 ulp
  }
  const double first = max_abs_diff(x, copy);
  choco_encode(spec_of(CompressionKind::kBf16), x, copy, r.msg);
  CHECK(max_abs_diff(x, copy) <= first / 100);
}

}  // namespace
}  // namespace gossip::sgd
