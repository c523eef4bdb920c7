# Topology benchmarks: bench/topo_bench prints ours next to scipy (bench/topo_reference.py).
add_executable(topo_bench ${CMAKE_CURRENT_LIST_DIR}/topo_bench.cc)
target_link_libraries(topo_bench PRIVATE gossip_topology CLI11::CLI11)
target_compile_definitions(topo_bench PRIVATE
  GOSSIP_TOPO_REFERENCE_SCRIPT="${CMAKE_CURRENT_LIST_DIR}/topo_reference.py")
