// UTF-8 helpers for the tokenizer: validation, lossy decoding, NFC, the GPT-2 byte table.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chronos::tokenizer_detail {

// Byte offset of the first byte that does not start or continue a valid UTF-8 sequence.
std::optional<size_t> find_invalid_utf8(std::string_view text);

// Length of the character starting at text[pos] (1 for an invalid lead byte).
size_t utf8_char_length(std::string_view text, size_t pos);

// Decodes the (valid) character at text[pos] and advances pos past it.
char32_t next_codepoint(std::string_view text, size_t& pos);

void append_utf8(std::string& out, char32_t cp);

// Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// True when `text` ends with U+FFFD.
bool ends_with_replacement_char(std::string_view text);

// Unicode NFC of valid UTF-8 text.
std::string nfc(std::string_view text);

// Unicode White_Space (Rust char::is_whitespace).
bool is_unicode_whitespace(char32_t cp);
// Letters and numbers (an approximation of Rust char::is_alphanumeric) or '_'.
bool is_word_char(char32_t cp);

// GPT-2 bytes_to_unicode: every byte maps to a printable code point.
struct ByteLevelTable {
  ByteLevelTable();
  std::array<std::string, 256> byte_to_utf8;     // UTF-8 of the code point for each byte
  std::array<int16_t, 0x144> codepoint_to_byte;  // -1 for code points outside the table
};
const ByteLevelTable& byte_level_table();

}  // namespace chronos::tokenizer_detail
