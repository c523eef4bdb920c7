// The command-line flags of the training settings: one table (flags.cc) that both programs read,
// so a setting has one flag name everywhere (docs/daemon.md "Overrides", docs/sim.md).
//
//   gossipd run|launch   a flag is sugar for `--set FIELD=VALUE` on the training config
//                        (add_override_flags: in command-line order, validated with the file);
//   gossip-sim           a flag sets the simulated job directly (add_training_option binds it to
//                        the program's own variable; sim/main.cc maps those to an
//                        ExperimentConfig; the round settings are assignments, add_override_flag,
//                        applied to a training config as gossipd's), and is refused beside
//                        `--config FILE`, which sets the same FIELDs.
//
// Each row names the flag, its hidden aliases (older spellings, accepted but not listed in --help),
// the config field it stands for, its help text, and the programs that offer it. Rows offered by
// gossip-sim only take values in gossip-sim's spelling (`--data fashion_mnist`, `--problem ...`)
// rather than the config's, which is why gossipd does not offer them.
#pragma once

#include <CLI/CLI.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gossip::config {

enum Program : unsigned { kGossipd = 1u, kSim = 2u };

struct TrainingFlag {
  const char* name;     // "--batch-size"
  const char* aliases;  // hidden older spellings, comma-separated ("--batch"), or ""
  const char* field;    // the training config's field ("batch_size"), or "" (--problem: a preset)
  const char* help;
  unsigned programs;  // Program bits
  // A flag without a value (--nesterov, --no-overlap): the field's value when it is given.
  const char* switch_value = nullptr;
};

// Every row, in the order --help lists them.
std::span<const TrainingFlag> training_flags();

// The row of `name` (its canonical spelling). A name not in the table is a programmer error
// (GOSSIP_CHECK fails).
const TrainingFlag& training_flag(std::string_view name);

// "learning rate (config: optimizer.lr)": the help a program shows for `flag`.
std::string help_text(const TrainingFlag& flag);

// gossipd: adds `--set FIELD=VALUE` and every row gossipd offers to `app`. Each flag given appends
// "FIELD=VALUE" to `overrides` (a switch: FIELD=switch_value), each --set its assignment, in
// command-line order, so the last one of a field wins. `overrides` must outlive the parse.
void add_override_flags(CLI::App& app, std::vector<std::string>& overrides);

// One row (and its hidden aliases) as add_override_flags adds it: each occurrence appends
// "FIELD=VALUE" (a switch: FIELD=switch_value) to `overrides`, which must outlive the parse.
// gossip-sim takes the round settings (--local-steps, --outer, --compression, ...) this way and
// applies them to a training config as gossipd does (config/sgd_config.h
// round_config_from_overrides). Returns the canonical option.
CLI::Option* add_override_flag(CLI::App& app, const TrainingFlag& row,
                               std::vector<std::string>& overrides);

// gossip-sim: adds the row `name` (offered to gossip-sim), bound to `value`, and its hidden
// aliases bound to the same variable. Returns the canonical option, for ->check() and defaults.
template <class T>
CLI::Option* add_training_option(CLI::App& app, std::string_view name, T& value) {
  const TrainingFlag& row = training_flag(name);
  CLI::Option* option = app.add_option(row.name, value, help_text(row));
  for (const std::string& alias : CLI::detail::split(row.aliases, ',')) {
    if (!alias.empty()) app.add_option(alias, value)->group("");
  }
  return option;
}
// The same for a switch row (no value).
CLI::Option* add_training_switch(CLI::App& app, std::string_view name, bool& value);

// The spelling (canonical or alias) of the first row offered to `program` that was given on
// `app`'s command line, in table order; "" when none was. gossip-sim refuses these beside
// --config.
std::string training_flag_given(const CLI::App& app, Program program);

// Whether every row offered to `program` is an option of `app` (a program that forgot one would
// silently not offer it): GOSSIP_CHECK fails naming the first missing row.
void check_all_offered(const CLI::App& app, Program program);

}  // namespace gossip::config
