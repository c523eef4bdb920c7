// UTF-8 validation by the table of well-formed byte sequences (Unicode 15, table 3-7): the second
// byte's range depends on the first byte, which is what excludes overlong forms and surrogates.
#include "common/escape.h"

#include <cstdio>

namespace gossip {

std::size_t utf8_sequence_length(std::string_view s, std::size_t pos) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[pos + k]); };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) return 1;
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() - pos < len) return 0;
  if (byte(1) < lo || byte(1) > hi) return 0;
  for (std::size_t k = 2; k < len; ++k) {
    if (byte(k) < 0x80 || byte(k) > 0xBF) return 0;
  }
  return len;
}

std::string log_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto hex = [&out](unsigned char c) {
    char buf[5];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += buf;
  };
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      hex(c);
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      const std::size_t len = utf8_sequence_length(s, i);
      // U+0080..U+009F are encoded 0xC2 0x80..0x9F.
      if (len == 0 || (len == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0)) {
        hex(c);
      } else {
        out.append(s.substr(i, len));
        i += len;
        continue;
      }
    }
    ++i;
  }
  return out;
}

}  // namespace gossip
