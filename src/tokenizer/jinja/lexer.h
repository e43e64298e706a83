// Splits a template into text and the tokens of its tags, with Jinja's whitespace control applied
// to the text (trim_blocks, lstrip_blocks, "-" and "+" markers) as transformers configures it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace chronos::jinja::detail {

struct Token {
  enum class Kind {
    kText,
    kVariableBegin,  // {{
    kVariableEnd,    // }}
    kBlockBegin,     // {%
    kBlockEnd,       // %}
    kName,
    kString,  // text holds the unescaped value
    kInteger,
    kFloat,
    kOperator,
    kEnd,
  };
  Kind kind;
  std::string text;
  int line;
};

// Throws chronos::Error("<name> line N: ...") for an unclosed tag, comment or string.
std::vector<Token> lex(std::string_view source, std::string_view name);

}  // namespace chronos::jinja::detail
