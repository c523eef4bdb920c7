// The simulator against theory where theory is exact: adapt-then-combine D-PSGD with W = J is
// C-PSGD; D-PSGD on a ring reaches C-PSGD's loss; runs are deterministic; per-node parameters
// dump as raw float32.
#include "sim/simulator.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "sim/experiment.h"
#include "tests/support/files.h"

namespace gossip::sim {
namespace {

sgd::ProblemConfig least_squares(int nodes) {
  sgd::ProblemConfig p;
  p.model = sgd::ModelKind::kLeastSquares;
  p.data = sgd::DataKind::kLeastSquares;
  p.synthetic_train = 4096;
  p.synthetic_test = 1024;
  p.synthetic_dim = 20;
  p.synthetic_noise = 0.1;
  p.num_nodes = nodes;
  p.seed = 5;
  return p;
}

RunConfig run_config(Algorithm algorithm, std::int64_t iterations) {
  RunConfig r;
  r.algorithm = algorithm;
  r.iterations = iterations;
  r.eval_every = iterations;
  r.batch_size = 16;
  r.optimizer.schedule.lr = 0.05;
  return r;
}

sgd::Problem problem_of(const sgd::ProblemConfig& config) {
  auto problem = sgd::make_problem(config);
  REQUIRE_MESSAGE(problem.is_ok(), problem.status().to_string());
  return std::move(problem).value();
}

// A simulator of `config` on `topology` (nullptr for C-PSGD) that has run to the end, and its
// trace; the test fails where either step does.
struct Ran {
  std::unique_ptr<Simulator> sim;
  RunTrace trace;
};
Ran run_to_end(const sgd::Problem& problem, const topology::Topology* topology,
               const RunConfig& config) {
  auto sim = Simulator::create(problem, topology, config);
  REQUIRE_MESSAGE(sim.is_ok(), sim.status().to_string());
  auto trace = (*sim)->run();
  REQUIRE_MESSAGE(trace.is_ok(), trace.status().to_string());
  return {std::move(sim).value(), std::move(trace).value()};
}

topology::Topology topo(const char* name, int n) {
  auto t = make_topology(name, n, topology::WeightScheme::kDefault);
  REQUIRE(t.is_ok());
  return std::move(t).value();
}

TEST_CASE("adapt-then-combine D-PSGD with W = J reproduces C-PSGD to float tolerance") {
  const int n = 8;
  const sgd::Problem problem = problem_of(least_squares(n));
  const auto complete = topo("complete", n);  // Metropolis–Hastings on K_n: every weight 1/n
  for (double momentum : {0.0, 0.9}) {
    CAPTURE(momentum);
    RunConfig c = run_config(Algorithm::kCpsgd, 300);
    c.optimizer.momentum = momentum;
    c.optimizer.weight_decay = 1e-3;
    RunConfig d = c;
    d.algorithm = Algorithm::kDpsgd;
    d.order = MixOrder::kAdaptThenCombine;
    const Ran cs = run_to_end(problem, nullptr, c);
    const Ran ds = run_to_end(problem, &complete, d);
    const StateMatrix& xc = cs.sim->params();
    const StateMatrix& xd = ds.sim->params();
    REQUIRE(xc.cols() == n);
    const double scale = xc.cwiseAbs().maxCoeff();
    const double diff = (xc - xd).cwiseAbs().maxCoeff();
    MESSAGE("max |x_cpsgd - x_dpsgd(W=J)| = " << diff << " (max |x| = " << scale << ")");
    CHECK(diff < 1e-5 * scale);
    CHECK(ds.trace.points.back().consensus_distance < 1e-10 * scale * scale);
    CHECK(ds.trace.points.back().train_loss ==
          doctest::Approx(cs.trace.points.back().train_loss).epsilon(1e-5));
    // The equality is not vacuous: the run moved far from x_0 = 0.
    CHECK(scale > 0.5);
  }
}

TEST_CASE("combine-then-adapt D-PSGD with W = J is not C-PSGD (gradients at local points)") {
  // The Lian et al. order evaluates g_i at x̄^{t-1} − γu_i^{t-1}, not at x̄^t, so the iterates
  // differ by O(γ²) even for W = J. This pins the semantics down: swapping the order in the
  // simulator would make this test fail.
  const int n = 8;
  const sgd::Problem problem = problem_of(least_squares(n));
  const auto complete = topo("complete", n);
  const Ran cs = run_to_end(problem, nullptr, run_config(Algorithm::kCpsgd, 50));
  const Ran ds = run_to_end(problem, &complete, run_config(Algorithm::kDpsgd, 50));
  const double diff = (cs.sim->params() - ds.sim->params()).cwiseAbs().maxCoeff();
  CHECK(diff > 1e-4);
}

TEST_CASE("D-PSGD on a ring of 16 reaches C-PSGD's final loss on least squares within 1%") {
  const int n = 16;
  const sgd::Problem problem = problem_of(least_squares(n));
  const auto ring = topo("ring", n);
  RunConfig c = run_config(Algorithm::kCpsgd, 3000);
  c.optimizer.schedule.kind = sgd::ScheduleKind::kCosine;
  c.optimizer.schedule.total_steps = 3000;
  RunConfig d = c;
  d.algorithm = Algorithm::kDpsgd;
  const RunTrace ct = run_to_end(problem, nullptr, c).trace;
  const RunTrace dt = run_to_end(problem, &ring, d).trace;
  const double lc = ct.points.back().train_loss, ld = dt.points.back().train_loss;
  const double l0 = ct.points.front().train_loss;
  MESSAGE("C-PSGD final loss " << lc << ", D-PSGD ring-16 final loss " << ld << ", start " << l0);
  CHECK(ld == doctest::Approx(lc).epsilon(0.01));
  CHECK(lc < 0.01 * l0);  // both actually trained (noise floor σ²/2 = 0.005)
  CHECK(dt.points.back().consensus_distance > 0);  // the nodes did not trivially coincide
}

TEST_CASE("runs are deterministic to the bit") {
  const int n = 6;
  const sgd::Problem problem = problem_of(least_squares(n));
  const auto ring = topo("ring", n);
  RunConfig r = run_config(Algorithm::kDpsgd, 40);
  r.optimizer.momentum = 0.5;
  const Ran a = run_to_end(problem, &ring, r);
  const Ran b = run_to_end(problem, &ring, r);
  CHECK(std::memcmp(a.sim->params().data(), b.sim->params().data(),
                    a.sim->params().size() * sizeof(float)) == 0);
}

TEST_CASE("every thread count gives the same bits") {
  // The nodes of an iteration are split over threads; per-node work is independent and every sum
  // across nodes (batch losses, C-PSGD's gradient average, local accuracies) is taken in node
  // order afterwards, so nothing may change with the thread count: parameters and every field of
  // every evaluation point, for each algorithm and step order, linear and dense models, a fixed
  // and a time-varying topology, ranges of unequal size (7 nodes) and more threads than nodes.
  struct Model {
    sgd::ModelKind model;
    sgd::DataKind data;
    std::vector<int> hidden;
  };
  for (const Model& m : {Model{sgd::ModelKind::kLeastSquares, sgd::DataKind::kLeastSquares, {}},
                         Model{sgd::ModelKind::kLogistic, sgd::DataKind::kLogistic, {}},
                         Model{sgd::ModelKind::kMlp, sgd::DataKind::kLogistic, {24, 17}}}) {
    CAPTURE(static_cast<int>(m.model));
    const int n = 7;
    sgd::ProblemConfig pc = least_squares(n);
    pc.model = m.model;
    pc.data = m.data;
    pc.hidden = m.hidden;
    pc.synthetic_train = 1024;
    pc.synthetic_test = 256;
    const sgd::Problem problem = problem_of(pc);
    const auto ring = topo("ring", n);
    const auto one_peer = topo("one_peer_exponential", n);
    struct Variant {
      Algorithm algorithm;
      MixOrder order;
      const topology::Topology* topology;
    };
    for (const Variant& v : {Variant{Algorithm::kCpsgd, MixOrder::kCombineThenAdapt, nullptr},
                             Variant{Algorithm::kDpsgd, MixOrder::kCombineThenAdapt, &ring},
                             Variant{Algorithm::kDpsgd, MixOrder::kAdaptThenCombine, &ring},
                             Variant{Algorithm::kDpsgd, MixOrder::kCombineThenAdapt, &one_peer}}) {
      CAPTURE(static_cast<int>(v.algorithm));
      CAPTURE(static_cast<int>(v.order));
      RunConfig r = run_config(v.algorithm, 30);
      r.order = v.order;
      r.eval_every = 10;
      r.optimizer.momentum = 0.5;
      r.optimizer.weight_decay = 1e-3;
      StateMatrix x1;
      std::vector<EvalPoint> p1;
      for (const int threads : {1, 2, 3, 12}) {
        CAPTURE(threads);
        r.threads = threads;
        auto sim = Simulator::create(problem, v.topology, r);
        REQUIRE(sim.is_ok());
        auto trace = (*sim)->run();
        REQUIRE(trace.is_ok());
        const StateMatrix x = (*sim)->params();
        if (threads == 1) {
          x1 = x;
          p1 = trace->points;
          CHECK(p1.back().train_loss < p1.front().train_loss);  // it trained
          continue;
        }
        REQUIRE(x.size() == x1.size());
        CHECK(std::memcmp(x.data(), x1.data(), x.size() * sizeof(float)) == 0);
        REQUIRE(trace->points.size() == p1.size());
        for (std::size_t k = 0; k < p1.size(); ++k) {
          const EvalPoint& a = trace->points[k];
          const EvalPoint& b = p1[k];
          const double fa[] = {a.train_loss,          a.test_loss,          a.test_accuracy,
                               a.local_test_accuracy, a.consensus_distance, a.batch_loss};
          const double fb[] = {b.train_loss,          b.test_loss,          b.test_accuracy,
                               b.local_test_accuracy, b.consensus_distance, b.batch_loss};
          CHECK(std::memcmp(fa, fb, sizeof fa) == 0);  // bit for bit, NaNs included
        }
      }
    }
  }
  RunConfig bad = run_config(Algorithm::kCpsgd, 1);
  bad.threads = -1;
  CHECK(bad.validate().message().find("threads") != std::string::npos);
}

TEST_CASE("blocks of iterations in skewed order give one iteration at a time's bits") {
  // CTA D-PSGD with a banded W runs several iterations as one block, node i's step on level j at
  // position i + r·j (sim/simulator.cc, step_block): on one thread over the whole ring, on
  // several as trapezoids per thread and then triangles around the range boundaries. Both
  // against iteration_blocks = false (one iteration at a time): rings and tori from the smallest
  // n the blocks accept (n > 2r), odd and even block lengths (eval_every), blocks cut short by
  // the last iteration, momentum.
  struct Case {
    const char* topology;
    int n;
    std::int64_t eval_every;
    int threads;
  };
  for (const Case& c : {Case{"ring", 3, 7, 1}, Case{"ring", 4, 4, 1}, Case{"ring", 5, 9, 1},
                        Case{"ring", 16, 11, 1}, Case{"ring", 33, 30, 1}, Case{"torus", 12, 5, 1},
                        Case{"torus", 20, 8, 1}, Case{"ring", 16, 11, 2}, Case{"ring", 33, 30, 2},
                        Case{"ring", 64, 13, 3}, Case{"ring", 100, 47, 4}}) {
    CAPTURE(std::string(c.topology));
    CAPTURE(c.n);
    CAPTURE(c.threads);
    sgd::ProblemConfig pc = least_squares(c.n);
    pc.synthetic_train = 40 * c.n;
    const sgd::Problem problem = problem_of(pc);
    const auto t = topo(c.topology, c.n);
    RunConfig r = run_config(Algorithm::kDpsgd, 47);
    r.eval_every = c.eval_every;
    r.optimizer.momentum = 0.5;
    r.threads = c.threads;
    auto blocked = Simulator::create(problem, &t, r);
    r.iteration_blocks = false;
    auto plain = Simulator::create(problem, &t, r);
    REQUIRE((blocked.is_ok() && plain.is_ok()));
    CHECK((*blocked)->block_levels() > 1);  // the case exercises the blocks
    CHECK((*plain)->block_levels() == 1);
    auto tb = (*blocked)->run();
    auto tp = (*plain)->run();
    REQUIRE((tb.is_ok() && tp.is_ok()));
    const StateMatrix xb = (*blocked)->params(), xp = (*plain)->params();
    CHECK(std::memcmp(xb.data(), xp.data(), xb.size() * sizeof(float)) == 0);
    REQUIRE(tb->points.size() == tp->points.size());
    for (std::size_t k = 0; k < tb->points.size(); ++k) {
      CHECK(tb->points[k].iteration == tp->points[k].iteration);
      const double b[] = {tb->points[k].batch_loss, tb->points[k].consensus_distance,
                          tb->points[k].train_loss};
      const double q[] = {tp->points[k].batch_loss, tp->points[k].consensus_distance,
                          tp->points[k].train_loss};
      CHECK(std::memcmp(b, q, sizeof b) == 0);  // bit for bit (the NaN batch loss at 0 too)
    }
    CHECK(tb->points.back().consensus_distance > 0);  // the nodes differ: the order matters
  }
  // An MLP (its batch gathered, not read in place) on a ring, on one and on two threads.
  for (const int threads : {1, 2}) {
    CAPTURE(threads);
    sgd::ProblemConfig pc = least_squares(24);
    pc.model = sgd::ModelKind::kMlp;
    pc.data = sgd::DataKind::kLogistic;
    pc.hidden = {12};
    pc.synthetic_train = 24 * 40;
    const sgd::Problem problem = problem_of(pc);
    const auto ring = topo("ring", 24);
    RunConfig r = run_config(Algorithm::kDpsgd, 23);
    r.eval_every = 23;
    r.optimizer.momentum = 0.5;
    r.threads = threads;
    auto blocked = Simulator::create(problem, &ring, r);
    r.iteration_blocks = false;
    auto plain = Simulator::create(problem, &ring, r);
    REQUIRE((blocked.is_ok() && plain.is_ok()));
    CHECK((*blocked)->block_levels() > 1);
    REQUIRE(((*blocked)->run().is_ok() && (*plain)->run().is_ok()));
    const StateMatrix xb = (*blocked)->params(), xp = (*plain)->params();
    CHECK(std::memcmp(xb.data(), xp.data(), xb.size() * sizeof(float)) == 0);
  }
  // Not blocked: the exponential graph (neighbours n/2 apart), ATC, a time-varying W, ranges
  // too short for the threads' triangles.
  const sgd::Problem problem = problem_of(least_squares(16));
  RunConfig r = run_config(Algorithm::kDpsgd, 5);
  r.threads = 1;
  const auto exp16 = topo("exponential", 16);
  const auto one_peer = topo("one_peer_exponential", 16);
  const auto ring = topo("ring", 16);
  CHECK((*Simulator::create(problem, &exp16, r))->block_levels() == 1);
  CHECK((*Simulator::create(problem, &one_peer, r))->block_levels() == 1);
  r.threads = 8;  // ranges of 2 nodes
  CHECK((*Simulator::create(problem, &ring, r))->block_levels() == 1);
  r.threads = 1;
  r.order = MixOrder::kAdaptThenCombine;
  CHECK((*Simulator::create(problem, &ring, r))->block_levels() == 1);
}

TEST_CASE("dump_params writes raw little-endian float32 per node") {
  StateMatrix x(3, 2);
  x << 1.5f, -2.0f, 0.25f, 1e-3f, -7.0f, 3.0f;
  const gossip::testing::TempDir tmp;
  const auto dir = std::filesystem::path(tmp.path) / "dump";  // dump_params creates it
  REQUIRE(dump_params(x, dir.string()).is_ok());
  for (int i = 0; i < 2; ++i) {
    auto bytes = Env::system().read_file((dir / ("node_" + std::to_string(i) + ".f32")).string());
    REQUIRE(bytes.is_ok());
    REQUIRE(bytes->size() == 12);
    float v[3];
    std::memcpy(v, bytes->data(), 12);
    for (int k = 0; k < 3; ++k) CHECK(v[k] == x(k, i));
  }
}

TEST_CASE("bad configurations are errors, not crashes") {
  const sgd::Problem problem = problem_of(least_squares(4));
  const auto ring5 = topo("ring", 5);
  auto mismatch = Simulator::create(problem, &ring5, run_config(Algorithm::kDpsgd, 1));
  CHECK(mismatch.status().message().find("5 nodes") != std::string::npos);
  CHECK(!Simulator::create(problem, nullptr, run_config(Algorithm::kDpsgd, 1)).is_ok());
  RunConfig bad = run_config(Algorithm::kCpsgd, 1);
  bad.batch_size = 0;
  CHECK(!Simulator::create(problem, nullptr, bad).is_ok());
  RunConfig diverge = run_config(Algorithm::kCpsgd, 200);
  diverge.optimizer.schedule.lr = 50;
  auto sim = Simulator::create(problem, nullptr, diverge);
  REQUIRE(sim.is_ok());
  CHECK((*sim)->run().status().message().find("diverged") != std::string::npos);
  // The same when the iterations run in blocks (the check runs after each block).
  const auto ring4 = topo("ring", 4);
  diverge.algorithm = Algorithm::kDpsgd;
  auto blocked = Simulator::create(problem, &ring4, diverge);
  REQUIRE(blocked.is_ok());
  CHECK((*blocked)->block_levels() > 1);
  const auto status = (*blocked)->run().status();
  CHECK_MESSAGE(status.message().find("training diverged at iteration") != std::string::npos,
                status.to_string());
  CHECK(status.code() == StatusCode::kAborted);  // gossip-sim maps it to exit 5, as gossipd
}

TEST_CASE("push-sum on the star: weights move, their sum stays n, thread count changes no bit") {
  // The star is not regular, so the push-sum weights leave 1 (the hub splits over n, a leaf over
  // 2); Σ_i w_i = n is mass conservation (float weights: to rounding). Training still works: the
  // de-biased models' loss falls as D-PSGD's does.
  const int n = 8;
  const sgd::Problem problem = problem_of(least_squares(n));
  const auto star = topo("star", n);
  RunConfig c = run_config(Algorithm::kPushSum, 200);
  Ran one = run_to_end(problem, &star, c);
  const std::vector<float>& w = one.sim->push_sum_weights();
  REQUIRE(w.size() == static_cast<std::size_t>(n));
  double sum = 0;
  for (float wi : w) sum += wi;
  CHECK(sum == doctest::Approx(n).epsilon(1e-6));
  // The weights reach n π, π the Perron vector of P: a leaf keeps 1/2 and gets 1/8 of the hub,
  // π_leaf = π_hub / 4, so w_hub → 8 · 4/11 and every leaf → 8/11.
  CHECK(w[0] == doctest::Approx(32.0 / 11).epsilon(1e-5));
  for (int i = 1; i < n; ++i) CHECK(w[i] == doctest::Approx(8.0 / 11).epsilon(1e-5));
  CHECK(one.trace.points.back().train_loss < 0.5 * one.trace.points.front().train_loss);
  c.threads = 3;
  Ran three = run_to_end(problem, &star, c);
  CHECK(three.sim->params() == one.sim->params());
  // Push-sum is per iteration only.
  c.round.local_steps = 4;
  CHECK(!Simulator::create(problem, &star, c).is_ok());
}

TEST_CASE(
    "joins and leaves: absent nodes stay put, a joiner takes its present neighbours' mean, and "
    "pure gossip keeps the present nodes' sum through every change of the roster") {
  const int n = 9;
  const sgd::Problem problem = problem_of(least_squares(n));
  // A ring mixes slowly enough that the nodes still differ a few iterations after their steps.
  const topology::Topology ring = topo("ring", n);
  // SGD steps for 95 iterations (the nodes drift apart on their shards), then a learning rate of
  // 5e-32: pure gossip in float32 from there on.
  RunConfig base = run_config(Algorithm::kDpsgd, 0);
  base.optimizer.schedule.kind = sgd::ScheduleKind::kStep;
  base.optimizer.schedule.step_size = 95;
  base.optimizer.schedule.step_factor = 1e-30;
  base.roster = {{RosterEvent::kJoin, 8, 100}, {RosterEvent::kLeave, 4, 105}};
  auto ran = [&](std::int64_t iterations) {
    RunConfig r = base;
    r.iterations = r.eval_every = iterations;
    Ran out = run_to_end(problem, &ring, r);
    return std::pair{out.sim->params(), out.trace};
  };
  const auto [a, trace_a] = ran(100);   // before the join
  const auto [b, trace_b] = ran(105);   // joined, before the leave
  const auto [c, trace_c] = ran(6000);  // long after the leave
  const std::vector<float> x0 = problem.initial_params();
  const auto d = static_cast<Eigen::Index>(x0.size());
  // Node 8 never stepped before its join.
  for (Eigen::Index k = 0; k < d; ++k) REQUIRE(a(k, 8) == x0[static_cast<std::size_t>(k)]);
  CHECK(a.col(0) != a.col(1));
  CHECK(b.col(3) != b.col(4));
  // Its in-neighbours on the ring: 0 and 7 (both present at 100).
  std::vector<int> nbrs;
  for (const topology::Neighbor& nb : ring.in_neighbors(8, 100)) nbrs.push_back(nb.node);
  REQUIRE(nbrs.size() == 2);
  for (Eigen::Index k = 0; k < d; ++k) {
    double sum_a = 0, mean = 0, sum_b = 0;
    for (int i = 0; i < 8; ++i) sum_a += a(k, i);
    for (int j : nbrs) mean += a(k, j) / 2.0;
    for (int i = 0; i < n; ++i) sum_b += b(k, i);
    // W on the present nodes is doubly stochastic: the sum is kept, plus the joiner's mean.
    CHECK(sum_b == doctest::Approx(sum_a + mean).epsilon(1e-5));
    // Node 4 left at 105: its x stays; the other 8 reach the mean of what they held at 105.
    CHECK(c(k, 4) == b(k, 4));
    const double rest = (sum_b - b(k, 4)) / 8.0;
    for (int i = 0; i < n; ++i) {
      if (i != 4) CHECK(c(k, i) == doctest::Approx(rest).epsilon(1e-4));
    }
  }
  // The evaluation covers the present nodes only: at the end the 8 agree, so their consensus
  // distance is ~0 although node 4 holds another value.
  CHECK(trace_c.points.back().consensus_distance < 1e-8);
}

TEST_CASE("joins and leaves: bad rosters are refused with the event named") {
  const sgd::Problem problem = problem_of(least_squares(9));
  const topology::Topology torus = topo("torus", 9);
  auto refused = [&](std::vector<RosterEvent> roster, Algorithm algorithm,
                     const topology::Topology* t) {
    RunConfig r = run_config(algorithm, 100);
    r.roster = std::move(roster);
    auto sim = Simulator::create(problem, t, r);
    REQUIRE_FALSE(sim.is_ok());
    return sim.status().message();
  };
  CHECK(refused({{RosterEvent::kJoin, 9, 10}}, Algorithm::kDpsgd, &torus).find("join:9@10") !=
        std::string::npos);
  CHECK(refused({{RosterEvent::kJoin, 3, 0}}, Algorithm::kDpsgd, &torus).find(">= 1") !=
        std::string::npos);
  CHECK(refused({{RosterEvent::kJoin, 3, 50}, {RosterEvent::kLeave, 3, 20}}, Algorithm::kDpsgd,
                &torus)
            .find("leaves before it joins") != std::string::npos);
  CHECK(
      refused({{RosterEvent::kLeave, 3, 5}, {RosterEvent::kLeave, 3, 9}}, Algorithm::kDpsgd, &torus)
          .find("at most once") != std::string::npos);
  CHECK(refused({{RosterEvent::kLeave, 3, 5}}, Algorithm::kPushSum, &torus).find("push_sum") !=
        std::string::npos);
  const topology::Topology one_peer = topo("one_peer_exponential", 9);
  CHECK(refused({{RosterEvent::kLeave, 3, 5}}, Algorithm::kDpsgd, &one_peer).find("symmetric") !=
        std::string::npos);
}

}  // namespace
}  // namespace gossip::sim
