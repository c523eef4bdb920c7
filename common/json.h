// The one JSON string writer of the project: every JSON producer (gossip-topo --json, gossip-sim
// --json, gossipd metrics and summary.json) quotes strings through json_quote, so its output is
// valid JSON (RFC 8259) for any bytes.
//
// json_quote(s) returns s between double quotes with '"' and '\' escaped, the control characters
// U+0000..U+001F written as \b \f \n \r \t or \u00XX, and DEL written as \u007f (valid raw, but
// escaped so the output is safe on a terminal). Well-formed UTF-8 is copied unchanged. Bytes that
// are not well-formed UTF-8 (common/escape.h, utf8_sequence_length) are replaced, one per byte,
// with U+FFFD REPLACEMENT CHARACTER, written "\ufffd": JSON text must be UTF-8, so arbitrary
// bytes cannot be carried through; a consumer sees that something was replaced, and where.
#pragma once

#include <string>
#include <string_view>

namespace gossip {

std::string json_quote(std::string_view s);

}  // namespace gossip
