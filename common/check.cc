// Failure path of GOSSIP_CHECK. Writes with one fprintf so lines from threads do not interleave.
#include "common/check.h"

#include <cstdio>
#include <cstdlib>

namespace gossip::internal {

CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  stream_ << file << ":" << line << ": check failed: " << condition << " ";
}

CheckFailure::~CheckFailure() {
  std::string s = stream_.str();
  std::fprintf(stderr, "%s\n", s.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace gossip::internal
