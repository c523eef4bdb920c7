// Status and Result<T>: how recoverable failures travel (files, parsing, config, network, peers).
//
// Contract: a function that can fail for reasons outside the program's control returns a Status or
// a Result<T>; it never throws across a module boundary. The message is written for the user who
// has to act on it: which file, which line, which field, what was expected. Programmer errors use
// GOSSIP_CHECK (check.h) instead. Both types are cheap to move and are not thread-safe to mutate
// concurrently (like any value type).
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace gossip {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input from a user: file contents, flags, config fields
  kNotFound,            // a file, node or key that does not exist
  kCorruption,          // data that fails a checksum, magic number or length check
  kIoError,             // the operating system refused (disk full, permission, EOF mid-read)
  kUnavailable,         // a peer or service cannot be reached right now; retrying may help
  kDeadlineExceeded,    // a wait ran past its deadline
  kFailedPrecondition,  // the system is not in a state where the call makes sense
  kPermissionDenied,    // authentication or file-permission failure
  kOutOfRange,          // a value outside the limits agreed beforehand
  kUnimplemented,       // asked for something this build does not have (e.g. CUDA)
  kInternal,            // an invariant failed that should have been caught earlier
  kAborted,             // a computation stopped because its result is unusable (a training run
                        // diverged: common/divergence.h)
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "InvalidArgument: ring8.pbtxt:3:7: ..." — or "OK".
  std::string to_string() const;

  // Returns a copy whose message is prefixed with `context` and ": ", so that callers can say
  // where an error came from without losing what it was ("loading checkpoint x: Corruption: ...").
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status deadline_exceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status failed_precondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status permission_denied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }

// A value or the Status saying why there is none. Constructing a Result from an OK Status is a
// programmer error (asserted).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design, like absl::StatusOr
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).is_ok() && "Result constructed from an OK Status");
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }

  const Status& status() const {
    static const Status kOkStatus;
    return is_ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace gossip

#define GOSSIP_CONCAT_INNER_(a, b) a##b
#define GOSSIP_CONCAT_(a, b) GOSSIP_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) is not OK.
#define GOSSIP_RETURN_IF_ERROR(expr)                    \
  do {                                                  \
    ::gossip::Status gossip_status_ = (expr);           \
    if (!gossip_status_.is_ok()) return gossip_status_; \
  } while (0)

// `GOSSIP_ASSIGN_OR_RETURN(auto x, f());` — declares x from a Result or returns its Status.
#define GOSSIP_ASSIGN_OR_RETURN(lhs, expr) \
  GOSSIP_ASSIGN_OR_RETURN_IMPL_(GOSSIP_CONCAT_(gossip_result_, __LINE__), lhs, expr)
#define GOSSIP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.is_ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
