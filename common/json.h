// The one JSON writer of the project: every JSON producer (gossip-topo --json, gossip-sim --json,
// gossipd metrics and summary.json) quotes strings through json_quote, so its output is valid
// JSON (RFC 8259) for any bytes, and writes numbers through json_number.
//
// json_quote(s) returns s between double quotes with '"' and '\' escaped, the control characters
// U+0000..U+001F written as \b \f \n \r \t or \u00XX, and DEL written as \u007f (valid raw, but
// escaped so the output is safe on a terminal). Well-formed UTF-8 is copied unchanged. Bytes that
// are not well-formed UTF-8 (common/escape.h, utf8_sequence_length) are replaced, one per byte,
// with U+FFFD REPLACEMENT CHARACTER, written "\ufffd": JSON text must be UTF-8, so arbitrary
// bytes cannot be carried through; a consumer sees that something was replaced, and where.
//
// json_number(v, digits) writes v with printf's "%.<digits>g" (C locale: '.' as the decimal
// point), so 17 significant digits — the default — read back as the same double (IEEE 754
// binary64 round trip); NaN and ±Inf have no JSON spelling and are written null.
//
// JsonWriter builds one JSON value (objects, arrays, keys, strings, numbers, booleans, null) into
// a string, placing the commas and colons itself:
//
//   JsonWriter w;
//   w.begin_object().key("node").integer(3).key("loss").number(0.25, 9).end_object();
//   w.text();  // {"node":3,"loss":0.25}
//
// Misuse (a value where a key is due, a key outside an object, unbalanced ends, a second top-level
// value, text() before the value is complete) is a programmer error: GOSSIP_CHECK aborts.
// Not thread-safe; one writer per document.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gossip {

std::string json_quote(std::string_view s);

inline constexpr int kJsonRoundTripDigits = 17;  // enough for any double to read back exactly
std::string json_number(double v, int significant_digits = kJsonRoundTripDigits);

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  // The next member's name (objects only); a value must follow.
  JsonWriter& key(std::string_view name);
  JsonWriter& string(std::string_view s);  // through json_quote
  JsonWriter& number(double v, int significant_digits = kJsonRoundTripDigits);
  JsonWriter& integer(std::int64_t v);
  JsonWriter& boolean(bool v);
  JsonWriter& null();

  // The document; the top-level value must be complete.
  const std::string& text() const;

 private:
  enum class Scope { kObject, kArray };
  void before_value();
  void append_value(std::string_view text);
  // Opens an object or array (`bracket` '{' or '['); close() ends the innermost one, checked.
  JsonWriter& open(char bracket, Scope scope);
  JsonWriter& close(char bracket);

  std::string out_;
  std::vector<Scope> scopes_;
  std::vector<bool> first_;  // per open scope: no member or element yet
  bool key_pending_ = false;
  bool done_ = false;  // the top-level value is complete
};

}  // namespace gossip
