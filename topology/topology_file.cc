// Topology files: parse_topology and load_topology. Text format is parsed with a ParseInfoTree so
// that semantic errors (a repeated id, an edge to a missing node, a bad address) point at the line
// and column of the field, not just at the file; a JSON file is scanned once more for the same
// positions (Locator). The parsed message becomes a Topology in topology_file_build.cc.
#include "topology/topology_file.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <cctype>
#include <cstdlib>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "topology/topology.pb.h"
#include "topology/topology_file_internal.h"

namespace gossip::topology {
namespace {

namespace gp = google::protobuf;

using file_internal::err;
using file_internal::from_explicit;
using file_internal::from_generator;
using file_internal::JsonMember;
using file_internal::JsonPlace;
using file_internal::JsonValue;
using file_internal::Locator;

// Protobuf reports some errors (an unknown enum value, for one) at the token AFTER the culprit,
// which can be the next line. When the message quotes the culprit, point at its last occurrence
// before the reported position instead.
std::pair<int, int> relocate(std::string_view text, int line, int column, const std::string& msg) {
  const auto q1 = msg.find('"');
  const auto q2 = q1 == std::string::npos ? q1 : msg.find('"', q1 + 1);
  if (q2 == std::string::npos || q2 == q1 + 1) return {line, column};
  const std::string token = msg.substr(q1 + 1, q2 - q1 - 1);
  std::size_t offset = 0;
  for (int l = 0; l < line && offset != std::string_view::npos; ++l) {
    offset = text.find('\n', offset);
    if (offset != std::string_view::npos) ++offset;
  }
  if (offset == std::string_view::npos) return {line, column};
  const auto found = text.substr(0, offset + column).rfind(token);
  if (found == std::string_view::npos) return {line, column};
  int l = 0;
  std::size_t line_start = 0;
  for (std::size_t k = 0; k < found; ++k)
    if (text[k] == '\n') ++l, line_start = k + 1;
  if (line - l > 2) return {line, column};  // too far back to be the same mistake
  return {l, static_cast<int>(found - line_start)};
}

class Collector : public gp::io::ErrorCollector {
 public:
  Collector(std::string file, std::string_view text) : file_(std::move(file)), text_(text) {}
  void AddError(int line, gp::io::ColumnNumber column, const std::string& message) override {
    if (!first_.empty()) return;
    const auto [l, c] = relocate(text_, line, column, message);
    first_ = file_ + ":" + std::to_string(l + 1) + ":" + std::to_string(c + 1) + ": " + message;
  }
  void AddWarning(int, gp::io::ColumnNumber, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  std::string file_;
  std::string_view text_;
  std::string first_;
};

// ---- JSON positions. Protobuf's JSON parser keeps no positions, so a JSON topology file is
// scanned once more for where its keys and values sit: syntax errors, protobuf's own errors (they
// name a path such as "(node[1].id)") and the semantic errors (topology_file_build.cc) then point
// at a line and column, as in text format. The scan is as lenient as protobuf's parser (trailing
// commas).

// "base_port", "basePort" and "BasePort" name the same field (protobuf accepts the proto name and
// the lowerCamelCase JSON name); no two fields of the schema collide this way.
std::string json_key(std::string_view key) {
  std::string out;
  for (const char c : key) {
    if (c != '_') out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

// Member `key` of `object` (under either of its names, json_key()), or null.
const JsonMember* json_member(const JsonValue& object, std::string_view key) {
  const auto it = object.members.find(json_key(key));
  return it == object.members.end() ? nullptr : &it->second;
}

// Element `index` of member `m` (its single value when index < 0), or null.
const JsonValue* json_element(const JsonMember& m, int index) {
  const std::size_t k = index < 0 ? 0 : static_cast<std::size_t>(index);
  return k < m.values.size() ? &m.values[k] : nullptr;
}

// "file:line:col", or "file" when the place is unknown.
std::string place_in(const std::string& file, const JsonPlace* p) {
  if (p == nullptr || p->line <= 0) return file;
  return file + ":" + std::to_string(p->line) + ":" + std::to_string(p->column);
}

class JsonScanner {
 public:
  explicit JsonScanner(std::string_view text) : text_(text) {}
  // The document's tree; false on a syntax error, whose place error() gives.
  bool scan(JsonValue& root) {
    if (!value(root, 0)) return false;
    skip_space();
    return pos_ == text_.size() || fail();
  }
  JsonPlace error() const { return error_; }

 private:
  static constexpr int kMaxDepth = 64;

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void advance() {
    if (text_[pos_] == '\n') {
      ++line_;
      column_ = 1;
    } else {
      ++column_;
    }
    ++pos_;
  }
  JsonPlace here() const { return {line_, column_}; }
  bool fail() {
    error_ = here();
    return false;
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) advance();
  }
  bool value(JsonValue& v, int depth) {
    skip_space();
    v.at = here();
    if (depth > kMaxDepth) return fail();
    const char c = peek();
    if (c == '{') return object(v, depth);
    if (c == '[') {
      JsonMember nested;  // an array inside an array: scanned, not kept
      return array(nested, depth);
    }
    if (c == '"') return string(nullptr);
    const std::size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '-' ||
            text_[pos_] == '+' || text_[pos_] == '.')) {
      advance();
    }
    return pos_ > start || fail();
  }
  bool object(JsonValue& v, int depth) {
    advance();  // {
    skip_space();
    if (peek() == '}') {
      advance();
      return true;
    }
    while (true) {
      skip_space();
      if (peek() != '"') return fail();
      const JsonPlace key_place = here();
      std::string key;
      if (!string(&key)) return false;
      skip_space();
      if (peek() != ':') return fail();
      advance();
      skip_space();
      JsonMember& m = v.members[json_key(key)];
      m.key = key_place;
      m.values.clear();
      if (peek() == '[') {
        if (!array(m, depth + 1)) return false;
      } else {
        m.values.emplace_back();
        if (!value(m.values.back(), depth + 1)) return false;
      }
      const Next next = after_item('}');
      if (next == Next::kMore) continue;
      return next == Next::kClosed;
    }
  }
  // After a member or element: a comma and the next item (kMore), or the closing bracket, also
  // after a trailing comma (kClosed, consumed), or anything else (kError, failed there).
  enum class Next { kMore, kClosed, kError };
  Next after_item(char close) {
    skip_space();
    if (peek() == ',') {
      advance();
      skip_space();
      if (peek() != close) return Next::kMore;
    }
    if (peek() != close) {
      fail();
      return Next::kError;
    }
    advance();
    return Next::kClosed;
  }
  bool array(JsonMember& m, int depth) {
    advance();  // [
    skip_space();
    if (peek() == ']') {
      advance();
      return true;
    }
    while (true) {
      m.values.emplace_back();
      if (!value(m.values.back(), depth + 1)) return false;
      const Next next = after_item(']');
      if (next == Next::kMore) continue;
      return next == Next::kClosed;
    }
  }
  // A string; its characters (escapes kept as the escaped character) into *out when given.
  bool string(std::string* out) {
    advance();  // "
    while (pos_ < text_.size() && text_[pos_] != '\n') {
      const char c = text_[pos_];
      advance();
      if (c == '"') return true;
      if (c == '\\') {
        if (pos_ >= text_.size()) break;
        if (out) out->push_back(text_[pos_]);
        advance();
      } else if (out) {
        out->push_back(c);
      }
    }
    return fail();
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  int line_ = 1;
  int column_ = 1;
  JsonPlace error_;
};

// The place a protobuf JSON error names: "(node[1].id): invalid value ..." (that value's key) or
// "(generator) rowz: Cannot find field." (the unknown key inside that object). Null when the path
// is not in the tree.
const JsonPlace* json_error_place(const JsonValue& root, const std::string& message) {
  if (message.empty()) return nullptr;
  if (message[0] != '(') {
    // "nodes: Cannot find field." names a key of the top-level object.
    const JsonMember* m = json_member(root, message.substr(0, message.find(':')));
    return m ? &m->key : nullptr;
  }
  const auto close = message.find(')');
  if (close == std::string::npos) return nullptr;
  const JsonValue* object = &root;
  const JsonPlace* place = nullptr;
  std::string_view path(message.data() + 1, close - 1);
  while (!path.empty()) {
    const auto dot = path.find('.');
    std::string_view segment = path.substr(0, dot);
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
    int index = -1;
    if (const auto bracket = segment.find('['); bracket != std::string_view::npos) {
      index = std::atoi(std::string(segment.substr(bracket + 1)).c_str());
      segment = segment.substr(0, bracket);
    }
    const JsonMember* m = object ? json_member(*object, segment) : nullptr;
    if (m == nullptr) return nullptr;
    object = json_element(*m, index);
    place = index >= 0 && object ? &object->at : &m->key;
  }
  // "(path) key: ..." names a key inside the object at path.
  const std::string rest = message.substr(close + 1);
  if (rest.size() > 1 && rest[0] == ' ' && object != nullptr) {
    const auto colon = rest.find(':');
    const JsonMember* m =
        colon == std::string::npos ? nullptr : json_member(*object, rest.substr(1, colon - 1));
    if (m) return &m->key;
  }
  return place;
}

}  // namespace

namespace file_internal {

std::string Locator::at(const gp::TextFormat::ParseInfoTree* tree, const gp::Message& m,
                        std::string_view field, int index) const {
  if (tree) {
    const auto* fd = m.GetDescriptor()->FindFieldByName(std::string(field));
    if (fd) {
      const auto loc = tree->GetLocation(fd, index);
      if (loc.line >= 0)
        return file_ + ":" + std::to_string(loc.line + 1) + ":" + std::to_string(loc.column + 1);
    }
  }
  return file_;
}

std::string Locator::top(const gp::Message& m, std::string_view field, int index) const {
  if (json_text_) {
    const JsonValue* root = json();
    return root ? json_at(*root, field, index) : file_;
  }
  return at(tree_, m, field, index);
}

std::string Locator::nested(const gp::Message& m, std::string_view outer, int index,
                            std::string_view field) const {
  if (json_text_) {
    const JsonValue* root = json();
    const JsonMember* member = root ? json_member(*root, outer) : nullptr;
    const JsonValue* element = member ? json_element(*member, index) : nullptr;
    std::string s = element ? json_at(*element, field, -1) : file_;
    return s != file_ ? s : top(m, outer, index);
  }
  if (tree_) {
    const auto* fd = m.GetDescriptor()->FindFieldByName(std::string(outer));
    if (fd) {
      const auto* sub = tree_->GetTreeForNested(fd, index);
      const gp::Message& inner = fd->is_repeated()
                                     ? m.GetReflection()->GetRepeatedMessage(m, fd, index)
                                     : m.GetReflection()->GetMessage(m, fd);
      if (sub) {
        std::string s = at(sub, inner, field);
        if (s != file_) return s;
      }
    }
  }
  return top(m, outer, index);
}

std::string Locator::json_at(const JsonValue& object, std::string_view field, int index) const {
  const JsonMember* m = json_member(object, field);
  if (m == nullptr) return file_;
  const JsonValue* element = index >= 0 ? json_element(*m, index) : nullptr;
  return place_in(file_, element ? &element->at : &m->key);
}

const JsonValue* Locator::json() const {
  if (!json_scanned_) {
    json_scanned_ = true;
    if (!JsonScanner(*json_text_).scan(json_root_))
      json_root_ = JsonValue();
    else
      json_ok_ = true;
  }
  return json_ok_ ? &json_root_ : nullptr;
}

Status err(const std::string& where, const std::string& what) {
  return invalid_argument(where + ": " + what);
}

}  // namespace file_internal

namespace {

// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF. proto3 strings
// must be UTF-8, yet the text-format parser only logs a bad one and keeps it.
bool is_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int more = 0;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      more = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      more = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      more = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + more >= s.size()) return false;  // truncated sequence
    for (int k = 1; k <= more; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return false;
    }
    i += more + 1;
  }
  return true;
}

// Every string field (name, node addresses, generator host and edge_list) must be UTF-8; a bad
// one is reported at its field.
Status check_strings(const pb::TopologyFile& file, const Locator& loc) {
  const std::string bad = " is not valid UTF-8 (strings in a topology file must be UTF-8)";
  if (!is_utf8(file.name())) return err(loc.top(file, "name"), "name" + bad);
  for (int k = 0; k < file.node_size(); ++k)
    if (!is_utf8(file.node(k).address()))
      return err(loc.nested(file, "node", k, "address"),
                 "node " + std::to_string(file.node(k).id()) + ": address" + bad);
  if (file.has_generator()) {
    if (!is_utf8(file.generator().host()))
      return err(loc.nested(file, "generator", -1, "host"), "generator.host" + bad);
    if (!is_utf8(file.generator().edge_list()))
      return err(loc.nested(file, "generator", -1, "edge_list"), "generator.edge_list" + bad);
  }
  for (int k = 0; k < file.host_size(); ++k)
    if (!is_utf8(file.host(k).name()))
      return err(loc.nested(file, "host", k, "name"),
                 "host entry " + std::to_string(k + 1) + ": name" + bad);
  return Status::ok();
}

}  // namespace

Result<Topology> parse_topology(std::string_view text, const std::string& filename, Env& env) {
  pb::TopologyFile file;
  gp::TextFormat::ParseInfoTree tree;
  // A UTF-8 byte-order mark (some editors write one) is not text; columns count from after it.
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  const auto first = text.find_first_not_of(" \t\r\n");
  const bool json = (filename.size() >= 5 && filename.ends_with(".json")) ||
                    (first != std::string_view::npos && text[first] == '{');
  if (json) {
    gp::util::JsonParseOptions opts;
    auto st = gp::util::JsonStringToMessage(std::string(text), &file, opts);
    if (!st.ok()) {
      // Protobuf's message; its first line only (a syntax error adds a snippet and a caret).
      std::string message(st.message());
      message = message.substr(0, message.find('\n'));
      JsonValue root;
      JsonScanner scanner(text);
      const bool scanned = scanner.scan(root);
      const JsonPlace syntax = scanner.error();
      const JsonPlace* place = scanned ? json_error_place(root, message) : &syntax;
      return invalid_argument(place_in(filename, place) + ": JSON: " + message);
    }
  } else {
    Collector collector(filename, text);
    gp::TextFormat::Parser parser;
    parser.RecordErrorsTo(&collector);
    parser.WriteLocationsTo(&tree);
    if (!parser.ParseFromString(std::string(text), &file))
      return invalid_argument(collector.first().empty() ? filename + ": parse error"
                                                        : collector.first());
  }
  const Locator loc(filename, json ? nullptr : &tree,
                    json ? std::optional<std::string_view>(text) : std::nullopt);
  GOSSIP_RETURN_IF_ERROR(check_strings(file, loc));
  if (!file.has_generator() && file.host_size() > 0)
    return err(loc.top(file, "host", 0),
               "host entries place a generator's nodes; explicit nodes carry their own addresses");
  if (file.has_generator()) {
    if (file.node_size() > 0 || file.edge_size() > 0)
      return err(loc.top(file, file.node_size() > 0 ? "node" : "edge", 0),
                 "give either a generator block or explicit nodes and edges, not both");
    if (file.directed())
      return err(loc.top(file, "directed"),
                 "directed: is for explicit edges; generators decide it (EDGE_LIST: "
                 "generator.directed)");
    return from_generator(file, loc, filename, env);
  }
  return from_explicit(file, loc);
}

Result<Topology> load_topology(const std::string& path, Env& env,
                               const ValidationOptions& validation) {
  GOSSIP_ASSIGN_OR_RETURN(std::string text, env.read_file(path));
  GOSSIP_ASSIGN_OR_RETURN(Topology t, parse_topology(text, path, env));
  Status s = validate(t, validation);
  if (!s.is_ok()) return invalid_argument(path + ": invalid topology: " + s.message());
  return t;
}

}  // namespace gossip::topology
