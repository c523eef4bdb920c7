// json_quote: see common/json.h for the rules; the UTF-8 check is shared with log_escape.
#include "common/json.h"

#include <cstdio>

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

}  // namespace gossip
