// ParameterBuffers: the parameter vectors of one node's loop — x_t and x_{t+1} on the backend, the
// update u_t, the host copy of x_t that is sent, and one receive buffer per in-neighbour — and the
// one operation that combines them, the fused D-PSGD mix
//   x_{t+1} = Σ_{j ∈ N_in(i,t) ∪ {i}} W_ij(t) x_j^t − γ_t u_t   (terms in increasing j)
// in the order and rounding gossip-sim uses.
//
// On the cpu backend x_t is host memory and is sent straight from the backend buffer; on a GPU
// node x_t is staged in page-locked host memory (Backend::alloc_host), so the device-to-host copy
// runs at full bus speed, and every receive buffer is page-locked too, so that the copy of a
// neighbour's x_j^t to the device (upload(), queued as soon as it arrived) is an asynchronous DMA
// that overlaps the gradient computation.
//
// An attached trainer's shared memory (share(), cpu backend only) can stand in for x and u, so that
// its parameters are sent and mixed where they lie, with no copy (daemon/attach_step.h).
//
// Sizes are counts of floats (num_params). Used from the loop's thread; the spans handed to the
// exchange (outgoing(), inbox()) are borrowed by it until its wait returns.
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <vector>

#include "daemon/membership.h"
#include "sgd/backend.h"

namespace gossip::daemon {

class ParameterBuffers {
 public:
  // `backend` is borrowed and must outlive this object; `peers`: every node that ever sends to
  // this one (one receive buffer each, of `message_floats` floats: the parameters first, then
  // what the algorithm sends with them; 0 means num_params).
  ParameterBuffers(sgd::Backend& backend, std::size_t num_params, std::span<const int> peers,
                   std::size_t message_floats = 0);

  std::size_t num_params() const { return num_params_; }
  // x_t on the backend, and u_t (written by the local step's direction()).
  const float* x() const { return x_in_shared_ ? shared_x_.data() : x_.data(); }
  float* update() { return shared_update_.empty() ? update_.data() : shared_update_.data(); }

  // x_t := `values` (host memory), staged for sending; waits for the copy.
  void set_x(std::span<const float> values);
  // u_t := `values` (host memory); waits for the copy. Nothing to copy when `values` is update().
  void set_update(std::span<const float> values);

  // Whether share() is possible: the backend computes in host memory.
  bool can_share() const { return on_host_; }
  // From now on, `update` (num_params floats, or empty: keep our own) is u_t, and mix() writes
  // x_{t+1} into `x` when `mix_into_x`, else into our own memory. Call use_shared_x() whenever `x`
  // holds x_t (the trainer posted it): x_t is then sent and mixed from there.
  void share(std::span<float> x, std::span<float> update, bool mix_into_x);
  void use_shared_x() { x_in_shared_ = !shared_x_.empty(); }
  // x_t in host memory (copied), e.g. for a checkpoint or the final parameters.
  std::vector<float> x_to_host() const;
  void x_to_host(std::span<float> out) const;  // out.size() == num_params()
  // What is sent at this iteration: x_t in host memory.
  std::span<const float> outgoing() const;
  // The receive buffer of `peer` (host memory): its parameters (num_params floats), and the whole
  // message (message_floats floats; the same span unless the algorithm sends more).
  std::span<float> inbox(int peer);
  std::span<float> message(int peer);
  // Queues the copy of `peer`'s received x_j^t to the backend (nothing to do on cpu).
  void upload(int peer);

  // x := Σ W_ij x_j − γ u with the row `w` of node `self` (self's term at its place in increasing
  // id), from the uploaded receive buffers; then x is staged for sending.
  // Without `with_update` the update term is left out (pure gossip).
  void mix(int self, const RowWeights& w, float gamma, bool with_update = true);
  // The same fused pass over terms the caller orders: x := Σ_k w_k x_k − γ u, where a term's x is
  // host memory of num_params floats (an algorithm's own receive buffers) or null for x_t itself.
  // Several terms may come from one peer (asynchronous push-sum mixes every message that arrived).
  void mix_terms(std::span<const sgd::MixTerm> terms, float gamma, bool with_update = true);

 private:
  // The pass over terms_ (x_t's term at its place), into x (or the shared x), then staged.
  void finish_mix(float gamma, bool with_update);

  sgd::Backend& backend_;
  const std::size_t num_params_;
  const std::size_t message_floats_;
  const bool on_host_;
  sgd::DeviceBuffer x_, next_, update_;
  sgd::DeviceBuffer x_host_;  // the staged x_t (GPU nodes only)
  std::map<int, sgd::DeviceBuffer> inbox_host_;
  std::map<int, sgd::DeviceBuffer> inbox_device_;  // GPU nodes only
  std::vector<sgd::MixTerm> terms_;
  std::vector<sgd::DeviceBuffer> term_device_;  // mix_terms' copies on a GPU node
  std::span<float> shared_x_, shared_update_;   // share()
  bool mix_into_shared_ = false;
  bool x_in_shared_ = false;  // x_t is in shared_x_ (else in x_)
};

}  // namespace gossip::daemon
