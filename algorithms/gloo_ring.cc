// GlooRing (see gloo_ring.h).
#include "algorithms/gloo_ring.h"

#include <gloo/common/error.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>

#include "common/check.h"
#include "sgd/ring_allreduce.h"

namespace gossip::algorithms {

GlooRing::GlooRing(std::shared_ptr<gloo::Context> context, const sgd::CompressionSpec& spec,
                   std::size_t num_floats, std::chrono::milliseconds timeout)
    : context_(std::move(context)),
      spec_(spec),
      num_floats_(num_floats),
      timeout_(timeout),
      n_(context_->size),
      rank_(context_->rank),
      encoded_(static_cast<std::size_t>(n_)) {
  GOSSIP_CHECK(spec.validate().is_ok());
  for (int k = 0; k < n_; ++k) {
    const sgd::ChunkRange c = sgd::ring_chunk(n_, num_floats, spec.block_floats, k);
    encoded_[k].resize(sgd::compressed_bytes(spec, c.size()));
  }
  bytes_sent_ = sgd::ring_bytes_sent(spec, n_, num_floats, rank_);
  bytes_received_ = sgd::ring_bytes_received(spec, n_, num_floats, rank_);
}

std::uint64_t GlooRing::slot(std::uint64_t tag, int step) const {
  return (std::uint64_t{kSlotPrefix} << 56) | ((tag & 0xffffffffffull) << 16) |
         static_cast<std::uint64_t>(step);
}

void GlooRing::exchange(std::uint64_t at, std::span<std::byte> out, std::span<std::byte> in) {
  const int next = (rank_ + 1) % n_, prev = (rank_ + n_ - 1) % n_;
  std::unique_ptr<gloo::transport::UnboundBuffer> recv, send;
  if (!in.empty()) {
    recv = context_->createUnboundBuffer(in.data(), in.size());
    recv->recv(prev, at);
  }
  if (!out.empty()) {
    send = context_->createUnboundBuffer(out.data(), out.size());
    send->send(next, at);
  }
  // Gloo throws on a timeout or a failed link; a false return is an abort.
  if (recv && !recv->waitRecv(timeout_)) throw gloo::IoException("receive aborted");
  if (send && !send->waitSend(timeout_)) throw gloo::IoException("send aborted");
}

Status GlooRing::mean(std::uint64_t tag, std::span<const float> input, std::span<float> mean) {
  GOSSIP_CHECK_EQ(input.size(), num_floats_);
  GOSSIP_CHECK_EQ(mean.size(), num_floats_);
  auto chunk = [&](int k) { return sgd::ring_chunk(n_, num_floats_, spec_.block_floats, k); };
  int step = 0;
  try {
    // Reduce-scatter: node i sends chunk (i − s) on, adding its own part to what it received.
    if (n_ > 1) {
      const sgd::ChunkRange first = chunk(sgd::ring_reduce_send_chunk(n_, rank_, 0));
      send_.resize(sgd::compressed_bytes(spec_, first.size()));
      sgd::ring_reduce_first(spec_, input.subspan(first.begin, first.size()), send_);
    }
    for (int s = 0; s + 1 < n_; ++s, ++step) {
      const sgd::ChunkRange in = chunk(sgd::ring_reduce_recv_chunk(n_, rank_, s));
      recv_.resize(sgd::compressed_bytes(spec_, in.size()));
      exchange(slot(tag, step), send_, recv_);
      acc_.resize(in.size());
      send_.resize(recv_.size());
      sgd::ring_reduce_hop(spec_, recv_, input.subspan(in.begin, in.size()), acc_, send_);
    }
    const int owned = sgd::ring_owned_chunk(n_, rank_);
    if (n_ > 1) {
      encoded_[owned] = send_;
    } else {
      sgd::ring_reduce_first(spec_, input, encoded_[0]);
    }
    // Allgather: the encoded sums travel on unchanged.
    for (int s = 0; s + 1 < n_; ++s, ++step) {
      exchange(slot(tag, step), encoded_[sgd::ring_gather_send_chunk(n_, rank_, s)],
               encoded_[sgd::ring_gather_recv_chunk(n_, rank_, s)]);
    }
  } catch (const std::exception& e) {
    return unavailable("ring allreduce of round " + std::to_string(tag) + " failed at step " +
                       std::to_string(step) + " of " + std::to_string(2 * (n_ - 1)) +
                       " (a node died, hung or left): " + e.what());
  }
  for (int k = 0; k < n_; ++k) {
    const sgd::ChunkRange c = chunk(k);
    sgd::ring_mean(spec_, n_, encoded_[k], mean.subspan(c.begin, c.size()));
  }
  return Status::ok();
}

}  // namespace gossip::algorithms
