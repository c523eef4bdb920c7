// Text that came from outside the process (a peer's Hello, file names, file contents, config
// values) made safe for one log line or a terminal, and the UTF-8 check that both this and
// common/json.h rely on.
//
// log_escape keeps printable ASCII and every well-formed UTF-8 sequence except the C1 controls
// (U+0080..U+009F, which some terminals obey as escape sequences); it writes a backslash as
// "\\", newline, carriage return and tab as "\n", "\r", "\t", and every other control byte (C0,
// DEL, C1) and every byte that is not part of well-formed UTF-8 as "\xNN". The result holds no
// byte below 0x20 and no invalid UTF-8, so a hostile string can neither start a new log line nor
// send a terminal escape sequence, and it can be read back unambiguously.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gossip {

// Length (1..4) of the well-formed UTF-8 sequence starting at s[pos] (RFC 3629: no overlong
// forms, no surrogates U+D800..U+DFFF, nothing above U+10FFFF), or 0 when the bytes there do not
// form one (a stray continuation byte, a truncated sequence, 0xC0, 0xC1, 0xF5..0xFF).
// Requires pos < s.size().
std::size_t utf8_sequence_length(std::string_view s, std::size_t pos);

std::string log_escape(std::string_view s);

}  // namespace gossip
