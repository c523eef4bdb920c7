// The table of training flags (flags.h). gossip-sim's rows come first, in the order its --config
// check names them; gossipd's own rows follow the setting they sit beside.
#include "config/flags.h"

#include "common/check.h"

namespace gossip::config {
namespace {

constexpr unsigned kBoth = kGossipd | kSim;

constexpr TrainingFlag kTrainingFlags[] = {
    {"--problem", "", "",
     "preset: least_squares, logistic, fmnist-softmax, fmnist-mlp (784-256-128-10)", kSim},
    {"--model", "", "model.kind",
     "override the preset's model: least_squares, logistic, softmax, mlp", kSim},
    {"--data", "", "data.dataset",
     "override the preset's data: least_squares, logistic, fashion_mnist", kSim},
    {"--hidden", "", "model.hidden", "mlp hidden widths, e.g. 256,128", kSim},
    {"--data-dir", "", "data.path", "Fashion-MNIST IDX directory", kSim},
    {"--shard", "", "shard.scheme", "sharding: iid, by_label, dirichlet", kSim},
    {"--dirichlet-alpha", "", "shard.dirichlet_alpha", "Dirichlet concentration (dirichlet)", kSim},
    {"--dim", "", "data.dim", "synthetic problems: feature dimension", kSim},
    {"--train-examples", "", "data.num_examples", "synthetic problems: training examples", kSim},
    {"--test-examples", "", "data.test_examples", "synthetic problems: test examples", kSim},
    {"--noise", "", "data.noise", "least_squares: noise stddev; logistic: margin scale", kSim},
    {"--l2", "", "model.l2", "L2 penalty on weight matrices", kSim},
    {"--lr", "", "optimizer.lr", "learning rate", kBoth},
    {"--momentum", "", "optimizer.momentum", "momentum (kept per node)", kSim},
    {"--nesterov", "", "optimizer.kind", "Nesterov momentum", kSim, "NESTEROV"},
    {"--weight-decay", "", "optimizer.weight_decay", "coupled L2 weight decay", kSim},
    {"--lr-schedule", "", "optimizer.schedule", "constant, step or cosine", kSim},
    {"--warmup", "", "optimizer.warmup_iterations", "linear warm-up iterations", kSim},
    {"--lr-step", "", "optimizer.step_size", "step schedule: iterations per decay", kSim},
    {"--lr-factor", "", "optimizer.step_factor", "step schedule: decay factor", kSim},
    {"--min-lr", "", "optimizer.min_lr", "cosine schedule: final learning rate", kSim},
    {"--batch-size", "--batch", "batch_size", "per-node batch size", kBoth},
    {"--iterations", "", "iterations", "total iterations (each node takes one step each)", kBoth},
    {"--epochs", "", "epochs", "passes over the mean shard", kGossipd},
    {"--eval-every", "", "eval_every", "iterations between evaluations", kBoth},
    {"--eval-examples", "", "eval_examples",
     "evaluate on the first N examples of each split (0: all)", kSim},
    {"--seed", "", "seed", "seed of data, shards, x_0 and batches", kBoth},
    {"--local-steps", "", "local_steps",
     "local steps H per communication round (1: every iteration)", kBoth},
    {"--outer", "", "outer.kind",
     "outer optimizer on a round's pseudo-gradient: none, sgd, nesterov", kBoth},
    {"--outer-lr", "", "outer.lr", "outer learning rate (default: 0.7 nesterov, 1 sgd)", kBoth},
    {"--outer-momentum", "", "outer.momentum", "outer momentum (default: 0.9 nesterov, 0 sgd)",
     kBoth},
    {"--compression", "", "compression.kind", "what a round sends: none (float32), bf16, int8",
     kBoth},
    {"--block-floats", "", "compression.block_floats",
     "int8: floats per scale, a power of two in [16, 65536] (default 256)", kBoth},
    {"--choco-step", "", "compression.choco_step",
     "D-PSGD with compression: CHOCO-SGD's consensus step in (0, 1] (default 1)", kBoth},
    {"--overlap", "", "overlap",
     "combine round r's messages after round r+1's inner steps, so the exchange runs during them",
     kBoth, "true"},
    {"--device", "", "device", "auto|cpu|cuda", kGossipd},
    {"--checkpoint-dir", "", "checkpoint.dir", "checkpoint directory", kGossipd},
    {"--checkpoint-every", "", "checkpoint.every", "iterations between checkpoints", kGossipd},
    {"--deadline-ms", "", "timeouts.deadline_ms", "neighbour deadline per iteration", kGossipd},
    {"--cpu-threads", "", "cpu_threads", "cpu backend threads", kGossipd},
    {"--no-overlap", "", "no_overlap",
     "exchange after computing the gradient instead of during it (benchmarks)", kGossipd, "true"},
};

std::vector<std::string> aliases_of(const TrainingFlag& row) {
  std::vector<std::string> out;
  for (const std::string& a : CLI::detail::split(row.aliases, ',')) {
    if (!a.empty()) out.push_back(a);
  }
  return out;
}

}  // namespace

std::span<const TrainingFlag> training_flags() { return kTrainingFlags; }

const TrainingFlag& training_flag(std::string_view name) {
  for (const TrainingFlag& row : kTrainingFlags) {
    if (row.name == name) return row;
  }
  GOSSIP_CHECK(false) << "no training flag " << name << " in config/flags.cc";
  return kTrainingFlags[0];
}

std::string help_text(const TrainingFlag& flag) {
  if (*flag.field == '\0') return flag.help;
  std::string config = flag.field;
  if (flag.switch_value != nullptr) config += ": " + std::string(flag.switch_value);
  return std::string(flag.help) + " (config: " + config + ")";
}

void add_override_flags(CLI::App& app, std::vector<std::string>& overrides) {
  // Each occurrence appends as it is parsed (trigger_on_parse), so a later flag overrides an
  // earlier one whatever its kind; CLI11 would otherwise run the callbacks in definition order.
  app.add_option_function<std::vector<std::string>>(
         "--set",
         [&overrides](const std::vector<std::string>& v) {
           overrides.insert(overrides.end(), v.begin(), v.end());
         },
         "override any training config field by dotted path, e.g. --set optimizer.lr=0.05 "
         "--set model.hidden=256,128 (repeatable)")
      ->type_name("FIELD=VALUE")
      ->allow_extra_args(false)  // one FIELD=VALUE per --set, so positionals may follow
      ->trigger_on_parse();
  for (const TrainingFlag& row : kTrainingFlags) {
    if ((row.programs & kGossipd) != 0) add_override_flag(app, row, overrides);
  }
}

CLI::Option* add_override_flag(CLI::App& app, const TrainingFlag& row,
                               std::vector<std::string>& overrides) {
  GOSSIP_CHECK(*row.field != '\0') << row.name << " stands for no config field";
  const std::string field = row.field;
  std::vector<std::string> names{row.name};
  for (std::string& a : aliases_of(row)) names.push_back(std::move(a));
  CLI::Option* canonical = nullptr;
  for (std::size_t k = 0; k < names.size(); ++k) {
    CLI::Option* option = nullptr;
    if (row.switch_value != nullptr) {
      const std::string assignment = field + "=" + row.switch_value;
      option = app.add_flag_callback(
          names[k], [&overrides, assignment] { overrides.push_back(assignment); }, help_text(row));
    } else {
      option = app.add_option_function<std::string>(
          names[k],
          [&overrides, field](const std::string& v) { overrides.push_back(field + "=" + v); },
          help_text(row));
    }
    option->trigger_on_parse();
    if (k > 0) option->group("");
    if (k == 0) canonical = option;
  }
  return canonical;
}

CLI::Option* add_training_switch(CLI::App& app, std::string_view name, bool& value) {
  const TrainingFlag& row = training_flag(name);
  GOSSIP_CHECK(row.switch_value != nullptr) << row.name << " takes a value";
  CLI::Option* option = app.add_flag(row.name, value, help_text(row));
  for (const std::string& alias : aliases_of(row)) app.add_flag(alias, value)->group("");
  return option;
}

std::string training_flag_given(const CLI::App& app, Program program) {
  for (const TrainingFlag& row : kTrainingFlags) {
    if ((row.programs & program) == 0) continue;
    std::vector<std::string> names{row.name};
    for (std::string& alias : aliases_of(row)) names.push_back(std::move(alias));
    for (const std::string& name : names) {
      const CLI::Option* option = app.get_option_no_throw(name);
      if (option != nullptr && option->count() > 0) return name;
    }
  }
  return "";
}

void check_all_offered(const CLI::App& app, Program program) {
  for (const TrainingFlag& row : kTrainingFlags) {
    if ((row.programs & program) == 0) continue;
    GOSSIP_CHECK(app.get_option_no_throw(row.name) != nullptr)
        << "training flag " << row.name << " (config/flags.cc) is not offered";
    for (const std::string& alias : aliases_of(row)) {
      GOSSIP_CHECK(app.get_option_no_throw(alias) != nullptr)
          << "alias " << alias << " of " << row.name << " is not offered";
    }
  }
}

}  // namespace gossip::config
