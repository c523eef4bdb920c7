// gossip-sim: does gossip beat allreduce on my cluster, with my model, and on which topology?
// Runs n virtual nodes of C-PSGD and D-PSGD on a real gossip_sgd problem and real gossip_topology
// matrices, prices every iteration with the network cost model, and prints/writes the result.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

#include "common/cli.h"
#include "common/env.h"
#include "common/escape.h"
#include "common/memory.h"
#include "common/strings.h"
#include "config/flags.h"
#include "config/load.h"
#include "config/sgd_config.h"
#include "sgd/optimizer.h"
#include "sgd/problem.h"
#include "sim/experiment.h"
#include "sim/push_sum_replay.h"
#include "sim/report.h"
#include "sim/simulator.h"
#include "topology/link_flags.h"
#include "topology/topology_file.h"
#include "topology/weights.h"

namespace {

using namespace gossip;
using namespace gossip::sim;

// Everything the three subcommands share, as strings where units or names need parsing.
struct Options {
  std::string problem = "least_squares";
  std::string model, data;
  std::string hidden;
  std::string data_dir = sgd::kFashionMnistDir;
  std::string shard = "iid";
  double dirichlet_alpha = 0.5;
  int dim = 20;
  std::int64_t train_examples = 10000, test_examples = 2000;
  double noise = 0.1;
  double l2 = 0;

  int nodes = 16;  // unless --nodes is given, a topology file's own count replaces it
  std::vector<CLI::Option*> nodes_flags;  // --nodes of each subcommand
  std::string topology = "ring";
  std::string weights = "default";
  std::string order = "cta";

  double lr = 0.05;
  double momentum = 0;
  bool nesterov = false;
  double weight_decay = 0;
  std::string schedule = "constant";
  std::int64_t warmup = 0, lr_step = 1000;
  double lr_factor = 0.1, min_lr = 0;

  int batch = 32;
  std::int64_t iterations = 1000, eval_every = 100, eval_examples = 0;
  bool no_local_eval = false;
  std::uint64_t seed = 1;
  int threads = 0;

  topology::LinkFlags link;  // --bandwidth, --latency (as gossip-topo takes them)
  std::string compute_time = "measure", model_params;
  double payload_fraction = 1.0, cpu_share = 1.0;
  std::string cpu_per_byte = "0", message_overhead = "0", allreduce_model = "table1";
  std::string straggler = "none";

  double target_loss = std::numeric_limits<double>::quiet_NaN();
  double target_accuracy = std::numeric_limits<double>::quiet_NaN();
  std::string csv, dump_params;

  // --local-steps, --outer, --compression, ...: "field=value" in command-line order, applied to a
  // training config as gossipd applies them (config/sgd_config.h round_config_from_overrides).
  std::vector<std::string> round_settings;

  std::vector<std::string> joins, leaves;  // run: --join / --leave NODE@ITER
  std::string replay_push_sum;             // run: the logs' directory of an asynchronous run

  std::string config;             // gossipd's training config: replaces config/flags.h's rows
  std::vector<std::string> sets;  // its --set overrides
  bool json = false, quiet = false;
};

// The training settings: config/flags.h's rows offered to gossip-sim, the flag names gossipd uses.
void add_training_flags(CLI::App& app, Options& o) {
  using config::add_training_option;
  add_training_option(app, "--problem", o.problem)->capture_default_str();
  add_training_option(app, "--model", o.model);
  add_training_option(app, "--data", o.data);
  add_training_option(app, "--hidden", o.hidden);
  add_training_option(app, "--data-dir", o.data_dir)->capture_default_str();
  add_training_option(app, "--shard", o.shard)->capture_default_str();
  add_training_option(app, "--dirichlet-alpha", o.dirichlet_alpha)->capture_default_str();
  add_training_option(app, "--dim", o.dim)->capture_default_str();
  add_training_option(app, "--train-examples", o.train_examples)->capture_default_str();
  add_training_option(app, "--test-examples", o.test_examples)->capture_default_str();
  add_training_option(app, "--noise", o.noise)->capture_default_str();
  add_training_option(app, "--l2", o.l2)->capture_default_str();
  add_training_option(app, "--lr", o.lr)->capture_default_str();
  add_training_option(app, "--momentum", o.momentum)->capture_default_str();
  config::add_training_switch(app, "--nesterov", o.nesterov);
  add_training_option(app, "--weight-decay", o.weight_decay)->capture_default_str();
  add_training_option(app, "--lr-schedule", o.schedule)->capture_default_str();
  add_training_option(app, "--warmup", o.warmup)->capture_default_str();
  add_training_option(app, "--lr-step", o.lr_step)->capture_default_str();
  add_training_option(app, "--lr-factor", o.lr_factor)->capture_default_str();
  add_training_option(app, "--min-lr", o.min_lr)->capture_default_str();
  add_training_option(app, "--batch-size", o.batch)->capture_default_str();
  add_training_option(app, "--iterations", o.iterations)->capture_default_str();
  add_training_option(app, "--eval-every", o.eval_every)->capture_default_str();
  add_training_option(app, "--eval-examples", o.eval_examples)->capture_default_str();
  add_training_option(app, "--seed", o.seed)
      ->check(gossip::non_negative_integer())
      ->capture_default_str();
  for (const char* round : {"--local-steps", "--outer", "--outer-lr", "--outer-momentum",
                            "--compression", "--block-floats", "--choco-step", "--overlap"}) {
    config::add_override_flag(app, config::training_flag(round), o.round_settings);
  }
  config::check_all_offered(app, config::kSim);
}

// How the simulation runs: nodes, weights, step order, evaluation of the local models, threads.
void add_simulation_flags(CLI::App& app, Options& o) {
  o.nodes_flags.push_back(
      app.add_option("--nodes,-n", o.nodes,
                     "Number of simulated nodes (default: a topology file's own count, else 16)"));
  app.add_option("--weights", o.weights,
                 "Weight scheme for generated topologies: default (Metropolis-Hastings / uniform), "
                 "max_degree, lazy, best_constant, optimized, ...")
      ->capture_default_str();
  app.add_option("--order", o.order,
                 "D-PSGD step order: cta (x_i <- sum_j W_ij x_j - lr*u_i, Lian et al.; overlaps) "
                 "or atc (mix after the local step)")
      ->capture_default_str();
  app.add_flag("--no-local-eval", o.no_local_eval,
               "Skip the mean test accuracy of the local models (saves n evaluations per point)");
  app.add_option("--threads,-j", o.threads,
                 "Threads stepping the nodes (0: one per CPU this process may use, i.e. its "
                 "affinity mask capped by its cgroup CPU quota). Results are the same bits for "
                 "every count; a measured --compute-time includes the threads' contention. Give 1 "
                 "when other jobs keep the cores busy (waiting threads spin)")
      ->capture_default_str();
}

// The network cost model's inputs (sim/cost_model.h).
void add_cost_flags(CLI::App& app, Options& o) {
  o.link.add(app);
  app.add_option("--compute-time", o.compute_time,
                 "Seconds of one local step (e.g. 120ms), or 'measure' (real backend, this run)")
      ->capture_default_str();
  app.add_option("--payload-fraction", o.payload_fraction,
                 "Payload bytes per byte on the wire (framing: 0.956 for TCP on a 1500-byte MTU); "
                 "the bandwidth is priced times this")
      ->capture_default_str();
  app.add_option("--cpu-share", o.cpu_share,
                 "Share of a core each node gets when nodes share a host (cores / nodes per "
                 "host, at most 1); compute and --cpu-per-byte are divided by it")
      ->capture_default_str();
  app.add_option("--cpu-per-byte", o.cpu_per_byte,
                 "CPU time each payload byte a node sends or receives costs, e.g. 1.2ns "
                 "(kernel TCP path and copies; measure once per host)")
      ->capture_default_str();
  app.add_option("--message-overhead", o.message_overhead,
                 "Fixed time of one message a node sends or receives, e.g. 0.5ms (added after a "
                 "D-PSGD exchange; overlapping the wire in an allreduce); measure once per cluster")
      ->capture_default_str();
  app.add_option("--allreduce-model", o.allreduce_model,
                 "How C-PSGD's ring allreduce is priced: table1 (2(n-1) latencies + "
                 "2(n-1)/n M/B) or gloo (Gloo's ring: 1 MiB segments, two in flight, each send "
                 "waiting for the receiver's ready message; what gossipd's ALLREDUCE runs) or "
                 "gloo-hops (one chunk of M/n per step, each a rendezvous: 2(n-1)(2 latencies + "
                 "M/nB); how rounds of local steps are always priced)")
      ->capture_default_str();
  app.add_option("--model-params", o.model_params,
                 "Price messages as a model of this many parameters (e.g. 25M) instead of the "
                 "simulated model's own size");
  app.add_option("--straggler", o.straggler,
                 "Per-node, per-iteration compute slowdown: none, bernoulli:P:FACTOR, "
                 "lognormal:SIGMA (drawn from --seed); or one slow host: node:K:FACTOR (node "
                 "K's compute FACTOR times slower) or link:K:FACTOR (its egress at 1/FACTOR of "
                 "the rate)")
      ->capture_default_str();
}

// Targets, outputs, and gossipd's training config in place of the training flags.
void add_output_flags(CLI::App& app, Options& o) {
  app.add_option("--target-loss", o.target_loss, "Target train loss of the averaged model");
  app.add_option("--target-accuracy", o.target_accuracy, "Target test accuracy (0..1)");
  app.add_option("--csv", o.csv, "Write every evaluation point to this CSV file");
  app.add_flag("--json", o.json, "Print a JSON summary on stdout instead of the table");
  app.add_flag("--quiet,-q", o.quiet, "No progress bar");
  app.add_option("--config", o.config,
                 "gossipd's training config (Protobuf text, docs/daemon.md): simulate what gossipd "
                 "would run. Its model, data, shards, batch, optimizer, length, evaluation and "
                 "seed replace the flags that set them (giving one of those too is an error)");
  app.add_option("--set", o.sets,
                 "Override a field of --config as gossipd's --set does, e.g. optimizer.lr=0.1 "
                 "(repeatable)");
}

// Everything the three subcommands share.
void add_common(CLI::App& app, Options& o) {
  add_training_flags(app, o);
  add_simulation_flags(app, o);
  add_cost_flags(app, o);
  add_output_flags(app, o);
}

Result<std::vector<int>> parse_int_list(const std::string& text, const char* what) {
  std::vector<int> out;
  std::stringstream s(text);
  std::string item;
  while (std::getline(s, item, ',')) {
    try {
      std::size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size() || v <= 0) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      return invalid_argument(std::string(what) + ": '" + item + "' is not a positive integer");
    }
  }
  return out;
}

// A comma-separated list of `flag`; an empty entry ("a,,b", a trailing comma) is an error, not
// silently one value fewer.
Result<std::vector<std::string>> split(const std::string& text, const char* flag) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string item(trim(std::string_view(text).substr(start, comma - start)));
    if (item.empty()) {
      return invalid_argument(std::string(flag) + ": empty entry " +
                              std::to_string(out.size() + 1) + " in '" + text + "'");
    }
    out.push_back(item);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// The problem's fields checked where they are given (sgd::ProblemConfig::validate), named by the
// flag that sets them: a bad --dim is a usage error before anything runs, not a runtime one.
Status check_problem_flags(sgd::ProblemConfig p, int nodes) {
  p.num_nodes = nodes;
  const Status s = p.validate();
  if (s.is_ok()) return s;
  constexpr std::pair<const char*, const char*> kFlags[] = {{"synthetic_train", "--train-examples"},
                                                            {"synthetic_test", "--test-examples"},
                                                            {"synthetic_dim", "--dim"},
                                                            {"synthetic_noise", "--noise"},
                                                            {"hidden", "--hidden"},
                                                            {"model", "--model / --problem"}};
  for (const auto& [field, flag] : kFlags) {
    if (s.message().rfind(field, 0) == 0) return s.with_context(flag);
  }
  return s;
}

// Outputs are checked before the run, so that a bad path does not cost the whole simulation: the
// CSV's directory must exist (the file itself, if there, must be a regular file), and the dump's
// directory must be one, or its nearest existing ancestor must be (dump_params creates the rest).
Status check_output_paths(const Options& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!o.csv.empty()) {
    const fs::path csv(o.csv);
    const fs::path dir = csv.parent_path().empty() ? fs::path(".") : csv.parent_path();
    if (!fs::is_directory(dir, ec)) {
      return invalid_argument("--csv " + o.csv + ": " + dir.string() + " is not a directory");
    }
    if (fs::exists(csv, ec) && !fs::is_regular_file(csv, ec)) {
      return invalid_argument("--csv " + o.csv + ": exists and is not a regular file");
    }
  }
  if (!o.dump_params.empty()) {
    fs::path existing = fs::absolute(fs::path(o.dump_params), ec);
    while (!fs::exists(existing, ec) && existing.has_parent_path() &&
           existing.parent_path() != existing) {
      existing = existing.parent_path();
    }
    if (!fs::is_directory(existing, ec)) {
      return invalid_argument("--dump-params " + o.dump_params + ": " + existing.string() +
                              " is not a directory");
    }
  }
  return Status::ok();
}

// --problem's preset: the model and data it names (and the MLP's hidden widths).
Status apply_preset(const std::string& problem, std::string& model, std::string& data,
                    std::vector<int>& hidden) {
  if (problem == "least_squares") {
    model = data = "least_squares";
  } else if (problem == "logistic") {
    model = data = "logistic";
  } else if (problem == "fmnist-softmax") {
    model = "softmax";
    data = "fashion_mnist";
  } else if (problem == "fmnist-mlp") {
    model = "mlp";
    data = "fashion_mnist";
    hidden = {256, 128};
  } else {
    return invalid_argument("--problem '" + problem +
                            "': expected least_squares, logistic, fmnist-softmax or fmnist-mlp");
  }
  return Status::ok();
}

// The learning problem: --problem's preset, then --model, --data, --hidden and the data's fields.
Status problem_from_flags(const Options& o, sgd::ProblemConfig& p) {
  std::string model, data;
  GOSSIP_RETURN_IF_ERROR(apply_preset(o.problem, model, data, p.hidden));
  if (!o.model.empty()) model = o.model;
  if (!o.data.empty()) data = o.data;
  GOSSIP_ASSIGN_OR_RETURN(p.model, sgd::kModelKinds.parse(model));
  GOSSIP_ASSIGN_OR_RETURN(p.data, sgd::kDataKinds.parse(data));
  if (!o.hidden.empty()) {
    GOSSIP_ASSIGN_OR_RETURN(p.hidden, parse_int_list(o.hidden, "--hidden"));
  }
  if (p.model != sgd::ModelKind::kMlp) p.hidden.clear();
  p.l2 = static_cast<float>(o.l2);
  p.data_dir = o.data_dir;
  p.synthetic_train = o.train_examples;
  p.synthetic_test = o.test_examples;
  p.synthetic_dim = o.dim;
  p.synthetic_noise = o.noise;
  GOSSIP_ASSIGN_OR_RETURN(p.shard.scheme, sgd::kShardSchemes.parse(o.shard));
  p.shard.dirichlet_alpha = o.dirichlet_alpha;
  p.seed = o.seed;
  return Status::ok();
}

// The nodes and the topologies; without --nodes, the first topology file in the list sets n
// (make_topology refuses files that disagree).
Status nodes_from_flags(const Options& o, ExperimentConfig& c) {
  c.nodes = o.nodes;
  if (o.nodes <= 0) return invalid_argument("--nodes must be > 0");
  GOSSIP_ASSIGN_OR_RETURN(c.topologies, split(o.topology, "--topology"));
  const bool nodes_given = std::any_of(o.nodes_flags.begin(), o.nodes_flags.end(),
                                       [](const CLI::Option* f) { return f->count() > 0; });
  if (nodes_given) return Status::ok();
  for (const std::string& t : c.topologies) {
    std::error_code ec;
    if (topology::parse_generator_kind(t).is_ok() || !std::filesystem::exists(t, ec)) continue;
    GOSSIP_ASSIGN_OR_RETURN(const topology::Topology file, topology::load_topology(t));
    c.nodes = file.num_nodes();
    break;
  }
  return Status::ok();
}

// The runs: step order, optimizer and schedule, batch, length, evaluation, threads.
Status run_from_flags(const Options& o, RunConfig& r) {
  GOSSIP_ASSIGN_OR_RETURN(r.order, parse_mix_order(o.order));
  r.optimizer.momentum = o.momentum;
  r.optimizer.nesterov = o.nesterov;
  r.optimizer.weight_decay = o.weight_decay;
  GOSSIP_ASSIGN_OR_RETURN(r.optimizer.schedule.kind, sgd::kScheduleKinds.parse(o.schedule));
  r.optimizer.schedule.lr = o.lr;
  r.optimizer.schedule.warmup_steps = o.warmup;
  r.optimizer.schedule.step_size = o.lr_step;
  r.optimizer.schedule.step_factor = o.lr_factor;
  r.optimizer.schedule.total_steps = o.iterations;
  r.optimizer.schedule.min_lr = o.min_lr;
  r.batch_size = o.batch;
  r.iterations = o.iterations;
  r.eval_every = o.eval_every;
  r.eval_examples = o.eval_examples;
  r.eval_local = !o.no_local_eval;
  r.threads = o.threads;
  return r.validate();
}

// A duration flag's value in seconds; errors name the flag.
Result<double> duration_flag(const std::string& text, const char* flag) {
  Result<double> seconds = parse_duration_s(text);
  if (!seconds.is_ok()) return seconds.status().with_context(flag);
  return seconds;
}

// The network cost model: the link, the shares of CPU, the message costs, the allreduce's pricing,
// the compute time, the priced model size and the stragglers.
Status cost_from_flags(const Options& o, CostConfig& cost) {
  GOSSIP_ASSIGN_OR_RETURN(cost.net, o.link.link());
  if (!(o.payload_fraction > 0 && o.payload_fraction <= 1)) {
    return invalid_argument("--payload-fraction must be in (0, 1]");
  }
  cost.net.payload_fraction = o.payload_fraction;
  if (!(o.cpu_share > 0 && o.cpu_share <= 1)) {
    return invalid_argument("--cpu-share must be in (0, 1]");
  }
  cost.cpu_share = o.cpu_share;
  GOSSIP_ASSIGN_OR_RETURN(cost.cpu_s_per_byte, duration_flag(o.cpu_per_byte, "--cpu-per-byte"));
  GOSSIP_ASSIGN_OR_RETURN(cost.message_overhead_s,
                          duration_flag(o.message_overhead, "--message-overhead"));
  Result<AllreduceModel> model = parse_allreduce_model(o.allreduce_model);
  if (!model.is_ok()) return model.status().with_context("--allreduce-model");
  cost.allreduce = *model;
  if (o.compute_time != "measure") {
    GOSSIP_ASSIGN_OR_RETURN(const double s, parse_duration_s(o.compute_time));
    cost.compute_s = s;
  }
  if (!o.model_params.empty()) {
    GOSSIP_ASSIGN_OR_RETURN(const double m, parse_count(o.model_params));
    if (m < 1) return invalid_argument("--model-params must be >= 1");
    cost.model_params = m;
  }
  GOSSIP_ASSIGN_OR_RETURN(cost.straggler,
                          parse_straggler_model(o.straggler, mix_seed(o.seed, 0x57a6)));
  return Status::ok();
}

// The targets whose time and iterations the summary reports.
Status targets_from_flags(const Options& o, ExperimentConfig& c) {
  c.target_loss = o.target_loss;
  c.target_accuracy = o.target_accuracy;
  if (!std::isnan(c.target_loss) && !(std::isfinite(c.target_loss) && c.target_loss >= 0)) {
    return invalid_argument("--target-loss must be a finite loss >= 0");
  }
  if (!std::isnan(c.target_accuracy) && (c.target_accuracy < 0 || c.target_accuracy > 1)) {
    return invalid_argument("--target-accuracy must be in [0, 1]");
  }
  return Status::ok();
}

// The experiment the flags describe, in the order its parts are checked.
Result<ExperimentConfig> build_config(const Options& o) {
  ExperimentConfig c;
  GOSSIP_RETURN_IF_ERROR(problem_from_flags(o, c.problem));
  GOSSIP_RETURN_IF_ERROR(nodes_from_flags(o, c));
  GOSSIP_ASSIGN_OR_RETURN(c.weights, topology::parse_weight_scheme(o.weights));
  GOSSIP_RETURN_IF_ERROR(run_from_flags(o, c.run));
  GOSSIP_RETURN_IF_ERROR(cost_from_flags(o, c.cost));
  GOSSIP_RETURN_IF_ERROR(targets_from_flags(o, c));
  return c;
}

// --config: the training config, loaded as gossipd loads it (file, --set, defaults, validation)
// and mapped to the sgd configs by config/sgd_config.h, the mapping gossipd runs, so the simulated
// nodes draw the same shards and batches and take the same steps as gossipd's. `allreduce`: whether
// the config's algorithm is ALLREDUCE (C-PSGD by Gloo's ring allreduce).
Status apply_train_config(const Options& o, ExperimentConfig& c, bool& allreduce) {
  GOSSIP_ASSIGN_OR_RETURN(const config::TrainConfig t,
                          config::load_config_with_overrides(o.config, o.sets));
  allreduce = t.algorithm() == config::pb::TrainConfig::ALLREDUCE;
  c.push_sum = t.algorithm() == config::pb::TrainConfig::PUSH_SUM;
  // Push-sum with staleness: simulated in lock step (its order is replayed with
  // --replay-push-sum), priced as it runs, asynchronously (sim/cost_model.h).
  c.cost.asynchronous = c.push_sum && t.staleness() > 0;
  c.problem = config::to_problem_config(t, c.nodes);
  std::int64_t train_examples = 0;
  if (t.iterations() == 0) {
    // Epochs count passes over the mean shard, as gossipd counts them: the data set's size.
    GOSSIP_ASSIGN_OR_RETURN(const sgd::Problem problem, sgd::make_problem(c.problem));
    train_examples = problem.train->num_examples;
  }
  const std::uint64_t total =
      config::total_iterations(t, static_cast<std::size_t>(train_examples / std::max(c.nodes, 1)));
  RunConfig& r = c.run;
  r.optimizer = config::to_optimizer_config(t, total);
  r.round = config::to_round_config(t);
  r.batch_size = static_cast<int>(t.batch_size());
  r.iterations = static_cast<std::int64_t>(total);
  // gossipd's eval_every 0 means "at the end only"; the simulator always evaluates at the end.
  r.eval_every = t.eval_every() > 0 ? static_cast<std::int64_t>(t.eval_every())
                                    : std::max<std::int64_t>(r.iterations, 1);
  r.eval_examples = static_cast<std::int64_t>(t.eval_examples());
  GOSSIP_RETURN_IF_ERROR(r.validate());
  GOSSIP_ASSIGN_OR_RETURN(c.cost.straggler,
                          parse_straggler_model(o.straggler, mix_seed(t.seed(), 0x57a6)));
  return Status::ok();
}

// The algorithm of --config decides what is simulated, as it decides what gossipd runs. ALLREDUCE
// (C-PSGD: the n gradients averaged exactly, then one optimizer step; daemon/allreduce.h, held
// against gossip-sim's cpsgd-allreduce by tests/daemon/gossipd_allreduce_test.cc): `run` simulates
// cpsgd-allreduce unless --algorithm names another C-PSGD pricing (dpsgd is refused: it is not
// what the config runs), and the ring is priced as Gloo's unless --allreduce-model says otherwise.
// Says on stderr what is simulated and why.
Status follow_config_algorithm(const std::string& config, bool allreduce, const CLI::App& sub,
                               std::string& algorithm, ExperimentConfig& c) {
  const bool run = sub.get_name() == "run";
  const bool algorithm_given = run && sub.count("--algorithm") > 0;
  if (c.push_sum) {
    if (algorithm_given && algorithm != "push_sum") {
      return invalid_argument("--algorithm " + algorithm + ": --config " + config +
                              " has algorithm: PUSH_SUM; leave out --algorithm, or give push_sum");
    }
    if (run) algorithm = "push_sum";
    std::cerr << "gossip-sim: --config " << log_escape(config)
              << " has algorithm PUSH_SUM: simulating push-sum (Stochastic Gradient Push)\n";
    return Status::ok();
  }
  if (!allreduce) {
    if (run && !algorithm_given) {
      std::cerr << "gossip-sim: --config " << log_escape(config)
                << " has algorithm DPSGD: simulating D-PSGD (dpsgd)\n";
    }
    return Status::ok();
  }
  if (algorithm_given && algorithm == "dpsgd") {
    return invalid_argument("--algorithm dpsgd: --config " + config +
                            " has algorithm: ALLREDUCE (C-PSGD by Gloo's ring allreduce); leave "
                            "out --algorithm, or give cpsgd-allreduce");
  }
  if (run && !algorithm_given) algorithm = "cpsgd-allreduce";
  const bool model_given = sub.count("--allreduce-model") > 0;
  if (!model_given) c.cost.allreduce = AllreduceModel::kGloo;
  std::cerr << "gossip-sim: --config " << log_escape(config)
            << " has algorithm ALLREDUCE: simulating C-PSGD ("
            << (run ? algorithm : std::string("cpsgd-allreduce beside D-PSGD"))
            << "), the ring allreduce priced as "
            << (c.cost.allreduce == AllreduceModel::kGloo ? "Gloo's ring" : "Table 1's ring")
            << (model_given ? " (--allreduce-model)" : " (what gossipd runs)") << "\n";
  return Status::ok();
}

// A runtime error or invalid input (a data or topology file): exit 1.
int fail(const Status& s) {
  std::cerr << "gossip-sim: " << log_escape(s.to_string()) << "\n";
  return s.code() == StatusCode::kAborted ? kExitDiverged : kExitRuntimeError;
}

// A bad command line (an option's value, a missing or unknown option): exit 2, as CLI11's own
// usage errors.
int usage(const Status& s) {
  std::cerr << "gossip-sim: " << log_escape(s.to_string()) << "\n";
  return kExitUsageError;
}

// Memory the experiment needs, estimated before anything is allocated: the data set (float32
// features and a label or target per example) and the per-node state (x, x_{t+1}, gradient,
// direction, optimizer state: 5 float32 vectors of the model's size per node), so that huge sizes
// are a clear error, not std::bad_alloc half-way through.
Status check_experiment_memory(const ExperimentConfig& c) {
  const sgd::ProblemConfig& p = c.problem;
  const bool fmnist = p.data == sgd::DataKind::kFashionMnist;
  const double dim = fmnist ? 784.0 : std::max(p.synthetic_dim, 1);
  const double examples = fmnist ? 70000.0
                                 : double(std::max<std::int64_t>(p.synthetic_train, 0)) +
                                       double(std::max<std::int64_t>(p.synthetic_test, 0));
  double params = 0, in = dim;
  for (int h : p.hidden) {
    params += (in + 1) * std::max(h, 1);
    in = std::max(h, 1);
  }
  params += (in + 1) * (fmnist ? 10.0 : 2.0);
  const double bytes = examples * (dim + 1) * 4 + params * 4 * 5 * std::max(c.nodes, 1);
  if (!(bytes < 1.8e19)) return out_of_range("the experiment's sizes overflow any memory");
  return check_memory(static_cast<std::uint64_t>(bytes), 0,
                      "the experiment (" + std::to_string(static_cast<long long>(examples)) +
                          " examples of dimension " + std::to_string(static_cast<long long>(dim)) +
                          ", about " + std::to_string(static_cast<long long>(params)) +
                          " parameters on each of " + std::to_string(c.nodes) + " nodes)");
}

// The command line: the three subcommands, each with the common flags and its own.
struct CommandLine {
  CLI::App app{
      "gossip-sim: simulate decentralized parallel SGD (D-PSGD, Lian et al. 2017) against "
      "centralized PSGD (parameter server and ring allreduce) on n virtual nodes, with real "
      "models and data (gossip_sgd), real mixing matrices (gossip_topology) and a network cost "
      "model that turns iterations into simulated seconds.\n\n"
      "  gossip-sim run --algorithm dpsgd --topology ring --nodes 16 --iterations 2000\n"
      "  gossip-sim compare --topology ring,exponential --nodes 32 --problem fmnist-mlp \\\n"
      "      --bandwidth 1Gbps --latency 1ms --model-params 25M --compute-time 100ms\n"
      "  gossip-sim sweep --param bandwidth --values 100Mbps,1Gbps,10Gbps,100Gbps ...\n"};
  Options o;
  std::string algorithm = "dpsgd";
  std::string sweep_param = "bandwidth", sweep_values;
  CLI::App* run = nullptr;
  CLI::App* compare = nullptr;
  CLI::App* sweep = nullptr;

  CommandLine() {
    app.require_subcommand(1);
    define_run();
    define_compare();
    define_sweep();
  }
  // The subcommand that was given (after a successful parse).
  const CLI::App& given() const {
    return run->parsed() ? *run : compare->parsed() ? *compare : *sweep;
  }

 private:
  void define_run() {
    run = app.add_subcommand(
        "run", "One algorithm on one topology: the convergence, priced with the cost model");
    add_common(*run, o);
    run->add_option(
           "--algorithm", algorithm,
           "dpsgd, push_sum (Stochastic Gradient Push), cpsgd (priced as parameter server and as "
           "ring allreduce), cpsgd-ps or cpsgd-allreduce")
        ->capture_default_str();
    run->add_option("--topology", o.topology,
                    "Generator (ring, torus, exponential, "
                    "one_peer_exponential, complete, ...) or topology file")
        ->capture_default_str();
    run->add_option("--join", o.joins,
                    "NODE@ITER (repeatable): node NODE is absent until iteration ITER, then joins "
                    "with its present neighbours' mean, as a gossipd standby node "
                    "(fault.standby_nodes) admitted at ITER; dpsgd on a symmetric W only");
    run->add_option("--leave", o.leaves,
                    "NODE@ITER (repeatable): node NODE takes no part from iteration ITER on, as a "
                    "gossipd node that announced its leave (SIGTERM) for ITER");
    run->add_option("--replay-push-sum", o.replay_push_sum,
                    "DIR: replay, bit for bit, the asynchronous push-sum run whose nodes logged "
                    "their mixing order to DIR/node-<i>/push_sum_order.tsv (gossipd's "
                    "checkpoint.dir; a run from iteration 0), with --config its training config "
                    "(algorithm: PUSH_SUM) and --topology its topology; prints the final push-sum "
                    "weights and their sum, --dump-params writes the final parameters");
    run->add_option("--dump-params", o.dump_params,
                    "Write each node's final parameters to DIR/node_<i>.f32 (raw float32, "
                    "little-endian)");
  }
  void define_compare() {
    compare = app.add_subcommand(
        "compare",
        "C-PSGD (parameter server, ring allreduce) against D-PSGD on one or more "
        "topologies; prints time and iterations to the target and the speedups");
    add_common(*compare, o);
    compare
        ->add_option("--topology", o.topology,
                     "Comma-separated generators or topology files for D-PSGD")
        ->capture_default_str();
  }
  void define_sweep() {
    sweep = app.add_subcommand(
        "sweep",
        "Repeat compare over values of one parameter and report where D-PSGD starts or "
        "stops winning (bandwidth and latency re-price the same runs)");
    add_common(*sweep, o);
    sweep->add_option("--topology", o.topology, "D-PSGD topology (comma-separated for several)")
        ->capture_default_str();
    sweep
        ->add_option("--param", sweep_param,
                     "bandwidth, latency, nodes, topology, local_steps or compression")
        ->capture_default_str();
    sweep
        ->add_option("--values", sweep_values,
                     "Comma-separated values, e.g. 100Mbps,1Gbps,10Gbps or 1,10,50 (local_steps) "
                     "or none,bf16,int8 (compression)")
        ->required();
  }
};

// The config algorithm the round flags are checked for: ALLREDUCE when `run` simulates C-PSGD
// only (a CHOCO step is then an error, as in such a config), else DPSGD (compare's DiLoCo ignores
// it).
config::pb::TrainConfig::Algorithm round_algorithm(const CommandLine& cl) {
  const bool cpsgd_only = cl.run->parsed() && cl.algorithm.rfind("cpsgd", 0) == 0;
  return cpsgd_only ? config::pb::TrainConfig::ALLREDUCE : config::pb::TrainConfig::DPSGD;
}

// The training settings come from the flags or from --config (with --set), never from both. An
// exit code when they cannot be used.
std::optional<int> apply_training_source(CommandLine& cl, ExperimentConfig& c) {
  const Options& o = cl.o;
  if (o.config.empty()) {
    if (!o.sets.empty()) {
      return usage(invalid_argument("--set overrides a field of --config; give --config FILE"));
    }
    if (const Status s = check_problem_flags(c.problem, c.nodes); !s.is_ok()) return usage(s);
    auto round = config::round_config_from_overrides(o.round_settings, round_algorithm(cl));
    if (!round.is_ok()) return usage(round.status());
    c.run.round = *round;
    return std::nullopt;
  }
  const CLI::App& sub = cl.given();
  if (const std::string flag = config::training_flag_given(sub, config::kSim); !flag.empty()) {
    return usage(invalid_argument(flag + " is set by --config " + o.config +
                                  "; change it there or with --set"));
  }
  // A config that does not load or validate is invalid input, as a bad topology file is.
  bool allreduce = false;
  if (const Status s = apply_train_config(o, c, allreduce); !s.is_ok()) return fail(s);
  if (const Status s = follow_config_algorithm(o.config, allreduce, sub, cl.algorithm, c);
      !s.is_ok()) {
    return usage(s);
  }
  return std::nullopt;
}

// `run --algorithm`: which of the experiment's series run.
Status select_algorithm(const std::string& algorithm, ExperimentConfig& c) {
  if (algorithm == "dpsgd" || algorithm == "push_sum") {
    c.include_cpsgd = false;
    c.push_sum = algorithm == "push_sum";
    if (c.topologies.size() != 1) return invalid_argument("run takes one --topology");
    if (c.push_sum && !c.run.round.per_iteration()) {
      return invalid_argument(
          "--algorithm push_sum communicates every iteration, uncompressed: leave out "
          "--local-steps, --outer and --compression");
    }
  } else if (algorithm == "cpsgd" || algorithm == "cpsgd-ps" || algorithm == "cpsgd-allreduce") {
    c.include_dpsgd = false;
  } else {
    return invalid_argument("--algorithm '" + algorithm +
                            "': expected dpsgd, push_sum, cpsgd, cpsgd-ps or cpsgd-allreduce");
  }
  return Status::ok();
}

LabelledProgress progress_to(ProgressBar& bar) {
  return [&bar](const std::string& label, std::int64_t done, std::int64_t total) {
    bar.update(label, done, total);
  };
}

// run and compare: the experiment, its series to `csv`, the final parameters to --dump-params, the
// summary to stdout. An exit code when it fails.
std::optional<int> simulate_experiment(const CommandLine& cl, ExperimentConfig& c,
                                       std::ostream& csv) {
  const Options& o = cl.o;
  const bool run = cl.run->parsed();
  if (run) {
    if (const Status s = select_algorithm(cl.algorithm, c); !s.is_ok()) return usage(s);
  }
  ProgressBar bar(!o.quiet);
  auto result = run_experiment(c, progress_to(bar));
  bar.finish();
  if (!result.is_ok()) return fail(result.status());
  if (run && (cl.algorithm == "cpsgd-ps" || cl.algorithm == "cpsgd-allreduce")) {
    std::erase_if(result->series, [&](const Series& s) { return s.algorithm != cl.algorithm; });
  }
  write_csv_rows(csv, result->series);
  if (!o.dump_params.empty()) {
    const Status s = dump_params(result->runs.front().final_params, o.dump_params);
    if (!s.is_ok()) return fail(s);
  }
  if (o.json) {
    std::cout << summary_json(*result, c) << "\n";
  } else {
    print_summary(std::cout, *result, c);
  }
  return std::nullopt;
}

// sweep: the experiment at every value of --param, the points to `csv`, the summary to stdout. A
// bad value is a usage error before anything runs (run_sweep checks them too).
std::optional<int> simulate_sweep(const CommandLine& cl, const ExperimentConfig& c,
                                  std::ostream& csv) {
  auto param = parse_sweep_param(cl.sweep_param);
  if (!param.is_ok()) return usage(param.status());
  const auto values = split(cl.sweep_values, "--values");
  if (!values.is_ok()) return usage(values.status());
  if (*param == SweepParam::kLocalSteps || *param == SweepParam::kCompression) {
    // Each value checked as its flag's (--local-steps, --compression) with the other round flags.
    const std::string field =
        *param == SweepParam::kLocalSteps ? "local_steps=" : "compression.kind=";
    for (const std::string& v : *values) {
      std::vector<std::string> settings = cl.o.round_settings;
      settings.push_back(field + v);
      const auto round = config::round_config_from_overrides(settings, round_algorithm(cl));
      if (!round.is_ok()) return usage(round.status().with_context("--values"));
    }
  }
  if (const Status s = check_sweep_values(*param, *values); !s.is_ok()) return usage(s);
  ProgressBar bar(!cl.o.quiet);
  auto result = run_sweep(c, *param, *values, progress_to(bar));
  bar.finish();
  if (!result.is_ok()) return fail(result.status());
  for (const SweepPoint& p : result->points) {
    write_csv_rows(csv, p.series, cl.sweep_param, p.value);
  }
  if (cl.o.json) {
    std::cout << sweep_json(*result, c) << "\n";
  } else {
    print_sweep(std::cout, *result, c);
  }
  return std::nullopt;
}

// --join / --leave NODE@ITER into the run's roster (sim/simulator.h RosterEvent).
Status roster_from_flags(const Options& o, const std::string& algorithm, RunConfig& r) {
  auto add = [&](const std::vector<std::string>& values, RosterEvent::Kind kind,
                 const char* flag) -> Status {
    for (const std::string& v : values) {
      const std::size_t at = v.find('@');
      std::int64_t node = -1, iteration = -1;
      auto whole = [](std::string_view text, std::int64_t& out) {
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
        return ec == std::errc() && end == text.data() + text.size() && out >= 0;
      };
      if (at == std::string::npos || !whole(std::string_view(v).substr(0, at), node) ||
          !whole(std::string_view(v).substr(at + 1), iteration) || node > 1 << 30) {
        return invalid_argument(std::string(flag) + " '" + v +
                                "': expected NODE@ITER (two whole numbers), e.g. 8@100");
      }
      r.roster.push_back({kind, static_cast<int>(node), iteration});
    }
    return Status::ok();
  };
  GOSSIP_RETURN_IF_ERROR(add(o.joins, RosterEvent::kJoin, "--join"));
  GOSSIP_RETURN_IF_ERROR(add(o.leaves, RosterEvent::kLeave, "--leave"));
  if (r.roster.empty()) return Status::ok();
  if (algorithm != "dpsgd") {
    return invalid_argument(
        "--join/--leave: joins and leaves are simulated for --algorithm dpsgd "
        "(gossipd's carry-on policy), not " +
        algorithm);
  }
  std::stable_sort(
      r.roster.begin(), r.roster.end(),
      [](const RosterEvent& a, const RosterEvent& b) { return a.iteration < b.iteration; });
  return r.validate();
}

// run --replay-push-sum DIR: the logged asynchronous push-sum run replayed (sim/push_sum_replay.h),
// each node's final z_i to --dump-params, the final weights and their sum (mass conservation: n up
// to rounding) on stdout. Bad logs are bad input: exit 2, naming the file and line.
int replay_push_sum_run(const CommandLine& cl, const ExperimentConfig& c) {
  const Options& o = cl.o;
  if (o.config.empty() || !c.push_sum) {
    return usage(invalid_argument(
        "--replay-push-sum replays a gossipd push-sum run: give its training config (--config) "
        "with algorithm: PUSH_SUM" +
        (o.config.empty() ? std::string() : "; " + o.config + " has another algorithm")));
  }
  if (!o.csv.empty() || o.json || !std::isnan(o.target_loss) || !std::isnan(o.target_accuracy)) {
    return usage(invalid_argument(
        "--replay-push-sum prints the final push-sum weights only (no evaluation points): leave "
        "out --csv, --json, --target-loss and --target-accuracy"));
  }
  auto replay = PushSumReplay::create(c);
  if (!replay.is_ok()) return fail(replay.status());
  const auto logs = (*replay)->read_logs(o.replay_push_sum);
  if (!logs.is_ok()) return usage(logs.status().with_context("--replay-push-sum"));
  ProgressBar bar(!o.quiet);
  auto result = (*replay)->run(*logs, [&bar](std::int64_t done, std::int64_t total) {
    bar.update("replay push_sum", done, total);
  });
  bar.finish();
  if (!result.is_ok()) return fail(result.status());
  if (!o.dump_params.empty()) {
    if (const Status s = dump_params(result->params, o.dump_params); !s.is_ok()) return fail(s);
  }
  double sum = 0;
  for (const float w : result->weights) sum += w;  // in node order
  char text[64];
  std::snprintf(text, sizeof text, "%.6f", sum);
  std::cout << "push-sum weights: sum " << text << " (";
  for (std::size_t i = 0; i < result->weights.size(); ++i) {
    std::snprintf(text, sizeof text, "%.9g", static_cast<double>(result->weights[i]));  // exact
    std::cout << (i > 0 ? " " : "") << text;
  }
  std::cout << ")\n";
  return 0;
}

int sim_main(int argc, char** argv) {
  CommandLine cl;
  if (const auto rc = parse_command_line(cl.app, argc, argv)) return *rc;
  auto config = build_config(cl.o);
  if (!config.is_ok()) return usage(config.status());
  ExperimentConfig& c = *config;
  if (const auto rc = apply_training_source(cl, c)) return *rc;
  if (const Status s = roster_from_flags(cl.o, cl.algorithm, c.run); !s.is_ok()) return usage(s);
  c.per_step_baseline = cl.compare->parsed();
  if (const Status s = check_output_paths(cl.o); !s.is_ok()) return usage(s);
  if (const Status s = check_experiment_memory(c); !s.is_ok()) return usage(s);
  if (!cl.o.replay_push_sum.empty()) return replay_push_sum_run(cl, c);
  if (c.cost.straggler.node >= c.nodes) {
    return usage(invalid_argument("--straggler " + c.cost.straggler.to_string() + ": node " +
                                  std::to_string(c.cost.straggler.node) + " is not one of the " +
                                  std::to_string(c.nodes) + " nodes"));
  }
  std::ostringstream csv;
  write_csv_header(csv);
  const auto rc = cl.sweep->parsed() ? simulate_sweep(cl, c, csv) : simulate_experiment(cl, c, csv);
  if (rc) return *rc;
  if (!cl.o.csv.empty()) {
    const Status s = Env::system().write_file_atomic(cl.o.csv, csv.str());
    if (!s.is_ok()) return fail(s.with_context("--csv"));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int rc = guard_main("gossip-sim", [&] { return sim_main(argc, argv); });
  return finish_stdout("gossip-sim", rc);
}
