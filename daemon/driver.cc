// The node driver (see driver.h). Why it is arranged as it is:
//  - a stopped or abandoned iteration checkpoints the state at its start: x_t is still in the
//    buffers, the optimizer state advances only in LocalStep::direction (after the point of no
//    return), and the batch stream is rewound to where it was (`before`);
//  - a diverged run writes nothing (common/divergence.h), so the newest checkpoint stays usable;
//  - the final parameter files are written even when the final checkpoint fails: they are what
//    the user asked the run for, and the checkpoint's failure is still the exit status.
#include "daemon/driver.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "common/divergence.h"
#include "common/log.h"
#include "daemon/exit_codes.h"
#include "daemon/node_checkpoints.h"

namespace gossip::daemon {
namespace {

class Driver {
 public:
  Driver(const NodeOptions& options, NodeJob& job, NodeCheckpoints& checkpoints,
         ParameterBuffers& buffers, MetricsWriter& metrics, Algorithm& algorithm,
         const std::atomic<bool>& stop, Env& env)
      : options_(options),
        cfg_(options.config),
        job_(job),
        step_(*job.step),
        checkpoints_(checkpoints),
        buffers_(buffers),
        metrics_(metrics),
        algorithm_(algorithm),
        env_(env),
        services_{metrics, env.clock(), stop, options.live_metrics != nullptr} {
    snapshot_.node = options.node_id;
    snapshot_.algorithm = std::string(algorithm.name());
    snapshot_.loss = std::numeric_limits<double>::quiet_NaN();
  }

  RunServices& services() { return services_; }
  // The buffers hold x (from x_0, a checkpoint, or the step's begin()).
  void have_x() { have_x_ = true; }

  NodeResult loop(std::uint64_t start, std::uint64_t total);
  NodeResult fail(int code, const Status& status);
  NodeResult step_failed(std::uint64_t t, const Status& s);
  // The live snapshot after `done` completed iterations, the last one's `stats` (null: none).
  void publish(std::uint64_t done, const IterationStats* stats);

 private:
  Status save(std::uint64_t iteration, const sgd::SamplerState& position);
  NodeResult stop_at(std::uint64_t t, const sgd::SamplerState& before, int code,
                     const std::string& why);
  NodeResult ended(std::uint64_t t, const sgd::SamplerState& before, const IterationEnd& end);
  std::optional<NodeResult> diverged_loss(std::uint64_t t, const std::optional<double>& loss);
  std::optional<NodeResult> after_iteration(std::uint64_t done, std::uint64_t total);
  NodeResult finish(std::uint64_t iterations);

  const NodeOptions& options_;
  const TrainConfig& cfg_;
  NodeJob& job_;
  LocalStep& step_;
  NodeCheckpoints& checkpoints_;
  ParameterBuffers& buffers_;
  MetricsWriter& metrics_;
  Algorithm& algorithm_;
  Env& env_;
  RunServices services_;
  NodeResult result_;
  bool have_x_ = false;
  MetricsSnapshot snapshot_;  // published to options_.live_metrics
};

NodeResult Driver::loop(std::uint64_t start, std::uint64_t total) {
  std::uint64_t end = total;
  for (std::uint64_t t = start; t < total; ++t) {
    if (algorithm_.ends_at(t)) {
      end = t;
      GOSSIP_LOG(kInfo) << "the run ends at iteration " << t << " of " << total << " ("
                        << algorithm_.name() << ": every node that sends to this one has ended)";
      metrics_.event(t, "ended_early", "every node that sends to this one has ended");
      break;
    }
    const sgd::SamplerState before = step_.position();
    if (services_.interrupted()) {
      return stop_at(t, before, kExitStopped, "stop requested (signal)");
    }
    if (Status s = step_.begin(t, buffers_); !s.is_ok()) return step_failed(t, s);
    have_x();
    const IterationOutcome outcome = algorithm_.iterate(t, step_, buffers_);
    if (outcome.ended()) return ended(t, before, outcome.end());
    IterationStats stats = outcome.report().stats;
    stats.loss = outcome.report().loss.value_or(std::numeric_limits<double>::quiet_NaN());
    metrics_.add_iteration(t, stats);
    publish(t + 1, &stats);
    if (std::optional<NodeResult> r = diverged_loss(t, outcome.report().loss)) return *r;
    if (Status s = step_.end(t, buffers_); !s.is_ok()) return step_failed(t + 1, s);
    if (std::optional<NodeResult> r = after_iteration(t + 1, total)) return *r;
  }
  if (start < total) {
    if (std::optional<IterationEnd> why = algorithm_.conclude(end, buffers_)) {
      return ended(end, step_.position(), *why);
    }
  }
  return finish(std::max(start, end));
}

void Driver::publish(std::uint64_t done, const IterationStats* stats) {
  if (!options_.live_metrics) return;
  MetricsSnapshot& s = snapshot_;
  s.iteration = done;
  if (stats) {
    s.loss = stats->loss;
    s.lr = stats->lr;
    s.iteration_s = stats->iteration_s;
    s.iterations_run++;
    s.compute_s_total += stats->compute_s;
    s.wait_s_total += stats->wait_s;
    s.iteration_s_total += stats->iteration_s;
    s.bytes_sent_total += stats->bytes_sent;
    s.bytes_received_total += stats->bytes_received;
  }
  algorithm_.observe(s);
  options_.live_metrics->publish(s);
}

NodeResult Driver::fail(int code, const Status& status) {
  result_.exit_code = code;
  result_.message = status.to_string();
  step_.finish(result_.message);
  GOSSIP_LOG(kError) << result_.message;
  return result_;
}

// The local step could not go on at iteration t (LocalStep::begin, before_mix or end): a diverged
// step stops without a checkpoint; otherwise the step's owner is gone and the node leaves the
// group with a checkpoint of the state it holds.
NodeResult Driver::step_failed(std::uint64_t t, const Status& s) {
  if (s.code() == StatusCode::kAborted) {
    metrics_.flush_iterations();
    metrics_.event(t, "diverged", s.message());
    result_.iterations_done = t;
    return fail(kExitDiverged, s);
  }
  GOSSIP_LOG(kError) << s.to_string();
  return stop_at(t, step_.position(), kExitTrainerGone, s.to_string());
}

Status Driver::save(std::uint64_t iteration, const sgd::SamplerState& position) {
  // Nothing to save before an external trainer posted its x_0.
  if (!checkpoints_.enabled() || !have_x_) return Status::ok();
  std::vector<float> state = step_.state();
  const std::vector<float> extra = algorithm_.state();
  state.insert(state.end(), extra.begin(), extra.end());
  return checkpoints_.save(iteration, buffers_.x_to_host(), position, std::move(state));
}

// Ends the run at the start of iteration t (checkpoint of the state then, position `before`).
NodeResult Driver::stop_at(std::uint64_t t, const sgd::SamplerState& before, int code,
                           const std::string& why) {
  if (code == kExitStopped) algorithm_.leave(t);
  metrics_.flush_iterations();
  metrics_.event(t,
                 code == kExitStopped       ? "stopped"
                 : code == kExitTrainerGone ? "trainer_gone"
                                            : "neighbour_failed",
                 why);
  Status s = save(t, before);
  result_.exit_code = code;
  result_.iterations_done = t;
  result_.message = why;
  if (!s.is_ok()) {
    GOSSIP_LOG(kError) << "checkpoint at iteration " << t << " failed: " << s.to_string();
    result_.message += "; checkpoint failed: " + s.to_string();
  } else if (checkpoints_.enabled()) {
    GOSSIP_LOG(kInfo) << "checkpoint written at iteration " << t;
  }
  step_.finish(result_.message);
  return result_;
}

NodeResult Driver::ended(std::uint64_t t, const sgd::SamplerState& before,
                         const IterationEnd& end) {
  if (end.kind == IterationEnd::Kind::kStepFailed) return step_failed(t, end.status);
  // Abandoned: the batch is drawn again on resume.
  if (Status s = step_.rewind(before); !s.is_ok()) return fail(kExitError, s);
  return stop_at(t, before, end.exit_code, end.status.message());
}

// A non-finite training loss: the run diverged (common/divergence.h) and stops without writing x
// anywhere.
std::optional<NodeResult> Driver::diverged_loss(std::uint64_t t,
                                                const std::optional<double>& loss) {
  if (!loss || std::isfinite(*loss)) return std::nullopt;
  metrics_.flush_iterations();
  const Status s =
      diverged(static_cast<std::int64_t>(t), "the training loss is " + std::to_string(*loss));
  metrics_.event(t, "diverged", s.message());
  result_.iterations_done = t;
  return fail(kExitDiverged, s);
}

// After iteration done−1: evaluation and the periodic checkpoint.
std::optional<NodeResult> Driver::after_iteration(std::uint64_t done, std::uint64_t total) {
  result_.iterations_done = done;
  if (cfg_.eval_every() > 0 && done % cfg_.eval_every() == 0 && done < total && job_.eval_set) {
    if (std::optional<sgd::EvalResult> e = step_.evaluate(buffers_.x(), *job_.eval_set)) {
      metrics_.eval(done, e->loss, e->accuracy);
    }
  }
  if (cfg_.checkpoint().every() > 0 && done % cfg_.checkpoint().every() == 0 && done < total) {
    if (Status s = save(done, step_.position()); !s.is_ok()) {
      if (s.code() == StatusCode::kAborted) {
        metrics_.flush_iterations();
        metrics_.event(done, "diverged", s.message());
        return fail(kExitDiverged, s);
      }
      // Training goes on: a full disk should not cost the run, only durability (logged).
      GOSSIP_LOG(kError) << "periodic checkpoint failed: " << s.to_string();
      metrics_.event(done, "checkpoint_failed", s.to_string());
    }
  }
  return std::nullopt;
}

// The end of the run: final evaluation, checkpoint, parameter files, metrics.
NodeResult Driver::finish(std::uint64_t iterations) {
  metrics_.flush_iterations();
  result_.iterations_done = iterations;
  std::optional<sgd::EvalResult> e;
  if (job_.test_set) e = step_.evaluate(buffers_.x(), *job_.test_set);
  if (e) {
    metrics_.eval(iterations, e->loss, e->accuracy);
    result_.final_test_accuracy = e->accuracy;
    result_.final_test_loss = e->loss;
  }
  const Status checkpoint = save(iterations, step_.position());
  if (checkpoint.code() == StatusCode::kAborted) {
    metrics_.event(iterations, "diverged", checkpoint.message());
    return fail(kExitDiverged, checkpoint);
  }
  if (Status s = write_final_parameters(env_, options_, buffers_.x_to_host(), iterations);
      !s.is_ok()) {
    return fail(s.code() == StatusCode::kAborted ? kExitDiverged : kExitError, s);
  }
  if (!checkpoint.is_ok()) return fail(kExitError, checkpoint.with_context("final checkpoint"));
  // The metrics file is an output the user asked for: lost lines are an error, not exit 0.
  if (Status s = metrics_.close(); !s.is_ok()) return fail(kExitError, s);
  step_.finish("");
  result_.exit_code = kExitOk;
  result_.message = "done";
  if (e) {
    GOSSIP_LOG(kInfo) << "finished " << iterations << " iterations (" << algorithm_.name()
                      << "); local model test accuracy " << e->accuracy << ", loss " << e->loss;
  } else {
    GOSSIP_LOG(kInfo) << "finished " << iterations << " iterations (" << algorithm_.name() << ")";
  }
  return result_;
}

// The result of a run that ends before its first iteration: logged, and the step told why.
NodeResult failed_before_start(LocalStep& step, int code, const Status& status) {
  NodeResult r;
  r.exit_code = code;
  r.message = status.to_string();
  step.finish(r.message);
  GOSSIP_LOG(kError) << r.message;
  return r;
}

}  // namespace

NodeResult drive_node(const NodeOptions& options, NodeJob& job, NodeStart& node_start,
                      sgd::Backend& backend, Algorithm& algorithm, const std::vector<int>& senders,
                      const std::atomic<bool>& stop, Env& env) {
  LocalStep& step = *job.step;
  ParameterBuffers buffers(backend, job.num_params, senders,
                           algorithm.received_floats(job.num_params));
  const std::optional<Checkpoint>& resumed = node_start.resumed;
  std::uint64_t start = 0;
  if (resumed) {
    const Checkpoint& c = *resumed;
    if (Status s = step.rewind(from_snapshot(c.sampler)); !s.is_ok())
      return failed_before_start(step, kExitError, s.with_context("resume"));
    // The checkpoint's state: the step's optimizer state, then the algorithm's (driver.h).
    const std::span<const float> state(c.optimizer_state);
    const std::size_t own = step.state_size();
    step.load_state(state.first(own));
    if (Status s = algorithm.load_state(state.subspan(own)); !s.is_ok())
      return failed_before_start(step, kExitCannotResume, s.with_context("resume"));
    buffers.set_x(c.params);
    start = c.iteration;
  } else if (!job.initial_params.empty()) {
    buffers.set_x(job.initial_params);
  }
  const TrainConfig& cfg = options.config;
  Result<MetricsWriter> metrics =
      MetricsWriter::open(options.metrics_path, options.node_id, cfg.metrics_every(),
                          options.append_metrics || start > 0, env.clock());
  if (!metrics.is_ok()) return failed_before_start(step, kExitError, metrics.status());

  Driver driver(options, job, node_start.checkpoints, buffers, *metrics, algorithm, stop, env);
  if (resumed || !job.initial_params.empty()) driver.have_x();
  const std::uint64_t total = job.total_iterations;
  const bool rejoining = start > 0 && (options.resume || options.resume_at) && start < total;
  int code = kExitError;
  Result<std::uint64_t> first = algorithm.start(start, rejoining, total, driver.services(), &code);
  if (!first.is_ok()) return driver.fail(code, first.status());
  start = *first;
  driver.publish(start, nullptr);
  if (Status s = step.start(start, resumed ? buffers.x_to_host() : std::vector<float>());
      !s.is_ok()) {
    return driver.step_failed(start, s);
  }
  return driver.loop(start, total);
}

}  // namespace gossip::daemon
