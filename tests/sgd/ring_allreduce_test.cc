// The compressed ring allreduce (sgd/ring_allreduce.h): chunks partition the vector on block
// boundaries; the schedule is consistent (what one node sends is what its successor expects, each
// node forwards what it just reduced); n nodes as real threads exchanging messages through queues
// (the daemon's way) give the reference's bits on every node and send exactly ring_bytes_sent();
// the reference equals a chunk-by-chunk restatement of the sum; the uncompressed mean is exact on
// integers and within float rounding of the double mean; int8's error stays within the closed-form
// bound of one half-scale per hop.
#include "sgd/ring_allreduce.h"

#include <doctest/doctest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "common/random.h"
#include "tests/sgd/compression_spec.h"

namespace gossip::sgd {
namespace {

std::vector<std::vector<float>> random_inputs(int n, std::size_t d, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<float>> x(n, std::vector<float>(d));
  for (auto& v : x) {
    for (float& f : v) f = static_cast<float>(2 * rng.uniform() - 1);  // |x| ≤ 1
  }
  return x;
}

std::vector<float> reference_mean(const CompressionSpec& spec,
                                  const std::vector<std::vector<float>>& x) {
  std::vector<std::span<const float>> in(x.begin(), x.end());
  std::vector<float> mean(x[0].size());
  ring_allreduce_mean_reference(spec, in, mean);
  return mean;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_CASE("ring_chunk: a partition on block boundaries, block counts differing by at most one") {
  for (int n : {1, 2, 3, 5, 8}) {
    for (std::size_t d : {0, 1, 15, 16, 17, 100, 1000, 4096}) {
      for (std::size_t block : {16, 64}) {
        CAPTURE(n);
        CAPTURE(d);
        CAPTURE(block);
        std::size_t next = 0, min_blocks = d, max_blocks = 0;
        for (int k = 0; k < n; ++k) {
          const ChunkRange c = ring_chunk(n, d, block, k);
          CHECK(c.begin == next);
          CHECK(c.end >= c.begin);
          CHECK((c.begin % block == 0 || c.begin == d));
          next = c.end;
          const std::size_t blocks = (c.size() + block - 1) / block;
          min_blocks = std::min(min_blocks, blocks);
          max_blocks = std::max(max_blocks, blocks);
        }
        CHECK(next == d);
        CHECK(max_blocks - std::min(min_blocks, max_blocks) <= 1);
      }
    }
  }
}

TEST_CASE("ring schedule: sends meet receives, nodes forward what they reduced, all is gathered") {
  for (int n : {2, 3, 4, 7}) {
    CAPTURE(n);
    for (int i = 0; i < n; ++i) {
      const int next = (i + 1) % n;
      std::vector<int> gathered(n, 0);
      gathered[ring_owned_chunk(n, i)] = 1;
      for (int s = 0; s + 2 <= n; ++s) {
        CHECK(ring_reduce_send_chunk(n, i, s) == ring_reduce_recv_chunk(n, next, s));
        CHECK(ring_gather_send_chunk(n, i, s) == ring_gather_recv_chunk(n, next, s));
        if (s + 3 <= n) {
          CHECK(ring_reduce_send_chunk(n, i, s + 1) == ring_reduce_recv_chunk(n, i, s));
          CHECK(ring_gather_send_chunk(n, i, s + 1) == ring_gather_recv_chunk(n, i, s));
        }
        ++gathered[ring_gather_recv_chunk(n, i, s)];
      }
      CHECK(ring_reduce_send_chunk(n, i, 0) == i);  // a node starts with its own chunk
      CHECK(ring_owned_chunk(n, i) == ring_reduce_recv_chunk(n, i, n - 2));
      CHECK(ring_gather_send_chunk(n, i, 0) == ring_owned_chunk(n, i));
      for (int k = 0; k < n; ++k) CHECK(gathered[k] == 1);
    }
  }
}

// A one-way link between two node threads.
class Channel {
 public:
  void send(std::vector<std::byte> msg) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(msg));
    cv_.notify_one();
  }
  std::vector<std::byte> receive() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty(); });
    std::vector<std::byte> msg = std::move(queue_.front());
    queue_.pop_front();
    return msg;
  }

 private:
  std::mutex mu_;  // guards queue_
  std::condition_variable cv_;
  std::deque<std::vector<std::byte>> queue_;
};

struct NodeResult {
  std::vector<float> mean;
  std::size_t sent = 0, received = 0;
  bool sizes_ok = true;
};

// Node i of the ring as gossipd would run it: the schedule, the primitives, messages on links.
void run_node(const CompressionSpec& spec, int n, int i, std::span<const float> x,
              std::vector<Channel>& links, NodeResult& r) {
  const auto chunk = [&](int k) { return ring_chunk(n, x.size(), spec.block_floats, k); };
  const auto own = [&](int k) { return x.subspan(chunk(k).begin, chunk(k).size()); };
  Channel& to_next = links[i];
  Channel& from_prev = links[(i + n - 1) % n];
  std::vector<std::vector<std::byte>> encoded(n);
  std::vector<std::byte> msg(compressed_bytes(spec, chunk(i).size()));
  ring_reduce_first(spec, own(i), msg);
  std::vector<float> acc;
  for (int s = 0; s + 2 <= n; ++s) {
    r.sent += msg.size();
    to_next.send(msg);
    const std::vector<std::byte> in = from_prev.receive();
    r.received += in.size();
    const int k = ring_reduce_recv_chunk(n, i, s);
    r.sizes_ok = r.sizes_ok && in.size() == compressed_bytes(spec, chunk(k).size());
    acc.resize(chunk(k).size());
    msg.resize(in.size());
    ring_reduce_hop(spec, in, own(k), acc, msg);
  }
  encoded[ring_owned_chunk(n, i)] = msg;
  for (int s = 0; s + 2 <= n; ++s) {
    const std::vector<std::byte>& out = encoded[ring_gather_send_chunk(n, i, s)];
    r.sent += out.size();
    to_next.send(out);
    std::vector<std::byte> in = from_prev.receive();
    r.received += in.size();
    encoded[ring_gather_recv_chunk(n, i, s)] = std::move(in);
  }
  r.mean.assign(x.size(), 0.0f);
  for (int k = 0; k < n; ++k) {
    const ChunkRange c = chunk(k);
    ring_mean(spec, n, encoded[k], std::span<float>(r.mean).subspan(c.begin, c.size()));
  }
}

TEST_CASE("n node threads on a ring of queues: every node decodes the reference's bits") {
  for (CompressionKind kind :
       {CompressionKind::kNone, CompressionKind::kBf16, CompressionKind::kInt8}) {
    for (int n : {1, 2, 3, 5}) {
      for (std::size_t d : {7, 16 * 13 + 5, 3000}) {
        CAPTURE(kCompressionKinds.name(kind));
        CAPTURE(n);
        CAPTURE(d);
        const CompressionSpec spec = spec_of(kind, 16);
        const auto x = random_inputs(n, d, 100 + n);
        const std::vector<float> want = reference_mean(spec, x);
        std::vector<Channel> links(n);
        std::vector<NodeResult> results(n);
        std::vector<std::thread> threads;
        for (int i = 0; i < n; ++i) {
          threads.emplace_back([&, i] { run_node(spec, n, i, x[i], links, results[i]); });
        }
        for (std::thread& t : threads) t.join();
        for (int i = 0; i < n; ++i) {
          CAPTURE(i);
          CHECK(results[i].sizes_ok);
          CHECK(same_bits(results[i].mean, want));
          CHECK(results[i].sent == ring_bytes_sent(spec, n, d, i));
          CHECK(results[i].received == ring_bytes_received(spec, n, d, i));
        }
      }
    }
  }
}

TEST_CASE("the reference equals each chunk summed around the ring from its first sender") {
  const int n = 4;
  const std::size_t d = 16 * 11 + 3;
  const auto x = random_inputs(n, d, 7);
  for (CompressionKind kind : {CompressionKind::kBf16, CompressionKind::kInt8}) {
    const CompressionSpec spec = spec_of(kind, 16);
    std::vector<float> want(d);
    for (int c = 0; c < n; ++c) {
      const ChunkRange r = ring_chunk(n, d, 16, c);
      // Chunk c: C(x_c), then node c + j adds its own (⊕, compress.h) and re-encodes.
      std::vector<std::byte> bytes(compressed_bytes(spec, r.size()));
      compress(spec, std::span<const float>(x[c]).subspan(r.begin, r.size()), bytes);
      for (int j = 1; j < n; ++j) {
        std::vector<float> acc(x[(c + j) % n].begin() + r.begin, x[(c + j) % n].begin() + r.end);
        decompress_add(spec, bytes, acc);
        compress(spec, acc, bytes);
      }
      std::vector<float> sum(r.size());
      decompress(spec, bytes, sum);
      for (std::size_t k = 0; k < r.size(); ++k) want[r.begin + k] = sum[k] / static_cast<float>(n);
    }
    CHECK(same_bits(reference_mean(spec, x), want));
  }
}

TEST_CASE("uncompressed: exact on integers, within float rounding of the double mean") {
  const CompressionSpec none = spec_of(CompressionKind::kNone, 16);
  const int n = 4;
  std::vector<std::vector<float>> ints(n, std::vector<float>(50));
  for (int i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < 50; ++k) ints[i][k] = static_cast<float>((i * 37 + k * 11) % 101);
  }
  const std::vector<float> m = reference_mean(none, ints);
  for (std::size_t k = 0; k < 50; ++k) {
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += ints[i][k];
    CHECK(m[k] == sum / n);  // small integers add exactly; dividing by 4 is exact
  }
  const auto x = random_inputs(6, 999, 9);
  const std::vector<float> m6 = reference_mean(none, x);
  for (std::size_t k = 0; k < 999; ++k) {
    double sum = 0;
    for (const auto& v : x) sum += v[k];
    CHECK(std::fabs(m6[k] - sum / 6) <= 6 * 6e-8);  // 5 adds and a division, |partial| ≤ 6
  }
}

TEST_CASE("int8: the mean's error is within one half-scale per hop (closed-form bound)") {
  for (int n : {2, 4, 8}) {
    CAPTURE(n);
    const std::size_t d = 64 * 20;
    const auto x = random_inputs(n, d, 11 + n);
    const std::vector<float> m = reference_mean(spec_of(CompressionKind::kInt8, 64), x);
    // The encoding after j inputs has |partial sum| ≤ j (each |x| ≤ 1), so its scale is at most
    // about j/127 and it errs by ≤ j/254; summed over j = 1..n and divided by n: (n + 1)/508.
    const double bound = (n + 1) / 508.0 * 1.001 + 1e-6;
    double worst = 0;
    for (std::size_t k = 0; k < d; ++k) {
      double sum = 0;
      for (const auto& v : x) sum += v[k];
      worst = std::max(worst, std::fabs(m[k] - sum / n));
    }
    CHECK(worst <= bound);
    CHECK(worst > 0);  // int8 is lossy: a test that cannot see the error proves nothing
  }
}

TEST_CASE("bytes per node: (n−1)/n · 2 · compressed size when the chunks are equal") {
  const CompressionSpec spec = spec_of(CompressionKind::kInt8, 256);
  const int n = 4;
  const std::size_t d = 4 * 3 * 256;  // three blocks per chunk
  for (int i = 0; i < n; ++i) {
    CHECK(ring_bytes_sent(spec, n, d, i) * n == 2 * (n - 1) * compressed_bytes(spec, d));
  }
  CHECK(ring_bytes_sent(spec, 1, d, 0) == 0);
}

}  // namespace
}  // namespace gossip::sgd
