// The parsed form of a template: expressions and statements, each with its source line.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chronos/jinja.h"
#include "tokenizer/jinja/value.h"

namespace chronos::jinja::detail {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kAttr,     // operands[0].name
    kItem,     // operands[0][operands[1]]
    kSlice,    // operands[0][operands[1]:operands[2]:operands[3]], each bound may be null
    kCall,     // operands[0](arguments)
    kFilter,   // operands[0] | name(arguments)
    kTest,     // operands[0] is [not] name(arguments)
    kNegate,   // -operands[0]
    kBinary,   // operands[0] name operands[1]: + - * / // % ** ~ == != < <= > >= in
    kAnd,
    kOr,
    kNot,
    kCondition,  // operands[0] if operands[1] else operands[2] (may be null)
    kList,
    kTuple,
    kDict,  // operands: key, value, key, value, ...
  };
  Kind kind;
  int line = 0;
  int depth = 1;  // of the tree under this node
  Value literal;
  std::string name;
  std::vector<ExprPtr> operands;
  // Calls, filters and tests: positional arguments, then keyword arguments named by keywords.
  std::vector<ExprPtr> arguments;
  std::vector<std::string> keywords;
  bool negated = false;  // "is not", "not in"
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// A macro's parameters (also a call block's).
struct Parameters {
  std::vector<std::string> names;
  std::vector<ExprPtr> defaults;  // one per name; null where there is none
};

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches: (condition, body); the else branch has a null condition
    kFor,          // for targets in expr [if condition] [recursive]: body [else: else_body]
    kSet,          // set targets = expr, or set targets[0].attribute = expr
    kSetBlock,     // set targets[0] %} body {% endset
    kMacro,        // macro name(parameters): body
    kCallBlock,    // call(parameters) expr: body (the caller)
    kFilterBlock,  // filter: expr is the filter chain over the body, applied to the name "caller"
    kBreak,
    kContinue,
    kScope,  // a body rendered in place ({% generation %})
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::string> targets;
  std::string attribute;
  std::string name;
  Parameters parameters;
  Body body;
  Body else_body;
  bool recursive = false;
};

struct Program {
  std::string name;  // for messages: "chat template"
  Body body;
};

// Parses `source` (Jinja syntax with transformers' environment: trim_blocks, lstrip_blocks, no
// trailing newline kept). Throws chronos::Error naming the line.
std::shared_ptr<const Program> parse_program(std::string_view source, std::string_view name);

}  // namespace chronos::jinja::detail
