// Unit tests of AttachClient (attach/client.h) against AttachServer over a real Unix
// socket and memfd: the round trip with values, and each way a session ends as the Status the
// trainer gets (BYE, refusal, ERROR, daemon gone, nobody listening).
#include "attach/client.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "attach/server.h"
#include "tests/attach/attach_test_support.h"

namespace gossip::attach {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST_CASE_FIXTURE(Listening,
                  "AttachClient: values round trip, then BYE ends training with OutOfRange") {
  const std::uint64_t n = 3000;
  Status end;
  int wrong = 0;
  std::uint64_t start = 0;
  std::thread trainer([&] {
    auto client = AttachClient::connect(dir.socket(), n, Clock::now() + 10s);
    REQUIRE_MESSAGE(client.is_ok(), client.status().to_string());
    start = (*client)->next_iteration();
    for (;;) {
      const auto t = static_cast<float>((*client)->next_iteration());
      auto x = (*client)->parameters();
      for (std::uint64_t k = 0; k < n; ++k) x[k] = t + static_cast<float>(k);
      end = (*client)->post_and_get(Clock::now() + 10s);
      if (!end.is_ok()) break;
      for (std::uint64_t k = 0; k < n; ++k) wrong += x[k] != 2.0f * (t + static_cast<float>(k));
    }
  });
  AttachOptions options;
  options.start_iteration = 40;
  REQUIRE(server->accept(Clock::now() + 10s, options).is_ok());
  for (std::uint64_t t = 40; t < 44; ++t) {
    auto x = server->wait_post(t, Clock::now() + 10s);
    REQUIRE_MESSAGE(x.is_ok(), x.status().to_string());
    for (float& v : *x) v *= 2.0f;
    REQUIRE(server->reply_mixed(t).is_ok());
  }
  // The trainer has posted 44 by now or will: BYE answers it.
  auto last = server->wait_post(44, Clock::now() + 10s);
  REQUIRE(last.is_ok());
  REQUIRE(server->close().is_ok());
  trainer.join();
  CHECK(start == 40);
  CHECK(wrong == 0);
  CHECK(end.code() == StatusCode::kOutOfRange);
  CHECK(end.message().find("MIXED(44)") != std::string::npos);
}

TEST_CASE_FIXTURE(Listening, "AttachClient: post() and wait_mixed() in halves, in order only") {
  const std::uint64_t n = 100;
  Status out_of_order, twice, first, second, mixed;
  float seen = 0;
  std::thread trainer([&] {
    auto client = AttachClient::connect(dir.socket(), n, Clock::now() + 10s);
    REQUIRE_MESSAGE(client.is_ok(), client.status().to_string());
    out_of_order = (*client)->wait_mixed(Clock::now() + 1s);  // nothing posted yet
    for (float& v : (*client)->parameters()) v = 3.0f;
    first = (*client)->post();
    twice = (*client)->post();  // MIXED(0) not read yet
    mixed = (*client)->wait_mixed(Clock::now() + 10s);
    seen = (*client)->parameters()[n - 1];
    second = (*client)->post();
    (void)(*client)->wait_mixed(Clock::now() + 10s);  // BYE
  });
  REQUIRE(server->accept(Clock::now() + 10s, {}).is_ok());
  auto x = server->wait_post(0, Clock::now() + 10s);
  REQUIRE(x.is_ok());
  for (float& v : *x) v += 1.0f;
  REQUIRE(server->reply_mixed(0).is_ok());
  REQUIRE(server->wait_post(1, Clock::now() + 10s).is_ok());
  REQUIRE(server->close().is_ok());
  trainer.join();
  CHECK(out_of_order.code() == StatusCode::kFailedPrecondition);
  CHECK(first.is_ok());
  CHECK(twice.code() == StatusCode::kFailedPrecondition);
  CHECK(mixed.is_ok());
  CHECK(seen == 4.0f);
  CHECK(second.is_ok());
}

TEST_CASE_FIXTURE(Listening, "AttachClient: an update session sends u_t and gamma, in order only") {
  const std::uint64_t n = 64;
  Status no_update, early, update, twice, mixed;
  float seen = 0;
  bool has_region = false;
  std::thread trainer([&] {
    auto client = AttachClient::connect(dir.socket(), n, Clock::now() + 10s, attach::kHelloUpdate);
    REQUIRE_MESSAGE(client.is_ok(), client.status().to_string());
    AttachClient& c = **client;
    has_region = c.update().size() == n;
    early = c.send_update(1.0f);  // nothing posted yet
    for (float& v : c.parameters()) v = 3.0f;
    REQUIRE(c.post().is_ok());
    no_update = c.wait_mixed(Clock::now() + 1s);  // UPDATE is due first
    for (float& v : c.update()) v = 2.0f;
    update = c.send_update(0.5f);
    twice = c.send_update(0.5f);
    mixed = c.wait_mixed(Clock::now() + 10s);
    seen = c.parameters()[n - 1];
    (void)c.post();
    (void)c.send_update(0.5f);
    (void)c.wait_mixed(Clock::now() + 10s);  // BYE
  });
  REQUIRE(server->accept(Clock::now() + 10s, {}).is_ok());
  auto x = server->wait_post(0, Clock::now() + 10s);
  REQUIRE(x.is_ok());
  Result<float> gamma = server->wait_update(0, Clock::now() + 10s);
  REQUIRE_MESSAGE(gamma.is_ok(), gamma.status().to_string());
  for (std::uint64_t k = 0; k < n; ++k) (*x)[k] -= *gamma * server->update()[k];
  REQUIRE(server->reply_mixed(0).is_ok());
  REQUIRE(server->wait_post(1, Clock::now() + 10s).is_ok());
  REQUIRE(server->close().is_ok());
  trainer.join();
  CHECK(has_region);
  CHECK(early.code() == StatusCode::kFailedPrecondition);
  CHECK(no_update.code() == StatusCode::kFailedPrecondition);
  CHECK(update.is_ok());
  CHECK(twice.code() == StatusCode::kFailedPrecondition);
  CHECK(mixed.is_ok());
  CHECK(seen == 2.0f);  // 3 - 0.5 * 2
}

TEST_CASE_FIXTURE(Listening,
                  "AttachClient: a refused count is InvalidArgument with the daemon's text") {
  Status got;
  std::thread trainer(
      [&] { got = AttachClient::connect(dir.socket(), 7, Clock::now() + 10s).status(); });
  AttachOptions options;
  options.expected_num_params = 8;
  CHECK(server->accept(Clock::now() + 10s, options).status().code() ==
        StatusCode::kInvalidArgument);
  trainer.join();
  CHECK(got.code() == StatusCode::kInvalidArgument);
  CHECK(got.message().find("announced 7 parameters") != std::string::npos);
  CHECK(got.message().find("trains 8") != std::string::npos);
}

TEST_CASE(
    "AttachClient: the daemon's ERROR is Aborted, its death Unavailable, nobody Unavailable") {
  for (const bool with_error : {true, false}) {
    CAPTURE(with_error);
    SocketDir dir;
    auto server = listen_or_fail(dir.socket());
    Status got;
    std::thread trainer([&] {
      auto client = AttachClient::connect(dir.socket(), 16, Clock::now() + 10s);
      REQUIRE(client.is_ok());
      got = (*client)->post_and_get(Clock::now() + 30s);
    });
    REQUIRE(server->accept(Clock::now() + 10s, {}).is_ok());
    REQUIRE(server->wait_post(0, Clock::now() + 10s).is_ok());
    const auto begin = Clock::now();
    if (with_error) {
      server->fail("neighbour 3 failed; leaving the group");
    } else {
      server.reset();  // the daemon's side closes without a word, as when its process dies
    }
    trainer.join();
    CHECK(Clock::now() - begin < 10s);
    if (with_error) {
      CHECK(got.code() == StatusCode::kAborted);
      CHECK(got.message().find("neighbour 3 failed") != std::string::npos);
    } else {
      CHECK(got.code() == StatusCode::kUnavailable);
      CHECK(got.message().find("MIXED(0)") != std::string::npos);
    }
  }
  SocketDir dir;
  CHECK(AttachClient::connect(dir.socket(), 16, Clock::now() + 1s).status().code() ==
        StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gossip::attach
