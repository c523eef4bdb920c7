// gossipd on a CUDA device (ctest label gpu): n gossipd processes with `device: CUDA` on one GPU,
// over real loopback TCP, against gossip-sim's D-PSGD on the cpu for the same files. The parameters
// travel host → pinned staging → device for every neighbour each iteration, so this exercises the
// asynchronous copies of the daemon's data path (docs/design.md §2) end to end.
// Mixing and the optimizer are bit-identical on both backends (tests/sgd/cuda_parity_test.cc), but
// cuBLAS and Eigen sum the GEMMs in different orders, so after 60 iterations the parameters agree
// to a stated tolerance, 1e-4 absolute on weights of order 0.1–1, instead of the cpu tests' 1e-5.
// Exits 77 (ctest: skipped) where the build has no CUDA backend or the machine no device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tests/daemon/gossipd_harness.h"
#include "tests/gpu_test_main.h"

namespace gossip::daemon {
namespace {

using namespace harness;

TEST_CASE("cuda: 4 gossipd processes on a ring (TLS) train like gossip-sim's D-PSGD on the cpu") {
  exactness("RING", 4, /*tls=*/true, "--set device=CUDA", 1e-4);
}

TEST_CASE("cuda: 8 gossipd processes on the exponential graph share one GPU") {
  exactness("EXPONENTIAL", 8, /*tls=*/false, "--set device=CUDA", 1e-4);
}

}  // namespace
}  // namespace gossip::daemon

int main(int argc, char** argv) {
  return gossip::testing::run_gpu_tests("gossipd_gpu_test", argc, argv);
}
