// The arithmetic of a compressed ring allreduce of the mean (Patarasuk and Yuan 2009's
// bandwidth-optimal ring: reduce-scatter, then allgather; re-quantised at every hop as INTELLECT-1
// does, arXiv 2412.01152): the per-hop primitives a node calls as its messages arrive over the
// network, and a reference that runs all n nodes in one process (the simulator's) from the same
// primitives, so both give the same bits. No sockets here: a node moves the bytes itself.
//
// Chunks. The vector of num_floats floats is cut into n chunks on block boundaries
// (spec.block_floats, for every kind): with B = ⌈num_floats / block_floats⌉ blocks, chunk k holds
// blocks [⌊kB/n⌋, ⌊(k+1)B/n⌋) (clipped to num_floats), so an int8 chunk compresses on its own and
// its bytes are the matching slice of the whole vector's. Chunks may be empty (B < n): their
// messages have zero bytes.
//
// Schedule, for node i of n (indices mod n), n − 1 steps of each phase:
//   reduce-scatter step s = 0 .. n−2: send chunk (i − s) to node i + 1, receive chunk (i − s − 1)
//     from node i − 1. The first send of a chunk is ring_reduce_first (C(own chunk)); a receive is
//     ring_reduce_hop: acc = own chunk ⊕ D(received) (compress.h's ⊕: for int8 fma(q, s, own)),
//     and C(acc) is what the node sends at step s + 1 — or, after the last step, keeps: node i
//     then holds the encoded sum of chunk ring_owned_chunk(i) = (i + 1), summed around the ring
//     from node i + 1, the chunk's first sender, to node i, which adds its own last.
//   allgather step s = 0 .. n−2: send chunk (i + 1 − s) to node i + 1, receive chunk (i − s) from
//     node i − 1, forwarding the encoded sums unchanged.
// Then every node, the owner included, holds the same bytes for every chunk and decodes them with
// ring_mean: mean_k = fl(D_k / n) (one IEEE division by n; exact when n is a power of two). With
// n = 1 there are no steps and the encoded sum is C(x): the mean is always decoded bytes.
//
// With kind none the messages are raw floats and this is an uncompressed ring: each chunk's sum is
// taken in ring order from its first sender, which differs from Gloo's order (sums may differ in
// the last bits from gossipd's Gloo ALLREDUCE); the arithmetic here is what both gossipd and
// gossip-sim compute when they use these primitives.
//
// Bytes: node i sends Σ_{s} |C(chunk (i − s))| + |C(chunk (i + 1 − s))| over s = 0 .. n−2, i.e.
// twice the compressed size of every chunk except (i + 1) in reduce-scatter and (i + 2) in
// allgather (ring_bytes_sent); ≈ 2 (n − 1)/n · compressed_bytes(spec, num_floats) when the chunks
// are equal. Node i receives what node i − 1 sends.
//
// Contracts: n ≥ 1, 0 ≤ node, chunk < n, 0 ≤ step ≤ n − 2; spec validates; sizes as compress.h
// (GOSSIP_CHECK). Thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <span>

#include "sgd/compress.h"

namespace gossip::sgd {

struct ChunkRange {
  std::size_t begin = 0, end = 0;  // floats [begin, end)
  std::size_t size() const { return end - begin; }
};

// Chunk k of n over num_floats floats, on block_floats boundaries (see above).
ChunkRange ring_chunk(int n, std::size_t num_floats, std::size_t block_floats, int k);

// The schedule (see above): which chunk node `node` sends and receives at `step`.
int ring_reduce_send_chunk(int n, int node, int step);  // (node − step) mod n
int ring_reduce_recv_chunk(int n, int node, int step);  // (node − step − 1) mod n
int ring_gather_send_chunk(int n, int node, int step);  // (node + 1 − step) mod n
int ring_gather_recv_chunk(int n, int node, int step);  // (node − step) mod n
// The chunk whose encoded sum node `node` holds after reduce-scatter: (node + 1) mod n.
int ring_owned_chunk(int n, int node);

// Reduce-scatter step 0: out = C(own chunk).
void ring_reduce_first(const CompressionSpec& spec, std::span<const float> own_chunk,
                       std::span<std::byte> out);

// A reduce-scatter receive: acc = own_chunk ⊕ D(received) (acc: own_chunk.size() floats of the
// caller's scratch, left holding the float partial sum), then out = C(acc). `received` and `out`
// are compressed_bytes(spec, own_chunk.size()) bytes and may not overlap.
void ring_reduce_hop(const CompressionSpec& spec, std::span<const std::byte> received,
                     std::span<const float> own_chunk, std::span<float> acc,
                     std::span<std::byte> out);

// After the allgather: mean_chunk = fl(D(encoded_sum) / n).
void ring_mean(const CompressionSpec& spec, int n, std::span<const std::byte> encoded_sum,
               std::span<float> mean_chunk);

// Exact bytes node `node` sends (ring_bytes_sent) or receives in one allreduce of num_floats.
std::size_t ring_bytes_sent(const CompressionSpec& spec, int n, std::size_t num_floats, int node);
std::size_t ring_bytes_received(const CompressionSpec& spec, int n, std::size_t num_floats,
                                int node);

// All n nodes in one process: inputs[i] is node i's vector (all of mean.size() floats); `mean`
// receives the mean every node decodes. Runs the schedule above hop by hop with the primitives
// above; the allgather forwards bytes unchanged, so each chunk is decoded once from its owner's
// bytes. Needs n = inputs.size() ≥ 1.
void ring_allreduce_mean_reference(const CompressionSpec& spec,
                                   std::span<const std::span<const float>> inputs,
                                   std::span<float> mean);

}  // namespace gossip::sgd
