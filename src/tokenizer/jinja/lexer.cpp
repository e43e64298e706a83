// The template lexer: text between tags with whitespace control applied, and the tags' tokens.
#include "tokenizer/jinja/lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "chronos/error.h"

namespace chronos::jinja::detail {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Newlines as Jinja normalizes them (\r\n and \r become \n), without the one trailing newline
// that Jinja drops (keep_trailing_newline is off in transformers).
std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, std::string_view name) : source_(normalize_source(source)), name_(name) {}

  std::vector<Token> run() {
    while (pos_ < source_.size()) {
      const size_t start = find_tag_start(pos_);
      add_text(source_.substr(pos_, start - pos_));
      if (start == source_.size()) break;
      lex_tag(start);
    }
    tokens_.push_back({Token::Kind::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  enum class Trim { kNone, kNewline, kAll };

  [[noreturn]] void error(int line, const std::string& message) const {
    throw_error("{} line {}: {}", name_, line, message);
  }

  size_t find_tag_start(size_t from) const {
    for (size_t i = from; i + 1 < source_.size(); ++i) {
      if (source_[i] == '{' && (source_[i + 1] == '{' || source_[i + 1] == '%' || source_[i + 1] == '#')) return i;
    }
    return source_.size();
  }

  void advance_to(size_t to) {
    line_ += int(std::count(source_.begin() + long(pos_), source_.begin() + long(to), '\n'));
    pos_ = to;
  }

  // Text after a tag loses what the tag's right side trims ("-" all whitespace; trim_blocks one
  // newline after a block or comment); whether what was consumed ended a line matters to the
  // lstrip_blocks rule of the next tag.
  void add_text(std::string_view text) {
    const int line = line_;
    advance_to(pos_ + text.size());
    size_t consumed = 0;
    if (trim_next_ == Trim::kAll) {
      while (consumed < text.size() && is_space(text[consumed])) ++consumed;
    } else if (trim_next_ == Trim::kNewline && !text.empty() && text[0] == '\n') {
      consumed = 1;
    }
    const bool line_starting = consumed > 0 ? text[consumed - 1] == '\n' : at_template_start_;
    trim_next_ = Trim::kNone;
    at_template_start_ = false;
    text.remove_prefix(consumed);
    if (text.empty()) return;
    tokens_.push_back({Token::Kind::kText, std::string(text), line});
    last_text_line_starting_ = line_starting;
  }

  // The left side of a tag: "-" strips all whitespace before it; lstrip_blocks (blocks and
  // comments, not "+") strips the spaces and tabs between the start of its line and the tag.
  void trim_before(char modifier, bool is_block) {
    if (tokens_.empty() || tokens_.back().kind != Token::Kind::kText) return;
    std::string& text = tokens_.back().text;
    if (modifier == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (is_block && modifier != '+') {
      const size_t line_start = text.rfind('\n') + 1;  // 0 when there is no newline
      if (line_start == 0 && !last_text_line_starting_) return;
      if (std::all_of(text.begin() + long(line_start), text.end(), [](char c) { return is_space(c) && c != '\n'; })) {
        text.resize(line_start);
      }
    }
    if (text.empty()) tokens_.pop_back();
  }

  void lex_tag(size_t start) {
    const char kind = source_[start + 1];
    const char modifier = start + 2 < source_.size() ? source_[start + 2] : '\0';
    trim_before(modifier, kind != '{');
    at_template_start_ = false;
    if (kind == '#') {
      const size_t end = source_.find("#}", start + 2);
      if (end == std::string::npos) error(line_, "unclosed comment '{#'");
      trim_next_ = end > start + 2 && source_[end - 1] == '-' ? Trim::kAll : Trim::kNewline;
      advance_to(end + 2);
      return;
    }
    const bool variable = kind == '{';
    tokens_.push_back({variable ? Token::Kind::kVariableBegin : Token::Kind::kBlockBegin, "", line_});
    advance_to(start + 2 + (modifier == '-' || modifier == '+' ? 1 : 0));
    const size_t begin_index = tokens_.size();
    lex_tag_tokens(variable);
    if (!variable && tokens_.size() == begin_index + 2 && tokens_[begin_index].kind == Token::Kind::kName &&
        tokens_[begin_index].text == "raw") {
      lex_raw(begin_index);
    }
  }

  // The tokens of a tag up to its end marker ("}}" or "%}" outside brackets, with "-" or "+").
  void lex_tag_tokens(bool variable) {
    const char closer = variable ? '}' : '%';
    int depth = 0;
    const int tag_line = line_;
    while (true) {
      while (pos_ < source_.size() && is_space(source_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= source_.size()) error(tag_line, variable ? "unclosed tag '{{'" : "unclosed tag '{%'");
      const std::string_view rest = std::string_view(source_).substr(pos_);
      if (depth == 0) {
        const char end[3] = {closer, '}', '\0'};
        const bool plain = rest.starts_with(end);
        const bool stripped =
            rest.size() >= 3 && (rest[0] == '-' || (rest[0] == '+' && !variable)) && rest.substr(1).starts_with(end);
        if (plain || stripped) {
          tokens_.push_back({variable ? Token::Kind::kVariableEnd : Token::Kind::kBlockEnd, "", line_});
          trim_next_ = stripped && rest[0] == '-'                 ? Trim::kAll
                       : variable || (stripped && rest[0] == '+') ? Trim::kNone
                                                                  : Trim::kNewline;
          advance_to(pos_ + (plain ? 2 : 3));
          return;
        }
      }
      const char c = rest[0];
      if (is_name_start(c)) {
        size_t n = 1;
        while (n < rest.size() && is_name_char(rest[n])) ++n;
        push(Token::Kind::kName, std::string(rest.substr(0, n)), n);
      } else if (is_digit(c)) {
        lex_number(rest);
      } else if (c == '\'' || c == '"') {
        lex_string(rest);
      } else {
        static constexpr const char* kTwoChar[] = {"**", "//", "==", "!=", "<=", ">="};
        size_t n = 0;
        for (const char* op : kTwoChar) {
          if (rest.starts_with(op)) n = 2;
        }
        if (n == 0 && std::strchr("+-*/%~<>=()[]{},.:|", c) != nullptr) n = 1;
        if (n == 0) error(line_, fmt::format("unexpected character '{}' in a tag", c));
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        push(Token::Kind::kOperator, std::string(rest.substr(0, n)), n);
      }
    }
  }

  void push(Token::Kind kind, std::string text, size_t length) {
    tokens_.push_back({kind, std::move(text), line_});
    advance_to(pos_ + length);
  }

  void lex_number(std::string_view rest) {
    size_t n = 0;
    const auto digits = [&] {
      while (n < rest.size() && (is_digit(rest[n]) || rest[n] == '_')) ++n;
    };
    digits();
    bool is_float = false;
    if (n + 1 < rest.size() && rest[n] == '.' && is_digit(rest[n + 1])) {
      is_float = true;
      ++n;
      digits();
    }
    if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
      size_t e = n + 1;
      if (e < rest.size() && (rest[e] == '+' || rest[e] == '-')) ++e;
      if (e < rest.size() && is_digit(rest[e])) {
        is_float = true;
        n = e;
        digits();
      }
    }
    std::string text(rest.substr(0, n));
    std::erase(text, '_');
    push(is_float ? Token::Kind::kFloat : Token::Kind::kInteger, std::move(text), n);
  }

  // A string literal, unescaped as Python's unicode-escape codec does.
  void lex_string(std::string_view rest) {
    const char quote = rest[0];
    std::string value;
    size_t i = 1;
    while (true) {
      if (i >= rest.size()) error(line_, "unclosed string literal");
      const char c = rest[i];
      if (c == quote) break;
      if (c != '\\' || i + 1 >= rest.size()) {
        value += c;
        ++i;
        continue;
      }
      const char e = rest[i + 1];
      i += 2;
      switch (e) {
        case '\n': break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'n': value += '\n'; break;
        case 'r': value += '\r'; break;
        case 't': value += '\t'; break;
        case 'v': value += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t count = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t code = 0;
          for (size_t k = 0; k < count; ++k) {
            const int h = i + k < rest.size() ? hex_value(rest[i + k]) : -1;
            if (h < 0) error(line_, fmt::format("truncated \\{} escape in a string literal", e));
            code = code * 16 + char32_t(h);
          }
          if (code > 0x10FFFF) error(line_, "a \\U escape beyond U+10FFFF in a string literal");
          append_code_point(value, code);
          i += count;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t code = char32_t(e - '0');
            for (int k = 0; k < 2 && i < rest.size() && rest[i] >= '0' && rest[i] <= '7'; ++k, ++i) {
              code = code * 8 + char32_t(rest[i] - '0');
            }
            append_code_point(value, code);
          } else if (e == 'N') {
            error(line_, "\\N{...} escapes are not supported in string literals");
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    push(Token::Kind::kString, std::move(value), i + 1);
  }

  static void append_code_point(std::string& out, char32_t c) {
    if (c < 0x80) {
      out += char(c);
    } else if (c < 0x800) {
      out += char(0xC0 | (c >> 6));
      out += char(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += char(0xE0 | (c >> 12));
      out += char(0x80 | ((c >> 6) & 0x3F));
      out += char(0x80 | (c & 0x3F));
    } else {
      out += char(0xF0 | (c >> 18));
      out += char(0x80 | ((c >> 12) & 0x3F));
      out += char(0x80 | ((c >> 6) & 0x3F));
      out += char(0x80 | (c & 0x3F));
    }
  }

  // {% raw %}...{% endraw %}: the text between is data. Jinja's whitespace rules apply to both tags.
  void lex_raw(size_t begin_index) {
    tokens_.resize(begin_index - 1);  // drop {% raw %}
    size_t search = pos_;
    while (true) {
      const size_t start = source_.find("{%", search);
      if (start == std::string::npos) error(line_, "unclosed '{% raw %}' (no '{% endraw %}')");
      size_t i = start + 2;
      const char modifier = i < source_.size() ? source_[i] : '\0';
      if (modifier == '-' || modifier == '+') ++i;
      while (i < source_.size() && is_space(source_[i])) ++i;
      if (source_.compare(i, 6, "endraw") != 0) {
        search = start + 2;
        continue;
      }
      i += 6;
      while (i < source_.size() && is_space(source_[i])) ++i;
      char right = '\0';
      if (i < source_.size() && (source_[i] == '-' || source_[i] == '+')) right = source_[i++];
      if (source_.compare(i, 2, "%}") != 0) error(line_, "malformed '{% endraw %}'");
      add_text(std::string_view(source_).substr(pos_, start - pos_));
      trim_before(modifier, true);
      advance_to(i + 2);
      trim_next_ = right == '-' ? Trim::kAll : right == '+' ? Trim::kNone : Trim::kNewline;
      return;
    }
  }

  std::string source_;
  std::string_view name_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
  Trim trim_next_ = Trim::kNone;
  bool at_template_start_ = true;
  bool last_text_line_starting_ = true;
};

}  // namespace

std::vector<Token> lex(std::string_view source, std::string_view name) { return Lexer(source, name).run(); }

}  // namespace chronos::jinja::detail
