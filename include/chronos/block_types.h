// The one table of GGUF block weight types: sizes, GGUF id and name, the short-row fallback, which
// kernels exist and whether Chronos quantizes to the type. dtype.cpp, the GGUF reader, the CPU
// kernels (quant_layout.h) and the CUDA decoders (block_decode.h) all read it, so a new block type
// is one row here plus its decoders and kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>
#include <utility>

#include "chronos/dtype.h"

namespace chronos {

struct BlockType {
  DType dtype;
  std::string_view name;  // GGUF's (ggml.h), also dtype_name's
  uint32_t ggml_type;     // the type id a GGUF tensor info holds
  int block_elements;     // weights per block: 32, or 256 for the K-style super-blocks
  int block_bytes;
  int group_elements;  // weights that share one (mul, sub) pair: quant_layout.h, decode_factors
  // The type a row that is not whole blocks of this one is stored in, as GGUF writers do: a
  // 256-weight type on a row that is not a multiple of 256 falls back to a 32-weight type of at
  // least as many bits; a 32-weight type is its own.
  DType short_row_fallback;
  bool int8_kernels;  // the 8-bit-activation path (matmul_int8*); without it the f32 path serves
  bool cuda_kernels;  // block_decode.h decodes it for the CUDA kernels
  bool quantizer;     // Chronos writes it (pack --expert-type / --lowbit-type)
};

// Sizes and ids as ggml-common.h and ggml.h give them; docs/quantization.md draws each layout.
inline constexpr BlockType kBlockTypes[] = {
    // dtype        name      id  elems bytes group fallback      int8  cuda  quantizer
    {DType::kQ8_0, "Q8_0", 8, 32, 34, 32, DType::kQ8_0, true, true, true},
    {DType::kQ4_0, "Q4_0", 2, 32, 18, 32, DType::kQ4_0, true, true, true},
    {DType::kQ5_0, "Q5_0", 6, 32, 22, 32, DType::kQ5_0, true, true, true},
    {DType::kQ2_K, "Q2_K", 10, 256, 84, 16, DType::kQ4_0, true, true, true},
    {DType::kQ3_K, "Q3_K", 11, 256, 110, 16, DType::kQ4_0, true, true, true},
    {DType::kQ4_K, "Q4_K", 12, 256, 144, 32, DType::kQ5_0, true, true, true},
    {DType::kQ6_K, "Q6_K", 14, 256, 210, 16, DType::kQ8_0, true, true, true},
    {DType::kQ5_K, "Q5_K", 13, 256, 176, 32, DType::kQ5_0, true, true, true},
    {DType::kQ4_1, "Q4_1", 3, 32, 20, 32, DType::kQ4_1, true, true, true},
    {DType::kQ5_1, "Q5_1", 7, 32, 24, 32, DType::kQ5_1, true, true, true},
    {DType::kIQ4_NL, "IQ4_NL", 20, 32, 18, 32, DType::kIQ4_NL, true, true, true},
    {DType::kIQ4_XS, "IQ4_XS", 23, 256, 136, 32, DType::kIQ4_NL, true, true, true},
    {DType::kMXFP4, "MXFP4", 39, 32, 17, 32, DType::kMXFP4, true, true, true},
    // Read only (the grid types need an importance matrix to quantize well): no quantizer. A short
    // row falls back to IQ4_NL as llama.cpp's writer does.
    {DType::kIQ2_XXS, "IQ2_XXS", 16, 256, 66, 32, DType::kIQ4_NL, true, true, false},
    {DType::kIQ2_XS, "IQ2_XS", 17, 256, 74, 16, DType::kIQ4_NL, true, true, false},
    {DType::kIQ3_XXS, "IQ3_XXS", 18, 256, 98, 32, DType::kIQ4_NL, true, true, false},
    {DType::kIQ1_S, "IQ1_S", 19, 256, 50, 32, DType::kIQ4_NL, true, true, false},
    {DType::kIQ3_S, "IQ3_S", 21, 256, 110, 32, DType::kIQ4_NL, true, true, false},
    {DType::kIQ2_S, "IQ2_S", 22, 256, 82, 16, DType::kIQ4_NL, true, true, false},
    {DType::kIQ1_M, "IQ1_M", 29, 256, 56, 16, DType::kIQ4_NL, true, true, false},
};

inline constexpr size_t kNumBlockTypes = std::size(kBlockTypes);

// The row of a block type; nullptr for the whole-byte types.
constexpr const BlockType* find_block_type(DType dtype) {
  for (const BlockType& t : kBlockTypes)
    if (t.dtype == dtype) return &t;
  return nullptr;
}

constexpr bool is_block_type(DType dtype) { return find_block_type(dtype) != nullptr; }

// The row of a block type known at compile time (the kernels' template parameters).
template <DType D>
inline constexpr BlockType kBlockType = *find_block_type(D);

// Calls f.template operator()<D>() with the block type `dtype` as a constant, one instantiation per
// row of the table, so that kernels decode each type without a switch per block. Does nothing
// for a whole-byte type (callers check dtype_is_block first).
template <class F, size_t... I>
inline void with_block_type_of(DType dtype, F& f, std::index_sequence<I...>) {
  (void)((dtype == kBlockTypes[I].dtype ? (f.template operator()<kBlockTypes[I].dtype>(), true) : false) || ...);
}
template <class F>
inline void with_block_type(DType dtype, F&& f) {
  with_block_type_of(dtype, f, std::make_index_sequence<kNumBlockTypes>{});
}

}  // namespace chronos
