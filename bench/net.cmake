# bench/net_bench: gossip_net parameter exchange between real processes on loopback, side by side
# with iperf3 (single stream) in the same run; also CRC32C vs zlib crc32 speed.
add_executable(net_bench ${CMAKE_CURRENT_LIST_DIR}/net_bench.cc)
target_link_libraries(net_bench PRIVATE gossip_net ZLIB::ZLIB)
target_compile_definitions(net_bench PRIVATE GOSSIP_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
