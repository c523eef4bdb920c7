// Status / Result: codes, messages, context and the propagation macros.
#include "common/status.h"

#include <doctest/doctest.h>

namespace gossip {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("expected a positive value, got " + std::to_string(v));
  return v;
}

Result<int> doubled(int v) {
  GOSSIP_ASSIGN_OR_RETURN(int x, parse_positive(v));
  return 2 * x;
}

Status check_both(int a, int b) {
  GOSSIP_RETURN_IF_ERROR(parse_positive(a).status());
  GOSSIP_RETURN_IF_ERROR(parse_positive(b).status().with_context("field b"));
  return Status::ok();
}

TEST_CASE("ok status and formatting") {
  Status s;
  CHECK(s.is_ok());
  CHECK(s.to_string() == "OK");
  Status e = corruption("bad checksum in x.ckpt");
  CHECK_FALSE(e.is_ok());
  CHECK(e.code() == StatusCode::kCorruption);
  CHECK(e.to_string() == "Corruption: bad checksum in x.ckpt");
  CHECK(e.with_context("loading").message() == "loading: bad checksum in x.ckpt");
  CHECK(Status::ok().with_context("ignored").is_ok());
}

TEST_CASE("Result carries a value or the reason") {
  auto r = doubled(21);
  REQUIRE(r.is_ok());
  CHECK(*r == 42);
  auto bad = doubled(-1);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad.status().message() == "expected a positive value, got -1");
}

TEST_CASE("RETURN_IF_ERROR stops at the first failure") {
  CHECK(check_both(1, 2).is_ok());
  CHECK(check_both(0, 2).message() == "expected a positive value, got 0");
  CHECK(check_both(1, -3).message() == "field b: expected a positive value, got -3");
}

}  // namespace
}  // namespace gossip
