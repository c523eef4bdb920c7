// json_quote and log_escape against independent oracles: Python's json module decides what valid
// JSON is (when /usr/bin/python3 is there), and the byte-level rules are checked directly: no
// control byte and no invalid UTF-8 ever reaches the output, and the escapes read back.
#include "common/json.h"

#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/escape.h"
#include "common/random.h"

namespace gossip {
namespace {

// Whether `s` is well-formed UTF-8 throughout (by the shared decoder, checked itself below).
bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// Whether /usr/bin/python3 reads `text` (lines of JSON) so that `check` (Python code over `v`,
// the parsed line, and `i`, its index) holds for every line; prints the line count. Returns the
// count printed, or -1 when python3 is not there (the byte-level checks still ran).
int python_checks(const std::string& text, const std::string& check) {
  if (::access("/usr/bin/python3", X_OK) != 0) return -1;
  char in_path[] = "/tmp/json_writer_XXXXXX";
  const int fd = ::mkstemp(in_path);
  REQUIRE(fd >= 0);
  std::FILE* f = ::fdopen(fd, "w");
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  const std::string cmd =
      "/usr/bin/python3 -c \"import json,sys,struct\nn=0\nfor i,l in "
      "enumerate(open(sys.argv[1], encoding='utf-8')):\n  v=json.loads(l)\n  "
      "assert " +
      check + ", (i, l)\n  n+=1\nprint(n)\" " + in_path;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[64] = {};
  const bool got = std::fgets(buf, sizeof buf, p) != nullptr;
  const int rc = ::pclose(p);
  ::unlink(in_path);
  CHECK(rc == 0);
  return got && rc == 0 ? std::atoi(buf) : 0;
}

TEST_CASE("utf8_sequence_length follows RFC 3629 at every boundary") {
  CHECK(utf8_sequence_length("a", 0) == 1);
  CHECK(utf8_sequence_length("\xC2\x80", 0) == 2);          // U+0080
  CHECK(utf8_sequence_length("\xDF\xBF", 0) == 2);          // U+07FF
  CHECK(utf8_sequence_length("\xE0\xA0\x80", 0) == 3);      // U+0800
  CHECK(utf8_sequence_length("\xED\x9F\xBF", 0) == 3);      // U+D7FF
  CHECK(utf8_sequence_length("\xEE\x80\x80", 0) == 3);      // U+E000
  CHECK(utf8_sequence_length("\xF0\x90\x80\x80", 0) == 4);  // U+10000
  CHECK(utf8_sequence_length("\xF4\x8F\xBF\xBF", 0) == 4);  // U+10FFFF
  CHECK(utf8_sequence_length("\xC0\xAF", 0) == 0);          // overlong '/'
  CHECK(utf8_sequence_length("\xC1\xBF", 0) == 0);          // overlong
  CHECK(utf8_sequence_length("\xE0\x9F\xBF", 0) == 0);      // overlong 3-byte
  CHECK(utf8_sequence_length("\xF0\x8F\xBF\xBF", 0) == 0);  // overlong 4-byte
  CHECK(utf8_sequence_length("\xED\xA0\x80", 0) == 0);      // surrogate U+D800
  CHECK(utf8_sequence_length("\xF4\x90\x80\x80", 0) == 0);  // U+110000
  CHECK(utf8_sequence_length("\xF5\x80\x80\x80", 0) == 0);
  CHECK(utf8_sequence_length("\x80", 0) == 0);      // stray continuation
  CHECK(utf8_sequence_length("\xE2\x82", 0) == 0);  // truncated
  CHECK(utf8_sequence_length("\xE2\x82"
                             "a",
                             0) == 0);  // bad continuation
  // Exhaustive over the 2-byte space against the code point arithmetic.
  for (int a = 0x80; a < 0x100; ++a) {
    for (int b = 0; b < 0x100; ++b) {
      const std::string s{static_cast<char>(a), static_cast<char>(b)};
      const bool lead2 = a >= 0xC0 && a < 0xE0, cont = b >= 0x80 && b < 0xC0;
      const int cp = ((a & 0x1F) << 6) | (b & 0x3F);
      const bool expect = lead2 && cont && cp >= 0x80;
      CHECK_MESSAGE((utf8_sequence_length(s, 0) == 2) == expect, a, " ", b);
    }
  }
}

TEST_CASE("json_quote escapes every control character and quotes") {
  CHECK(json_quote("") == "\"\"");
  CHECK(json_quote("plain") == "\"plain\"");
  CHECK(json_quote("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(json_quote("tab\there") == "\"tab\\there\"");  // the case topology/main.cc got wrong
  CHECK(json_quote("\n\r\b\f") == "\"\\n\\r\\b\\f\"");
  CHECK(json_quote(std::string("nul\0x", 5)) == "\"nul\\u0000x\"");
  CHECK(json_quote("\x1b[31m") == "\"\\u001b[31m\"");
  CHECK(json_quote("\x7f") == "\"\\u007f\"");
  for (int c = 0; c < 0x20; ++c) {
    const std::string q = json_quote(std::string(1, static_cast<char>(c)));
    CAPTURE(c);
    for (char ch : q) CHECK(static_cast<unsigned char>(ch) >= 0x20);
    CHECK(q.front() == '"');
    CHECK(q[1] == '\\');
  }
}

TEST_CASE("json_quote keeps valid UTF-8 and replaces each invalid byte with \\ufffd") {
  CHECK(json_quote("Metropolis–Hastings ρ 😀") == "\"Metropolis–Hastings ρ 😀\"");
  CHECK(json_quote("a\xff"
                   "b") == "\"a\\ufffdb\"");
  CHECK(json_quote("\xC0\xAF") == "\"\\ufffd\\ufffd\"");  // overlong: both bytes replaced
  CHECK(json_quote("\xED\xA0\x80") == "\"\\ufffd\\ufffd\\ufffd\"");  // surrogate
  CHECK(json_quote("\xE2\x82") == "\"\\ufffd\\ufffd\"");             // truncated at the end
  CHECK(json_quote("\xE2\x82\xAC") == "\"\xE2\x82\xAC\"");           // the whole euro sign stays
}

// Up to 39 bytes, each any of the 256 values (rng's draws: the length, then each byte).
std::string random_bytes(Rng& rng) {
  std::string s(rng.uniform_int(40), '\0');
  for (char& c : s) c = static_cast<char>(rng.uniform_int(256));
  return s;
}

TEST_CASE(
    "json_quote of random bytes is valid UTF-8 without raw control bytes, and python "
    "reads it back") {
  Rng rng(7, 1);
  std::string lines;
  for (int k = 0; k < 300; ++k) {
    const std::string s = random_bytes(rng);
    const std::string q = json_quote(s);
    CAPTURE(k);
    CHECK(valid_utf8(q));
    for (char ch : q) CHECK(static_cast<unsigned char>(ch) >= 0x20);
    CHECK(static_cast<unsigned char>(q.back()) == '"');
    lines += q + "\n";
  }
  // Independent oracle: Python's json module must parse every line as one string.
  const int read = python_checks(lines, "isinstance(v,str)");
  if (read >= 0) CHECK(read == 300);
}

TEST_CASE("JsonWriter places commas, colons and quotes, control characters in keys and strings") {
  JsonWriter w;
  w.begin_object()
      .key("nodes")
      .begin_array()
      .begin_object()
      .key("node")
      .integer(0)
      .key("ok")
      .boolean(true)
      .end_object()
      .begin_object()
      .key("node")
      .integer(-1)
      .key("cause")
      .null()
      .end_object()
      .end_array()
      .key("empty")
      .begin_array()
      .end_array()
      .key("nested")
      .begin_object()
      .end_object()
      .key("tab\tkey\n")
      .string("esc \x1b[31m \"q\" \\ nul:" + std::string(1, '\0') + "\xff")
      .end_object();
  CHECK(w.text() ==
        "{\"nodes\":[{\"node\":0,\"ok\":true},{\"node\":-1,\"cause\":null}],\"empty\":[],"
        "\"nested\":{},\"tab\\tkey\\n\":\"esc \\u001b[31m \\\"q\\\" \\\\ "
        "nul:\\u0000\\ufffd\"}");
  for (char ch : w.text()) CHECK(static_cast<unsigned char>(ch) >= 0x20);
  // A top-level scalar is a document too.
  CHECK(JsonWriter().number(2.5).text() == "2.5");
  CHECK(JsonWriter().begin_array().string("").number(NAN).end_array().text() == "[\"\",null]");
  // Python's json module reads it back with the same structure and strings.
  const int read = python_checks(
      w.text() + "\n",
      "v['nodes'][1]=={'node':-1,'cause':None} and v['empty']==[] and v['nested']=={} and "
      "v[chr(9).join(['tab','key'])+chr(10)]==''.join(['esc ',chr(27),'[31m ',chr(34),'q',"
      "chr(34),' ',chr(92),' nul:',chr(0),chr(0xfffd)])");
  CHECK((read == 1 || read == -1));
}

TEST_CASE("json_number: NaN and infinities are null, precision is the stated one") {
  CHECK(json_number(NAN) == "null");
  CHECK(json_number(-NAN) == "null");
  CHECK(json_number(INFINITY) == "null");
  CHECK(json_number(-INFINITY, 9) == "null");
  CHECK(json_number(0.0) == "0");
  CHECK(json_number(-0.0) == "-0");
  CHECK(json_number(0.1) == "0.10000000000000001");  // 17 digits show the double that 0.1 is
  CHECK(json_number(0.1, 9) == "0.1");               // 9 digits: a shorter spelling
  CHECK(json_number(0.1f, 9) == "0.100000001");      // the float nearest 0.1, exactly
  CHECK(json_number(1.0 / 3.0, 9) == "0.333333333");
  CHECK(json_number(1.0 / 3.0, 3) == "0.333");
  CHECK(json_number(1e300) == "1.0000000000000001e+300");
  CHECK(json_number(123456789.0, 9) == "123456789");
  CHECK(json_number(1234567891.0, 9) == "1.23456789e+09");
}

TEST_CASE("json_number round-trips every double at 17 digits and every float at 9") {
  // Edge values, then seeded random bit patterns (every exponent, subnormals included).
  std::vector<double> values = {DBL_MAX, -DBL_MAX,          DBL_MIN, DBL_TRUE_MIN, -DBL_TRUE_MIN,
                                1.0,     1.0 + DBL_EPSILON, 0.1,     1e-310,       5e-324};
  Rng rng(17, 3);
  while (values.size() < 2000) {
    const std::uint64_t bits =
        (rng.uniform_int(std::uint64_t{1} << 32) << 32) | rng.uniform_int(std::uint64_t{1} << 32);
    double v;
    std::memcpy(&v, &bits, sizeof v);
    if (std::isfinite(v)) values.push_back(v);
  }
  std::string lines;
  for (double v : values) {
    const std::string text = json_number(v);
    CAPTURE(text);
    const double back = std::strtod(text.c_str(), nullptr);
    CHECK(std::memcmp(&back, &v, sizeof v) == 0);
    const float f = static_cast<float>(v);
    if (std::isfinite(f)) {
      const float fback = std::strtof(json_number(f, 9).c_str(), nullptr);
      CHECK(std::memcmp(&fback, &f, sizeof f) == 0);
    }
    std::uint64_t bits;
    std::memcpy(&bits, &v, sizeof v);
    lines += "[" + text + "," + std::to_string(bits) + "]\n";
  }
  // Independent oracle: Python parses each number to the same bits.
  const int read = python_checks(lines, "struct.unpack('<Q', struct.pack('<d', v[0]))[0] == v[1]");
  CHECK((read == static_cast<int>(values.size()) || read == -1));
}

TEST_CASE("log_escape leaves no control byte, no C1 control and no invalid UTF-8") {
  CHECK(log_escape("node 3: ok") == "node 3: ok");
  CHECK(log_escape("a\nI 00:00:00.000 forged") == "a\\nI 00:00:00.000 forged");
  CHECK(log_escape("\x1b]0;title\x07") == "\\x1b]0;title\\x07");
  CHECK(log_escape("back\\slash\ttab\r") == "back\\\\slash\\ttab\\r");
  CHECK(log_escape("\xC2\x9B"
                   "31m") == "\\xc2\\x9b31m");      // U+009B CSI, a C1 control
  CHECK(log_escape("\xC2\xA0 ρ") == "\xC2\xA0 ρ");  // U+00A0 is printable
  CHECK(log_escape("\xff\xfe") == "\\xff\\xfe");
  CHECK(log_escape("\x7f") == "\\x7f");
  Rng rng(11, 2);
  for (int k = 0; k < 500; ++k) {
    const std::string s = random_bytes(rng);
    const std::string e = log_escape(s);
    CAPTURE(k);
    CHECK(valid_utf8(e));
    for (std::size_t i = 0; i < e.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(e[i]);
      CHECK(c >= 0x20);
      CHECK(c != 0x7f);
      if (c == 0xC2 && i + 1 < e.size()) CHECK(static_cast<unsigned char>(e[i + 1]) >= 0xA0);
    }
  }
}

}  // namespace
}  // namespace gossip
