// Sharding and batch sampling: determinism, partition of the data set, label skew as designed,
// sampler epochs and checkpoint restore.
#include "sgd/shard.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "sgd/dataset.h"
#include "sgd/sampler.h"

namespace gossip::sgd {
namespace {

// 10 classes, 1000 examples, labels i % 10; features carry the index.
Dataset labelled(int n = 1000, int classes = 10) {
  Dataset d;
  d.num_examples = n;
  d.dim = 1;
  d.num_classes = classes;
  for (int i = 0; i < n; ++i) {
    d.features.push_back(static_cast<float>(i));
    d.labels.push_back(i % classes);
  }
  return d;
}

void check_partition(const std::vector<std::vector<std::int64_t>>& shards, std::int64_t n) {
  std::vector<int> seen(n, 0);
  for (const auto& s : shards) {
    CHECK(std::is_sorted(s.begin(), s.end()));
    for (std::int64_t i : s) {
      REQUIRE((i >= 0 && i < n));
      ++seen[i];
    }
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
}

int distinct_labels(const Dataset& d, const std::vector<std::int64_t>& shard) {
  std::set<int> s;
  for (auto i : shard) s.insert(d.labels[i]);
  return static_cast<int>(s.size());
}

TEST_CASE("every scheme is a deterministic partition / a node's own shard matches") {
  const Dataset d = labelled();
  for (ShardScheme scheme : {ShardScheme::kIid, ShardScheme::kByLabel, ShardScheme::kDirichlet}) {
    CAPTURE(kShardSchemes.name(scheme));
    ShardConfig cfg{scheme, 0.3};
    auto a = all_shards(d, cfg, 8, 11);
    auto b = all_shards(d, cfg, 8, 11);
    auto c = all_shards(d, cfg, 8, 12);
    REQUIRE(a.is_ok());
    CHECK(*a == *b);
    CHECK(*a != *c);
    check_partition(*a, d.num_examples);
    for (int i = 0; i < 8; ++i) {
      auto own = shard_indices(d, cfg, 8, i, 11);
      REQUIRE(own.is_ok());
      CHECK(*own == (*a)[i]);
    }
  }
}

TEST_CASE("iid: sizes differ by at most one and every node sees every label") {
  const Dataset d = labelled(1003);
  auto s = all_shards(d, {ShardScheme::kIid, 0}, 7, 5);
  REQUIRE(s.is_ok());
  for (const auto& shard : *s) {
    CHECK((shard.size() == 143 || shard.size() == 144));
    CHECK(distinct_labels(d, shard) == 10);
  }
}

TEST_CASE("by_label: with n = C each node holds one label / with n = C/2 two") {
  const Dataset d = labelled();
  auto ten = all_shards(d, {ShardScheme::kByLabel, 0}, 10, 3);
  REQUIRE(ten.is_ok());
  for (const auto& shard : *ten) CHECK(distinct_labels(d, shard) == 1);
  auto five = all_shards(d, {ShardScheme::kByLabel, 0}, 5, 3);
  REQUIRE(five.is_ok());
  for (const auto& shard : *five) CHECK(distinct_labels(d, shard) == 2);
}

TEST_CASE("dirichlet: small alpha concentrates labels + large alpha is close to iid") {
  const Dataset d = labelled(10000);
  auto dominant_share = [&](double alpha) {
    auto s = all_shards(d, {ShardScheme::kDirichlet, alpha}, 10, 9);
    REQUIRE(s.is_ok());
    double mean = 0;
    for (const auto& shard : *s) {
      std::vector<int> c(10, 0);
      for (auto i : shard) ++c[d.labels[i]];
      mean += static_cast<double>(*std::max_element(c.begin(), c.end())) / shard.size();
    }
    return mean / 10;
  };
  const double skewed = dominant_share(0.1), mild = dominant_share(100.0);
  CAPTURE(skewed);
  CAPTURE(mild);
  CHECK(skewed > 0.6);  // mostly one label per node
  CHECK(mild < 0.2);    // iid would be 0.1
}

TEST_CASE("sharding errors: bad node + too many nodes + label schemes on regression data") {
  const Dataset d = labelled(10);
  CHECK(!shard_indices(d, {}, 4, 4, 1).is_ok());
  CHECK(!all_shards(d, {}, 11, 1).is_ok());
  CHECK(!all_shards(d, {ShardScheme::kDirichlet, 0.0}, 2, 1).is_ok());
  Dataset reg = make_least_squares(20, 2, 0.1, 1, nullptr);
  CHECK(all_shards(reg, {}, 2, 1).is_ok());
  CHECK(!all_shards(reg, {ShardScheme::kByLabel, 0}, 2, 1).is_ok());
  CHECK(!kShardSchemes.parse("random").is_ok());
}

TEST_CASE("sampler: every epoch is a permutation of the shard / batches wrap across epochs") {
  std::vector<std::int64_t> shard{3, 5, 8, 13, 21, 34, 55};
  BatchSampler s(shard, 3, 99, 2);
  std::vector<std::int64_t> drawn;
  for (int t = 0; t < 7; ++t) {
    auto b = s.next();
    CHECK(b.size() == 3);
    drawn.insert(drawn.end(), b.begin(), b.end());
  }
  // 21 indices = 3 full epochs of 7.
  for (int e = 0; e < 3; ++e) {
    std::vector<std::int64_t> epoch(drawn.begin() + 7 * e, drawn.begin() + 7 * (e + 1));
    std::sort(epoch.begin(), epoch.end());
    CHECK(epoch == shard);
  }
  CHECK(std::vector<std::int64_t>(drawn.begin(), drawn.begin() + 7) !=
        std::vector<std::int64_t>(drawn.begin() + 7, drawn.begin() + 14));
}

TEST_CASE("sampler: deterministic per (seed + node) + different across nodes + restorable") {
  std::vector<std::int64_t> shard(100);
  for (int i = 0; i < 100; ++i) shard[i] = i;
  BatchSampler a(shard, 16, 7, 0), b(shard, 16, 7, 0), c(shard, 16, 7, 1);
  auto first = [](BatchSampler& s) {
    auto v = s.next();
    return std::vector<std::int64_t>(v.begin(), v.end());
  };
  CHECK(first(a) == first(b));
  CHECK(first(a) != first(c));

  BatchSampler s(shard, 16, 7, 3);
  for (int t = 0; t < 9; ++t) s.next();  // mid-way through the second epoch
  const SamplerState saved = s.state();
  CHECK(saved.batches == 9);
  std::vector<std::vector<std::int64_t>> expected;
  for (int t = 0; t < 10; ++t) expected.push_back(first(s));
  BatchSampler r(shard, 16, 7, 3);
  REQUIRE(r.restore(saved).is_ok());
  for (int t = 0; t < 10; ++t) CHECK(first(r) == expected[t]);
  SamplerState bad = saved;
  bad.position = 101;
  CHECK(!r.restore(bad).is_ok());
}

}  // namespace
}  // namespace gossip::sgd
