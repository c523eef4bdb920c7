// Training config: loading (Protobuf text format, config/train_config.proto), defaults, validation
// and command-line overrides. Errors name the file, line, column and field so a user can fix them:
//
//   fmnist.pbtxt:7:14: optimizer.lr: must be finite and >= 0, got nan
//
// Overrides: `apply_override(config, "optimizer.lr=0.05")` sets any scalar, enum, repeated or
// message field by its dotted path through protobuf reflection; the value uses text-format syntax
// ("MOMENTUM", "\"dir\"" or "dir", "256,128" for repeated fields, "{ kind: SGD }" for messages).
// All functions are pure (no globals) and thread-compatible.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/env.h"
#include "common/status.h"
#include "config/train_config.pb.h"

namespace gossip::config {

using TrainConfig = pb::TrainConfig;

// Parses text-format `text`; `name` (a path) prefixes messages. Unknown fields, bad enum names and
// malformed values are InvalidArgument with name:line:col. Does not fill defaults or validate.
Result<TrainConfig> parse_train_config(std::string_view text, const std::string& name);

// Reads, parses, fills defaults and validates `path`.
Result<TrainConfig> load_train_config(const std::string& path, Env& env = Env::system());

// Sets fields left at 0/empty to their documented defaults (train_config.proto).
void fill_defaults(TrainConfig& config);

// Checks every field's value and the fields against each other. `name` prefixes messages; when
// `text` (the source) is given, messages also carry the line and column of the offending field.
// `overrides` ("path=value", as given to apply_override): a field set there is blamed on the
// command line ("command line (optimizer.lr=-1): optimizer.lr: ..."), not on the file.
// `use`: with kAttachedTrainer (gossipd --attach) the fields of the built-in trainer (model, data,
// shard, batch_size, optimizer, epochs) are not checked, since an attached trainer brings its own,
// and `iterations` (the number of gossip rounds) is required. With kRoundSettings only the round
// fields (local_steps, outer, compression, overlap) are checked: gossip-sim's round flags on a
// config that holds nothing else.
enum class ConfigUse { kOwnTrainer, kAttachedTrainer, kRoundSettings };
Status validate_train_config(const TrainConfig& config, const std::string& name = "config",
                             std::string_view text = {},
                             const std::vector<std::string>& overrides = {},
                             ConfigUse use = ConfigUse::kOwnTrainer);

// The checks that need the topology's node count `num_nodes`: every fault.standby_nodes entry is a
// node of it, and not every node is on standby. Messages as validate_train_config's (name, line,
// column and field; a value set by an override blames the command line).
Status validate_against_topology(const TrainConfig& config, int num_nodes,
                                 const std::string& name = "config", std::string_view text = {},
                                 const std::vector<std::string>& overrides = {});

// "path.to.field=value": parses and sets one field (see the file comment). InvalidArgument naming
// the path when the field does not exist or the value does not parse.
Status apply_override(TrainConfig& config, std::string_view assignment);

// The config as text format (for logs and --print-config).
std::string to_text(const TrainConfig& config);

// The number of iterations to run: `iterations`, or ceil(epochs * shard_size / batch_size).
std::uint64_t total_iterations(const TrainConfig& config, std::size_t shard_size);

}  // namespace gossip::config
