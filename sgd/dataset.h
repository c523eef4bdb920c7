// Dataset and Batch: examples in host memory, row-major (one example per row), which is also a
// column-major dim × n matrix — the shape both backends consume without a transpose.
//
// A Dataset is immutable once built and shared between nodes of one process (the simulator holds
// one copy for n virtual nodes); shards are index lists into it (shard.h). Classification sets
// carry int32 labels in [0, num_classes); regression sets carry float targets.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace gossip::sgd {

struct Dataset {
  std::int64_t num_examples = 0;
  int dim = 0;
  int num_classes = 0;               // 0 for regression
  std::vector<float> features;       // num_examples × dim, row-major
  std::vector<std::int32_t> labels;  // classification: num_examples entries
  std::vector<float> targets;        // regression: num_examples entries

  bool is_classification() const { return num_classes > 0; }
  std::span<const float> example(std::int64_t i) const {
    return {features.data() + i * dim, static_cast<std::size_t>(dim)};
  }
  // Checks sizes against each other and labels against num_classes; `name` prefixes the message.
  Status validate(const std::string& name) const;
};

// A mini-batch gathered into contiguous host memory. Reused across iterations: gather() resizes
// without reallocating once the capacity is there.
struct Batch {
  int rows = 0;
  int dim = 0;
  std::vector<float> features;       // rows × dim, row-major
  std::vector<std::int32_t> labels;  // classification
  std::vector<float> targets;        // regression
};

// The features of a Dataset again, every row starting on a 64-byte boundary: the row stride is dim
// rounded up to a multiple of 16 floats (zeros in between), so no 16-float vector load of a row
// spans two cache lines. With dim = 999, every row of `features` but one in 16 starts mid-line and
// nearly every vector load of it reads two lines; the linear models' gradient over 8 random rows
// ran 20–25% faster from aligned rows (microbenchmark, 8–128 MB of rows). For a reader that visits
// random rows many times (the simulator's in-place batch views); the values are the features', bit
// for bit. Costs a second copy of the features.
class AlignedRows {
 public:
  explicit AlignedRows(const Dataset& data);
  // Move-only: a copy's buffer would start at another address, so its 64-byte offset would differ.
  AlignedRows(const AlignedRows&) = delete;
  AlignedRows& operator=(const AlignedRows&) = delete;
  AlignedRows(AlignedRows&&) = default;
  AlignedRows& operator=(AlignedRows&&) = default;

  std::int64_t num_rows() const { return num_rows_; }
  int dim() const { return dim_; }
  std::size_t stride() const { return stride_; }  // floats from one row to the next
  const float* row(std::int64_t i) const { return storage_.data() + offset_ + i * stride_; }

 private:
  std::vector<float> storage_;
  std::size_t offset_ = 0;  // floats from storage_.data() to the first 64-byte boundary
  std::size_t stride_ = 0;
  std::int64_t num_rows_ = 0;
  int dim_ = 0;
};

// Copies the examples `indices` of `data` into `out`, in the order given.
void gather(const Dataset& data, std::span<const std::int64_t> indices, Batch& out);
// The whole data set (or rows [begin, end)) as a batch view copy; used by evaluation.
Batch slice(const Dataset& data, std::int64_t begin, std::int64_t end);

// The first `limit` examples of `data` as a data set of their own (`data` itself when limit is 0
// or not smaller than the set): the evaluation subset gossipd and gossip-sim both use.
std::shared_ptr<const Dataset> first_examples(const std::shared_ptr<const Dataset>& data,
                                              std::int64_t limit);

// ---- Preprocessing

// Per-feature affine map x -> (x − mean) / stddev, fitted on a training set and applied to every
// split, so all nodes (which fit on the same full training set) agree. Features with zero spread
// (e.g. always-black corner pixels) keep stddev 1.
struct Standardizer {
  std::vector<float> mean;
  std::vector<float> stddev;

  static Standardizer fit(const Dataset& train);
  void apply(Dataset& data) const;  // data.dim must equal mean.size()
};

// ---- Synthetic problems with a known optimum (tests and theory checks). Deterministic in seed.

// y = a·x* + b* + noise·N(0,1), a ~ N(0, I_dim). `planted` receives x* in the flat layout of a
// least_squares ModelSpec (dim weights, then the bias b*), drawn N(0,1).
Dataset make_least_squares(std::int64_t num_examples, int dim, double noise, std::uint64_t seed,
                           std::vector<float>* planted);

// Planted separator w*, b*: a ~ N(0, I_dim), label 1 with probability σ(a·w* + b*) (so the
// population logistic loss is minimised exactly at (w*, b*)). `planted` as above, scaled so that
// ‖w*‖ = margin_scale (larger: cleaner labels).
Dataset make_logistic(std::int64_t num_examples, int dim, double margin_scale, std::uint64_t seed,
                      std::vector<float>* planted);

}  // namespace gossip::sgd
