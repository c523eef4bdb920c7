// The job wiring (see node_job.h).
#include "daemon/node_job.h"

#include <algorithm>
#include <utility>

#include "config/sgd_config.h"

namespace gossip::daemon {

std::shared_ptr<const sgd::Dataset> evaluation_set(
    const TrainConfig& config, const std::shared_ptr<const sgd::Dataset>& test) {
  return sgd::first_examples(test, static_cast<std::int64_t>(config.eval_examples()));
}

Result<NodeJob> make_sgd_job(const TrainConfig& config, const sgd::Problem& problem,
                             sgd::Backend& backend, int node, int num_nodes) {
  NodeJob job;
  job.num_params = problem.spec.num_params();
  job.total_iterations = config::total_iterations(
      config, static_cast<std::size_t>(problem.train->num_examples / num_nodes));
  Result<std::unique_ptr<SgdStep>> step =
      SgdStep::create(backend, problem, config::to_optimizer_config(config, job.total_iterations),
                      node, static_cast<int>(config.batch_size()));
  if (!step.is_ok()) return step.status();
  job.step = std::move(*step);
  job.initial_params = problem.initial_params();
  job.eval_set = evaluation_set(config, problem.test);
  job.test_set = problem.test;
  return job;
}

}  // namespace gossip::daemon
