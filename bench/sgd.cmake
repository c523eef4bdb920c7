# sgd_bench: cpu training step vs PyTorch (bench/sgd_reference.py), mixing vs memcpy, GPU figures
# where a device exists. Run: build/bench/sgd_bench [--threads 1 2] [--seconds 3]
add_executable(sgd_bench ${CMAKE_CURRENT_LIST_DIR}/sgd_bench.cc)
target_link_libraries(sgd_bench PRIVATE gossip_sgd CLI11::CLI11)
target_compile_definitions(sgd_bench PRIVATE GOSSIP_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
if(TARGET gossip_sgd_cuda)  # the cuda backend is in gossip_sgd; its header is sgd/cuda/
  target_compile_definitions(sgd_bench PRIVATE GOSSIP_SGD_CUDA=1)
endif()

# compress_bench: compressors, CHOCO, the ring hop, the outer step and AdamW in GB/s beside memcpy,
# per instruction-set level. Run: build/bench/compress_bench [--floats N] [--seconds S]
add_executable(compress_bench ${CMAKE_CURRENT_LIST_DIR}/compress_bench.cc)
target_link_libraries(compress_bench PRIVATE gossip_sgd CLI11::CLI11)
