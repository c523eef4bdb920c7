// json_quote, json_number and JsonWriter: see common/json.h for the rules; the UTF-8 check is
// shared with log_escape.
#include "common/json.h"

#include <cmath>
#include <cstdio>

#include "common/check.h"
#include "common/escape.h"

namespace gossip {

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else if (c < 0x80) {
          out += static_cast<char>(c);
        } else if (const std::size_t len = utf8_sequence_length(s, i); len > 0) {
          out.append(s.substr(i, len));
          i += len;
          continue;
        } else {
          out += "\\ufffd";
        }
    }
    ++i;
  }
  out += '"';
  return out;
}

std::string json_number(double v, int significant_digits) {
  GOSSIP_CHECK(significant_digits >= 1 && significant_digits <= kJsonRoundTripDigits)
      << significant_digits;
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*g", significant_digits, v);
  return buf;
}

void JsonWriter::before_value() {
  GOSSIP_CHECK(!done_) << "a second top-level JSON value";
  if (scopes_.empty()) return;
  if (scopes_.back() == Scope::kObject) {
    GOSSIP_CHECK(key_pending_) << "a JSON object member needs a key first";
    key_pending_ = false;
    return;
  }
  if (!first_.back()) out_ += ',';
  first_.back() = false;
}

void JsonWriter::append_value(std::string_view text) {
  before_value();
  out_ += text;
  if (scopes_.empty()) done_ = true;
}

JsonWriter& JsonWriter::open(char bracket, Scope scope) {
  before_value();
  out_ += bracket;
  scopes_.push_back(scope);
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::close(char bracket) {
  out_ += bracket;
  scopes_.pop_back();
  first_.pop_back();
  if (scopes_.empty()) done_ = true;
  return *this;
}

JsonWriter& JsonWriter::begin_object() { return open('{', Scope::kObject); }

JsonWriter& JsonWriter::end_object() {
  GOSSIP_CHECK(!scopes_.empty() && scopes_.back() == Scope::kObject && !key_pending_)
      << "end_object without an open object (or after a key without its value)";
  return close('}');
}

JsonWriter& JsonWriter::begin_array() { return open('[', Scope::kArray); }

JsonWriter& JsonWriter::end_array() {
  GOSSIP_CHECK(!scopes_.empty() && scopes_.back() == Scope::kArray)
      << "end_array without an open array";
  return close(']');
}

JsonWriter& JsonWriter::key(std::string_view name) {
  GOSSIP_CHECK(!scopes_.empty() && scopes_.back() == Scope::kObject && !key_pending_)
      << "a JSON key outside an object, or two keys in a row";
  if (!first_.back()) out_ += ',';
  first_.back() = false;
  out_ += json_quote(name);
  out_ += ':';
  key_pending_ = true;
  return *this;
}

JsonWriter& JsonWriter::string(std::string_view s) {
  append_value(json_quote(s));
  return *this;
}

JsonWriter& JsonWriter::number(double v, int significant_digits) {
  append_value(json_number(v, significant_digits));
  return *this;
}

JsonWriter& JsonWriter::integer(std::int64_t v) {
  append_value(std::to_string(v));
  return *this;
}

JsonWriter& JsonWriter::boolean(bool v) {
  append_value(v ? "true" : "false");
  return *this;
}

JsonWriter& JsonWriter::null() {
  append_value("null");
  return *this;
}

const std::string& JsonWriter::text() const {
  GOSSIP_CHECK(done_) << "JsonWriter::text() before the value is complete";
  return out_;
}

}  // namespace gossip
