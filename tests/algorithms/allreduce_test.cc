// TransportStore (algorithms/allreduce.h) over real net::Transport links on loopback, n nodes as
// threads of this process in the star the daemon uses:
//  - every key set at any node reaches every node through node 0, values longer than one
//    512-byte part and empty ones included; a key set before node 0 attached is still relayed;
//  - Gloo connects over it and a ring allreduce of known integer vectors gives their exact sum;
//  - wait() for a key nobody sets throws after its timeout, naming the key.
#include "algorithms/allreduce.h"

#include <doctest/doctest.h>
#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/math.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/ports.h"

namespace gossip::algorithms {
namespace {

struct StarCluster {
  explicit StarCluster(int n) : stop(false) {
    const int base = free_loopback_ports(n, 24000 + (::getpid() * 13) % 20000);
    REQUIRE(base > 0);
    for (int i = 0; i < n; ++i) {
      stores.push_back(std::make_unique<TransportStore>(i, stop, std::chrono::milliseconds(5000)));
    }
    for (int i = 0; i < n; ++i) {
      net::TransportOptions o;
      o.self = {"allreduce-test", i, 0x1234, 10, "allreduce"};
      o.listen_host = "127.0.0.1";
      o.listen_port = static_cast<std::uint16_t>(base + i);
      o.insecure = true;
      for (int j : star_peers(n, i)) {
        o.neighbours.push_back({j, "127.0.0.1", static_cast<std::uint16_t>(base + j)});
      }
      TransportStore* store = stores[i].get();
      auto t = net::Transport::start(o);
      REQUIRE_MESSAGE(t.is_ok(), t.status().to_string());
      (*t)->set_control_handler(
          [store](int peer, std::string_view c) { return store->on_control(peer, c); });
      transports.push_back(std::move(*t));
    }
  }
  // Waits for node i's links and attaches its store.
  void attach(int i) {
    const std::vector<int> peers = star_peers(static_cast<int>(stores.size()), i);
    REQUIRE(transports[i]->wait_connected(peers, net::deadline_in_ms(10000)));
    stores[i]->attach(transports[i].get(), peers);
  }
  ~StarCluster() {
    for (auto& t : transports) t->shutdown();
  }
  std::atomic<bool> stop;
  std::vector<std::unique_ptr<TransportStore>> stores;
  std::vector<std::unique_ptr<net::Transport>> transports;
};

std::vector<char> bytes(int seed, std::size_t count) {
  std::vector<char> v(count);
  for (std::size_t k = 0; k < count; ++k) v[k] = static_cast<char>((seed * 131 + k * 7) & 0xff);
  return v;
}

TEST_CASE("TransportStore: every key reaches every node through node 0, in parts") {
  const int n = 4;
  StarCluster c(n);
  for (int i = 1; i < n; ++i) c.attach(i);
  // Node 1's key arrives at node 0 before node 0 attached: relayed at attach.
  c.stores[1]->set("k1", bytes(1, 1300));
  c.stores[2]->set("k2", {});
  // Both are at node 0 before it attaches (wait() needs no links): attach relays them to every
  // peer, their owners included, which must end with their values intact.
  c.stores[0]->wait({"k1", "k2"}, std::chrono::milliseconds(5000));
  c.attach(0);
  c.stores[0]->set("k0", bytes(0, 512));
  c.stores[3]->set("k3", bytes(3, 1025));
  const std::vector<std::vector<char>> expect = {bytes(0, 512), bytes(1, 1300), {}, bytes(3, 1025)};
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < n; ++k) {
      std::string key = "k";  // (not "k" + to_string: GCC 12 reports a false -Wrestrict there)
      key += std::to_string(k);
      CAPTURE(i);
      CAPTURE(key);
      c.stores[i]->wait({key}, std::chrono::milliseconds(5000));
      CHECK(c.stores[i]->get(key) == expect[k]);
    }
  }
}

TEST_CASE("TransportStore: Gloo connects through it and its ring allreduce sums exactly") {
  const int n = 3;
  StarCluster c(n);
  const std::size_t d = 1000;
  std::vector<std::vector<float>> data(n, std::vector<float>(d));
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      c.attach(i);
      auto ctx = connect_gloo(i, n, "127.0.0.1", *c.stores[i], std::chrono::milliseconds(10000),
                              std::chrono::milliseconds(10000));
      if (!ctx.is_ok()) {
        errors[i] = ctx.status().to_string();
        return;
      }
      for (std::size_t k = 0; k < d; ++k) data[i][k] = static_cast<float>((i + 1) * k);
      try {
        gloo::AllreduceOptions opts(*ctx);
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setOutput(data[i].data(), d);
        opts.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        gloo::allreduce(opts);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    CHECK_MESSAGE(errors[i].empty(), errors[i]);
    bool exact = true;
    // (1 + 2 + 3)·k: small integers, exact in float whatever the summation order.
    for (std::size_t k = 0; k < d; ++k) exact &= data[i][k] == static_cast<float>(6 * k);
    CHECK(exact);
  }
}

TEST_CASE("TransportStore: waiting for a key nobody sets throws after the timeout, naming it") {
  StarCluster c(2);
  c.attach(0);
  c.attach(1);
  const auto start = std::chrono::steady_clock::now();
  std::string what;
  try {
    c.stores[1]->wait({"never"}, std::chrono::milliseconds(300));
  } catch (const gloo::IoException& e) {
    what = e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(what.find("never") != std::string::npos);
  CHECK(s >= 0.3);
  CHECK(s < 3.0);
}

}  // namespace
}  // namespace gossip::algorithms
