# bench/sim_bench: gossip-sim's D-PSGD node-iterations/s next to numpy (bench/sim_reference.py) in
# the same run, and the mixing kernel's GB/s next to memcpy, with two figures measured on the
# machine at hand: the rate of reading the batch rows alone, and the mixing's bound at this core's
# peak FMA rate. Run: build/bench/sim_bench
add_executable(sim_bench ${CMAKE_CURRENT_LIST_DIR}/sim_bench.cc)
gossip_isa_sources(sim_bench ${CMAKE_CURRENT_LIST_DIR}/sim_bench_kernels.cc)
find_package(OpenMP REQUIRED COMPONENTS CXX)  # --threads: the mixing on column ranges
target_link_libraries(sim_bench PRIVATE gossip_sim CLI11::CLI11 OpenMP::OpenMP_CXX)
target_compile_definitions(sim_bench PRIVATE
  GOSSIP_SIM_REFERENCE_SCRIPT="${CMAKE_CURRENT_LIST_DIR}/sim_reference.py")
