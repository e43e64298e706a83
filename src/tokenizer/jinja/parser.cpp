// The template parser: Jinja's statement and expression grammar (its operator precedence) to the AST.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "chronos/error.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"

namespace chronos::jinja::detail {
namespace {

// Deeper nesting is refused while parsing: evaluating or destroying a deeper tree would recurse
// past the stack. Real chat templates nest a few levels.
constexpr int kMaxNesting = 128;    // parser recursion: blocks, parentheses, unary operators
constexpr int kMaxExprDepth = 256;  // an expression tree, chains of operators and filters included

ExprPtr make_expr(Expr::Kind kind, int line) {
  auto expr = std::make_unique<Expr>();
  expr->kind = kind;
  expr->line = line;
  return expr;
}

StmtPtr make_stmt(Stmt::Kind kind, int line) {
  auto stmt = std::make_unique<Stmt>();
  stmt->kind = kind;
  stmt->line = line;
  return stmt;
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string_view name) : tokens_(std::move(tokens)), name_(name) {}

  Body parse_template() {
    std::string unused_terminator;  // the top level ends only at the end of the template
    return parse_body({}, "", &unused_terminator);
  }

 private:
  // ---- tokens ----
  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(index_ + ahead, tokens_.size() - 1)]; }
  const Token& next() { return tokens_[std::min(index_++, tokens_.size() - 1)]; }
  bool at(Token::Kind kind, size_t ahead = 0) const { return peek(ahead).kind == kind; }
  bool at_operator(std::string_view op, size_t ahead = 0) const {
    return at(Token::Kind::kOperator, ahead) && peek(ahead).text == op;
  }
  bool at_name(std::string_view name, size_t ahead = 0) const {
    return at(Token::Kind::kName, ahead) && peek(ahead).text == name;
  }

  [[noreturn]] void error(int line, const std::string& message) const {
    throw_error("{} line {}: {}", name_, line, message);
  }

  std::string describe(const Token& token) const {
    switch (token.kind) {
      case Token::Kind::kEnd: return "the end of the template";
      case Token::Kind::kBlockEnd: return "'%}'";
      case Token::Kind::kVariableEnd: return "'}}'";
      case Token::Kind::kText: return "text";
      case Token::Kind::kString: return "a string";
      default: return "'" + token.text + "'";
    }
  }

  void expect_operator(std::string_view op) {
    if (!at_operator(op)) error(peek().line, fmt::format("expected '{}', found {}", op, describe(peek())));
    next();
  }
  std::string expect_name() {
    if (!at(Token::Kind::kName)) error(peek().line, fmt::format("expected a name, found {}", describe(peek())));
    return next().text;
  }
  void expect_block_end() {
    if (!at(Token::Kind::kBlockEnd)) error(peek().line, fmt::format("expected '%}}', found {}", describe(peek())));
    next();
  }

  // Every node that takes operands passes here: its depth is known when it is built.
  ExprPtr seal(ExprPtr expr) {
    int depth = 0;
    for (const ExprPtr& operand : expr->operands) {
      if (operand != nullptr) depth = std::max(depth, operand->depth);
    }
    for (const ExprPtr& argument : expr->arguments) depth = std::max(depth, argument->depth);
    expr->depth = depth + 1;
    if (expr->depth > kMaxExprDepth) {
      error(expr->line, fmt::format("an expression nests deeper than {} levels", kMaxExprDepth));
    }
    return expr;
  }

  struct NestingGuard {
    explicit NestingGuard(Parser& p) : parser(p) {
      if (++parser.nesting_ > kMaxNesting) {
        parser.error(parser.peek().line, fmt::format("the template nests deeper than {} levels", kMaxNesting));
      }
    }
    ~NestingGuard() { --parser.nesting_; }
    Parser& parser;
  };

  // ---- statements ----

  // Statements until a block tag whose name is one of `terminators`; the name is left unread
  // and returned in *found. `opener` names the open block for the error at the end of input.
  Body parse_body(std::initializer_list<std::string_view> terminators, std::string_view opener, std::string* found) {
    NestingGuard guard(*this);
    Body body;
    while (true) {
      const Token& token = peek();
      switch (token.kind) {
        case Token::Kind::kText: {
          auto stmt = make_stmt(Stmt::Kind::kText, token.line);
          stmt->text = next().text;
          body.push_back(std::move(stmt));
          break;
        }
        case Token::Kind::kVariableBegin: {
          next();
          auto stmt = make_stmt(Stmt::Kind::kOutput, token.line);
          stmt->expr = parse_tuple(true);
          if (!at(Token::Kind::kVariableEnd)) {
            error(peek().line, fmt::format("expected '}}}}', found {}", describe(peek())));
          }
          next();
          body.push_back(std::move(stmt));
          break;
        }
        case Token::Kind::kBlockBegin: {
          const Token& keyword = peek(1);
          if (keyword.kind == Token::Kind::kName &&
              std::find(terminators.begin(), terminators.end(), keyword.text) != terminators.end()) {
            next();
            *found = next().text;
            return body;
          }
          next();
          body.push_back(parse_statement());
          break;
        }
        case Token::Kind::kEnd:
          if (terminators.size() == 0) return body;
          error(token.line, fmt::format("unexpected end of the template: '{}' is not closed", opener));
        default: error(token.line, fmt::format("unexpected {}", describe(token)));
      }
    }
  }

  StmtPtr parse_statement() {
    const Token& keyword = peek();
    if (keyword.kind != Token::Kind::kName)
      error(keyword.line, fmt::format("expected a statement, found {}", describe(keyword)));
    const std::string& word = keyword.text;
    if (word == "if") return parse_if();
    if (word == "for") return parse_for();
    if (word == "set") return parse_set();
    if (word == "macro") return parse_macro();
    if (word == "call") return parse_call_block();
    if (word == "filter") return parse_filter_block();
    if (word == "generation") return parse_scope("generation", "endgeneration");
    if (word == "break" || word == "continue") {
      next();
      if (loop_depth_ == 0) error(keyword.line, fmt::format("'{}' outside a loop", word));
      expect_block_end();
      return make_stmt(word == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, keyword.line);
    }
    static constexpr std::string_view kUnsupported[] = {"include", "import",     "from", "extends", "block",
                                                        "with",    "autoescape", "do",   "trans",   "pluralize"};
    if (std::find(std::begin(kUnsupported), std::end(kUnsupported), word) != std::end(kUnsupported)) {
      error(keyword.line, fmt::format("'{{% {} %}}' is not supported in chat templates", word));
    }
    if (word.starts_with("end") || word == "elif" || word == "else") {
      error(keyword.line, fmt::format("unexpected '{}' (no open block it closes)", word));
    }
    error(keyword.line, fmt::format("unknown statement '{}'", word));
  }

  StmtPtr parse_if() {
    auto stmt = make_stmt(Stmt::Kind::kIf, next().line);
    std::string found = "elif";
    while (found == "elif") {
      ExprPtr condition = parse_tuple(true);
      expect_block_end();
      Body body = parse_body({"elif", "else", "endif"}, "if", &found);
      stmt->branches.emplace_back(std::move(condition), std::move(body));
    }
    if (found == "else") {
      expect_block_end();
      Body body = parse_body({"endif"}, "if", &found);
      stmt->branches.emplace_back(nullptr, std::move(body));
    }
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_for() {
    auto stmt = make_stmt(Stmt::Kind::kFor, next().line);
    stmt->targets = parse_targets();
    if (!at_name("in")) error(peek().line, fmt::format("expected 'in' in a for loop, found {}", describe(peek())));
    next();
    stmt->expr = parse_tuple(false);
    if (at_name("if")) {
      next();
      stmt->condition = parse_expression();
    }
    if (at_name("recursive")) {
      next();
      stmt->recursive = true;
    }
    expect_block_end();
    std::string found;
    ++loop_depth_;
    stmt->body = parse_body({"else", "endfor"}, "for", &found);
    --loop_depth_;
    if (found == "else") {
      expect_block_end();
      stmt->else_body = parse_body({"endfor"}, "for", &found);
    }
    expect_block_end();
    return stmt;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> targets;
    const bool parenthesized = at_operator("(");
    if (parenthesized) next();
    targets.push_back(expect_name());
    while (at_operator(",")) {
      next();
      targets.push_back(expect_name());
    }
    if (parenthesized) expect_operator(")");
    return targets;
  }

  StmtPtr parse_set() {
    const int line = next().line;
    std::vector<std::string> targets = parse_targets();
    std::string attribute;
    if (targets.size() == 1 && at_operator(".")) {
      next();
      attribute = expect_name();
    }
    if (at(Token::Kind::kBlockEnd)) {
      if (targets.size() != 1 || !attribute.empty()) error(line, "a block set takes one plain name");
      next();
      auto stmt = make_stmt(Stmt::Kind::kSetBlock, line);
      stmt->targets = std::move(targets);
      std::string found;
      stmt->body = parse_body({"endset"}, "set", &found);
      expect_block_end();
      return stmt;
    }
    if (at_operator("|")) error(line, "a filtered block set ('{% set x | filter %}') is not supported");
    expect_operator("=");
    auto stmt = make_stmt(Stmt::Kind::kSet, line);
    stmt->targets = std::move(targets);
    stmt->attribute = std::move(attribute);
    stmt->expr = parse_tuple(true);
    expect_block_end();
    return stmt;
  }

  Parameters parse_parameters() {
    Parameters parameters;
    expect_operator("(");
    while (!at_operator(")")) {
      parameters.names.push_back(expect_name());
      if (at_operator("=")) {
        next();
        parameters.defaults.push_back(parse_expression());
      } else {
        parameters.defaults.push_back(nullptr);
      }
      if (!at_operator(",")) break;
      next();
    }
    expect_operator(")");
    return parameters;
  }

  StmtPtr parse_macro() {
    auto stmt = make_stmt(Stmt::Kind::kMacro, next().line);
    stmt->name = expect_name();
    stmt->parameters = parse_parameters();
    expect_block_end();
    std::string found;
    const int saved_loops = std::exchange(loop_depth_, 0);
    stmt->body = parse_body({"endmacro"}, "macro", &found);
    loop_depth_ = saved_loops;
    if (at(Token::Kind::kName)) next();  // {% endmacro name %}
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_call_block() {
    auto stmt = make_stmt(Stmt::Kind::kCallBlock, next().line);
    if (at_operator("(")) stmt->parameters = parse_parameters();
    stmt->expr = parse_expression();
    if (stmt->expr->kind != Expr::Kind::kCall) error(stmt->line, "'{% call %}' needs a macro call");
    expect_block_end();
    std::string found;
    stmt->body = parse_body({"endcall"}, "call", &found);
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_filter_block() {
    auto stmt = make_stmt(Stmt::Kind::kFilterBlock, next().line);
    ExprPtr chain = make_expr(Expr::Kind::kName, stmt->line);
    chain->name = "caller";
    do {
      if (at_operator("|")) next();
      chain = parse_filter(std::move(chain));
    } while (at_operator("|"));
    stmt->expr = std::move(chain);
    expect_block_end();
    std::string found;
    stmt->body = parse_body({"endfilter"}, "filter", &found);
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_scope(std::string_view open, std::string_view close) {
    auto stmt = make_stmt(Stmt::Kind::kScope, next().line);
    expect_block_end();
    std::string found;
    stmt->body = parse_body({close}, open, &found);
    expect_block_end();
    return stmt;
  }

  // ---- expressions ----

  // An expression, or a tuple of them without parentheses ("a, b").
  ExprPtr parse_tuple(bool with_condition) {
    const int line = peek().line;
    ExprPtr first = with_condition ? parse_expression() : parse_or();
    if (!at_operator(",")) return first;
    auto tuple = make_expr(Expr::Kind::kTuple, line);
    tuple->operands.push_back(std::move(first));
    while (at_operator(",")) {
      next();
      if (at(Token::Kind::kBlockEnd) || at(Token::Kind::kVariableEnd) || at_operator(")")) break;
      tuple->operands.push_back(with_condition ? parse_expression() : parse_or());
    }
    return seal(std::move(tuple));
  }

  ExprPtr parse_expression() {
    NestingGuard guard(*this);
    ExprPtr value = parse_or();
    while (at_name("if")) {
      auto condition = make_expr(Expr::Kind::kCondition, next().line);
      condition->operands.push_back(std::move(value));
      condition->operands.push_back(parse_or());
      if (at_name("else")) {
        next();
        condition->operands.push_back(parse_expression());
      } else {
        condition->operands.push_back(nullptr);
      }
      value = seal(std::move(condition));
    }
    return value;
  }

  ExprPtr binary(Expr::Kind kind, std::string op, ExprPtr left, ExprPtr right, int line) {
    auto expr = make_expr(kind, line);
    expr->name = std::move(op);
    expr->operands.push_back(std::move(left));
    expr->operands.push_back(std::move(right));
    return seal(std::move(expr));
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      const int line = next().line;
      left = binary(Expr::Kind::kOr, "or", std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      const int line = next().line;
      left = binary(Expr::Kind::kAnd, "and", std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      NestingGuard guard(*this);
      auto expr = make_expr(Expr::Kind::kNot, next().line);
      expr->operands.push_back(parse_not());
      return seal(std::move(expr));
    }
    return parse_compare();
  }

  // Comparisons chain as Python's do: a < b < c is (a < b) and (b < c), b evaluated twice.
  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    ExprPtr result;
    const Expr* previous = nullptr;
    while (true) {
      std::string op;
      bool negated = false;
      const int line = peek().line;
      if (at(Token::Kind::kOperator) && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                         peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (at_name("in")) {
        next();
        op = "in";
      } else if (at_name("not") && at_name("in", 1)) {
        next();
        next();
        op = "in";
        negated = true;
      } else {
        break;
      }
      ExprPtr right = parse_math1();
      ExprPtr lhs = previous == nullptr ? std::move(left) : clone(*previous);
      previous = right.get();
      auto comparison = binary(Expr::Kind::kBinary, op, std::move(lhs), std::move(right), line);
      comparison->negated = negated;
      result = result == nullptr ? std::move(comparison)
                                 : binary(Expr::Kind::kAnd, "and", std::move(result), std::move(comparison), line);
    }
    return result != nullptr ? std::move(result) : std::move(left);
  }

  static ExprPtr clone(const Expr& expr) {
    auto copy = make_expr(expr.kind, expr.line);
    copy->depth = expr.depth;
    copy->literal = expr.literal;
    copy->name = expr.name;
    copy->keywords = expr.keywords;
    copy->negated = expr.negated;
    for (const auto& operand : expr.operands) copy->operands.push_back(operand ? clone(*operand) : nullptr);
    for (const auto& argument : expr.arguments) copy->arguments.push_back(clone(*argument));
    return copy;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (at_operator("+") || at_operator("-")) {
      const Token& op = next();
      left = binary(Expr::Kind::kBinary, op.text, std::move(left), parse_concat(), op.line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (at_operator("~")) {
      const Token& op = next();
      left = binary(Expr::Kind::kBinary, op.text, std::move(left), parse_math2(), op.line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (at_operator("*") || at_operator("/") || at_operator("//") || at_operator("%")) {
      const Token& op = next();
      left = binary(Expr::Kind::kBinary, op.text, std::move(left), parse_pow(), op.line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (at_operator("**")) {
      const Token& op = next();
      left = binary(Expr::Kind::kBinary, op.text, std::move(left), parse_unary(true), op.line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    NestingGuard guard(*this);
    ExprPtr node;
    if (at_operator("-")) {
      node = make_expr(Expr::Kind::kNegate, next().line);
      node->operands.push_back(parse_unary(false));
      node = seal(std::move(node));
    } else if (at_operator("+")) {
      next();
      node = parse_unary(false);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& token = peek();
    switch (token.kind) {
      case Token::Kind::kName: {
        next();
        auto expr = make_expr(Expr::Kind::kLiteral, token.line);
        if (token.text == "true" || token.text == "True") {
          expr->literal = true;
        } else if (token.text == "false" || token.text == "False") {
          expr->literal = false;
        } else if (token.text == "none" || token.text == "None") {
          expr->literal = None{};
        } else {
          expr->kind = Expr::Kind::kName;
          expr->name = token.text;
        }
        return expr;
      }
      case Token::Kind::kString: {
        std::string text;
        while (at(Token::Kind::kString)) text += next().text;  // adjacent literals concatenate
        auto expr = make_expr(Expr::Kind::kLiteral, token.line);
        expr->literal = std::move(text);
        return expr;
      }
      case Token::Kind::kInteger: {
        next();
        auto expr = make_expr(Expr::Kind::kLiteral, token.line);
        int64_t value = 0;
        const auto [ptr, ec] = std::from_chars(token.text.data(), token.text.data() + token.text.size(), value);
        if (ec != std::errc()) error(token.line, fmt::format("integer literal {} is out of range", token.text));
        expr->literal = value;
        return expr;
      }
      case Token::Kind::kFloat: {
        next();
        auto expr = make_expr(Expr::Kind::kLiteral, token.line);
        expr->literal = std::strtod(token.text.c_str(), nullptr);
        return expr;
      }
      case Token::Kind::kOperator:
        if (token.text == "(") return parse_parenthesized();
        if (token.text == "[") return parse_list();
        if (token.text == "{") return parse_dict();
        [[fallthrough]];
      default: error(token.line, fmt::format("unexpected {} in an expression", describe(token)));
    }
  }

  ExprPtr parse_parenthesized() {
    const int line = next().line;
    if (at_operator(")")) {
      next();
      return make_expr(Expr::Kind::kTuple, line);
    }
    ExprPtr first = parse_expression();
    if (at_operator(")")) {
      next();
      return first;
    }
    auto tuple = make_expr(Expr::Kind::kTuple, line);
    tuple->operands.push_back(std::move(first));
    while (at_operator(",")) {
      next();
      if (at_operator(")")) break;
      tuple->operands.push_back(parse_expression());
    }
    expect_operator(")");
    return seal(std::move(tuple));
  }

  ExprPtr parse_list() {
    auto list = make_expr(Expr::Kind::kList, next().line);
    while (!at_operator("]")) {
      list->operands.push_back(parse_expression());
      if (!at_operator(",")) break;
      next();
    }
    expect_operator("]");
    return seal(std::move(list));
  }

  ExprPtr parse_dict() {
    auto dict = make_expr(Expr::Kind::kDict, next().line);
    while (!at_operator("}")) {
      dict->operands.push_back(parse_expression());
      expect_operator(":");
      dict->operands.push_back(parse_expression());
      if (!at_operator(",")) break;
      next();
    }
    expect_operator("}");
    return seal(std::move(dict));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (at_operator(".")) {
        const int line = next().line;
        if (at(Token::Kind::kInteger)) {  // x.0 is x[0]
          auto item = make_expr(Expr::Kind::kItem, line);
          item->operands.push_back(std::move(node));
          item->operands.push_back(parse_primary());
          node = seal(std::move(item));
          continue;
        }
        auto attr = make_expr(Expr::Kind::kAttr, line);
        attr->name = expect_name();
        attr->operands.push_back(std::move(node));
        node = seal(std::move(attr));
      } else if (at_operator("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_operator("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const int line = next().line;
    ExprPtr bounds[3];
    int part = 0;
    bool slice = false;
    while (!at_operator("]")) {
      if (at_operator(":")) {
        next();
        slice = true;
        if (++part > 2) error(line, "a slice takes at most three parts");
        continue;
      }
      if (bounds[part] != nullptr) error(peek().line, fmt::format("unexpected {} in a subscript", describe(peek())));
      bounds[part] = parse_expression();
    }
    next();
    if (!slice) {
      if (bounds[0] == nullptr) error(line, "an empty subscript '[]'");
      auto item = make_expr(Expr::Kind::kItem, line);
      item->operands.push_back(std::move(node));
      item->operands.push_back(std::move(bounds[0]));
      return seal(std::move(item));
    }
    auto expr = make_expr(Expr::Kind::kSlice, line);
    expr->operands.push_back(std::move(node));
    for (auto& bound : bounds) expr->operands.push_back(std::move(bound));
    return seal(std::move(expr));
  }

  // Arguments of a call, filter or test: positional ones, then name=value ones.
  void parse_arguments(Expr& expr) {
    expect_operator("(");
    std::vector<ExprPtr> keyword_values;
    while (!at_operator(")")) {
      if (at_operator("*") || at_operator("**"))
        error(peek().line, "'*args' and '**kwargs' in calls are not supported");
      if (at(Token::Kind::kName) && at_operator("=", 1)) {
        expr.keywords.push_back(next().text);
        next();
        keyword_values.push_back(parse_expression());
      } else {
        if (!keyword_values.empty()) error(peek().line, "a positional argument after a keyword argument");
        expr.arguments.push_back(parse_expression());
      }
      if (!at_operator(",")) break;
      next();
    }
    expect_operator(")");
    for (auto& value : keyword_values) expr.arguments.push_back(std::move(value));
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto call = make_expr(Expr::Kind::kCall, peek().line);
    call->operands.push_back(std::move(callee));
    parse_arguments(*call);
    return seal(std::move(call));
  }

  ExprPtr parse_filter(ExprPtr input) {
    auto filter = make_expr(Expr::Kind::kFilter, peek().line);
    filter->name = expect_name();
    if (!is_filter_name(filter->name)) error(filter->line, fmt::format("unknown filter '{}'", filter->name));
    filter->operands.push_back(std::move(input));
    if (at_operator("(")) parse_arguments(*filter);
    return seal(std::move(filter));
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (at_operator("|")) {
        next();
        node = parse_filter(std::move(node));
      } else if (at_name("is")) {
        node = parse_test(std::move(node));
      } else if (at_operator("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_test(ExprPtr input) {
    auto test = make_expr(Expr::Kind::kTest, next().line);
    if (at_name("not")) {
      next();
      test->negated = true;
    }
    test->name = expect_name();
    if (!is_test_name(test->name)) error(test->line, fmt::format("unknown test '{}'", test->name));
    test->operands.push_back(std::move(input));
    if (at_operator("(")) {
      parse_arguments(*test);
    } else if (takes_bare_argument()) {
      test->arguments.push_back(parse_postfix(parse_primary()));
    }
    return seal(std::move(test));
  }

  // "x is divisibleby 3", "x is sameas none": a test's single argument without parentheses.
  bool takes_bare_argument() const {
    const Token& token = peek();
    if (token.kind == Token::Kind::kString || token.kind == Token::Kind::kInteger ||
        token.kind == Token::Kind::kFloat) {
      return true;
    }
    if (token.kind == Token::Kind::kOperator) return token.text == "[" || token.text == "{";
    if (token.kind != Token::Kind::kName) return false;
    static constexpr std::string_view kStop[] = {"else", "or", "and", "if", "in", "is", "not", "recursive"};
    return std::find(std::begin(kStop), std::end(kStop), token.text) == std::end(kStop);
  }

  std::vector<Token> tokens_;
  std::string_view name_;
  size_t index_ = 0;
  int nesting_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

std::shared_ptr<const Program> parse_program(std::string_view source, std::string_view name) {
  auto program = std::make_shared<Program>();
  program->name = std::string(name);
  program->body = Parser(lex(source, program->name), program->name).parse_template();
  return program;
}

}  // namespace chronos::jinja::detail
