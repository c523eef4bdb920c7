// SgdStep: gossip_sgd's model, optimizer and sampler as the loop's local step (local_step.h). The
// calls are exactly those the loop made before it had this seam, in the same order, so gossipd
// and gossip-sim still agree bit for bit.
#include "daemon/local_step.h"

#include <algorithm>

namespace gossip::daemon {

Result<std::unique_ptr<SgdStep>> SgdStep::create(sgd::Backend& backend, const sgd::Problem& problem,
                                                 const sgd::OptimizerConfig& optimizer, int node,
                                                 int batch_size) {
  Result<std::unique_ptr<sgd::Model>> model = backend.make_model(problem.spec);
  if (!model.is_ok()) return model.status();
  if (Status s = optimizer.validate(); !s.is_ok()) return s.with_context("optimizer");
  return std::unique_ptr<SgdStep>(new SgdStep(backend, problem, std::move(*model), optimizer,
                                              problem.sampler(node, batch_size)));
}

SgdStep::SgdStep(sgd::Backend& backend, const sgd::Problem& problem,
                 std::unique_ptr<sgd::Model> model, const sgd::OptimizerConfig& optimizer,
                 sgd::BatchSampler sampler)
    : backend_(backend),
      train_(problem.train),
      model_(std::move(model)),
      optimizer_(optimizer, problem.spec.num_params()),
      sampler_(std::move(sampler)),
      grad_(backend.alloc(problem.spec.num_params())),
      state_(backend.alloc(std::max<std::size_t>(optimizer_.state_size(), 1))) {}

std::optional<double> SgdStep::gradient(const float* x, std::uint64_t /*iteration*/) {
  sgd::gather(*train_, sampler_.next(), batch_);
  return model_->loss_and_grad(x, batch_, grad_.data());
}

float SgdStep::direction(const float* x, float* update, std::uint64_t iteration) {
  optimizer_.direction(backend_, static_cast<std::int64_t>(iteration), x, grad_.data(),
                       optimizer_.state_size() > 0 ? state_.data() : nullptr, update);
  return static_cast<float>(optimizer_.learning_rate(static_cast<std::int64_t>(iteration)));
}

std::optional<sgd::EvalResult> SgdStep::evaluate(const float* x, const sgd::Dataset& data) {
  return model_->evaluate(x, data);
}

std::vector<float> SgdStep::state() const {
  std::vector<float> out(optimizer_.state_size());
  if (!out.empty()) backend_.copy_to_host(out.data(), state_.data(), out.size());
  return out;
}

void SgdStep::load_state(std::span<const float> state) {
  if (!state.empty()) backend_.copy_to_device(state_.data(), state.data(), state.size());
}

}  // namespace gossip::daemon
