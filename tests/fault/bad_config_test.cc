// Hostile and broken training configs (issue 8), through the loader gossipd uses
// (config::load_config_with_overrides: file, --set overrides, defaults, validation). Every case is
// an InvalidArgument naming the file, the line:column where the value was written (or the
// override's path) and the field. The real `gossipd run` on such files is in
// bad_input_cli_test.cc.
#include "config/load.h"
#include "config/train_config.h"
#include "tests/fault/fault_test_util.h"

namespace gossip::fault_testing {
namespace {

using config::load_config_with_overrides;
using config::TrainConfig;

// A small valid config; `extra` is appended (text format allows a field to be set once, so the
// cases add fields the base does not set, or replace a line).
const std::string kBase =
    "seed: 5\n"                                                        // 1
    "model { kind: LOGISTIC }\n"                                       // 2
    "data { dataset: SYNTHETIC_LOGISTIC num_examples: 256 dim: 8 }\n"  // 3
    "optimizer { kind: SGD lr: 0.1 }\n"                                // 4
    "batch_size: 16\n"                                                 // 5
    "iterations: 20\n";                                                // 6

struct Loaded {
  TempDir dir;
  std::string path;
  Result<TrainConfig> result = invalid_argument("not loaded");
  std::string message() const { return result.status().message(); }
};

std::unique_ptr<Loaded> load(const std::string& text, std::vector<std::string> overrides = {}) {
  auto l = std::make_unique<Loaded>();
  l->path = l->dir.write("train.pbtxt", text);
  l->result = load_config_with_overrides(l->path, overrides);
  return l;
}

void expect_rejected(const Loaded& l, const std::string& where, const std::string& what) {
  INFO("message: ", l.message());
  REQUIRE_FALSE(l.result.is_ok());
  CHECK(l.result.status().code() == StatusCode::kInvalidArgument);
  CHECK(contains(l.message(), l.path + where));
  CHECK(contains(l.message(), what));
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, from);
  return text.replace(at, from.size(), to);
}

TEST_CASE("control: the base config loads and gets its defaults") {
  auto l = load(kBase);
  REQUIRE_MESSAGE(l->result.is_ok(), l->message());
  CHECK(l->result->batch_size() > 0);
  CHECK(l->result->timeouts().deadline_ms() > 0);
}

TEST_CASE("unknown keys are rejected at their line and column, top level and nested") {
  expect_rejected(*load(kBase + "learning_rate: 0.1\n"), ":7:", "learning_rate");
  expect_rejected(*load(replace(kBase, "lr: 0.1", "lr: 0.1 momentun: 0.9")), ":4:", "momentun");
  expect_rejected(*load(kBase + "timeouts { deadline: 100 }\n"), ":7:", "deadline");
}

TEST_CASE("a missing or empty config file is an error naming it") {
  auto missing = load_config_with_overrides("/nonexistent/train.pbtxt", {});
  REQUIRE_FALSE(missing.is_ok());
  CHECK(contains(missing.status().message(), "/nonexistent/train.pbtxt"));
  expect_rejected(*load(""), "", "model.kind");
}

TEST_CASE("batch size zero is rejected naming the field, in the file and as an override") {
  expect_rejected(*load(replace(kBase, "batch_size: 16", "batch_size: 0")),
                  ":5:1:", "batch_size: must be > 0");
  auto o = load(kBase, {"batch_size=0"});
  REQUIRE_FALSE(o->result.is_ok());
  CHECK(contains(o->message(), "batch_size"));
  // A negative value does not fit the unsigned field: a parse error pointing at the value.
  expect_rejected(*load(replace(kBase, "batch_size: 16", "batch_size: -4")),
                  ":5:13:", "Expected integer");
  // A config without batch_size at all is refused the same way as 0.
  expect_rejected(*load(replace(kBase, "batch_size: 16\n", "")), "", "batch_size: must be > 0");
}

TEST_CASE("NaN, infinite and negative learning rates are rejected naming optimizer.lr") {
  for (const char* lr : {"nan", "inf", "-inf", "-0.1"}) {
    CAPTURE(lr);
    expect_rejected(*load(replace(kBase, "lr: 0.1", std::string("lr: ") + lr)),
                    ":4:", "optimizer.lr: must be finite and >= 0");
  }
  auto o = load(kBase, {"optimizer.lr=nan"});
  REQUIRE_FALSE(o->result.is_ok());
  CHECK(contains(o->message(), "optimizer.lr"));
}

TEST_CASE("a config without a learning rate is refused, lr 0 (pure gossip) is accepted") {
  expect_rejected(*load(replace(kBase, " lr: 0.1", "")), "", "optimizer.lr: required");
  expect_rejected(*load(replace(kBase, "optimizer { kind: SGD lr: 0.1 }\n", "")), "",
                  "optimizer.lr: required");
  auto zero = load(replace(kBase, "lr: 0.1", "lr: 0"));
  REQUIRE_MESSAGE(zero->result.is_ok(), zero->message());
  CHECK(zero->result->optimizer().lr() == 0);
  auto set = load(replace(kBase, " lr: 0.1", ""), {"optimizer.lr=0.2"});
  REQUIRE_MESSAGE(set->result.is_ok(), set->message());
  CHECK(set->result->optimizer().lr() == 0.2);
}

TEST_CASE("a bad value set on the command line is blamed on the command line, not the file") {
  // lr is written at 4:13 in the file; the override's -1 is what fails.
  auto o = load(kBase, {"optimizer.lr=-1"});
  REQUIRE_FALSE(o->result.is_ok());
  INFO("message: ", o->message());
  CHECK(contains(o->message(), "command line (optimizer.lr=-1): optimizer.lr: must be finite"));
  CHECK_FALSE(contains(o->message(), o->path));
  // A whole message set on the command line covers its fields.
  auto m = load(kBase, {"optimizer={ kind: SGD lr: -1 }"});
  REQUIRE_FALSE(m->result.is_ok());
  CHECK(contains(m->message(), "command line (optimizer={ kind: SGD lr: -1 }): optimizer.lr"));
  // An element of a repeated field set on the command line: hidden[1] is the override's 0, not
  // the file's 32.
  auto h = load(replace(kBase, "kind: LOGISTIC", "kind: MLP hidden: 16 hidden: 32"),
                {"model.hidden=16,0"});
  REQUIRE_FALSE(h->result.is_ok());
  CHECK(contains(h->message(), "command line (model.hidden=16,0): model.hidden[1]"));
  // An error in the file next to a harmless override still points into the file.
  expect_rejected(*load(replace(kBase, "batch_size: 16", "batch_size: 0"), {"optimizer.lr=0.2"}),
                  ":5:1:", "batch_size: must be > 0");
}

TEST_CASE("timeouts <= 0 are rejected naming the field") {
  for (const char* field : {"connect_ms", "deadline_ms", "heartbeat_ms"}) {
    CAPTURE(field);
    auto zero = load(kBase + "timeouts { " + field + ": 0 }\n");
    expect_rejected(*zero, ":7:", std::string("timeouts.") + field + ": must be > 0");
    // That error alone: a deadline of 0 once also reported the defaulted heartbeat (min(1000, 0)).
    CHECK_MESSAGE(zero->message().find('\n') == std::string::npos, zero->message());
    // Negative values do not fit the unsigned field: a parse error pointing at the value.
    expect_rejected(*load(kBase + "timeouts { " + field + ": -100 }\n"), ":7:", "Expected integer");
    auto o = load(kBase, {std::string("timeouts.") + field + "=0"});
    REQUIRE_FALSE(o->result.is_ok());
    CHECK(contains(o->message(), std::string("timeouts.") + field));
  }
  expect_rejected(*load(kBase + "timeouts { deadline_ms: 100 heartbeat_ms: 500 }\n"),
                  ":7:", "timeouts.heartbeat_ms: must not exceed timeouts.deadline_ms");
}

TEST_CASE(
    "overrides of fields that do not exist, or with values that do not parse, name the path") {
  for (const char* o : {"optimizer.learning_rate=0.1", "no.such.field=1", "batch_size=many",
                        "batch_size", "optimizer.kind=ADAGRAD"}) {
    CAPTURE(o);
    auto l = load(kBase, {o});
    REQUIRE_FALSE(l->result.is_ok());
    const std::string path = std::string(o).substr(0, std::string(o).find('='));
    CHECK(contains(l->message(), path));
  }
}

TEST_CASE("values out of range elsewhere are rejected too (a sample)") {
  expect_rejected(*load(replace(kBase, "kind: SGD", "kind: MOMENTUM momentum: 1.5")),
                  ":4:", "optimizer.momentum");
  expect_rejected(*load(replace(kBase, "dim: 8", "dim: 8 noise: -1")), ":3:", "data.noise");
  expect_rejected(*load(replace(kBase, "kind: LOGISTIC", "kind: TRANSFORMER")),
                  ":2:", "TRANSFORMER");
}

TEST_CASE("non-UTF-8 bytes outside strings are a syntax error with a position") {
  expect_rejected(*load(kBase + "\xff\xfe: 1\n"), ":7:", "");
}

TEST_CASE("CRLF line endings are accepted on purpose and errors keep their line numbers") {
  std::string dos;
  for (char c : replace(kBase, "batch_size: 16", "batch_size: 0")) {
    if (c == '\n') dos += '\r';
    dos += c;
  }
  expect_rejected(*load(dos), ":5:1:", "batch_size: must be > 0");
  std::string ok;
  for (char c : kBase) {
    if (c == '\n') ok += '\r';
    ok += c;
  }
  auto l = load(ok);
  CHECK_MESSAGE(l->result.is_ok(), l->message());
}

}  // namespace
}  // namespace gossip::fault_testing

namespace gossip::fault_testing {
namespace {

TEST_CASE("local steps, outer optimizer, compression: bad values name the field and its line") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"local_steps: 0\n", "local_steps: must be >= 1"},
      {"outer { kind: NESTEROV lr: nan }\n", "outer.lr: must be finite and > 0"},
      {"outer { kind: SGD lr: -1 }\n", "outer.lr: must be finite and > 0"},
      {"outer { kind: NESTEROV momentum: 1 }\n", "outer.momentum: must be in (0, 1)"},
      {"outer { kind: SGD momentum: 1.5 }\n", "outer.momentum: must be in [0, 1)"},
      {"outer { lr: 0.7 }\n", "outer.lr: set outer.kind SGD or NESTEROV"},
      {"compression { kind: INT8 block_floats: 100 }\n",
       "compression.block_floats: must be a power of two in [16, 65536]"},
      {"compression { kind: INT8 choco_step: 0 }\n", "compression.choco_step: must be in (0, 1]"},
      {"compression { kind: BF16 choco_step: 1.5 }\n", "compression.choco_step: must be in (0, 1]"},
      {"algorithm: ALLREDUCE compression { kind: INT8 choco_step: 0.5 }\n",
       "compression.choco_step: CHOCO-SGD is D-PSGD's"},
  };
  for (const auto& [extra, what] : cases) {
    CAPTURE(extra);
    expect_rejected(*load(kBase + extra), ":7:", what);
  }
  // An unknown compressor or outer optimizer is a parse error at its line and column.
  expect_rejected(*load(kBase + "compression { kind: ZSTD }\n"), ":7:", "ZSTD");
  expect_rejected(*load(kBase + "outer { kind: ADAM }\n"), ":7:", "ADAM");
  // AdamW's own fields: only on kind ADAMW, and in range.
  expect_rejected(*load(replace(kBase, "kind: SGD lr: 0.1", "kind: SGD lr: 0.1 beta1: 0.9")),
                  ":4:", "optimizer.beta1: set kind ADAMW");
  expect_rejected(*load(replace(kBase, "kind: SGD lr: 0.1", "kind: ADAMW lr: 0.1 beta2: 1")),
                  ":4:", "optimizer.beta2: must be in [0, 1)");
  expect_rejected(*load(replace(kBase, "kind: SGD lr: 0.1", "kind: ADAMW lr: 0.1 eps: 0")),
                  ":4:", "optimizer.eps: must be finite and > 0");
  // The same as overrides name the command line.
  auto o = load(kBase, {"local_steps=0"});
  REQUIRE_FALSE(o->result.is_ok());
  CHECK(contains(o->message(), "local_steps"));
  // Valid settings load, with DiLoCo's defaults for NESTEROV.
  auto ok = load(kBase + "local_steps: 50 outer { kind: NESTEROV } compression { kind: INT8 }\n");
  REQUIRE_MESSAGE(ok->result.is_ok(), ok->message());
  CHECK(ok->result->outer().lr() == 0.7);
  CHECK(ok->result->outer().momentum() == 0.9);
  CHECK(ok->result->compression().block_floats() == 256);
}

}  // namespace
}  // namespace gossip::fault_testing
