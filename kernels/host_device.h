// CHRONOS_HD: functions written once for the host compiler and for nvcc (__host__ __device__
// there), so that what the host tests run is what the kernels run.
#pragma once

#if defined(__CUDACC__)
#define CHRONOS_HD __host__ __device__
#else
#define CHRONOS_HD
#endif
