// Small string helpers shared by the text parsers of several modules (cost-model units, config
// overrides, cgroup files).
#pragma once

#include <cctype>
#include <string_view>

namespace gossip {

// `s` without its leading and trailing whitespace (std::isspace in the "C" locale sense). A view
// into `s`: valid as long as the characters it views are.
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace gossip
