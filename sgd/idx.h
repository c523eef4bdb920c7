// IDX files (the MNIST / Fashion-MNIST format, LeCun et al.), raw or gzip-compressed.
//
// Format: magic = 0x00 0x00 <type> <ndims>, then ndims big-endian uint32 dimensions, then the
// values, big-endian, row-major. Types: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32,
// 0x0D float32, 0x0E float64. A file is gzip when it starts with 1f 8b (detected, not guessed
// from the name). Every check failure names the file and what was expected: wrong magic, unknown
// type, zero dimensions, a payload shorter or longer than the dimensions say, a truncated or
// corrupt gzip stream.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/env.h"
#include "common/status.h"
#include "sgd/dataset.h"

namespace gossip::sgd {

struct IdxArray {
  std::uint8_t type = 0;            // the IDX type byte
  std::vector<std::uint32_t> dims;  // e.g. {60000, 28, 28}
  std::vector<float> values;        // converted to float, row-major

  std::int64_t count() const { return dims.empty() ? 0 : dims[0]; }
  std::int64_t row_size() const;  // product of dims[1..]
};

// Parses an IDX image from bytes (already decompressed or not). `name` is used in messages.
Result<IdxArray> parse_idx(std::string_view bytes, const std::string& name);
// Reads `path` through `env`, gunzips when needed, parses.
Result<IdxArray> read_idx(const std::string& path, Env& env = Env::system());
// Gunzip (zlib). Corruption on a truncated or damaged stream.
Result<std::string> gunzip(std::string_view bytes, const std::string& name);

// An images file (n × rows × cols) and a labels file (n) as a classification Dataset with
// features scaled to [0, 1] (uint8 / 255). The counts must agree; labels must be < num_classes.
Result<Dataset> load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                                 int num_classes, Env& env = Env::system());

enum class Split { kTrain, kTest };
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// Fashion-MNIST (Xiao et al. 2017) from a directory holding train-images-idx3-ubyte[.gz] etc.
// Features in [0, 1].
Result<Dataset> load_fashion_mnist(const std::string& dir, Split split, Env& env = Env::system());

}  // namespace gossip::sgd
