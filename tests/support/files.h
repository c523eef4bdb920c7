// Scratch directories and whole files for the tests: a uniquely named directory removed with
// everything in it at scope exit, and a file read whole (text, or raw float32 parameters).
// Header-only; needs doctest (a directory that cannot be made fails the test).
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace gossip::testing {

// A fresh directory `parent`/`prefix`XXXXXX (mkdtemp), removed with everything in it at scope exit.
// The default parent is the system temp directory; Unix socket paths (at most 107 bytes) want a
// short one such as "/tmp".
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& parent = std::filesystem::temp_directory_path().string(),
                   const std::string& prefix = "gossip-test-") {
    std::string tmpl = parent + "/" + prefix + "XXXXXX";
    REQUIRE_MESSAGE(::mkdtemp(tmpl.data()) != nullptr, "cannot make a directory like " << tmpl);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return path + "/" + name; }
  // Writes `bytes` to `name` inside the directory and returns the file's path.
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(file(name), std::ios::binary) << bytes;
    return file(name);
  }
};

// The whole file as bytes; "" when it cannot be read (a log not written yet).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A raw little-endian float32 file (--dump-params, final_params_path), whole.
inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

}  // namespace gossip::testing
