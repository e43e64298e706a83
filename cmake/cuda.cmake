# CUDA: CHRONOS_CUDA=AUTO turns the CUDA backend on when nvcc is found (on PATH, $CUDACXX, or
# the toolkit's default /usr/local/cuda), ON requires it, OFF leaves it out. Without it the
# CPU backend is the whole engine and `--device cuda` is refused with a clear error.
#
# Real architectures are listed explicitly: sm_80 (A100), sm_86 (RTX 30xx, A10), sm_89
# (RTX 40xx, L4, L40), sm_90 (H100/H200), plus compute_90 PTX that the driver JIT-compiles
# for newer GPUs. Override with -DCMAKE_CUDA_ARCHITECTURES=native to build for the local GPU
# only (tools/gpu_check.sh does).
include(CheckLanguage)
set(CHRONOS_HAVE_CUDA OFF)
if(NOT CHRONOS_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CHRONOS_HAVE_CUDA ON)
  elseif(CHRONOS_CUDA STREQUAL "ON")
    message(FATAL_ERROR "CHRONOS_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()
if(CHRONOS_HAVE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80-real;86-real;89-real;90-real;90-virtual")
  endif()
  enable_language(CUDA)
  # The kernels include the engine's C++20 headers (std::bit_cast, std::span). CMake 3.25 does
  # not know nvcc's C++20 flag (nvcc 12+ has it), so it is told here.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  # Host-side warnings as in the C++ code; device-side warnings are errors with CHRONOS_WERROR.
  set(CHRONOS_CUDA_WARNINGS "SHELL:-Xcompiler=-Wall,-Wextra")
  if(CHRONOS_WERROR)
    list(APPEND CHRONOS_CUDA_WARNINGS "SHELL:--Werror all-warnings")
  endif()
endif()
message(STATUS "Chronos CUDA backend: ${CHRONOS_HAVE_CUDA} ${CMAKE_CUDA_ARCHITECTURES}")
