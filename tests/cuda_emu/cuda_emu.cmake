# zaya_cuda_emu_tests: src/ops/cuda/*.cu rewritten to C++ (to_cpp.py) and built against the CPU stand-ins in
# include/ and emu.cpp, with the tests of tests/cuda (NCCL's excepted), under ZAYA_CUDA_EMU_SANITIZER.
# Included from the top-level CMakeLists.txt when ZAYA_CUDA_EMU is ON; scripts/cuda_emulate.sh drives it.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
find_package(Threads REQUIRED)
set(ZAYA_EMU_DIR ${CMAKE_SOURCE_DIR}/tests/cuda_emu)
file(GLOB ZAYA_EMU_CU CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/ops/cuda/*.cu)
set(ZAYA_EMU_GENERATED)
foreach(cu ${ZAYA_EMU_CU})
  get_filename_component(name ${cu} NAME_WE)
  set(out ${CMAKE_BINARY_DIR}/cuda_emu/${name}.cpp)
  add_custom_command(OUTPUT ${out} COMMAND Python3::Interpreter ${ZAYA_EMU_DIR}/to_cpp.py ${cu} ${out}
                     DEPENDS ${cu} ${ZAYA_EMU_DIR}/to_cpp.py COMMENT "to_cpp ${name}.cu")
  list(APPEND ZAYA_EMU_GENERATED ${out})
endforeach()
file(GLOB ZAYA_EMU_TESTS CONFIGURE_DEPENDS tests/cuda/*.cpp)
list(FILTER ZAYA_EMU_TESTS EXCLUDE REGEX "test_nccl\\.cpp$")
add_executable(zaya_cuda_emu_tests ${ZAYA_EMU_GENERATED} ${ZAYA_EMU_TESTS} ${ZAYA_EMU_DIR}/emu.cpp
               ${ZAYA_EMU_DIR}/threads.cpp ${ZAYA_EMU_DIR}/test_emu.cpp ${CMAKE_SOURCE_DIR}/src/ops/cuda/backend.cpp
               ${CMAKE_SOURCE_DIR}/src/infer/cuda_decoder.cpp)
# The stand-in headers come first, so <cuda_runtime.h>, <cuda_bf16.h> and <cublasLt.h> resolve to them.
target_include_directories(zaya_cuda_emu_tests BEFORE PRIVATE ${ZAYA_EMU_DIR}/include)
target_include_directories(zaya_cuda_emu_tests PRIVATE src tests/cuda)
if(ZAYA_CUDA_EMU_SANITIZER STREQUAL "thread")
  set(ZAYA_EMU_SAN -fsanitize=thread)
else()
  set(ZAYA_EMU_SAN -fsanitize=address,undefined -fno-sanitize-recover=undefined)
endif()
target_compile_options(zaya_cuda_emu_tests PRIVATE ${ZAYA_EMU_SAN} -fno-omit-frame-pointer -g -O1)
target_link_options(zaya_cuda_emu_tests PRIVATE ${ZAYA_EMU_SAN})
target_link_libraries(zaya_cuda_emu_tests PRIVATE zaya_cpu_ref GTest::gtest GTest::gtest_main fmt::fmt Threads::Threads
                      ${CMAKE_DL_LIBS})

# zaya_emu: the zaya CLI with the emulated kernels behind `--device cuda` (no sanitizer), to run the Trainer's device
# path — parameters uploaded, gradients and routing choices downloaded — end to end before any GPU time:
#   build-emu-address/zaya_emu train --device cuda --model tiny ...   (scripts/cuda_emulate.sh builds it)
# The kernels, ops/cuda/backend.cpp and infer/cuda_decoder.cpp are linked as objects, so zaya_lib's ops/no_cuda.cpp
# and infer/no_cuda_decoder.cpp are never pulled in.
file(GLOB ZAYA_EMU_CLI CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/cli/*.cpp)
add_executable(zaya_emu ${ZAYA_EMU_CLI} ${ZAYA_EMU_GENERATED} ${ZAYA_EMU_DIR}/emu.cpp ${ZAYA_EMU_DIR}/threads.cpp
               ${CMAKE_SOURCE_DIR}/src/ops/cuda/backend.cpp ${CMAKE_SOURCE_DIR}/src/infer/cuda_decoder.cpp)
target_include_directories(zaya_emu BEFORE PRIVATE ${ZAYA_EMU_DIR}/include)
target_include_directories(zaya_emu PRIVATE src)
target_compile_options(zaya_emu PRIVATE -O2)
target_link_libraries(zaya_emu PRIVATE zaya_lib CLI11::CLI11 Threads::Threads ${CMAKE_DL_LIBS})
