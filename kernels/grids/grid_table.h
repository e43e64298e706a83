// How the IQ grid tables (iq{1,2,3}_grids.h, generated) are declared, so that the CPU decoders
// (kernels/cpu/quant_layout.h) and the CUDA ones (kernels/cuda/iq_decode.h) read one definition.
// Each table is the function-local constant of an inline accessor, __host__ __device__ under
// nvcc: host code reads a constant array, device code reads global memory through the read-only
// cache (not __constant__, which serializes a warp whose lanes read different rows), and a CUDA
// unit holds only the tables its kernels call for. Internal linkage (the generated headers'
// anonymous namespace), as quant_layout.h requires of everything its ISA units share.
#pragma once

#if defined(__CUDACC__)
#define CHRONOS_GRID_ROW [[maybe_unused]] __host__ __device__ inline
#else
#define CHRONOS_GRID_ROW [[maybe_unused]] inline
#endif
