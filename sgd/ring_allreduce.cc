// The compressed ring allreduce (ring_allreduce.h): chunking, schedule, per-hop arithmetic and the
// all-nodes-in-one-process reference built from them.
#include "sgd/ring_allreduce.h"

#include <algorithm>
#include <vector>

#include "common/check.h"

namespace gossip::sgd {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

void check_schedule(int n, int node, int step) {
  GOSSIP_CHECK(n >= 1 && node >= 0 && node < n && step >= 0 && step <= n - 2)
      << "n " << n << ", node " << node << ", step " << step;
}

}  // namespace

ChunkRange ring_chunk(int n, std::size_t num_floats, std::size_t block_floats, int k) {
  GOSSIP_CHECK(n >= 1 && k >= 0 && k < n && block_floats > 0)
      << "n " << n << ", k " << k << ", block_floats " << block_floats;
  const std::size_t blocks = (num_floats + block_floats - 1) / block_floats;
  const auto un = static_cast<std::size_t>(n), uk = static_cast<std::size_t>(k);
  const std::size_t first = uk * blocks / un, last = (uk + 1) * blocks / un;
  return {std::min(first * block_floats, num_floats), std::min(last * block_floats, num_floats)};
}

int ring_reduce_send_chunk(int n, int node, int step) {
  check_schedule(n, node, step);
  return mod(node - step, n);
}
int ring_reduce_recv_chunk(int n, int node, int step) {
  check_schedule(n, node, step);
  return mod(node - step - 1, n);
}
int ring_gather_send_chunk(int n, int node, int step) {
  check_schedule(n, node, step);
  return mod(node + 1 - step, n);
}
int ring_gather_recv_chunk(int n, int node, int step) {
  check_schedule(n, node, step);
  return mod(node - step, n);
}
int ring_owned_chunk(int n, int node) {
  GOSSIP_CHECK(n >= 1 && node >= 0 && node < n) << "n " << n << ", node " << node;
  return mod(node + 1, n);
}

void ring_reduce_first(const CompressionSpec& spec, std::span<const float> own_chunk,
                       std::span<std::byte> out) {
  compress(spec, own_chunk, out);
}

void ring_reduce_hop(const CompressionSpec& spec, std::span<const std::byte> received,
                     std::span<const float> own_chunk, std::span<float> acc,
                     std::span<std::byte> out) {
  GOSSIP_CHECK_EQ(acc.size(), own_chunk.size());
  std::copy(own_chunk.begin(), own_chunk.end(), acc.begin());
  decompress_add(spec, received, acc);
  compress(spec, acc, out);
}

void ring_mean(const CompressionSpec& spec, int n, std::span<const std::byte> encoded_sum,
               std::span<float> mean_chunk) {
  GOSSIP_CHECK(n >= 1) << "n " << n;
  decompress(spec, encoded_sum, mean_chunk);
  const auto nf = static_cast<float>(n);
  for (float& v : mean_chunk) v = v / nf;
}

std::size_t ring_bytes_sent(const CompressionSpec& spec, int n, std::size_t num_floats, int node) {
  GOSSIP_CHECK(n >= 1 && node >= 0 && node < n) << "n " << n << ", node " << node;
  if (n == 1) return 0;
  std::size_t total = 0;
  for (int k = 0; k < n; ++k) {
    total += compressed_bytes(spec, ring_chunk(n, num_floats, spec.block_floats, k).size());
  }
  const auto chunk_bytes = [&](int k) {
    return compressed_bytes(spec, ring_chunk(n, num_floats, spec.block_floats, mod(k, n)).size());
  };
  return 2 * total - chunk_bytes(node + 1) - chunk_bytes(node + 2);
}

std::size_t ring_bytes_received(const CompressionSpec& spec, int n, std::size_t num_floats,
                                int node) {
  GOSSIP_CHECK(n >= 1 && node >= 0 && node < n) << "n " << n << ", node " << node;
  return ring_bytes_sent(spec, n, num_floats, mod(node - 1, n));
}

void ring_allreduce_mean_reference(const CompressionSpec& spec,
                                   std::span<const std::span<const float>> inputs,
                                   std::span<float> mean) {
  const int n = static_cast<int>(inputs.size());
  GOSSIP_CHECK(n >= 1) << "no inputs";
  for (const auto& in : inputs) GOSSIP_CHECK_EQ(in.size(), mean.size());
  const auto chunk = [&](int k) { return ring_chunk(n, mean.size(), spec.block_floats, k); };
  const auto bytes_of = [&](int k) { return compressed_bytes(spec, chunk(k).size()); };
  const auto own = [&](int i, int k) { return inputs[i].subspan(chunk(k).begin, chunk(k).size()); };

  // outbox[i]: what node i sends next (reduce-scatter step 0: C(own chunk i)).
  std::vector<std::vector<std::byte>> outbox(n), inbox(n);
  for (int i = 0; i < n; ++i) {
    outbox[i].resize(bytes_of(i));
    ring_reduce_first(spec, own(i, i), outbox[i]);
  }
  std::vector<float> acc;
  for (int step = 0; step + 2 <= n; ++step) {
    for (int i = 0; i < n; ++i) inbox[i].swap(outbox[mod(i - 1, n)]);  // i − 1 → i
    for (int i = 0; i < n; ++i) {
      const int k = ring_reduce_recv_chunk(n, i, step);
      acc.resize(chunk(k).size());
      outbox[i].resize(bytes_of(k));
      ring_reduce_hop(spec, inbox[i], own(i, k), acc, outbox[i]);
    }
  }
  // outbox[i] is now the encoded sum of chunk ring_owned_chunk(n, i); the allgather hands those
  // bytes on unchanged, so every node decodes exactly these.
  for (int i = 0; i < n; ++i) {
    const ChunkRange c = chunk(ring_owned_chunk(n, i));
    ring_mean(spec, n, outbox[i], mean.subspan(c.begin, c.size()));
  }
}

}  // namespace gossip::sgd
