// attach_trainer: an external trainer for gossipd's attach mode (gossipd run --attach), written
// against the C++ client (attach/client.h), for the tests that attach trainers to real
// gossipd processes.
//
// It runs gossipd's own step outside gossipd: gossip_sgd's model, optimizer and batch sampler on
// this node's shard of the training config (SgdStep, daemon/local_step.h). At iteration t it
// posts x_t and computes u_t at x_t and γ_t while the daemon exchanges (as gossipd's own loop
// overlaps the exchange with the gradient). Then, in an update session (the default), it hands
// u_t and γ_t to the daemon, whose fused mix writes x_{t+1} = Σ_j W_ij x_j^t − γ_t u_t into the
// shared buffer: x lives in that buffer and is never copied. With --plain it gets
// m = Σ_j W_ij x_j^t back and sets x_{t+1} = fma(−γ_t, u_t, m) itself, the same fused update
// (sgd::Backend::mix) split where the plain protocol hands the mixing to the daemon. Either way
// the bits are the same as gossipd training the model itself.
//
// Flags: --config FILE [--set k=v]... --node I --nodes N; --socket PATH (default
// $GOSSIP_ATTACH_SOCKET); --plain; --out FILE writes the final x as raw float32. Faults for tests:
// --die-at K kills itself (SIGKILL) instead of posting iteration K; --die-after-post K (update
// session) right after posting K, before its UPDATE; --announce N says HELLO with N parameters
// instead of the model's count.
// Exit codes: 0 training ended by the daemon (BYE), 1 the daemon failed or refused, 2 bad input.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "attach/client.h"
#include "config/load.h"
#include "config/sgd_config.h"
#include "config/train_config.h"
#include "daemon/local_step.h"
#include "sgd/backend.h"
#include "sgd/problem.h"

namespace {

using gossip::Status;
using gossip::StatusCode;
using namespace gossip::daemon;
using gossip::attach::AttachClient;
using Clock = std::chrono::steady_clock;

int fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "attach_trainer: %s: %s\n", what.c_str(), s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a trainer running gossipd's own SGD step, attached to gossipd (tests)"};
  std::string config_path, socket, out;
  std::vector<std::string> overrides;
  int node = -1, nodes = 0;
  std::optional<std::uint64_t> die_at, die_after_post, announce;
  bool plain = false;
  app.add_option("--config", config_path)->required();
  app.add_option("--set", overrides);
  app.add_option("--node", node)->required();
  app.add_option("--nodes", nodes)->required();
  app.add_option("--socket", socket);
  app.add_option("--out", out);
  app.add_flag("--plain", plain, "a plain session: the trainer applies its update after MIXED");
  app.add_option("--die-at", die_at);
  app.add_option("--die-after-post", die_after_post);
  app.add_option("--announce", announce);
  CLI11_PARSE(app, argc, argv);
  if (socket.empty() && std::getenv("GOSSIP_ATTACH_SOCKET") != nullptr) {
    socket = std::getenv("GOSSIP_ATTACH_SOCKET");
  }
  if (socket.empty()) {
    std::fprintf(stderr, "attach_trainer: give --socket or set GOSSIP_ATTACH_SOCKET\n");
    return 2;
  }
  gossip::Result<gossip::config::TrainConfig> config =
      gossip::config::load_config_with_overrides(config_path, overrides);
  if (!config.is_ok()) return fail("config", config.status()) + 1;
  gossip::Result<gossip::sgd::Problem> problem =
      gossip::sgd::make_problem(gossip::config::to_problem_config(*config, nodes));
  if (!problem.is_ok()) return fail("problem", problem.status()) + 1;
  gossip::Result<std::unique_ptr<gossip::sgd::Backend>> backend =
      gossip::sgd::make_backend(gossip::sgd::Device::kCpu, static_cast<int>(config->cpu_threads()));
  if (!backend.is_ok()) return fail("backend", backend.status()) + 1;
  const std::uint64_t total = config->iterations();
  gossip::Result<std::unique_ptr<SgdStep>> step =
      SgdStep::create(**backend, *problem, gossip::config::to_optimizer_config(*config, total),
                      node, static_cast<int>(config->batch_size()));
  if (!step.is_ok()) return fail("step", step.status()) + 1;
  const std::size_t d = problem->spec.num_params();
  gossip::sgd::DeviceBuffer x = (*backend)->alloc(d), u = (*backend)->alloc(d);
  const std::vector<float> x0 = problem->initial_params();
  (*backend)->copy_to_device(x.data(), x0.data(), d);

  // The daemon may still be starting: wait for its socket.
  const auto connect_deadline = Clock::now() + std::chrono::seconds(60);
  const std::uint32_t flags = plain ? 0 : gossip::attach::kHelloUpdate;
  gossip::Result<std::unique_ptr<AttachClient>> client =
      AttachClient::connect(socket, announce.value_or(d), connect_deadline, flags);
  // (A socket file appears at bind(), a moment before listen(): a second is allowed for that.)
  std::optional<Clock::time_point> seen;
  while (!client.is_ok() && client.status().code() == StatusCode::kUnavailable &&
         Clock::now() < connect_deadline) {
    if (!seen && std::filesystem::exists(socket)) seen = Clock::now();
    if (seen && Clock::now() > *seen + std::chrono::seconds(1)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    client = AttachClient::connect(socket, announce.value_or(d), connect_deadline, flags);
  }
  if (!client.is_ok()) return fail("connect", client.status());
  AttachClient& c = **client;
  std::span<float> shared = c.parameters();
  const bool initialized = (c.welcome().flags & gossip::attach::kFlagBufferInitialized) != 0;
  const auto wait = [&] { return c.wait_mixed(Clock::now() + std::chrono::seconds(120)); };
  const std::uint32_t local_steps = c.welcome().local_steps;
  if (local_steps > 1) {
    // Rounds (docs/attach.md): H steps of its own between POSTs, then the round's result.
    if (initialized) (*backend)->copy_to_device(x.data(), shared.data(), d);
    for (std::uint64_t k = 0;;) {
      const std::uint64_t t = c.next_iteration();
      if (die_at && t == *die_at) ::kill(::getpid(), SIGKILL);
      for (std::uint32_t s = 0; s < local_steps; ++s, ++k) {
        (*step)->gradient(x.data(), k);
        const float gamma = (*step)->direction(x.data(), u.data(), k);
        const gossip::sgd::MixTerm term{1.0f, x.data()};
        (*backend)->mix(x.data(), std::span(&term, 1), gamma, u.data(), d);
      }
      (*backend)->copy_to_host(shared.data(), x.data(), d);
      Status s = c.post();
      if (s.is_ok()) s = wait();
      if (s.code() == StatusCode::kOutOfRange) break;  // BYE: training is over
      if (!s.is_ok()) return fail("round " + std::to_string(t), s);
      (*backend)->copy_to_device(x.data(), shared.data(), d);
    }
  } else if (!plain) {
    // x is the shared buffer itself (the cpu backend computes in host memory).
    if (!initialized) std::copy(x0.begin(), x0.end(), shared.begin());
    for (;;) {
      const std::uint64_t t = c.next_iteration();
      if (die_at && t == *die_at) ::kill(::getpid(), SIGKILL);
      Status s = c.post();
      if (die_after_post && t == *die_after_post) ::kill(::getpid(), SIGKILL);
      (*step)->gradient(shared.data(), t);
      const float gamma = (*step)->direction(shared.data(), c.update().data(), t);
      if (s.is_ok()) s = c.send_update(gamma);
      if (s.is_ok()) s = wait();
      if (s.code() == StatusCode::kOutOfRange) break;  // BYE: training is over
      if (!s.is_ok()) return fail("iteration " + std::to_string(t), s);
    }
    (*backend)->copy_to_device(x.data(), shared.data(), d);
  } else {
    if (initialized) (*backend)->copy_to_device(x.data(), shared.data(), d);
    for (;;) {
      const std::uint64_t t = c.next_iteration();
      if (die_at && t == *die_at) ::kill(::getpid(), SIGKILL);
      (*backend)->copy_to_host(shared.data(), x.data(), d);
      Status s = c.post();
      (*step)->gradient(x.data(), t);
      const float gamma = (*step)->direction(x.data(), u.data(), t);
      if (s.is_ok()) s = wait();
      if (s.code() == StatusCode::kOutOfRange) break;  // BYE: training is over
      if (!s.is_ok()) return fail("iteration " + std::to_string(t), s);
      // m = Σ_j W_ij x_j^t is read where it lies (cpu backend: host memory).
      const gossip::sgd::MixTerm term{1.0f, shared.data()};
      (*backend)->mix(x.data(), std::span(&term, 1), gamma, u.data(), d);
    }
  }
  if (!out.empty()) {
    std::vector<float> host(d);
    (*backend)->copy_to_host(host.data(), x.data(), d);
    std::ofstream f(out, std::ios::binary);
    f.write(reinterpret_cast<const char*>(host.data()),
            static_cast<std::streamsize>(host.size() * sizeof(float)));
    if (!f.good()) {
      std::fprintf(stderr, "attach_trainer: writing %s failed\n", out.c_str());
      return 1;
    }
  }
  return 0;
}
