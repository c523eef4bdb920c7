// Minimal leveled logging to stderr: one line per message, written with a single call so lines
// from different threads never interleave. A process-wide prefix (e.g. "node 3") tells daemon
// processes apart when a launcher merges their output. The message text is passed through
// log_escape (common/escape.h) on its way out, so a string from outside (a peer's Hello, a file
// name, a config value) can neither start a forged line nor reach the terminal as an escape
// sequence.
//
//   GOSSIP_LOG(kWarning) << "neighbour " << j << " missed its deadline";
#pragma once

#include <sstream>
#include <string>

namespace gossip {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
void set_log_prefix(std::string prefix);

namespace internal {
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
  std::size_t header_bytes_ = 0;  // level, time, prefix, file:line: written by us, not escaped
};
}  // namespace internal

}  // namespace gossip

#define GOSSIP_LOG(level)                                  \
  if (::gossip::LogLevel::level < ::gossip::log_level()) { \
  } else                                                   \
    ::gossip::internal::LogMessage(::gossip::LogLevel::level, __FILE__, __LINE__).stream()
