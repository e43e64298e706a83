// MXFP4 weights as Hugging Face checkpoints store them (gpt-oss: a weight X as the U8 pair X_blocks,
// X_scales), presented as one tensor X of dtype MXFP4 in GGUF's block layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chronos/safetensors.h"

namespace chronos::io_detail {

// One 32-weight block: HF's 16 bytes hold weight 2j in the low nibble of byte j and weight 2j+1 in
// the high one (transformers' convert_moe_packed_tensors); GGUF's 17 bytes are the E8M0 scale,
// then weight j in the low nibble of byte j and weight j+16 in the high one. The scale byte means
// the same in both (value = E2M1 * 2^(e - 127)), so it is copied as it is.
inline void hf_mxfp4_block_to_gguf(const uint8_t* hf_nibbles, uint8_t scale, uint8_t* gguf_block) {
  gguf_block[0] = scale;
  uint8_t* qs = gguf_block + 1;
  for (int j = 0; j < 8; ++j) {
    const uint8_t first = hf_nibbles[j];       // weights 2j, 2j+1
    const uint8_t second = hf_nibbles[8 + j];  // weights 16+2j, 17+2j
    qs[2 * j] = uint8_t((first & 0x0F) | (second << 4));
    qs[2 * j + 1] = uint8_t((first >> 4) | (second & 0xF0));
  }
}

// Finds every X_blocks / X_scales pair among `tensors`, checks it and returns the tensors X it
// presents: shape [..., rows, 32 * groups] of MXFP4, file and file_offset those of X_blocks.
// Blocks may be [..., rows, groups, 16] (as saved) or [..., rows, 16 * groups] (flattened), scales
// [..., rows, groups]. A U8 tensor named *_blocks or *_scales without its partner, a pair that is
// not U8, shapes that do not fit, or an X that is also stored plainly is an Error naming the tensor.
std::vector<std::shared_ptr<const MadeTensor>> present_hf_mxfp4(
    const std::map<std::string, const TensorInfo*, std::less<>>& tensors);

}  // namespace chronos::io_detail
