// attach_peer: a test tool that plays gossipd's side of the attach protocol with the real
// AttachServer (attach/server.h), so that trainers (the Python client in tests/python) can be
// tested against it before the daemon's loop serves attached trainers.
//
// It runs D-PSGD on a ring of --nodes nodes in which node 0 is the attached trainer and nodes
// 1..n-1 are simulated in this process. Ring weights are Metropolis-Hastings: 1/3 for self and
// each of the two neighbours. Simulated node j starts at 0 (or at --initial) and takes the local
// step of the quadratic f_j(y) = 0.5 ||y - target_j||^2, target_j[k] = j + k / num_params:
//     y_j <- y_j - lr * (y_j - target_j)
// Then every node mixes, in float32 and in this order:
//     y_i <- (w * y_i + w * y_{i-1}) + w * y_{i+1}
// and the trainer gets its mixed row. In an update session (the trainer's HELLO asked for one) the
// trainer's UPDATE(t, gamma) follows its POST, and it gets its mixed row minus gamma * u_t
// instead (float32, rounded after the product). A reference in numpy can replay all of it exactly.
//
// Prints "listening PATH" (flushed) once the socket is ready. Faults for tests: --hang-at K
// receives POST(K) and never answers; --exit-at K exits (code 0, no BYE) on receiving POST(K).
// --initial V hands the trainer initial parameters all equal to V (as on a resume); the simulated
// nodes then start at V too. --echo answers every POST at once with the buffer as posted (the
// protocol's own cost, for bench/attach_bench.py).
// Exit codes: 0 all iterations served (BYE sent), 1 the trainer failed or was refused (the
// Status is printed on stderr), 2 bad command line.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include "attach/server.h"

namespace {

using gossip::attach::AttachOptions;
using gossip::attach::AttachServer;
using Clock = std::chrono::steady_clock;

int fail(const gossip::Status& s) {
  std::fprintf(stderr, "attach_peer: %s\n", s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attach_peer: the daemon side of the attach protocol over a simulated ring"};
  std::string socket_path;
  int nodes = 4;
  float lr = 0.1f;
  std::int64_t iterations = 10;
  std::uint64_t start_iteration = 0;
  std::optional<std::uint64_t> expect_params;
  std::optional<std::int64_t> hang_at;
  std::optional<std::int64_t> exit_at;
  std::optional<float> initial;
  bool echo = false;
  double timeout_s = 30;
  app.add_option("--socket", socket_path, "Unix socket path")->required();
  app.add_option("--nodes", nodes, "ring size (node 0 is the trainer)")->check(CLI::Range(3, 1024));
  app.add_option("--lr", lr, "learning rate of the simulated nodes");
  app.add_option("--iterations", iterations, "iterations to serve")->check(CLI::Range(1, 1 << 30));
  app.add_option("--start-iteration", start_iteration, "the first iteration");
  app.add_option("--expect-params", expect_params, "refuse another parameter count");
  app.add_option("--hang-at", hang_at, "never answer POST(K)");
  app.add_option("--exit-at", exit_at, "exit without a word on POST(K)");
  app.add_option("--initial", initial,
                 "hand the trainer initial parameters, all equal to this value (a resume); "
                 "needs --expect-params");
  app.add_flag("--echo", echo,
               "answer each POST at once, leaving the buffer as posted (benchmarks)");
  app.add_option("--timeout-s", timeout_s, "deadline of every wait for the trainer");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  auto server = AttachServer::listen(socket_path);
  if (!server.is_ok()) return fail(server.status());
  std::printf("listening %s\n", socket_path.c_str());
  std::fflush(stdout);
  const auto timeout =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));

  AttachOptions options;
  options.expected_num_params = expect_params;
  options.node_id = 0;
  options.num_nodes = static_cast<std::uint32_t>(nodes);
  options.start_iteration = start_iteration;
  std::vector<float> initial_parameters;
  if (initial) {
    if (!expect_params) {
      std::fprintf(stderr, "attach_peer: --initial needs --expect-params\n");
      return 2;
    }
    initial_parameters.assign(*expect_params, *initial);
    options.initial_parameters = initial_parameters;
  }
  auto accepted = (*server)->accept(Clock::now() + timeout, options);
  if (!accepted.is_ok()) return fail(accepted.status());
  const std::size_t n = *accepted;

  // Simulated nodes start where the trainer is told to start, or at 0.
  std::vector<std::vector<float>> y(echo ? 0 : nodes,
                                    std::vector<float>(n, initial.value_or(0.0f)));
  std::vector<std::vector<float>> next = y;
  const float w = 1.0f / 3.0f;
  for (std::int64_t i = 0; i < iterations; ++i) {
    const std::uint64_t t = start_iteration + static_cast<std::uint64_t>(i);
    auto x = (*server)->wait_post(t, Clock::now() + timeout);
    if (!x.is_ok()) return fail(x.status());
    if (exit_at && *exit_at == i) std::_Exit(0);
    if (hang_at && *hang_at == i) {
      for (;;) ::pause();
    }
    if (echo) {
      if ((*server)->with_update()) {
        if (auto g = (*server)->wait_update(t, Clock::now() + timeout); !g.is_ok()) {
          return fail(g.status());
        }
      }
      if (auto s = (*server)->reply_mixed(t); !s.is_ok()) return fail(s);
      continue;
    }
    std::copy(x->begin(), x->end(), y[0].begin());
    for (int j = 1; j < nodes; ++j) {
      for (std::size_t k = 0; k < n; ++k) {
        const float target = static_cast<float>(j) + static_cast<float>(k) / static_cast<float>(n);
        y[j][k] = y[j][k] - lr * (y[j][k] - target);
      }
    }
    for (int j = 0; j < nodes; ++j) {
      const auto& prev = y[(j + nodes - 1) % nodes];
      const auto& succ = y[(j + 1) % nodes];
      for (std::size_t k = 0; k < n; ++k) next[j][k] = (w * y[j][k] + w * prev[k]) + w * succ[k];
    }
    std::swap(y, next);
    if ((*server)->with_update()) {
      auto gamma = (*server)->wait_update(t, Clock::now() + timeout);
      if (!gamma.is_ok()) return fail(gamma.status());
      const std::span<const float> u = (*server)->update();
      for (std::size_t k = 0; k < n; ++k) {
        const volatile float step = *gamma * u[k];  // rounded: numpy computes it apart
        y[0][k] = y[0][k] - step;
      }
    }
    std::copy(y[0].begin(), y[0].end(), x->begin());
    if (auto s = (*server)->reply_mixed(t); !s.is_ok()) return fail(s);
  }
  if (auto s = (*server)->close(); !s.is_ok()) return fail(s);
  return 0;
}
