// daemon_bench: how much of the parameter exchange D-PSGD's overlap hides. Runs `gossipd launch`
// with n nodes on a loopback ring for MLPs of about 1M and 25M parameters, once with the exchange
// overlapping the gradient computation and once after it (--no-overlap), and prints the mean
// per-iteration split read from the nodes' metrics (first iterations skipped as warm-up):
//   compute   loss + gradient
//   exchange  from posting the sends/receives until the last neighbour's x_j^t had arrived
//             (with overlap it runs concurrently with compute)
//   wait      time blocked after the gradient was ready — the exchange the overlap did NOT hide
//   mix       optimizer direction + fused mixing pass
// hidden = 1 − wait(overlap) / wait(no overlap).
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/check.h"
#include "daemon/metrics.h"
#include "tests/support/ports.h"

namespace {

namespace fs = std::filesystem;

struct Split {
  double compute = 0, exchange = 0, wait = 0, mix = 0, iteration = 0;
  int count = 0;
};

int free_base(int n) {
  const int base = gossip::free_loopback_ports(n, 31000 + (::getpid() % 2000) * 10);
  GOSSIP_CHECK_GT(base, 0) << "no " << n << " free consecutive loopback ports";
  return base;
}

struct Size {
  std::string name;
  int dim;
  std::vector<int> hidden;
};

Split run(const std::string& dir, int nodes, const Size& size, int iterations, int warmup,
          bool overlap, bool tls, int batch) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/ring.pbtxt")
      << "name: \"bench\"\ngenerator { kind: RING nodes: " << nodes
      << " host: \"127.0.0.1\" base_port: " << free_base(nodes) << " }\n";
  std::string hidden;
  for (int h : size.hidden) hidden += " hidden: " + std::to_string(h);
  std::ofstream(dir + "/train.pbtxt")
      << "seed: 1\nmodel { kind: MLP" << hidden << " }\n"
      << "data { dataset: SYNTHETIC_LOGISTIC num_examples: 256 dim: " << size.dim
      << " test_examples: 32 }\nbatch_size: " << batch << "\noptimizer { kind: SGD lr: 0.01 }\n"
      << "iterations: " << iterations << "\nmetrics_every: 1\ncpu_threads: 1\n"
      << "checkpoint { dir: \"" << dir << "/ckpt\" }\n"
      << "timeouts { connect_ms: 60000 deadline_ms: 120000 heartbeat_ms: 1000 }\n";
  std::string cmd = std::string(GOSSIPD_PATH) + " launch " + dir + "/ring.pbtxt --config " + dir +
                    "/train.pbtxt --workdir " + dir + "/run --progress-interval 30" +
                    (tls ? "" : " --insecure") + (overlap ? "" : " --no-overlap") + " > " + dir +
                    "/launch.out 2>&1";
  int rc = std::system(cmd.c_str());
  Split s;
  if (rc != 0) {
    std::fprintf(stderr, "daemon_bench: gossipd launch failed (see %s/launch.out)\n", dir.c_str());
    return s;
  }
  for (int i = 0; i < nodes; ++i) {
    std::ifstream in(dir + "/run/node-" + std::to_string(i) + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto m = gossip::daemon::parse_flat_json(line);
      if (!m.is_ok() || (*m)["type"].text != "iter" || (*m)["iteration"].number <= warmup) continue;
      s.compute += (*m)["compute_s"].number;
      s.exchange += (*m)["exchange_s"].number;
      s.wait += (*m)["wait_s"].number;
      s.mix += (*m)["mix_s"].number;
      s.iteration += (*m)["iteration_s"].number;
      ++s.count;
    }
  }
  if (s.count > 0) {
    s.compute /= s.count;
    s.exchange /= s.count;
    s.wait /= s.count;
    s.mix /= s.count;
    s.iteration /= s.count;
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "daemon_bench: per-iteration compute / exchange / wait of n gossipd processes on a "
      "loopback ring, overlap on vs off"};
  int nodes = 8, iterations = 8, warmup = 2, batch = 16;
  std::string sizes = "1M,25M";
  bool tls = false;
  std::string workdir = (fs::temp_directory_path() / "gossip_daemon_bench").string();
  app.add_option("--nodes", nodes, "processes on the ring")->capture_default_str();
  app.add_option("--iterations", iterations, "iterations per run")->capture_default_str();
  app.add_option("--warmup", warmup, "first iterations left out of the means")
      ->capture_default_str();
  app.add_option("--batch", batch, "per-node batch size")->capture_default_str();
  app.add_option("--sizes", sizes, "model sizes: 1M, 25M (comma-separated)")->capture_default_str();
  app.add_flag("--tls", tls, "TLS 1.3 links (default: plaintext, to measure the loop itself)");
  app.add_option("--workdir", workdir, "scratch directory")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::vector<Size> all = {{"1M", 256, {2048, 256}}, {"25M", 1024, {8192, 2048}}};
  std::printf(
      "daemon_bench: %d gossipd processes, ring, loopback, %s, batch %d, %d iterations "
      "(first %d skipped), cpu backend 1 thread per node, %u hardware threads\n",
      nodes, tls ? "TLS 1.3" : "plaintext TCP", batch, iterations, warmup,
      std::thread::hardware_concurrency());
  std::printf("%-6s %-8s %12s %12s %12s %10s %12s %8s\n", "model", "overlap", "compute ms",
              "exchange ms", "wait ms", "mix ms", "iter ms", "hidden");
  for (const Size& size : all) {
    if (sizes.find(size.name) == std::string::npos) continue;
    long params = static_cast<long>(size.dim) * size.hidden[0] + size.hidden[0];
    for (std::size_t l = 1; l < size.hidden.size(); ++l)
      params += static_cast<long>(size.hidden[l - 1]) * size.hidden[l] + size.hidden[l];
    params += static_cast<long>(size.hidden.back()) * 2 + 2;
    Split off =
        run(workdir + "/" + size.name + "-off", nodes, size, iterations, warmup, false, tls, batch);
    Split on =
        run(workdir + "/" + size.name + "-on", nodes, size, iterations, warmup, true, tls, batch);
    for (const auto& [label, s] : {std::pair<const char*, Split&>{"off", off}, {"on", on}}) {
      std::printf(
          "%-6s %-8s %12.2f %12.2f %12.2f %10.2f %12.2f %8s\n", size.name.c_str(), label,
          s.compute * 1e3, s.exchange * 1e3, s.wait * 1e3, s.mix * 1e3, s.iteration * 1e3,
          std::string(label) == "on" && off.wait > 0
              ? (std::to_string(static_cast<int>(std::lround(100 * (1 - on.wait / off.wait)))) +
                 "%")
                    .c_str()
              : "");
    }
    std::printf("       (%ld parameters, %.1f MB per message)\n", params, params * 4 / 1e6);
    std::fflush(stdout);
  }
  fs::remove_all(workdir);
  return 0;
}
