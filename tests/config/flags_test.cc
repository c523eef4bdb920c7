// The table of training flags (config/flags.h): every row names a field the training config has,
// no spelling is taken twice, gossipd's flags become the --set assignments they stand for (aliases
// too, hidden from --help), and gossip-sim's bind a variable whose flag or alias is named when it
// meets --config.
#include "config/flags.h"

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "config/sgd_config.h"
#include "config/train_config.h"

namespace gossip::config {
namespace {

// argv for CLI11 from words (program name first).
void parse(CLI::App& app, std::vector<std::string> words) {
  words.insert(words.begin(), "prog");
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  app.parse(static_cast<int>(argv.size()), argv.data());
}

std::vector<std::string> aliases(const TrainingFlag& row) {
  std::vector<std::string> out;
  for (const std::string& a : CLI::detail::split(row.aliases, ',')) {
    if (!a.empty()) out.push_back(a);
  }
  return out;
}

TEST_CASE("every row names a field of the training config, and no spelling is taken twice") {
  std::set<std::string> spellings;
  for (const TrainingFlag& row : training_flags()) {
    CAPTURE(row.name);
    CHECK(spellings.insert(row.name).second);
    for (const std::string& a : aliases(row)) CHECK(spellings.insert(a).second);
    CHECK(row.programs != 0);
    if (*row.field == '\0') {
      CHECK(row.programs == kSim);  // only gossip-sim's --problem preset stands for no field
      continue;
    }
    // The path resolves field by field through the config's messages.
    const google::protobuf::Descriptor* message = TrainConfig::descriptor();
    const google::protobuf::FieldDescriptor* field = nullptr;
    for (const std::string& part : CLI::detail::split(row.field, '.')) {
      REQUIRE_MESSAGE(message != nullptr, row.field);
      field = message->FindFieldByName(part);
      REQUIRE_MESSAGE(field != nullptr, row.field);
      message = field->message_type();
    }
    CHECK(field->message_type() == nullptr);  // a value, not a whole message
    if (row.switch_value != nullptr) {
      TrainConfig config;
      CHECK(apply_override(config, std::string(row.field) + "=" + row.switch_value).is_ok());
    }
  }
  CHECK(training_flag("--batch-size").field == std::string("batch_size"));
  CHECK(help_text(training_flag("--lr")) == "learning rate (config: optimizer.lr)");
  CHECK(help_text(training_flag("--no-overlap")).ends_with("(config: no_overlap: true)"));
}

TEST_CASE("gossipd: each flag is the --set assignment of its field, in command-line order") {
  CLI::App app;
  std::vector<std::string> overrides;
  add_override_flags(app, overrides);
  parse(app, {"--lr", "0.1", "--batch", "8", "--set", "optimizer.lr=0.2", "--no-overlap",
              "--deadline-ms", "2500", "--seed", "4", "--set", "seed=5"});
  CHECK(overrides == std::vector<std::string>{"optimizer.lr=0.1", "batch_size=8",
                                              "optimizer.lr=0.2", "no_overlap=true",
                                              "timeouts.deadline_ms=2500", "seed=4", "seed=5"});
  // Every assignment applies to a config (each field exists and takes such a value).
  TrainConfig config;
  for (const std::string& o : overrides) CHECK(apply_override(config, o).is_ok());
  CHECK(config.batch_size() == 8);
  CHECK(config.optimizer().lr() == 0.2);  // the later --set wins over the earlier --lr
  CHECK(config.seed() == 5);
  // The alias works but is not listed; gossip-sim's own rows are not gossipd flags.
  const std::string help = app.help();
  CHECK(help.find("--batch-size") != std::string::npos);
  CHECK(help.find("--batch ") == std::string::npos);
  CHECK(app.get_option_no_throw("--problem") == nullptr);
  CHECK(app.get_option_no_throw("--momentum") == nullptr);
}

TEST_CASE("gossip-sim: a flag and its aliases bind one variable, and the spelling given is named") {
  CLI::App app;
  int batch = 32;
  double lr = 0.05;
  bool nesterov = false;
  add_training_option(app, "--batch-size", batch);
  add_training_option(app, "--lr", lr);
  add_training_switch(app, "--nesterov", nesterov);
  parse(app, {"--batch", "8", "--nesterov"});
  CHECK(batch == 8);
  CHECK(nesterov);
  CHECK(lr == 0.05);
  CHECK(training_flag_given(app, kSim) == "--nesterov");  // table order: --nesterov first
  CLI::App other;
  add_training_option(other, "--batch-size", batch);
  add_training_option(other, "--lr", lr);
  parse(other, {"--batch-size", "16"});
  CHECK(training_flag_given(other, kSim) == "--batch-size");
  parse(other, {"--batch", "4"});
  CHECK(training_flag_given(other, kSim) == "--batch");
  CHECK(batch == 4);
  CLI::App none;
  add_training_option(none, "--lr", lr);
  parse(none, {});
  CHECK(training_flag_given(none, kSim).empty());
}

// The round rows of both programs.
constexpr const char* kRoundFlags[] = {"--local-steps",    "--outer",       "--outer-lr",
                                       "--outer-momentum", "--compression", "--block-floats",
                                       "--choco-step",     "--overlap"};

TEST_CASE("round flags: the same settings as the config's fields, checked with the same messages") {
  for (const char* name : kRoundFlags) CHECK(training_flag(name).programs == (kGossipd | kSim));
  CLI::App app;
  std::vector<std::string> overrides;
  for (const char* name : kRoundFlags) add_override_flag(app, training_flag(name), overrides);
  parse(app, {"--local-steps", "4", "--outer", "nesterov", "--outer-momentum", "0.8",
              "--compression", "int8", "--block-floats", "64", "--choco-step", "0.5", "--overlap"});
  CHECK(overrides == std::vector<std::string>{"local_steps=4", "outer.kind=nesterov",
                                              "outer.momentum=0.8", "compression.kind=int8",
                                              "compression.block_floats=64",
                                              "compression.choco_step=0.5", "overlap=true"});
  // A config file with those fields: the same RoundConfig, field by field.
  auto file = parse_train_config(
      "local_steps: 4 outer { kind: NESTEROV momentum: 0.8 } "
      "compression { kind: INT8 block_floats: 64 choco_step: 0.5 } overlap: true",
      "t");
  REQUIRE(file.is_ok());
  fill_defaults(*file);
  const sgd::RoundConfig expected = to_round_config(*file);
  auto r = round_config_from_overrides(overrides, pb::TrainConfig::DPSGD);
  REQUIRE(r.is_ok());
  CHECK(r->local_steps == 4);
  CHECK(r->outer.kind == sgd::OuterKind::kNesterov);
  CHECK(r->outer.lr == 0.7);  // the config's default for NESTEROV
  CHECK(r->outer.momentum == 0.8);
  CHECK(r->compression.kind == sgd::CompressionKind::kInt8);
  CHECK(r->compression.block_floats == 64);
  CHECK(r->choco_step == 0.5);
  CHECK(r->overlap);
  CHECK(r->local_steps == expected.local_steps);
  CHECK(r->outer.kind == expected.outer.kind);
  CHECK(r->outer.lr == expected.outer.lr);
  CHECK(r->outer.momentum == expected.outer.momentum);
  CHECK(r->compression.kind == expected.compression.kind);
  CHECK(r->compression.block_floats == expected.compression.block_floats);
  CHECK(r->choco_step == expected.choco_step);
  CHECK(r->overlap == expected.overlap);
  // No setting: one exchange per iteration.
  auto none = round_config_from_overrides({}, pb::TrainConfig::DPSGD);
  REQUIRE(none.is_ok());
  CHECK(none->per_iteration());
}

TEST_CASE("round flags: a bad value names the field, as the config file's check does") {
  const struct {
    std::vector<std::string> overrides;
    pb::TrainConfig::Algorithm algorithm;
    const char* says;
  } kBad[] = {
      {{"local_steps=0"},
       pb::TrainConfig::DPSGD,
       "command line (local_steps=0): local_steps: must be >= 1"},
      {{"outer.kind=nesterov", "outer.momentum=1"},
       pb::TrainConfig::DPSGD,
       "command line (outer.momentum=1): outer.momentum: must be in (0, 1), got 1"},
      {{"outer.kind=sgd", "outer.lr=nan"},
       pb::TrainConfig::DPSGD,
       "outer.lr: must be finite and > 0, got nan"},
      {{"outer.lr=0.5"},
       pb::TrainConfig::DPSGD,
       "outer.lr: set outer.kind SGD or NESTEROV to use it"},
      {{"compression.kind=int4"}, pb::TrainConfig::DPSGD, "compression.kind"},
      {{"compression.block_floats=100"},
       pb::TrainConfig::DPSGD,
       "compression.block_floats: must be a power of two in [16, 65536], got 100"},
      {{"compression.choco_step=1.5"},
       pb::TrainConfig::DPSGD,
       "compression.choco_step: must be in (0, 1], got 1.5"},
      {{"compression.choco_step=0.5"},
       pb::TrainConfig::ALLREDUCE,
       "compression.choco_step: CHOCO-SGD is D-PSGD's"},
      {{"local_steps=many"}, pb::TrainConfig::DPSGD, "local_steps"},
  };
  for (const auto& bad : kBad) {
    CAPTURE(bad.says);
    auto r = round_config_from_overrides(bad.overrides, bad.algorithm);
    REQUIRE(!r.is_ok());
    CHECK(r.status().message().find(bad.says) != std::string::npos);
  }
  // The same messages as the config file gives for the same values (there with file:line:col).
  auto file = parse_train_config("local_steps: 0", "f");
  REQUIRE(file.is_ok());
  fill_defaults(*file);
  const Status s = validate_train_config(*file, "f", "local_steps: 0");
  CHECK(s.message().find("local_steps: must be >= 1 (1: communicate every iteration)") !=
        std::string::npos);
}

}  // namespace
}  // namespace gossip::config
