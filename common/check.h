// GOSSIP_CHECK: programmer errors (broken invariants, misuse of an API), never user input.
//
// A failed check prints file:line, the condition, the operands' values where given and an optional
// streamed message, then aborts. Checks stay on in release builds: the invariants they guard
// (buffer sizes, matrix shapes) are cheap to test next to the work they protect. The macros are
// prefixed because doctest owns the name CHECK.
//
//   GOSSIP_CHECK(n > 0) << "empty topology";
//   GOSSIP_CHECK_EQ(x.size(), y.size());
#pragma once

#include <sstream>
#include <string>

namespace gossip::internal {

// Collects the message of a failed check; its destructor prints it and aborts.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `GOSSIP_CHECK(c) << x;` compile to nothing when c holds.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace gossip::internal

#define GOSSIP_CHECK(condition)                 \
  (condition) ? (void)0                         \
              : ::gossip::internal::Voidify() & \
                    ::gossip::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define GOSSIP_CHECK_OP_(a, b, op)                                                           \
  ((a)op(b))                                                                                 \
      ? (void)0                                                                              \
      : ::gossip::internal::Voidify() &                                                      \
            ::gossip::internal::CheckFailure(__FILE__, __LINE__, #a " " #op " " #b).stream() \
                << "(" << (a) << " vs " << (b) << ") "

#define GOSSIP_CHECK_EQ(a, b) GOSSIP_CHECK_OP_(a, b, ==)
#define GOSSIP_CHECK_NE(a, b) GOSSIP_CHECK_OP_(a, b, !=)
#define GOSSIP_CHECK_LT(a, b) GOSSIP_CHECK_OP_(a, b, <)
#define GOSSIP_CHECK_LE(a, b) GOSSIP_CHECK_OP_(a, b, <=)
#define GOSSIP_CHECK_GT(a, b) GOSSIP_CHECK_OP_(a, b, >)
#define GOSSIP_CHECK_GE(a, b) GOSSIP_CHECK_OP_(a, b, >=)
