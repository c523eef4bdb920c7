// Log sink. The prefix is guarded by a mutex; the level is an atomic read on every message.
#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string_view>

#include "common/clock.h"
#include "common/enum_names.h"
#include "common/escape.h"

namespace gossip {
namespace {

// GOSSIP_LOG_LEVEL=debug|info|warning|error sets the starting level (default info); any other
// value is ignored.
int initial_level() {
  const char* e = std::getenv("GOSSIP_LOG_LEVEL");
  const std::string_view v = e ? e : "";
  if (v == "debug") return static_cast<int>(LogLevel::kDebug);
  if (v == "warning") return static_cast<int>(LogLevel::kWarning);
  if (v == "error") return static_cast<int>(LogLevel::kError);
  return static_cast<int>(LogLevel::kInfo);
}

std::atomic<int> g_level{initial_level()};
std::mutex g_prefix_mutex;
std::string g_prefix;  // guarded by g_prefix_mutex

constexpr EnumName<LogLevel> kLevelTags[] = {{LogLevel::kDebug, "D"},
                                             {LogLevel::kInfo, "I"},
                                             {LogLevel::kWarning, "W"},
                                             {LogLevel::kError, "E"}};

}  // namespace

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }
void set_log_prefix(std::string prefix) {
  std::lock_guard<std::mutex> lock(g_prefix_mutex);
  g_prefix = std::move(prefix);
}

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  const std::int64_t ms = Clock::system().wall_ms();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  std::string prefix;
  {
    std::lock_guard<std::mutex> lock(g_prefix_mutex);
    prefix = g_prefix;
  }
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  stream_ << enum_name(kLevelTags, level_) << " " << stamp << " ";
  if (!prefix.empty()) stream_ << "[" << prefix << "] ";
  if (level_ >= LogLevel::kWarning) stream_ << base << ":" << line << ": ";
  header_bytes_ = static_cast<std::size_t>(stream_.tellp());
}

LogMessage::~LogMessage() {
  const std::string text = stream_.str();
  std::string s = text.substr(0, header_bytes_);
  s += log_escape(std::string_view(text).substr(header_bytes_));
  s += '\n';
  std::fwrite(s.data(), 1, s.size(), stderr);
}

}  // namespace internal
}  // namespace gossip
