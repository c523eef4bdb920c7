// GlooRing: the compressed ring allreduce of sgd/ring_allreduce.h run over a Gloo context's pairs —
// its schedule, its per-hop arithmetic, its bytes — so that gossipd's mean is the bits
// ring_allreduce_mean_reference (the simulator's) computes. Gloo carries the messages: one unbound
// buffer per send and receive, each step's receive and send posted together, waited for with the
// run's deadline.
//
// Slots: prefix kSlotPrefix (unused by Gloo's own collectives), then the round's tag and the step,
// so the messages of different rounds never meet. One call at a time per context (Gloo's rule);
// not thread-safe.
#pragma once

#include <gloo/context.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "sgd/compress.h"

namespace gossip::algorithms {

class GlooRing {
 public:
  // `context` connected (rank = this node); every node of a job uses the same `spec`.
  GlooRing(std::shared_ptr<gloo::Context> context, const sgd::CompressionSpec& spec,
           std::size_t num_floats, std::chrono::milliseconds timeout);

  // mean ← the mean over the nodes of their `input` (num_floats each) for round `tag`;
  // Unavailable naming the step and the peer when a message does not arrive within the timeout or
  // a link fails.
  Status mean(std::uint64_t tag, std::span<const float> input, std::span<float> mean);

  // Bytes this node sends and receives per call (sgd::ring_bytes_sent / _received).
  std::uint64_t bytes_sent() const { return bytes_sent_; }
  std::uint64_t bytes_received() const { return bytes_received_; }

 private:
  static constexpr std::uint8_t kSlotPrefix = 0x5a;
  std::uint64_t slot(std::uint64_t tag, int step) const;
  // Sends `out` to the next node and receives `in` from the previous one at `slot`.
  void exchange(std::uint64_t slot, std::span<std::byte> out, std::span<std::byte> in);

  std::shared_ptr<gloo::Context> context_;
  const sgd::CompressionSpec spec_;
  const std::size_t num_floats_;
  const std::chrono::milliseconds timeout_;
  const int n_, rank_;
  std::uint64_t bytes_sent_ = 0, bytes_received_ = 0;
  std::vector<std::vector<std::byte>> encoded_;  // chunk k's encoded sum
  std::vector<std::byte> send_, recv_;
  std::vector<float> acc_;
};

}  // namespace gossip::algorithms
