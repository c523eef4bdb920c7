// main() of the test executables labelled gpu: runs the doctest cases where the build has the CUDA
// backend and the machine a device; otherwise prints why and exits 77 (ctest: skipped). Listing
// the cases (ctest's discovery) always works.
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

#include "sgd/backend.h"

namespace gossip::testing {

inline int run_gpu_tests(const char* name, int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--list", 6) == 0 || std::strncmp(argv[i], "-l", 2) == 0) {
      listing = true;
    }
  }
  if (!listing && sgd::cuda_device_count() == 0) {
    std::printf(
        "%s: %s; skipped\n", name,
        sgd::cuda_built() ? "no CUDA device on this machine" : "this build has no CUDA backend");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}

}  // namespace gossip::testing
