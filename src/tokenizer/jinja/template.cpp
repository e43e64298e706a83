// The evaluator: runs a parsed template over JSON variables with Jinja's scoping (loops and macros
// open scopes, if does not), within the render limits.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "chronos/error.h"
#include "chronos/jinja.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/builtins.h"

namespace chronos::jinja {
namespace detail {
namespace {

constexpr size_t kMaxRange = size_t{1} << 20;
// The stack a render may use: deep macro recursion over nested blocks ends in an error well
// before the thread's stack does (8 MiB by default, less for some worker threads).
constexpr ptrdiff_t kMaxStackBytes = ptrdiff_t{1} << 20;

class Evaluator {
 public:
  Evaluator(const Program& program, const RenderOptions& options)
      : program_(program), options_(options), limit_{options.limits.max_output_bytes} {}

  std::string render(const nlohmann::ordered_json& context) {
    if (!context.is_object()) throw_error("{}: the variables must be a JSON object", program_.name);
    frames_.push_back({{}, -1});
    stack_base_ = static_cast<const char*>(__builtin_frame_address(0));
    try {
      for (const auto& [key, value] : context.items()) frames_[0].variables.emplace_back(key, from_json(value));
      std::string out;
      exec_body(program_.body, out);
      return out;
    } catch (const RenderError& e) {
      throw_error("{} line {}: {}", program_.name, line_, e.message);
    }
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  struct Frame {
    std::vector<std::pair<std::string, Value>> variables;
    int parent;
  };

  // ---- scopes ----

  int push_frame(int parent) {
    frames_.push_back({{}, parent});
    frames_.back().variables.reserve(4);
    return int(frames_.size()) - 1;
  }

  // Runs `body` with `frame` as the current scope, then drops every frame opened since.
  template <typename Body>
  auto in_frame(int frame, Body&& body) {
    const int saved = std::exchange(current_, frame);
    const size_t depth = size_t(frame) + 1;
    struct Restore {
      Evaluator& self;
      int saved;
      size_t depth;
      ~Restore() {
        self.current_ = saved;
        self.frames_.resize(std::min(self.frames_.size(), depth - 1));
      }
    } restore{*this, saved, depth};
    return body();
  }

  void define(const std::string& name, Value value) {
    auto& variables = frames_[size_t(current_)].variables;
    for (auto& [k, v] : variables) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    variables.emplace_back(name, std::move(value));
  }

  Value lookup(const std::string& name) {
    for (int frame = current_; frame >= 0; frame = frames_[size_t(frame)].parent) {
      for (const auto& [k, v] : frames_[size_t(frame)].variables) {
        if (k == name) return v;
      }
    }
    if (Value global = global_function(name); global.is_function()) return global;
    return Undefined{fmt::format("'{}' is undefined", name)};
  }

  void step(int line) {
    line_ = line;
    if (++steps_ > options_.limits.max_steps) {
      fail(fmt::format("the template ran past {} steps (an endless or huge loop?)", options_.limits.max_steps));
    }
    if (stack_base_ - static_cast<const char*>(__builtin_frame_address(0)) > kMaxStackBytes) {
      fail("the template nests calls too deeply for the stack (runaway recursion?)");
    }
  }

  void emit(std::string& out, std::string_view text) const {
    if (out.size() + text.size() > options_.limits.max_output_bytes) {
      fail(fmt::format("the output grew past the limit of {} bytes", options_.limits.max_output_bytes));
    }
    out += text;
  }

  // ---- statements ----

  Flow exec_body(const Body& body, std::string& out) {
    for (const StmtPtr& stmt : body) {
      if (const Flow flow = exec(*stmt, out); flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& stmt, std::string& out) {
    step(stmt.line);
    switch (stmt.kind) {
      case Stmt::Kind::kText: emit(out, stmt.text); return Flow::kNormal;
      case Stmt::Kind::kOutput: emit(out, to_str(eval(*stmt.expr))); return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (const auto& [condition, body] : stmt.branches) {
          if (condition == nullptr || truthy(eval(*condition))) return exec_body(body, out);
        }
        return Flow::kNormal;
      case Stmt::Kind::kFor: exec_for(stmt, eval(*stmt.expr), out, 0); return Flow::kNormal;
      case Stmt::Kind::kSet: exec_set(stmt); return Flow::kNormal;
      case Stmt::Kind::kSetBlock: {
        std::string text;
        exec_body(stmt.body, text);
        define(stmt.targets[0], std::move(text));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro: define(stmt.name, make_macro(stmt, stmt.name)); return Flow::kNormal;
      case Stmt::Kind::kCallBlock: {
        const int call_site = current_;
        const Value caller = make_function("caller", [this, &stmt, call_site](const CallArgs& args) {
          return call_body(stmt, "caller", args, call_site);
        });
        // The macro receives the caller as a keyword argument its parameters need not name.
        const Value function = eval(*stmt.expr->operands[0]);
        CallArgs args = eval_arguments(*stmt.expr);
        args.keywords.emplace_back("caller", caller);
        if (!function.is_function()) fail("'{% call %}' needs a macro");
        emit(out, to_str(function.function().call(args)));
        return Flow::kNormal;
      }
      case Stmt::Kind::kFilterBlock: {
        std::string text;
        exec_body(stmt.body, text);
        const int frame = push_frame(current_);
        const Value result = in_frame(frame, [&] {
          define("caller", std::move(text));
          return eval(*stmt.expr);
        });
        emit(out, to_str(result));
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak: return Flow::kBreak;
      case Stmt::Kind::kContinue: return Flow::kContinue;
      case Stmt::Kind::kScope: return exec_body(stmt.body, out);
    }
    return Flow::kNormal;
  }

  void exec_set(const Stmt& stmt) {
    Value value = eval(*stmt.expr);
    if (!stmt.attribute.empty()) {
      const Value target = lookup(stmt.targets[0]);
      if (!target.is_object() || !target.object().is_namespace) {
        fail(fmt::format("cannot assign attribute on non-namespace object '{}'", stmt.targets[0]));
      }
      target.object().set(stmt.attribute, std::move(value));
      return;
    }
    if (stmt.targets.size() == 1) {
      define(stmt.targets[0], std::move(value));
      return;
    }
    const std::vector<Value> items = iterate(value);
    if (items.size() != stmt.targets.size()) {
      fail(fmt::format("cannot unpack {} values into {} names", items.size(), stmt.targets.size()));
    }
    for (size_t i = 0; i < items.size(); ++i) define(stmt.targets[i], items[i]);
  }

  void exec_for(const Stmt& stmt, const Value& iterable, std::string& out, int depth) {
    if (iterable.is_none()) fail("'NoneType' object is not iterable");
    std::vector<Value> items = iterate(iterable);
    const int outer = current_;
    if (stmt.condition != nullptr) {  // the filter runs before the loop, so loop.length counts what it keeps
      std::vector<Value> kept;
      for (Value& item : items) {
        const int frame = push_frame(outer);
        const bool keep = in_frame(frame, [&] {
          bind_targets(stmt.targets, item);
          return truthy(eval(*stmt.condition));
        });
        if (keep) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec_body(stmt.else_body, out);
      return;
    }
    const Value recurse =
        stmt.recursive ? Value(make_function("loop",
                                             [this, &stmt, depth](const CallArgs& args) {
                                               std::string inner;
                                               exec_for(stmt, args.positional.empty() ? Value() : args.positional[0],
                                                        inner, depth + 1);
                                               return Value(std::move(inner));
                                             }))
                       : Value();
    const int64_t length = int64_t(items.size());
    // One loop object per loop, its values updated in place each iteration (in this order).
    auto position = std::make_shared<int64_t>(0);
    ObjectPtr loop = make_object();
    for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth", "depth0",
                            "previtem", "nextitem", "cycle"}) {
      loop->items.emplace_back(key, Value());
    }
    loop->items[6].second = length;
    loop->items[7].second = int64_t{depth + 1};
    loop->items[8].second = int64_t{depth};
    loop->items[11].second = make_function("cycle", [position](const CallArgs& args) {
      if (args.positional.empty()) fail("no items for cycling given");
      return args.positional[size_t(*position) % args.positional.size()];
    });
    const Value loop_value = stmt.recursive ? recurse_with(loop, recurse) : Value(loop);
    for (int64_t i = 0; i < length; ++i) {
      step(stmt.line);
      *position = i;
      auto& values = loop->items;
      values[0].second = i + 1;
      values[1].second = i;
      values[2].second = length - i;
      values[3].second = length - i - 1;
      values[4].second = i == 0;
      values[5].second = i == length - 1;
      values[9].second = i > 0 ? items[size_t(i - 1)] : Value(Undefined{"there is no previous item"});
      values[10].second = i + 1 < length ? items[size_t(i + 1)] : Value(Undefined{"there is no next item"});
      const int frame = push_frame(outer);
      const Flow flow = in_frame(frame, [&] {
        bind_targets(stmt.targets, items[size_t(i)]);
        define("loop", loop_value);
        return exec_body(stmt.body, out);
      });
      if (flow == Flow::kBreak) break;
    }
  }

  // A recursive loop's "loop" is both the loop object and a function; calls go to the function.
  static Value recurse_with(const ObjectPtr& loop, const Value& recurse) {
    loop->items.emplace_back("__call__", recurse);
    return loop;
  }

  void bind_targets(const std::vector<std::string>& targets, const Value& item) {
    if (targets.size() == 1) {
      define(targets[0], item);
      return;
    }
    const std::vector<Value> parts = iterate(item);
    if (parts.size() != targets.size()) {
      fail(fmt::format("cannot unpack {} values into {} loop variables", parts.size(), targets.size()));
    }
    for (size_t i = 0; i < parts.size(); ++i) define(targets[i], parts[i]);
  }

  // ---- macros ----

  Value make_macro(const Stmt& stmt, const std::string& name) {
    return make_function(name, [this, &stmt](const CallArgs& args) { return call_body(stmt, stmt.name, args, 0); });
  }

  // Renders a macro's (or a call block's caller's) body with its parameters bound, in a scope
  // under `parent`: the template's top level for a macro, the call site for a caller.
  Value call_body(const Stmt& stmt, const std::string& name, const CallArgs& args, int parent) {
    if (++call_depth_ > options_.limits.max_call_depth) {
      fail(fmt::format("macro calls nest deeper than {} (runaway recursion?)", options_.limits.max_call_depth));
    }
    if (parent >= int(frames_.size())) fail(fmt::format("{}() called after its call block ended", name));
    const Parameters& parameters = stmt.parameters;
    if (args.positional.size() > parameters.names.size()) {
      fail(fmt::format("macro '{}' takes not more than {} argument(s)", name, parameters.names.size()));
    }
    for (const auto& [key, value] : args.keywords) {
      if (key != "caller" &&
          std::find(parameters.names.begin(), parameters.names.end(), key) == parameters.names.end()) {
        fail(fmt::format("macro '{}' takes no keyword argument '{}'", name, key));
      }
    }
    const int saved_line = line_;
    const int frame = push_frame(parent);
    std::string out;
    in_frame(frame, [&] {
      for (size_t i = 0; i < parameters.names.size(); ++i) {
        const Value* given = args.get(i, parameters.names[i]);
        if (given != nullptr) {
          define(parameters.names[i], *given);
        } else if (parameters.defaults[i] != nullptr) {
          define(parameters.names[i], eval(*parameters.defaults[i]));
        } else {
          define(parameters.names[i], Undefined{fmt::format("parameter '{}' was not provided", parameters.names[i])});
        }
      }
      for (const auto& [key, value] : args.keywords) {
        if (key == "caller") define(key, value);
      }
      exec_body(stmt.body, out);
      return 0;
    });
    line_ = saved_line;
    --call_depth_;
    return out;
  }

  // ---- expressions ----

  CallArgs eval_arguments(const Expr& expr) {
    CallArgs args;
    const size_t positional = expr.arguments.size() - expr.keywords.size();
    for (size_t i = 0; i < expr.arguments.size(); ++i) {
      Value value = eval(*expr.arguments[i]);
      if (i < positional) {
        args.positional.push_back(std::move(value));
      } else {
        args.keywords.emplace_back(expr.keywords[i - positional], std::move(value));
      }
    }
    return args;
  }

  Value eval(const Expr& expr) {
    step(expr.line);
    switch (expr.kind) {
      case Expr::Kind::kLiteral: return expr.literal;
      case Expr::Kind::kName: return lookup(expr.name);
      case Expr::Kind::kAttr: return get_attribute(eval(*expr.operands[0]), expr.name);
      case Expr::Kind::kItem: {
        const Value object = eval(*expr.operands[0]);
        return get_item(object, eval(*expr.operands[1]));
      }
      case Expr::Kind::kSlice: {
        const Value object = eval(*expr.operands[0]);
        Value bounds[3];
        for (int i = 0; i < 3; ++i) {
          if (expr.operands[size_t(i) + 1] != nullptr) bounds[i] = eval(*expr.operands[size_t(i) + 1]);
        }
        return get_slice(object, bounds[0], bounds[1], bounds[2]);
      }
      case Expr::Kind::kCall: return eval_call(expr);
      case Expr::Kind::kFilter: {
        const Value input = eval(*expr.operands[0]);
        const CallArgs args = eval_arguments(expr);
        line_ = expr.line;
        return call_filter(expr.name, input, args, limit_);
      }
      case Expr::Kind::kTest: {
        const Value input = eval(*expr.operands[0]);
        const CallArgs args = eval_arguments(expr);
        line_ = expr.line;
        return call_test(expr.name, input, args) != expr.negated;
      }
      case Expr::Kind::kNegate: {
        const Value value = eval(*expr.operands[0]);
        if (value.is_float()) return -value.as_double();
        return binary_operator("-", Value(int64_t{0}), value, limit_);
      }
      case Expr::Kind::kBinary: {
        const Value left = eval(*expr.operands[0]);
        const Value right = eval(*expr.operands[1]);
        line_ = expr.line;
        const Value result = binary_operator(expr.name, left, right, limit_);
        return expr.negated ? Value(!truthy(result)) : result;
      }
      case Expr::Kind::kAnd: {
        Value left = eval(*expr.operands[0]);
        return truthy(left) ? eval(*expr.operands[1]) : left;
      }
      case Expr::Kind::kOr: {
        Value left = eval(*expr.operands[0]);
        return truthy(left) ? left : eval(*expr.operands[1]);
      }
      case Expr::Kind::kNot: return !truthy(eval(*expr.operands[0]));
      case Expr::Kind::kCondition:
        if (truthy(eval(*expr.operands[1]))) return eval(*expr.operands[0]);
        return expr.operands[2] != nullptr ? eval(*expr.operands[2])
                                           : Value(Undefined{"the condition was false and there is no else"});
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        Array items;
        for (const ExprPtr& operand : expr.operands) items.push_back(eval(*operand));
        return expr.kind == Expr::Kind::kTuple ? make_tuple(std::move(items)) : Value(std::move(items));
      }
      case Expr::Kind::kDict: {
        ObjectPtr object = make_object();
        for (size_t i = 0; i + 1 < expr.operands.size(); i += 2) {
          const Value key = eval(*expr.operands[i]);
          object->set(to_str(key), eval(*expr.operands[i + 1]));
        }
        return object;
      }
    }
    return Value();
  }

  Value eval_call(const Expr& expr) {
    const Expr& callee = *expr.operands[0];
    if (callee.kind == Expr::Kind::kAttr) {  // a method: the object's own function member, else a builtin
      const Value object = eval(*callee.operands[0]);
      const CallArgs args = eval_arguments(expr);
      line_ = expr.line;
      if (object.is_object()) {
        if (const Value* member = object.object().find(callee.name); member != nullptr && member->is_function()) {
          return member->function().call(args);
        }
      }
      return call_method(object, callee.name, args, limit_);
    }
    const Value function = eval(callee);
    const CallArgs args = eval_arguments(expr);
    line_ = expr.line;
    if (function.is_function()) return function.function().call(args);
    if (function.is_object()) {  // a recursive loop called as loop(children)
      if (const Value* call = function.object().find("__call__"); call != nullptr && call->is_function()) {
        return call->function().call(args);
      }
    }
    if (function.is_undefined()) fail(std::get<Undefined>(function.data).name);
    fail(fmt::format("'{}' object is not callable", type_name(function)));
  }

  // ---- globals ----

  Value global_function(const std::string& name) {
    if (name == "range") return make_function(name, range);
    if (name == "namespace" || name == "dict") {
      const bool is_namespace = name == "namespace";
      return make_function(name, [is_namespace](const CallArgs& args) {
        ObjectPtr object = make_object(is_namespace);
        for (const Value& initial : args.positional) {
          if (!initial.is_object()) fail("namespace() and dict() take a dict or keyword arguments");
          for (const auto& [k, v] : initial.object().items) object->set(k, v);
        }
        for (const auto& [k, v] : args.keywords) object->set(k, v);
        return Value(object);
      });
    }
    if (name == "raise_exception") {
      return make_function(name, [](const CallArgs& args) -> Value {
        fail(args.positional.empty() ? "raise_exception() called" : to_str(args.positional[0]));
      });
    }
    if (name == "strftime_now") {
      return make_function(name, [this](const CallArgs& args) { return strftime_now(args); });
    }
    return Value();
  }

  static Value range(const CallArgs& args) {
    args.check("range", 3, {});
    if (args.positional.empty()) fail("range expected at least 1 argument, got 0");
    int64_t start = 0, stop = 0, step_size = 1;
    if (args.positional.size() == 1) {
      stop = args.positional[0].as_int();
    } else {
      start = args.positional[0].as_int();
      stop = args.positional[1].as_int();
      if (args.positional.size() == 3) step_size = args.positional[2].as_int();
    }
    if (step_size == 0) fail("range() arg 3 must not be zero");
    const double count = std::max(0.0, std::ceil((double(stop) - double(start)) / double(step_size)));
    if (count > double(kMaxRange)) fail(fmt::format("range() of {} items is past the limit of {}", count, kMaxRange));
    Array items;
    for (int64_t i = start; step_size > 0 ? i < stop : i > stop; i += step_size) items.emplace_back(i);
    return items;
  }

  Value strftime_now(const CallArgs& args) const {
    args.check("strftime_now", 1, {});
    if (args.positional.empty() || !args.positional[0].is_string()) fail("strftime_now() needs a format string");
    std::tm now{};
    if (options_.now) {
      now = *options_.now;
    } else {
      const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
      localtime_r(&t, &now);
    }
    const std::string& format = args.positional[0].str();
    if (format.empty()) return "";
    std::string out(format.size() * 4 + 64, '\0');
    const size_t n = std::strftime(out.data(), out.size(), format.c_str(), &now);
    if (n == 0) fail("strftime_now: the format produced nothing or too much");
    out.resize(n);
    return out;
  }

  const Program& program_;
  const RenderOptions& options_;
  SizeLimit limit_;
  std::vector<Frame> frames_;
  int current_ = 0;
  int line_ = 0;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  const char* stack_base_ = nullptr;
};

}  // namespace
}  // namespace detail

Template Template::parse(std::string_view source, std::string_view name) {
  Template result;
  result.program_ = detail::parse_program(source, name);
  return result;
}

std::string Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  return detail::Evaluator(*program_, options).render(context);
}

}  // namespace chronos::jinja
