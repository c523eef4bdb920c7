#include "config/load.h"

namespace gossip::config {

Result<TrainConfig> load_config_with_overrides(const std::string& path,
                                               const std::vector<std::string>& overrides, Env& env,
                                               ConfigUse use) {
  GOSSIP_ASSIGN_OR_RETURN(std::string text, env.read_file(path));
  GOSSIP_ASSIGN_OR_RETURN(TrainConfig config, parse_train_config(text, path));
  for (const std::string& o : overrides) GOSSIP_RETURN_IF_ERROR(apply_override(config, o));
  fill_defaults(config);
  GOSSIP_RETURN_IF_ERROR(validate_train_config(config, path, text, overrides, use));
  return config;
}

}  // namespace gossip::config
