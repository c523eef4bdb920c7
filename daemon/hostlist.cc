// Slurm's host lists and task layouts. The grammar is Slurm's own (src/common/hostlist.c): we
// expand what srun writes, and say where a hand-written list goes wrong rather than guess.
#include "daemon/hostlist.h"

#include <cstdint>

namespace gossip::daemon {
namespace {

constexpr std::size_t kMaxDigits = 18;  // fits in uint64 with room for the range arithmetic

// A decimal number as written: its value, and its text (for the zero padding of ranges).
struct Number {
  std::uint64_t value = 0;
  std::string text;
};

// A cursor over one variable's text that builds errors pointing at a position.
class Cursor {
 public:
  Cursor(std::string_view text, std::string_view variable) : text_(text), variable_(variable) {}

  bool done() const { return pos_ >= text_.size(); }
  char peek() const { return done() ? '\0' : text_[pos_]; }
  std::size_t pos() const { return pos_; }
  void advance() { ++pos_; }

  // InvalidArgument at `at` (0-based; reported 1-based).
  Status error_at(std::size_t at, const std::string& what) const {
    return invalid_argument(std::string(variable_) + "=\"" + std::string(text_) + "\": position " +
                            std::to_string(at + 1) + ": " + what);
  }
  Status error(const std::string& what) const { return error_at(pos_, what); }

  Result<Number> number(const char* what) {
    const std::size_t start = pos_;
    while (!done() && peek() >= '0' && peek() <= '9') advance();
    if (pos_ == start) {
      return error(done() ? std::string("expected ") + what + ", got the end"
                          : std::string("expected ") + what + ", got '" + peek() + "'");
    }
    if (pos_ - start > kMaxDigits) {
      return error_at(start, "number of more than " + std::to_string(kMaxDigits) + " digits");
    }
    std::string digits(text_.substr(start, pos_ - start));
    return Number{std::stoull(digits), digits};
  }

 private:
  std::string_view text_;
  std::string_view variable_;
  std::size_t pos_ = 0;
};

std::string padded(std::uint64_t value, std::size_t width) {
  std::string s = std::to_string(value);
  return s.size() >= width ? s : std::string(width - s.size(), '0') + s;
}

// One bracket group after its '[' up to and including its ']': the numbers it stands for, as
// text. `room` is how many more hosts the list may still take.
Result<std::vector<std::string>> bracket_group(Cursor& c, std::size_t room) {
  std::vector<std::string> out;
  for (;;) {
    const std::size_t start = c.pos();
    GOSSIP_ASSIGN_OR_RETURN(auto lo, c.number("a number"));
    std::uint64_t hi = lo.value;
    if (c.peek() == '-') {
      c.advance();
      GOSSIP_ASSIGN_OR_RETURN(auto h, c.number("the end of the range"));
      hi = h.value;
      if (hi < lo.value) {
        return c.error_at(start, "range " + lo.text + "-" + h.text + " runs backwards");
      }
    }
    if (hi - lo.value >= room - std::min(room, out.size())) {
      return c.error_at(start, "more than " + std::to_string(kMaxHostlistHosts) + " hosts");
    }
    for (std::uint64_t v = lo.value; v <= hi; ++v) out.push_back(padded(v, lo.text.size()));
    if (c.peek() == ',') {
      c.advance();
      continue;
    }
    if (c.peek() == ']') {
      c.advance();
      return out;
    }
    return c.error(c.done() ? "'[' is not closed"
                            : std::string("expected ',', '-' or ']', got '") + c.peek() + "'");
  }
}

// One entry (up to a top-level ',' or the end), appended to `hosts`.
Status entry(Cursor& c, std::vector<std::string>& hosts) {
  std::vector<std::string> names{""};  // the Cartesian product built so far
  const std::size_t start = c.pos();
  while (!c.done() && c.peek() != ',') {
    const char ch = c.peek();
    if (ch == ']') return c.error("']' without '['");
    if (ch == ' ' || ch == '\t' || ch == '\n') return c.error("white space in a host name");
    if (ch != '[') {
      for (std::string& n : names) n += ch;
      c.advance();
      continue;
    }
    c.advance();
    const std::size_t room = kMaxHostlistHosts - hosts.size();
    GOSSIP_ASSIGN_OR_RETURN(std::vector<std::string> group, bracket_group(c, room));
    if (names.size() * group.size() > room) {
      return c.error_at(start, "more than " + std::to_string(kMaxHostlistHosts) + " hosts");
    }
    std::vector<std::string> product;
    product.reserve(names.size() * group.size());
    for (const std::string& n : names) {
      for (const std::string& g : group) product.push_back(n + g);
    }
    names = std::move(product);
  }
  if (c.pos() == start) return c.error("empty host name");
  if (hosts.size() + names.size() > kMaxHostlistHosts) {
    return c.error_at(start, "more than " + std::to_string(kMaxHostlistHosts) + " hosts");
  }
  hosts.insert(hosts.end(), names.begin(), names.end());
  return Status::ok();
}

}  // namespace

Result<std::vector<std::string>> expand_hostlist(std::string_view text, std::string_view variable) {
  Cursor c(text, variable);
  if (text.empty()) return c.error("empty host list");
  std::vector<std::string> hosts;
  for (;;) {
    GOSSIP_RETURN_IF_ERROR(entry(c, hosts));
    if (c.done()) return hosts;
    c.advance();  // the ','
    if (c.done()) return c.error_at(c.pos() - 1, "',' ends the list");
  }
}

Result<std::vector<int>> expand_tasks_per_node(std::string_view text, std::string_view variable) {
  Cursor c(text, variable);
  if (text.empty()) return c.error("empty task layout");
  std::vector<int> tasks;
  for (;;) {
    const std::size_t start = c.pos();
    GOSSIP_ASSIGN_OR_RETURN(auto n, c.number("a task count"));
    if (n.value < 1 || n.value > 1'000'000) {
      return c.error_at(start, "task count must be in 1..1000000, got " + n.text);
    }
    std::uint64_t repeat = 1;
    if (c.peek() == '(') {
      c.advance();
      if (c.peek() != 'x') return c.error("expected 'x' after '('");
      c.advance();
      const std::size_t at = c.pos();
      GOSSIP_ASSIGN_OR_RETURN(auto r, c.number("a repeat count"));
      if (r.value < 1) return c.error_at(at, "repeat count must be >= 1");
      if (c.peek() != ')') return c.error("expected ')'");
      c.advance();
      repeat = r.value;
    }
    if (repeat > kMaxHostlistHosts - tasks.size()) {
      return c.error_at(start, "more than " + std::to_string(kMaxHostlistHosts) + " hosts");
    }
    tasks.insert(tasks.end(), repeat, static_cast<int>(n.value));
    if (c.done()) return tasks;
    if (c.peek() != ',') return c.error(std::string("expected ',' or '(', got '") + c.peek() + "'");
    c.advance();
    if (c.done()) return c.error("expected a task count after ','");
  }
}

}  // namespace gossip::daemon
