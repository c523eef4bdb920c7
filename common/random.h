// Seeded, portable random numbers: the same seed gives the same stream on every machine and
// compiler, which is what lets gossipd processes and gossip-sim agree bit for bit on shards,
// initial weights and mini-batches. (std:: distributions are implementation-defined, so they are
// not used for anything that must be reproducible.)
//
// Generator: xoshiro256** (Blackman & Vigna 2018), seeded through SplitMix64. Not cryptographic.
// An Rng is a value: copy it to fork a stream, save state() in a checkpoint, restore with
// set_state(). Not thread-safe; give each thread its own stream (Rng(seed, stream)).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <utility>

namespace gossip {

class Rng {
 public:
  using State = std::array<std::uint64_t, 4>;

  explicit Rng(std::uint64_t seed = 0, std::uint64_t stream = 0);

  std::uint64_t next_u64();
  // Uniform in [0, 1) with 53 random bits.
  double uniform();
  // Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, bound), bound > 0, without modulo bias (Lemire 2019).
  std::uint64_t uniform_int(std::uint64_t bound);
  // Standard normal (Box–Muller; one draw per call, no cached spare, so state() says it all).
  double normal();
  double normal(double mean, double stddev) { return mean + stddev * normal(); }
  // Gamma(shape, 1), shape > 0 (Marsaglia & Tsang 2000); used for Dirichlet draws.
  double gamma(double shape);

  // Fisher–Yates shuffle of any random-access range.
  template <typename T>
  void shuffle(std::span<T> items) {
    for (std::size_t i = items.size(); i > 1; --i) {
      std::size_t j = static_cast<std::size_t>(uniform_int(i));
      std::swap(items[i - 1], items[j]);
    }
  }

  const State& state() const { return s_; }
  void set_state(const State& s) { s_ = s; }

 private:
  State s_;
};

// SplitMix64 step: a good 64-bit mixer, also used to derive seeds from (seed, node id, ...).
std::uint64_t splitmix64(std::uint64_t& x);
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t salt);

}  // namespace gossip
