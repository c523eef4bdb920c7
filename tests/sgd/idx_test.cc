// IDX reader: files generated here (raw and gzip), valid and broken — truncated, wrong magic,
// wrong size, trailing bytes, corrupt gzip — plus the real Fashion-MNIST headers when installed.
#include "sgd/idx.h"

#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/env.h"
#include "tests/support/files.h"

namespace gossip::sgd {
namespace {

std::string idx_bytes(std::uint8_t type, std::vector<std::uint32_t> dims,
                      const std::string& payload) {
  std::string s{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (std::uint32_t d : dims) {
    for (int sh = 24; sh >= 0; sh -= 8) s.push_back(static_cast<char>((d >> sh) & 0xff));
  }
  return s + payload;
}

std::string gzip(const std::string& raw) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&zs, raw.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

using gossip::testing::TempDir;

std::string pixels(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(i * 37 % 256));
  return s;
}

TEST_CASE("a valid uint8 image file parses + raw and gzip alike") {
  TempDir dir;
  const std::string raw = idx_bytes(0x08, {3, 2, 2}, pixels(12));
  for (const std::string& path : {dir.write("a.idx", raw), dir.write("a.idx.gz", gzip(raw))}) {
    CAPTURE(path);
    auto a = read_idx(path);
    REQUIRE(a.is_ok());
    CHECK(a->type == 0x08);
    CHECK(a->dims == std::vector<std::uint32_t>{3, 2, 2});
    CHECK(a->count() == 3);
    CHECK(a->row_size() == 4);
    REQUIRE(a->values.size() == 12);
    for (int i = 0; i < 12; ++i) CHECK(a->values[i] == static_cast<float>(i * 37 % 256));
  }
}

TEST_CASE("big-endian int32 + int16 and float32 elements") {
  std::string p32 = {0, 0, 0x01, 0x02, '\xff', '\xff', '\xff', '\xfe'};  // 258, −2
  auto a = parse_idx(idx_bytes(0x0C, {2}, p32), "t");
  REQUIRE(a.is_ok());
  CHECK(a->values == std::vector<float>{258.0f, -2.0f});
  std::string p16 = {'\xff', '\xfd', 0x01, 0x00};  // −3, 256
  auto b = parse_idx(idx_bytes(0x0B, {2}, p16), "t");
  REQUIRE(b.is_ok());
  CHECK(b->values == std::vector<float>{-3.0f, 256.0f});
  std::string pf = {0x3f, '\xc0', 0, 0};  // 1.5f
  auto c = parse_idx(idx_bytes(0x0D, {1}, pf), "t");
  REQUIRE(c.is_ok());
  CHECK(c->values[0] == 1.5f);
}

TEST_CASE("broken files give Corruption with the file name and what was expected") {
  const std::string good = idx_bytes(0x08, {3, 2, 2}, pixels(12));
  struct Case {
    const char* what;
    std::string bytes;
    const char* message_part;
  };
  std::string bad_magic = good;
  bad_magic[0] = 0x1a;
  std::string bad_type = good;
  bad_type[2] = 0x07;
  const Case cases[] = {
      {"empty", "", "shorter than its 4-byte magic"},
      {"wrong magic", bad_magic, "not an IDX file"},
      {"unknown type", bad_type, "unknown IDX element type 0x07"},
      {"truncated header", good.substr(0, 9), "truncated IDX header"},
      {"truncated payload", good.substr(0, good.size() - 1), "truncated file"},
      {"wrong size (trailing bytes)", good + "xy", "trailing bytes"},
      {"wrong size (dims disagree)", idx_bytes(0x08, {4, 2, 2}, pixels(12)), "says 16"},
      {"zero dims", idx_bytes(0x08, {}, ""), "0 dimensions"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    auto r = parse_idx(c.bytes, "images.idx");
    REQUIRE(!r.is_ok());
    CHECK(r.status().code() == StatusCode::kCorruption);
    CAPTURE(r.status().message());
    CHECK(r.status().message().find("images.idx") != std::string::npos);
    CHECK(r.status().message().find(c.message_part) != std::string::npos);
  }
}

TEST_CASE("truncated and corrupt gzip streams are Corruption + not a crash") {
  TempDir dir;
  const std::string gz = gzip(idx_bytes(0x08, {50, 10}, pixels(500)));
  auto t = read_idx(dir.write("trunc.gz", gz.substr(0, gz.size() / 2)));
  REQUIRE(!t.is_ok());
  CHECK(t.status().code() == StatusCode::kCorruption);
  CHECK(t.status().message().find("truncated") != std::string::npos);
  std::string bad = gz;
  for (std::size_t i = 12; i < 30 && i < bad.size(); ++i) bad[i] = static_cast<char>(~bad[i]);
  auto c = read_idx(dir.write("bad.gz", bad));
  REQUIRE(!c.is_ok());
  CHECK(c.status().code() == StatusCode::kCorruption);
  // A gzip of a truncated IDX file: decompresses fine, then the IDX check catches it.
  auto s = read_idx(dir.write("short.gz", gzip(idx_bytes(0x08, {50, 10}, pixels(499)))));
  REQUIRE(!s.is_ok());
  CHECK(s.status().message().find("truncated file") != std::string::npos);
  auto missing = read_idx(dir.file("nope"));
  CHECK(missing.status().code() == StatusCode::kNotFound);
}

TEST_CASE("load_idx_dataset: scaling + label checks and count agreement") {
  TempDir dir;
  std::string px = pixels(12);
  const std::string images = dir.write("img", idx_bytes(0x08, {3, 2, 2}, px));
  const std::string labels = dir.write("lab", idx_bytes(0x08, {3}, std::string{0, 9, 4}));
  auto d = load_idx_dataset(images, labels, 10);
  REQUIRE(d.is_ok());
  CHECK(d->num_examples == 3);
  CHECK(d->dim == 4);
  CHECK(d->labels == std::vector<std::int32_t>{0, 9, 4});
  CHECK(d->features[1] == doctest::Approx(37.0 / 255));

  const std::string two = dir.write("lab2", idx_bytes(0x08, {2}, std::string{0, 1}));
  auto e = load_idx_dataset(images, two, 10);
  REQUIRE(!e.is_ok());
  CHECK(e.status().message().find("3 images but") != std::string::npos);
  const std::string big = dir.write("lab3", idx_bytes(0x08, {3}, std::string{0, 12, 1}));
  auto f = load_idx_dataset(images, big, 10);
  REQUIRE(!f.is_ok());
  CHECK(f.status().message().find("label 12") != std::string::npos);
  auto g = load_fashion_mnist(dir.path, Split::kTrain);
  CHECK(g.status().code() == StatusCode::kNotFound);
}

TEST_CASE("the installed Fashion-MNIST files have the published shapes") {
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz")) {
    MESSAGE("dataset-fashion-mnist not installed; skipped");
    return;
  }
  auto test = load_fashion_mnist(kFashionMnistDir, Split::kTest);
  REQUIRE(test.is_ok());
  CHECK(test->num_examples == 10000);
  CHECK(test->dim == 784);
  std::vector<int> counts(10, 0);
  for (auto l : test->labels) ++counts[l];
  for (int c : counts) CHECK(c == 1000);  // the test split is balanced
}

}  // namespace
}  // namespace gossip::sgd
