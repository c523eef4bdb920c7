// Loading the training config the way both gossipd subcommands do: file, then `--set` overrides
// and named flags (in command-line order), then defaults, then validation — so an override is
// validated like a value written in the file; an error in a value the command line set names the
// command line, the others point into the file.
#pragma once

#include <string>
#include <vector>

#include "common/env.h"
#include "common/status.h"
#include "config/train_config.h"

namespace gossip::config {

Result<TrainConfig> load_config_with_overrides(const std::string& path,
                                               const std::vector<std::string>& overrides,
                                               Env& env = Env::system(),
                                               ConfigUse use = ConfigUse::kOwnTrainer);

}  // namespace gossip::config
