// ParameterBuffers (see param_buffers.h). The mix makes its terms in increasing node id with the
// node's own term at its place, skipping a zero self weight, because gossip-sim sums in that order
// and the fused multiply-adds must round the same to agree bit for bit.
#include "daemon/param_buffers.h"

#include <algorithm>
#include <utility>

namespace gossip::daemon {

ParameterBuffers::ParameterBuffers(sgd::Backend& backend, std::size_t num_params,
                                   std::span<const int> peers, std::size_t message_floats)
    : backend_(backend),
      num_params_(num_params),
      message_floats_(std::max(num_params, message_floats)),
      on_host_(backend.device() == sgd::Device::kCpu),
      x_(backend.alloc(num_params)),
      next_(backend.alloc(num_params)),
      update_(backend.alloc(num_params)),
      x_host_(backend.alloc_host(on_host_ ? 0 : num_params)) {
  for (int peer : peers) {
    if (inbox_host_.count(peer)) continue;
    inbox_host_[peer] = backend.alloc_host(message_floats_);
    if (!on_host_) inbox_device_[peer] = backend.alloc(num_params);
  }
}

void ParameterBuffers::set_x(std::span<const float> values) {
  backend_.copy_to_device(x_.data(), values.data(), num_params_);
  backend_.synchronize();
  if (!on_host_) std::copy(values.begin(), values.end(), x_host_.data());
  x_in_shared_ = false;
}

void ParameterBuffers::set_update(std::span<const float> values) {
  if (values.data() == update()) return;  // u is there already (shared)
  backend_.copy_to_device(update(), values.data(), num_params_);
  backend_.synchronize();
}

void ParameterBuffers::share(std::span<float> x, std::span<float> update, bool mix_into_x) {
  shared_x_ = x;
  shared_update_ = update;
  mix_into_shared_ = mix_into_x;
}

std::vector<float> ParameterBuffers::x_to_host() const {
  std::vector<float> out(num_params_);
  backend_.copy_to_host(out.data(), x(), num_params_);
  return out;
}

void ParameterBuffers::x_to_host(std::span<float> out) const {
  if (out.data() == x()) return;  // x is there already (shared)
  backend_.copy_to_host(out.data(), x(), num_params_);
}

std::span<const float> ParameterBuffers::outgoing() const {
  return {on_host_ ? x() : x_host_.data(), num_params_};
}

std::span<float> ParameterBuffers::inbox(int peer) {
  return {inbox_host_.at(peer).data(), num_params_};
}

std::span<float> ParameterBuffers::message(int peer) {
  return {inbox_host_.at(peer).data(), message_floats_};
}

void ParameterBuffers::upload(int peer) {
  if (!on_host_) {
    backend_.copy_to_device(inbox_device_.at(peer).data(), inbox_host_.at(peer).data(),
                            num_params_);
  }
}

void ParameterBuffers::mix(int self, const RowWeights& w, float gamma, bool with_update) {
  terms_.clear();
  const float* self_x = x();
  const float self_weight = static_cast<float>(w.self);
  bool self_added = self_weight == 0.0f;
  for (const auto& [j, wj] : w.neighbours) {
    if (!self_added && j > self) {
      terms_.push_back({self_weight, self_x});
      self_added = true;
    }
    terms_.push_back(
        {static_cast<float>(wj), on_host_ ? inbox_host_.at(j).data() : inbox_device_.at(j).data()});
  }
  if (!self_added) terms_.push_back({self_weight, self_x});
  finish_mix(gamma, with_update);
}

void ParameterBuffers::mix_terms(std::span<const sgd::MixTerm> terms, float gamma,
                                 bool with_update) {
  terms_.clear();
  std::size_t copies = 0;
  for (const sgd::MixTerm& term : terms) {
    if (term.x == nullptr) {
      terms_.push_back({term.weight, x()});
    } else if (on_host_) {
      terms_.push_back(term);
    } else {
      if (copies == term_device_.size()) term_device_.push_back(backend_.alloc(num_params_));
      backend_.copy_to_device(term_device_[copies].data(), term.x, num_params_);
      terms_.push_back({term.weight, term_device_[copies++].data()});
    }
  }
  finish_mix(gamma, with_update);
}

void ParameterBuffers::finish_mix(float gamma, bool with_update) {
  if (!on_host_) backend_.synchronize();
  const float* u = with_update ? update() : nullptr;
  if (mix_into_shared_) {  // in place when x_t is there too: element-wise, read before write
    backend_.mix(shared_x_.data(), terms_, gamma, u, num_params_);
    x_in_shared_ = true;
    return;
  }
  backend_.mix(next_.data(), terms_, gamma, u, num_params_);
  std::swap(x_, next_);
  x_in_shared_ = false;
  if (!on_host_) backend_.copy_to_host(x_host_.data(), x_.data(), num_params_);
}

}  // namespace gossip::daemon
