# zaya_cuda_emu_tests[_tsan]: src/ops/cuda/*.cu rewritten to C++ (to_cpp.py) and built against the CPU stand-ins in
# include/ and emu.cpp, with the tests of tests/cuda (NCCL's over the NCCL stand-in, one rank), under ASan+UBSan and
# under TSan; and zaya_emu.
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
# The kernels' headers (*.cuh, which only kernel files include) rewritten too, into cuda_emu/ops/cuda/: the kernel
# targets find them there first (-iquote), so their __shared__ variables are each block's own as well.
file(GLOB ZAYA_EMU_CUH CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/ops/cuda/*.cuh)
foreach(cuh ${ZAYA_EMU_CUH})
  get_filename_component(name ${cuh} NAME)
  set(out ${CMAKE_BINARY_DIR}/cuda_emu/ops/cuda/${name})
  add_custom_command(OUTPUT ${out} COMMAND Python3::Interpreter ${ZAYA_EMU_DIR}/to_cpp.py ${cuh} ${out}
                     DEPENDS ${cuh} ${ZAYA_EMU_DIR}/to_cpp.py COMMENT "to_cpp ${name}")
  list(APPEND ZAYA_EMU_GENERATED ${out})
endforeach()
# The emulator's own tests declare shared memory as kernels do, so they are rewritten too.
set(ZAYA_EMU_SELF_TEST ${CMAKE_BINARY_DIR}/cuda_emu/test_emu.cpp)
add_custom_command(OUTPUT ${ZAYA_EMU_SELF_TEST}
                   COMMAND Python3::Interpreter ${ZAYA_EMU_DIR}/to_cpp.py ${ZAYA_EMU_DIR}/test_emu.cpp
                           ${ZAYA_EMU_SELF_TEST}
                   DEPENDS ${ZAYA_EMU_DIR}/test_emu.cpp ${ZAYA_EMU_DIR}/to_cpp.py COMMENT "to_cpp test_emu.cpp")
file(GLOB ZAYA_EMU_TESTS CONFIGURE_DEPENDS tests/cuda/*.cpp)
# Cached decoding on the device (infer/cuda_decoder.h): host C++ over the kernels, as in zaya_cuda.
set(ZAYA_EMU_DECODER ${CMAKE_SOURCE_DIR}/src/infer/cuda_decoder.cpp
                     ${CMAKE_SOURCE_DIR}/src/infer/cuda_decoder_prefill.cpp)
# The NCCL communicator (dist/comm_nccl.cu's host code) over the NCCL stand-in: one rank in the tests (no MPI), as
# many as mpirun starts in zaya_emu. Compiled apart (their anonymous namespaces are their own).
set(ZAYA_EMU_NCCL ${ZAYA_EMU_DIR}/comm_nccl_emu.cpp ${ZAYA_EMU_DIR}/nccl_emu.cpp)
set_source_files_properties(${ZAYA_EMU_NCCL} PROPERTIES COMPILE_OPTIONS "${ZAYA_WARNINGS}"
                            SKIP_UNITY_BUILD_INCLUSION ON)
# The kernels and their tests once per sanitizer: zaya_cuda_emu_tests under ASan+UBSan (bounds, in global and shared
# memory, and UB), zaya_cuda_emu_tests_tsan under TSan (races between a block's threads, a missing __syncthreads,
# between blocks, and between a dependent launch and the kernel before).
# The CPU reference ops (zaya_cpu_ref) are not instrumented: they run on one thread beside the kernels.
function(zaya_emu_tests name host_opt)
  # The tests and the host code at host_opt, the kernels and the emulator at -O1 (they run every CUDA thread of every
  # launch). Under ASan the host code at -O0 compiles in a third of the time and adds ~20 s to the run; under TSan
  # -O0 would instrument every local variable's access and double the run.
  add_library(${name}_host OBJECT ${ZAYA_EMU_TESTS} ${ZAYA_EMU_SELF_TEST}
              ${CMAKE_SOURCE_DIR}/src/ops/cuda/backend.cpp ${ZAYA_EMU_DECODER} ${ZAYA_EMU_NCCL})
  target_compile_options(${name}_host PRIVATE ${ARGN} -fno-omit-frame-pointer -g ${host_opt})
  zaya_unity(${name}_host) # not the kernels: each file's anonymous namespace may reuse a kernel's name
  # The decoder's files alone: they name the decoder's internal namespace in a using-directive.
  set_source_files_properties(${ZAYA_EMU_DECODER} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  add_executable(${name} ${ZAYA_EMU_GENERATED} ${ZAYA_EMU_DIR}/emu.cpp ${ZAYA_EMU_DIR}/threads.cpp)
  target_compile_options(${name} PRIVATE ${ARGN} -fno-omit-frame-pointer -g -O1 -iquote ${CMAKE_BINARY_DIR}/cuda_emu)
  target_link_options(${name} PRIVATE ${ARGN})
  foreach(target ${name}_host ${name})
    # The stand-in headers come first, so <cuda_runtime.h>, <cuda_bf16.h> and <cublasLt.h> resolve to them.
    target_include_directories(${target} BEFORE PRIVATE ${ZAYA_EMU_DIR}/include)
    target_include_directories(${target} PRIVATE src tests/cuda)
    target_link_libraries(${target} PRIVATE zaya_cpu_ref GTest::gtest fmt::fmt)
  endforeach()
  target_link_libraries(${name} PRIVATE ${name}_host GTest::gtest_main Threads::Threads ${CMAKE_DL_LIBS})
endfunction()
zaya_emu_tests(zaya_cuda_emu_tests -O0 -fsanitize=address,undefined -fno-sanitize-recover=undefined)
zaya_emu_tests(zaya_cuda_emu_tests_tsan -O1 -fsanitize=thread)

# zaya_emu: the zaya CLI with the emulated kernels behind `--device cuda` (no sanitizer), to run the Trainer's device
# path — parameters uploaded, gradients and routing choices downloaded — end to end before any GPU time:
#   build/zaya_emu train --device cuda --model tiny ...
# It shares zaya's objects (zaya_core, zaya_cli) and adds the kernels, ops/cuda/backend.cpp, the GPU decoder
# (infer/cuda_decoder*.cpp) and the communicators in place of zaya_lib's backend part: comm.cpp, with the NCCL one
# (dist/comm_nccl.cu) over the NCCL stand-in (nccl_emu.cpp: MPI between the ranks mpirun starts), so ZAYA_COMM=nccl
# runs here too.
add_executable(zaya_emu ${ZAYA_EMU_GENERATED} ${ZAYA_EMU_DIR}/emu.cpp ${ZAYA_EMU_DIR}/threads.cpp
               ${CMAKE_SOURCE_DIR}/src/ops/cuda/backend.cpp ${ZAYA_EMU_DECODER} ${CMAKE_SOURCE_DIR}/src/dist/comm.cpp
               ${ZAYA_EMU_NCCL})
target_include_directories(zaya_emu BEFORE PRIVATE ${ZAYA_EMU_DIR}/include)
target_compile_options(zaya_emu PRIVATE -O2 -iquote ${CMAKE_BINARY_DIR}/cuda_emu)
target_compile_definitions(zaya_emu PRIVATE ZAYA_WITH_NCCL $<$<BOOL:${MPI_CXX_FOUND}>:ZAYA_WITH_MPI>)
target_link_libraries(zaya_emu PRIVATE zaya_cli zaya_core Threads::Threads ${CMAKE_DL_LIBS})
