// The byte-level writer shared by write_safetensors and the .ctsr writer (io-internal).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

namespace chronos::io_detail {

// One run of the data buffer in file order: `bytes` from `data`, or zeros when data is nullptr.
struct DataPiece {
  std::string_view name;  // for error messages
  const void* data = nullptr;
  int64_t bytes = 0;
};

// Writes the little-endian header length, `header` and the pieces to "<path>.tmp", syncs it and
// renames it to `path`. Throws Error naming the file; a failure leaves no temporary file behind.
void write_safetensors_file(const std::filesystem::path& path, std::string_view header,
                            std::span<const DataPiece> pieces);

}  // namespace chronos::io_detail
