// Run-time kernel dispatch: detects the CPU's instruction set once and hands out the matching table.
#include <cpuid.h>

#include <atomic>

#include "chronos/error.h"
#include "kernels/cpu/cpu_kernels.h"

namespace chronos {
namespace {

constexpr kernels::CpuKernels kScalar = {
    kernels::matmul_rows_scalar,      kernels::row_to_f32_scalar, kernels::quantize_activations_scalar,
    kernels::matmul_rows_int8_scalar, kernels::rmsnorm_scalar,    kernels::softmax_scalar,
    kernels::silu_mul_scalar,         kernels::dot_scalar,        kernels::axpy_scalar,
};
constexpr kernels::CpuKernels kAvx2 = {
    kernels::matmul_rows_avx2,      kernels::row_to_f32_avx2, kernels::quantize_activations_avx2,
    kernels::matmul_rows_int8_avx2, kernels::rmsnorm_avx2,    kernels::softmax_avx2,
    kernels::silu_mul_avx2,         kernels::dot_avx2,        kernels::axpy_avx2,
};
// The integer-dot kernels are 256-bit: without VNNI the AVX-512 table uses the AVX2 ones.
constexpr kernels::CpuKernels kAvx512 = {
    kernels::matmul_rows_avx512,    kernels::row_to_f32_avx512, kernels::quantize_activations_avx2,
    kernels::matmul_rows_int8_avx2, kernels::rmsnorm_avx512,    kernels::softmax_avx512,
    kernels::silu_mul_avx512,       kernels::dot_avx512,        kernels::axpy_avx512,
};
// With VNNI, the integer-dot kernels of matmul_int8_vnni_avx512.cpp.
constexpr kernels::CpuKernels with_vnni(kernels::CpuKernels table) {
  table.matmul_rows_int8 = kernels::matmul_rows_int8_avx512vnni;
  return table;
}
constexpr kernels::CpuKernels kAvx512Vnni = with_vnni(kAvx512);
// With AVX512_BF16 as well (Cooper Lake, Sapphire Rapids, Zen 4): the bf16-activation path; the
// other tables leave its two entries null.
constexpr kernels::CpuKernels with_bf16(kernels::CpuKernels table) {
  table.activations_to_bf16 = kernels::activations_to_bf16_avx512bf16;
  table.matmul_rows_bf16 = kernels::matmul_rows_bf16_avx512bf16;
  return table;
}
constexpr kernels::CpuKernels kAvx512VnniBf16 = with_bf16(kAvx512Vnni);

// F16C from CPUID leaf 1 (ECX bit 29): clang before 16 rejects "f16c" in __builtin_cpu_supports,
// and one code path for both compilers keeps the check the same everywhere. F16C uses the AVX
// register state, whose OS support the "avx2" check below already requires.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

// Exactly the extensions the *_avx2.cpp / *_avx512.cpp files are compiled with
// (kernels/CMakeLists.txt), so a table is never chosen on a CPU that lacks one of them.
Isa probe_isa() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  if (!avx2) return Isa::kScalar;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return avx512 ? Isa::kAvx512 : Isa::kAvx2;
}

// AVX512_VNNI (vpdpbusd, vpdpwssd) with the AVX-512 set above; only the integer-dot kernels use it.
bool cpu_has_avx512_vnni() {
  static const bool vnni = detect_isa() == Isa::kAvx512 && __builtin_cpu_supports("avx512vnni");
  return vnni;
}

// AVX512_BF16 (vdpbf16ps) with VNNI and the AVX-512 set above; only the bf16-activation path uses it.
bool cpu_has_avx512_bf16() {
  static const bool bf16 = cpu_has_avx512_vnni() && __builtin_cpu_supports("avx512bf16");
  return bf16;
}

// The process-wide choice set_isa() changes; -1 until first used. Kept here rather than in an
// object because the ops.h interface makes the ISA a process setting (tests and benchmarks
// switch it; the engine never does).
std::atomic<int> g_active_isa{-1};

}  // namespace

Isa detect_isa() {
  static const Isa detected = probe_isa();
  return detected;
}

Isa active_isa() {
  const int isa = g_active_isa.load(std::memory_order_relaxed);
  return isa < 0 ? detect_isa() : Isa(isa);
}

void set_isa(Isa isa) {
  const Isa best = detect_isa();
  if (int(isa) > int(best)) isa = best;
  g_active_isa.store(int(isa), std::memory_order_relaxed);
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "unknown";
}

namespace kernels {

const CpuKernels& kernels_for(Isa isa) {
  CHRONOS_CHECK_MSG(int(isa) <= int(detect_isa()), "kernels_for: the CPU lacks {}", isa_name(isa));
  switch (isa) {
    case Isa::kAvx512: return cpu_has_avx512_bf16() ? kAvx512VnniBf16 : cpu_has_avx512_vnni() ? kAvx512Vnni : kAvx512;
    case Isa::kAvx2: return kAvx2;
    case Isa::kScalar: break;
  }
  return kScalar;
}

const CpuKernels& active_kernels() { return kernels_for(active_isa()); }

}  // namespace kernels
}  // namespace chronos
