// The table of training flags (config/flags.h): every row names a field the training config has,
// no spelling is taken twice, gossipd's flags become the --set assignments they stand for (aliases
// too, hidden from --help), and gossip-sim's bind a variable whose flag or alias is named when it
// meets --config.
#include "config/flags.h"

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace gossip::config
