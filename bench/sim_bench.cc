// bench/sim_bench: how fast gossip-sim simulates. Prints, side by side in one run:
//  1. node-iterations per second of the real Simulator running D-PSGD on synthetic least squares
//     (d = 1000 parameters) for n = 64, 256, 1024 on the ring and the exponential graph, next to
//     the same loop in numpy (bench/sim_reference.py; same thread count, OPENBLAS_CORETYPE and
//     OPENBLAS_L2_SIZE unset for that command alone);
//  2. the mixing step's achieved bandwidth (one read of X and one write of the output, 8·rows·n
//     bytes per call, X in the simulator's layout of columns padded to 16 floats) against a plain
//     copy of the same buffer into the same output (also one read and one write; the faster of
//     std::memcpy and a 16-float load/store loop), for
//     sim::mix (all columns, blocked) and for sim::mix_node over every node (what the default
//     combine-then-adapt simulation runs, there fused into each node's step);
//  3. two figures measured on the machine at hand, so a shortfall can be told from a limit:
//     "rows alone", the node-iterations per second of a loop that only reads every node's batch
//     rows (the simulator's samplers and rows, 8 rows side by side as the forward reads them, one
//     FMA per 16 features: the forward dot products against a fixed vector; no backward, no
//     mixing, no update), a reference for how much of a node-iteration is the row reads (a
//     measured pattern, not a proof: another read order could be faster), and
//     "FMA bound", the mixing GB/s at this core's peak rate of 16-float FMAs with K of them per
//     16 outputs (gossipd's arithmetic: w_0·x_0, then fma(w_q, x_q, acc) for q = 1..K−1, K
//     operations on the FMA pipes; the simulator mixes with those bits, so no kernel of it can
//     do fewer): a bound on the mixing's GB/s whatever its memory access.
// Figures only, no assertions. The same thread count on both sides: one by default (the
// simulator's RunConfig::threads = 1; numpy gets OPENBLAS_NUM_THREADS=1, OMP_NUM_THREADS=1), T
// with --threads T (the simulator steps its nodes on T threads; numpy gets
// OPENBLAS_NUM_THREADS=T, OMP_NUM_THREADS=T). With one thread both sides are timed with their own
// thread's CPU time by default (the machine is shared: wall time would count other jobs' turns on
// the core), or both with the wall clock (--wall); with T > 1 both are timed with the wall clock.
// The rows-alone loop and the first mixing table run on one thread whatever --threads says; with
// T > 1 a second mixing table runs mix_node and the copy on T threads over column ranges.
//
//   build-sim/bench/sim_bench [--nodes 64,256,1024] [--dim 1000] [--batch 8] [--seconds 2] [--wall]
//                             [--threads T]
#include <omp.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/sim_bench_kernels.h"
#include "common/clock.h"
#include "common/random.h"
#include "sim/experiment.h"
#include "sim/node_state.h"
#include "sim/simulator.h"

namespace {

using namespace gossip;
using namespace gossip::sim;

constexpr int kExamplesPerNode = 32;

// Seconds this thread has run (CLOCK_THREAD_CPUTIME_ID) or wall seconds (--wall). On a machine
// shared with other jobs, thread CPU time leaves out the time the scheduler gave to someone else.
bool g_wall = false;
// Threads of both sides in the node-iterations table (--threads).
int g_threads = 1;

double now_s() {
  timespec ts{};
  clock_gettime(g_wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

class Timer {
 public:
  Timer() : start_(now_s()) {}
  double elapsed_seconds() const { return now_s() - start_; }

 private:
  double start_;
};

// Timed runs per side; the fastest counts (the numpy reference gets the same: --repeats).
constexpr int kRepeats = 2;

// The benchmark's problem: synthetic least squares with `dim` parameters, kExamplesPerNode
// training examples per node, iid shards.
Result<sgd::Problem> least_squares(int n, int dim) {
  sgd::ProblemConfig pc;
  pc.model = sgd::ModelKind::kLeastSquares;
  pc.data = sgd::DataKind::kLeastSquares;
  pc.synthetic_dim = dim - 1;  // + the bias: `dim` parameters
  pc.synthetic_train = static_cast<std::int64_t>(n) * kExamplesPerNode;
  pc.synthetic_test = 64;
  pc.num_nodes = n;
  return sgd::make_problem(pc);
}

// Node-iterations per second of the Simulator, best of kRepeats timed runs.
double simulator_rate(int n, int dim, int batch, const std::string& topo_name, double seconds) {
  auto problem = least_squares(n, dim);
  auto topo = make_topology(topo_name, n, topology::WeightScheme::kDefault);
  if (!problem.is_ok() || !topo.is_ok()) {
    std::fprintf(stderr, "setup failed: %s %s\n", problem.status().to_string().c_str(),
                 topo.status().to_string().c_str());
    return -1;
  }
  RunConfig rc;
  rc.algorithm = Algorithm::kDpsgd;
  rc.batch_size = batch;
  rc.optimizer.schedule.lr = 0.01;
  rc.eval_examples = 64;  // evaluation (at the first and last iteration only) is not the subject
  rc.eval_local = false;
  rc.threads = g_threads;
  // Calibrate: a short run, then enough iterations for `seconds`.
  rc.iterations = 3;
  rc.eval_every = rc.iterations;
  auto probe = Simulator::create(*problem, &*topo, rc);
  Timer w;
  if (!probe.is_ok() || !(*probe)->run().is_ok()) return -1;
  const double per_iteration = w.elapsed_seconds() / 3;
  rc.iterations = std::max<std::int64_t>(5, static_cast<std::int64_t>(seconds / per_iteration));
  rc.eval_every = rc.iterations;
  double best = 0;
  for (int repeat = 0; repeat < kRepeats; ++repeat) {
    auto sim = Simulator::create(*problem, &*topo, rc);
    if (!sim.is_ok()) return -1;
    Timer run;
    auto trace = (*sim)->run();
    const double elapsed = run.elapsed_seconds();
    if (!trace.is_ok()) return -1;
    best = std::max(best, static_cast<double>(rc.iterations) * n / elapsed);
  }
  return best;
}

double numpy_rate(const std::string& script, int n, int dim, int batch, const std::string& topo,
                  double seconds, double our_rate) {
  // Aim each numpy loop at about `seconds`, assuming it is ~5x slower than us.
  const long iterations = std::max(3L, static_cast<long>(seconds * our_rate / 5 / n));
  const std::string threads = std::to_string(g_threads);
  const std::string cmd =
      "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=" + threads +
      " OMP_NUM_THREADS=" + threads + " /usr/bin/python3 " + script + " --nodes " +
      std::to_string(n) + " --dim " + std::to_string(dim) + " --batch " + std::to_string(batch) +
      " --examples-per-node " + std::to_string(kExamplesPerNode) + " --topology " + topo +
      " --iterations " + std::to_string(iterations) + " --repeats " + std::to_string(kRepeats) +
      (g_wall ? " --wall" : "") + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return -1;
  char line[512];
  double rate = -1;
  while (std::fgets(line, sizeof line, pipe)) {
    if (std::sscanf(line, "node_iterations_per_s %lf", &rate) != 1) std::fputs(line, stderr);
  }
  pclose(pipe);
  return rate;
}

// Best-of-5 rate of fn() calls per second over ~seconds in total.
template <typename Fn>
double best_calls_per_s(Fn fn, double seconds) {
  fn();
  Timer w;
  int calls = 0;
  while (w.elapsed_seconds() < 0.05) {
    fn();
    ++calls;
  }
  const int per_round = std::max(1, static_cast<int>(calls * seconds / 5 / 0.05));
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    Timer round;
    for (int k = 0; k < per_round; ++k) fn();
    best = std::max(best, per_round / round.elapsed_seconds());
  }
  return best;
}

// The best of std::memcpy and a plain 16-float load/store loop copying `src` into `dst` (n floats):
// glibc's memcpy ran at 58–220 GB/s on the same 256 KB here depending on the two buffers' offsets
// (its rep-movsb path for some alignments, its vector loop for others); the reference gets the
// faster of the two ways on the same buffers the mixing reads and writes.
double best_copy_gbps(float* dst, const float* src, Eigen::Index n, double seconds) {
  const double bytes = 8.0 * static_cast<double>(n);
  const double by_memcpy =
      best_calls_per_s([&] { std::memcpy(dst, src, n * sizeof(float)); }, seconds / 2);
  const auto copy16 = GOSSIP_ISA_PICK(gossip::bench, copy16);
  const double by_loop = best_calls_per_s([&] { copy16(dst, src, n); }, seconds / 2);
  return std::max(by_memcpy, by_loop) * bytes / 1e9;
}

// fn(first, last) on g_threads OpenMP threads over contiguous ranges of [0, count), as the
// simulator splits its nodes.
template <typename Fn>
void on_threads(Eigen::Index count, const Fn& fn) {
#pragma omp parallel num_threads(g_threads)
  {
    const Eigen::Index t = omp_get_thread_num(), nt = omp_get_num_threads();
    fn(count * t / nt, count * (t + 1) / nt);
  }
}

// best_copy_gbps with every thread copying its range of columns (rows floats each).
double best_copy_gbps_threads(float* dst, const float* src, Eigen::Index rows, Eigen::Index cols,
                              double seconds) {
  const double bytes = 8.0 * static_cast<double>(rows * cols);
  const double by_memcpy = best_calls_per_s(
      [&] {
        on_threads(cols, [&](Eigen::Index first, Eigen::Index last) {
          std::memcpy(dst + first * rows, src + first * rows,
                      (last - first) * rows * sizeof(float));
        });
      },
      seconds / 2);
  const auto copy16 = GOSSIP_ISA_PICK(gossip::bench, copy16);
  const double by_loop = best_calls_per_s(
      [&] {
        on_threads(cols, [&](Eigen::Index first, Eigen::Index last) {
          copy16(dst + first * rows, src + first * rows, (last - first) * rows);
        });
      },
      seconds / 2);
  return std::max(by_memcpy, by_loop) * bytes / 1e9;
}

// Node-iterations per second of a loop that does nothing but read each node's batch rows, as the
// simulator draws them (its samplers, its 64-byte-aligned rows) and as its forward reads them (8
// rows side by side), with one FMA per 16 features: the forward dot products against a fixed
// vector, the part of a least-squares gradient that has to touch every feature of every batch
// row. The simulator reads the same rows and then does the backward, the mixing and the update.
double rows_alone_rate(int n, int dim, int batch, double seconds) {
  auto problem = least_squares(n, dim);
  if (!problem.is_ok()) return -1;
  const sgd::AlignedRows rows(*problem->train);
  std::vector<sgd::BatchSampler> samplers;
  for (int i = 0; i < n; ++i) samplers.push_back(problem->sampler(i, batch));
  const int m = rows.dim();
  const auto read_rows = GOSSIP_ISA_PICK(gossip::bench, read_rows);
  std::vector<float> sink(16);
  constexpr int kGroup = 8;    // rows read side by side, as the forward's dot_rows<8> reads them
  const auto one_pass = [&] {  // every node's batch once
    for (int i = 0; i < n; ++i) {
      const std::span<const std::int64_t> b = samplers[static_cast<std::size_t>(i)].next();
      for (std::size_t j0 = 0; j0 < b.size(); j0 += kGroup) {
        const int g = static_cast<int>(std::min<std::size_t>(kGroup, b.size() - j0));
        const float* x[kGroup];
        for (int j = 0; j < g; ++j) x[j] = rows.row(b[j0 + static_cast<std::size_t>(j)]);
        read_rows(x, g, m, sink.data());
      }
    }
  };
  return best_calls_per_s(one_pass, seconds) * n;
}

// This core's peak rate of 16-float FMAs (F16::fma, the unit the mixing kernels use): 12
// independent chains, so latency does not count, operands in registers, so memory does not.
double peak_fma16_per_s(double seconds) {
  const auto chains = GOSSIP_ISA_PICK(gossip::bench, fma16_chains);
  constexpr int kChains = 12, kSteps = 1 << 14;
  volatile float keep = 0;
  const auto steps = [&] { keep = keep + chains(kChains, kSteps); };
  const double calls = best_calls_per_s(steps, seconds);
  return calls * kChains * kSteps;
}

// n columns of `rows` floats in the simulator's layout: dim normal values, zero padding.
StateMatrix random_state(Eigen::Index rows, int dim, int n) {
  StateMatrix x = StateMatrix::Zero(rows, n);
  Rng rng(1);
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index k = 0; k < dim; ++k) x(k, i) = static_cast<float>(rng.normal());
  }
  return x;
}

void bench_mixing(const std::vector<int>& nodes, int dim, double seconds) {
  const Eigen::Index rows = padded_rows(dim);  // the simulator's layout
  std::printf(
      "\n== mixing X <- X W^T (pure gossip), d = %d in columns of %ld floats (the "
      "simulator's layout), GB/s counting one read of X and one write (8*rows*n bytes per "
      "call), per %s second; copy = the faster of std::memcpy and a 16-float load/store "
      "loop from X into the same output buffer\n",
      dim, static_cast<long>(rows), g_wall ? "wall" : "thread CPU");
  std::printf(
      "(mix = sim::mix, the blocked kernel over all n columns (ATC order, library users); "
      "per-node = sim::mix_node for i = 0..n-1, the kernel the default CTA simulation runs "
      "inside its per-node pass, timed here alone)\n");
  const double fma16 = peak_fma16_per_s(seconds / 2);
  std::printf(
      "(FMA bound = 128 bytes x %.2f G 16-float FMAs/s (this core's peak) / terms: K FMAs "
      "per 16 outputs, gossipd's arithmetic, all operands in registers)\n",
      fma16 / 1e9);
  std::printf("%7s %12s %6s %10s %10s %13s %10s %8s %9s %10s %11s\n", "nodes", "topology", "terms",
              "MiB", "mix GB/s", "per-node GB/s", "copy GB/s", "mix/copy", "node/copy", "FMA bound",
              "bound/copy");
  for (int n : nodes) {
    StateMatrix x = random_state(rows, dim, n), out(rows, n);
    const double bytes = 8.0 * static_cast<double>(rows) * n;
    const double copy_rate = best_copy_gbps(out.data(), x.data(), x.size(), seconds);
    for (const char* name : {"ring", "exponential"}) {
      auto topo = make_topology(name, n, topology::WeightScheme::kDefault);
      auto plan = MixingPlan::from_matrix(topo->mixing_matrix());
      const double mix_rate =
          best_calls_per_s([&] { mix(*plan, x, 0.0f, nullptr, out); }, seconds / 2) * bytes / 1e9;
      const double node_rate = best_calls_per_s(
                                   [&] {
                                     for (int i = 0; i < n; ++i) {
                                       mix_node(*plan, x, i, 0.0f, nullptr, out.col(i).data());
                                     }
                                   },
                                   seconds / 2) *
                               bytes / 1e9;
      // Terms per output node (self included): each output float costs that many FMAs, and each
      // term is a load unless its column is shared through a band's register window.
      const double terms = static_cast<double>(plan->column().size()) / n;
      const double fma_bound = 128.0 * fma16 / terms / 1e9;
      std::printf("%7d %12s %6.1f %10.1f %10.2f %13.2f %10.2f %7.0f%% %8.0f%% %10.2f %10.0f%%\n", n,
                  name, terms, 4.0 * static_cast<double>(rows) * n / (1 << 20), mix_rate, node_rate,
                  copy_rate, 100 * mix_rate / copy_rate, 100 * node_rate / copy_rate, fma_bound,
                  100 * fma_bound / copy_rate);
      std::fflush(stdout);
    }
  }
  if (g_threads == 1) return;
  // The same with every thread taking a contiguous range of the columns, as the simulator's
  // threads do: mix_node per column against a copy of the same ranges on as many threads. The
  // FMA bound counts g_threads cores at the peak measured on one.
  std::printf(
      "\n== the same on %d threads (contiguous column ranges, as gossip-sim --threads %d "
      "splits its nodes), per wall second; copy on as many threads; FMA bound = %d x one "
      "core's\n",
      g_threads, g_threads, g_threads);
  std::printf("%7s %12s %6s %10s %13s %10s %9s %10s %11s\n", "nodes", "topology", "terms", "MiB",
              "per-node GB/s", "copy GB/s", "node/copy", "FMA bound", "bound/copy");
  for (int n : nodes) {
    StateMatrix x = random_state(rows, dim, n), out(rows, n);
    const double bytes = 8.0 * static_cast<double>(rows) * n;
    const double copy_rate = best_copy_gbps_threads(out.data(), x.data(), rows, n, seconds);
    for (const char* name : {"ring", "exponential"}) {
      auto topo = make_topology(name, n, topology::WeightScheme::kDefault);
      auto plan = MixingPlan::from_matrix(topo->mixing_matrix());
      const double node_rate =
          best_calls_per_s(
              [&] {
                on_threads(n, [&](Eigen::Index first, Eigen::Index last) {
                  for (Eigen::Index i = first; i < last; ++i) {
                    mix_node(*plan, x, static_cast<int>(i), 0.0f, nullptr, out.col(i).data());
                  }
                });
              },
              seconds / 2) *
          bytes / 1e9;
      const double terms = static_cast<double>(plan->column().size()) / n;
      const double fma_bound = g_threads * 128.0 * fma16 / terms / 1e9;
      std::printf("%7d %12s %6.1f %10.1f %13.2f %10.2f %8.0f%% %10.2f %10.0f%%\n", n, name, terms,
                  4.0 * static_cast<double>(rows) * n / (1 << 20), node_rate, copy_rate,
                  100 * node_rate / copy_rate, fma_bound, 100 * fma_bound / copy_rate);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gossip-sim speed: D-PSGD node-iterations/s vs numpy, and mixing vs memcpy"};
  std::vector<int> nodes = {64, 256, 1024};
  int dim = 1000, batch = 8;
  double seconds = 2;
  bool reference = true;
  std::string script = GOSSIP_SIM_REFERENCE_SCRIPT;
  app.add_option("--nodes", nodes, "Node counts")->delimiter(',')->capture_default_str();
  app.add_option("--dim", dim, "Parameters per node")->capture_default_str();
  app.add_option("--batch", batch, "Mini-batch per node")->capture_default_str();
  app.add_option("--seconds", seconds, "Seconds per measurement")->capture_default_str();
  app.add_flag("!--no-reference", reference, "Skip the numpy reference");
  app.add_flag("--wall", g_wall,
               "Time with the wall clock instead of each side's thread CPU time (both sides)");
  app.add_option("--threads", g_threads,
                 "Threads of both sides in the node-iterations table (the simulator's --threads, "
                 "numpy's OPENBLAS_NUM_THREADS); > 1 times both with the wall clock")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--reference-script", script, "numpy reference")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (g_threads > 1) g_wall = true;  // thread CPU time would count one thread of several

  std::printf(
      "== D-PSGD on synthetic least squares, d = %d, batch %d, %d examples per node, "
      "%d thread%s (node-iterations per %s second, higher is better)\n",
      dim, batch, kExamplesPerNode, g_threads, g_threads == 1 ? "" : "s",
      g_wall ? "wall" : "thread CPU");
  std::printf(
      "(rows alone: node-iterations/s of a loop that only reads each node's batch rows as "
      "the forward does, one FMA per 16 features, no backward, mixing or update; sim/rows "
      "= gossip-sim's share of that rate)\n");
  std::printf("%7s %12s %14s %14s %8s %12s %9s\n", "nodes", "topology", "gossip-sim", "numpy",
              "ratio", "rows alone", "sim/rows");
  for (int n : nodes) {
    // < 0: setup failed, or several threads (the loop runs on one; a share would mislead)
    const double rows_rate = g_threads == 1 ? rows_alone_rate(n, dim, batch, seconds / 2) : -1;
    for (const char* topo : {"ring", "exponential"}) {
      const double ours = simulator_rate(n, dim, batch, topo, seconds);
      const double theirs = reference ? numpy_rate(script, n, dim, batch, topo, seconds, ours) : -1;
      if (theirs > 0) {
        std::printf("%7d %12s %14.0f %14.0f %7.1fx", n, topo, ours, theirs, ours / theirs);
      } else {
        std::printf("%7d %12s %14.0f %14s %8s", n, topo, ours, "n/a", "");
      }
      if (rows_rate > 0) {
        std::printf(" %12.0f %8.0f%%\n", rows_rate, 100 * ours / rows_rate);
      } else {
        std::printf(" %12s %9s\n", "n/a", "");
      }
      std::fflush(stdout);
    }
  }
  bench_mixing(nodes, dim, seconds);
  return 0;
}
