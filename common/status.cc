// Status formatting. Kept out of the header so the names table exists once.
#include "common/status.h"

#include "common/enum_names.h"

namespace gossip {

namespace {
constexpr EnumName<StatusCode> kStatusCodeNames[] = {
    {StatusCode::kOk, "OK"},
    {StatusCode::kInvalidArgument, "InvalidArgument"},
    {StatusCode::kNotFound, "NotFound"},
    {StatusCode::kCorruption, "Corruption"},
    {StatusCode::kIoError, "IoError"},
    {StatusCode::kUnavailable, "Unavailable"},
    {StatusCode::kDeadlineExceeded, "DeadlineExceeded"},
    {StatusCode::kFailedPrecondition, "FailedPrecondition"},
    {StatusCode::kPermissionDenied, "PermissionDenied"},
    {StatusCode::kOutOfRange, "OutOfRange"},
    {StatusCode::kUnimplemented, "Unimplemented"},
    {StatusCode::kInternal, "Internal"},
    {StatusCode::kAborted, "Aborted"},
};
}  // namespace

std::string_view status_code_name(StatusCode code) {
  return enum_name(kStatusCodeNames, code, "Unknown");
}

std::string Status::to_string() const {
  if (is_ok()) return "OK";
  std::string s(status_code_name(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::with_context(std::string_view context) const {
  if (is_ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

}  // namespace gossip
