// Topology files. Text format is parsed with a ParseInfoTree so that semantic errors (a repeated
// id, an edge to a missing node, a bad address) point at the line and column of the field, not
// just at the file.
#include "topology/topology_file.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <cctype>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "topology/optimize.h"
#include "topology/topology.pb.h"

namespace gossip::topology {
namespace {

namespace gp = google::protobuf;

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
// name a path such as "(node[1].id)") and the semantic errors below then point at a line and
// column, as in text format. The scan is as lenient as protobuf's parser (trailing commas).

struct JsonPlace {
  int line = 0;  // 1-based; 0: unknown
  int column = 0;
};
struct JsonValue;
// An object member: where its key sits, and its value (one) or an array's elements.
struct JsonMember {
  JsonPlace key;
  std::vector<JsonValue> values;
};
struct JsonValue {
  JsonPlace at;
  std::map<std::string, JsonMember> members;  // objects only, by json_key()
};

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

// Where a field sits in the file: "file:line:col" (1-based), or "file" when unknown. For a JSON
// file (`json_text` given) the positions are scanned on the first question, so a file that loads
// without an error never builds them (an explicit topology of a million nodes would hold a
// member map per node).
class Locator {
 public:
  Locator(std::string file, const gp::TextFormat::ParseInfoTree* tree,
          std::optional<std::string_view> json_text = std::nullopt)
      : file_(std::move(file)), tree_(tree), json_text_(json_text) {}
  std::string at(const gp::TextFormat::ParseInfoTree* tree, const gp::Message& m,
                 std::string_view field, int index = -1) const {
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
  std::string top(const gp::Message& m, std::string_view field, int index = -1) const {
    if (json_text_) {
      const JsonValue* root = json();
      return root ? json_at(*root, field, index) : file_;
    }
    return at(tree_, m, field, index);
  }
  // Location of field `field` inside repeated/nested message `outer`[index].
  std::string nested(const gp::Message& m, std::string_view outer, int index,
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
  const std::string& file() const { return file_; }

 private:
  // A member of a JSON object: its key (index < 0) or element `index` of its array.
  std::string json_at(const JsonValue& object, std::string_view field, int index) const {
    const JsonMember* m = json_member(object, field);
    if (m == nullptr) return file_;
    const JsonValue* element = index >= 0 ? json_element(*m, index) : nullptr;
    return place_in(file_, element ? &element->at : &m->key);
  }

  // The JSON file's positions, scanned once; null when the scan fails.
  const JsonValue* json() const {
    if (!json_scanned_) {
      json_scanned_ = true;
      if (!JsonScanner(*json_text_).scan(json_root_))
        json_root_ = JsonValue();
      else
        json_ok_ = true;
    }
    return json_ok_ ? &json_root_ : nullptr;
  }

  std::string file_;
  const gp::TextFormat::ParseInfoTree* tree_;
  std::optional<std::string_view> json_text_;
  mutable bool json_scanned_ = false;
  mutable bool json_ok_ = false;
  mutable JsonValue json_root_;
};

Status err(const std::string& where, const std::string& what) {
  return invalid_argument(where + ": " + what);
}

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

// Our enums and the .proto's: one table per pair, read in both directions.
template <typename Ours, typename Wire>
struct WireName {
  Ours ours;
  Wire wire;
};

constexpr WireName<GeneratorKind, pb::GeneratorKind> kKindsOnWire[] = {
    {GeneratorKind::kRing, pb::RING},
    {GeneratorKind::kKRing, pb::K_RING},
    {GeneratorKind::kTorus, pb::TORUS},
    {GeneratorKind::kGrid, pb::GRID},
    {GeneratorKind::kHypercube, pb::HYPERCUBE},
    {GeneratorKind::kComplete, pb::COMPLETE},
    {GeneratorKind::kStar, pb::STAR},
    {GeneratorKind::kExponential, pb::EXPONENTIAL},
    {GeneratorKind::kOnePeerExponential, pb::ONE_PEER_EXPONENTIAL},
    {GeneratorKind::kRandomRegular, pb::RANDOM_REGULAR},
    {GeneratorKind::kErdosRenyi, pb::ERDOS_RENYI},
    {GeneratorKind::kEdgeList, pb::EDGE_LIST},
};
constexpr WireName<WeightScheme, pb::WeightScheme> kSchemesOnWire[] = {
    {WeightScheme::kMetropolisHastings, pb::METROPOLIS_HASTINGS},
    {WeightScheme::kMaxDegree, pb::MAX_DEGREE},
    {WeightScheme::kUniform, pb::UNIFORM},
    {WeightScheme::kLazyMetropolisHastings, pb::LAZY_METROPOLIS_HASTINGS},
    {WeightScheme::kLazyUniform, pb::LAZY_UNIFORM},
    {WeightScheme::kBestConstant, pb::BEST_CONSTANT},
    {WeightScheme::kExplicit, pb::EXPLICIT},
    {WeightScheme::kOptimized, pb::OPTIMIZED},
    {WeightScheme::kDefault, pb::WEIGHTS_DEFAULT},
};

template <typename Ours, typename Wire, std::size_t N>
std::optional<Ours> from_wire(const WireName<Ours, Wire> (&table)[N], Wire wire) {
  for (const auto& e : table) {
    if (e.wire == wire) return e.ours;
  }
  return std::nullopt;
}

template <typename Ours, typename Wire, std::size_t N>
std::optional<Wire> to_wire(const WireName<Ours, Wire> (&table)[N], Ours ours) {
  for (const auto& e : table) {
    if (e.ours == ours) return e.wire;
  }
  return std::nullopt;
}

Result<GeneratorKind> kind_from_pb(pb::GeneratorKind k) {
  if (const auto kind = from_wire(kKindsOnWire, k)) return *kind;
  return invalid_argument("generator kind missing");
}

pb::GeneratorKind kind_to_pb(GeneratorKind k) {
  return to_wire(kKindsOnWire, k).value_or(pb::GENERATOR_UNSPECIFIED);
}

// WEIGHTS_DEFAULT, and any value this build does not know, is the default scheme.
WeightScheme scheme_from_pb(pb::WeightScheme s) {
  return from_wire(kSchemesOnWire, s).value_or(WeightScheme::kDefault);
}

pb::WeightScheme scheme_to_pb(WeightScheme s) {
  return to_wire(kSchemesOnWire, s).value_or(pb::WEIGHTS_DEFAULT);
}

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

// Weights for a graph: a scheme, or the optimizer.
Result<SparseMatrix> scheme_weights(const Graph& g, WeightScheme scheme) {
  if (scheme == WeightScheme::kOptimized) {
    GOSSIP_ASSIGN_OR_RETURN(auto opt, optimize_weights(g));
    return std::move(opt.weights);
  }
  return compute_weights(g, scheme);
}

// The placement (placement.h) that a generator block and the file's host entries describe;
// errors point at the field.
Result<Placement> placement_of(const pb::TopologyFile& file, const Locator& loc) {
  const auto& gen = file.generator();
  Placement p;
  p.host = gen.host().empty() ? "127.0.0.1" : gen.host();
  constexpr int kDefaultBasePort = 7000;
  if (gen.base_port() > 65535)
    return err(loc.top(file, "generator"), "base_port " + std::to_string(gen.base_port()) +
                                               " runs outside the port range 1..65535");
  p.base_port = gen.has_base_port() ? static_cast<int>(gen.base_port()) : kDefaultBasePort;
  if (file.host_size() == 0) return p;
  if (!gen.host().empty())
    return err(loc.nested(file, "generator", -1, "host"),
               "generator.host and host entries both place the nodes; give one of them");
  if (gen.has_base_port() && gen.base_port() == 0)
    return err(loc.nested(file, "generator", -1, "base_port"),
               "base_port: 0 means no addresses, but host entries place the nodes on ports "
               "(leave base_port out for 7000)");
  for (int k = 0; k < file.host_size(); ++k) {
    const pb::Host& h = file.host(k);
    const std::string entry = "host entry " + std::to_string(k + 1);
    if (Status s = check_host_name(h.name()); !s.is_ok())
      return err(h.name().empty() ? loc.top(file, "host", k) : loc.nested(file, "host", k, "name"),
                 entry + ": " + s.message());
    if (h.has_slots() && h.slots() < 1)
      return err(
          loc.nested(file, "host", k, "slots"),
          entry + " (" + h.name() + "): slots " + std::to_string(h.slots()) + " (must be >= 1)");
    if (h.has_base_port() && (h.base_port() == 0 || h.base_port() > 65535))
      return err(loc.nested(file, "host", k, "base_port"),
                 entry + " (" + h.name() + "): base_port " + std::to_string(h.base_port()) +
                     " is not in 1..65535");
    p.hosts.push_back({.host = h.name(),
                       .slots = h.has_slots() ? h.slots() : 1,
                       .base_port = static_cast<int>(h.base_port())});
  }
  return p;
}

// The addresses of n nodes placed by the file; an error points at the host entry at fault, or at
// the host list (or the generator) as a whole.
Result<std::vector<NodeAddress>> file_addresses(int n, const Placement& p,
                                                const pb::TopologyFile& file, const Locator& loc) {
  int bad = -1;
  auto addrs = place_nodes(n, p, &bad);
  if (addrs.is_ok()) return addrs;
  const std::string where = bad >= 0               ? loc.top(file, "host", bad)
                            : file.host_size() > 0 ? loc.top(file, "host", 0)
                                                   : loc.top(file, "generator");
  return err(where, addrs.status().message());
}

Result<Topology> from_generator(const pb::TopologyFile& file, const Locator& loc,
                                const std::string& filename, Env& env) {
  const auto& gen = file.generator();
  auto kind = kind_from_pb(gen.kind());
  if (!kind.is_ok())
    return err(loc.top(file, "generator"),
               "generator.kind is missing (RING, K_RING, TORUS, GRID, HYPERCUBE, COMPLETE, STAR, "
               "EXPONENTIAL, ONE_PEER_EXPONENTIAL, RANDOM_REGULAR, ERDOS_RENYI, EDGE_LIST)");
  if (gen.nodes() > static_cast<std::uint32_t>(kMaxGeneratorNodes))
    return err(loc.nested(file, "generator", -1, "nodes"),
               "generator.nodes: " + std::to_string(gen.nodes()) + " is more than the limit of " +
                   std::to_string(kMaxGeneratorNodes) + " nodes");
  GeneratorSpec spec;
  spec.kind = *kind;
  spec.nodes = static_cast<int>(gen.nodes());
  spec.rows = static_cast<int>(gen.rows());
  spec.cols = static_cast<int>(gen.cols());
  spec.k = gen.k() == 0 ? 1 : static_cast<int>(gen.k());
  spec.degree = static_cast<int>(gen.degree());
  spec.p = gen.p();
  spec.seed = gen.seed();
  spec.directed = gen.directed();
  GOSSIP_ASSIGN_OR_RETURN(const Placement placement, placement_of(file, loc));
  const WeightScheme scheme = scheme_from_pb(file.weights());
  const std::string where = loc.top(file, "generator");

  if (spec.kind != GeneratorKind::kEdgeList) {
    if (scheme == WeightScheme::kExplicit)
      return err(loc.top(file, "weights"),
                 "EXPLICIT weights need explicit edges (or an EDGE_LIST with weights)");
    // Placed after generating, so that the generator's own errors come first and a placement
    // error points at its host entry.
    auto t = Topology::generate(spec, scheme);
    if (!t.is_ok()) return err(where, t.status().message());
    GOSSIP_ASSIGN_OR_RETURN(std::vector<NodeAddress> addrs,
                            file_addresses(t->num_nodes(), placement, file, loc));
    GOSSIP_RETURN_IF_ERROR(t->set_addresses(std::move(addrs)));
    if (!file.name().empty()) t->set_name(file.name());
    return t;
  }
  if (gen.edge_list().empty()) return err(where, "EDGE_LIST generator needs edge_list: \"path\"");
  const std::string path =
      gen.edge_list().front() == '/' ? gen.edge_list() : dir_of(filename) + gen.edge_list();
  GOSSIP_ASSIGN_OR_RETURN(std::string text, env.read_file(path));
  GOSSIP_ASSIGN_OR_RETURN(EdgeList list, parse_edge_list(text, path));
  if (list.num_nodes > kMaxGeneratorNodes)
    return err(path, "node id " + std::to_string(list.num_nodes - 1) +
                         " means more than the limit of " + std::to_string(kMaxGeneratorNodes) +
                         " nodes");
  int n = list.num_nodes;
  if (spec.nodes > 0) {
    if (spec.nodes < n)
      return err(where, "nodes: " + std::to_string(spec.nodes) + " but " + path + " uses node id " +
                            std::to_string(n - 1));
    n = spec.nodes;
  }
  auto g = spec.directed ? Graph::directed(n, list.edges) : Graph::undirected(n, list.edges);
  if (!g.is_ok()) return err(path, g.status().message());
  SparseMatrix w;
  if (scheme == WeightScheme::kExplicit) {
    if (list.weights.empty())
      return err(loc.top(file, "weights"), "EXPLICIT weights but " + path + " has no weights");
    std::vector<Eigen::Triplet<double>> t;
    std::vector<double> off(static_cast<std::size_t>(n), 0.0);
    for (std::size_t e = 0; e < list.edges.size(); ++e) {
      const auto [a, b] = list.edges[e];
      t.emplace_back(b, a, list.weights[e]);
      off[b] += list.weights[e];
      if (!spec.directed) {
        t.emplace_back(a, b, list.weights[e]);
        off[a] += list.weights[e];
      }
    }
    for (int i = 0; i < n; ++i) t.emplace_back(i, i, 1.0 - off[i]);
    w.resize(n, n);
    w.setFromTriplets(t.begin(), t.end());
  } else {
    if (!list.weights.empty())
      return err(loc.top(file, "weights"),
                 path + " carries weights; set weights: EXPLICIT to use them");
    auto ws = scheme_weights(*g, scheme);
    if (!ws.is_ok()) return err(where, ws.status().message());
    w = std::move(*ws);
  }
  GOSSIP_ASSIGN_OR_RETURN(std::vector<NodeAddress> addrs, file_addresses(n, placement, file, loc));
  return Topology::from_parts(file.name(), std::move(*g), std::move(addrs), std::move(w), scheme);
}

Result<Topology> from_explicit(const pb::TopologyFile& file, const Locator& loc) {
  const int n = file.node_size();
  if (n == 0)
    return err(loc.file(),
               "no nodes: give a generator { ... } block or node { id address } entries");
  std::vector<NodeAddress> addrs(static_cast<std::size_t>(n));
  std::vector<int> first_seen(static_cast<std::size_t>(n), -1);
  for (int k = 0; k < n; ++k) {
    const auto& node = file.node(k);
    const std::string where = loc.nested(file, "node", k, "id");
    if (node.id() >= static_cast<std::uint32_t>(n))
      return err(where, "node id " + std::to_string(node.id()) + " outside 0.." +
                            std::to_string(n - 1) +
                            " (ids must be 0..n-1 for n = " + std::to_string(n) + " nodes)");
    const int id = static_cast<int>(node.id());
    if (first_seen[id] >= 0)
      return err(where, "node id " + std::to_string(id) + " repeated (first at " +
                            loc.nested(file, "node", first_seen[id], "id") + ")");
    first_seen[id] = k;
    auto a = parse_address(node.address());
    if (!a.is_ok())
      return err(loc.nested(file, "node", k, "address"),
                 "node " + std::to_string(id) + ": " + a.status().message());
    addrs[id] = std::move(*a);
  }
  std::map<std::string, int> seen_addr;
  for (int k = 0; k < n; ++k) {
    const int id = static_cast<int>(file.node(k).id());
    auto [it, fresh] = seen_addr.emplace(addrs[id].to_string(), k);
    if (!fresh)
      return err(loc.nested(file, "node", k, "address"),
                 "address " + addrs[id].to_string() + " already used by node " +
                     std::to_string(file.node(it->second).id()) + " (" +
                     loc.nested(file, "node", it->second, "address") + ")");
  }
  const bool directed = file.directed();
  WeightScheme scheme = scheme_from_pb(file.weights());
  const bool explicit_w = scheme == WeightScheme::kExplicit;
  std::vector<std::pair<int, int>> arcs;
  std::map<std::pair<int, int>, int> seen;
  std::vector<Eigen::Triplet<double>> t;
  std::vector<double> off(static_cast<std::size_t>(n), 0.0);
  std::vector<char> has_self(static_cast<std::size_t>(n), 0);
  for (int k = 0; k < file.edge_size(); ++k) {
    const auto& e = file.edge(k);
    const std::string where = loc.top(file, "edge", k);
    if (e.from() >= static_cast<std::uint32_t>(n) || e.to() >= static_cast<std::uint32_t>(n))
      return err(where, "edge " + std::to_string(e.from()) + " -> " + std::to_string(e.to()) +
                            " names a node outside 0.." + std::to_string(n - 1));
    const int a = static_cast<int>(e.from()), b = static_cast<int>(e.to());
    const std::string name = directed ? "arc " + std::to_string(a) + " -> " + std::to_string(b)
                                      : "edge " + std::to_string(a) + " -- " + std::to_string(b);
    if (explicit_w && !e.has_weight())
      return err(where, name + ": weights: EXPLICIT but this edge has no weight");
    if (!explicit_w && e.has_weight())
      return err(loc.nested(file, "edge", k, "weight"),
                 name + " has a weight but the file says weights: " +
                     std::string(weight_scheme_name(scheme)) + " (set weights: EXPLICIT)");
    if (a == b) {
      if (!explicit_w)
        return err(where, name +
                              ": self loop (the diagonal of W is implicit unless weights: "
                              "EXPLICIT)");
      if (has_self[a]) return err(where, "second self weight for node " + std::to_string(a));
      has_self[a] = 1;
      t.emplace_back(a, a, e.weight());
      continue;
    }
    const std::pair<int, int> key =
        directed ? std::make_pair(a, b) : std::make_pair(std::min(a, b), std::max(a, b));
    auto [it, fresh] = seen.emplace(key, k);
    if (!fresh)
      return err(where, name + " repeated (first at " + loc.top(file, "edge", it->second) + ")");
    arcs.emplace_back(a, b);
    if (explicit_w) {
      t.emplace_back(b, a, e.weight());
      off[b] += e.weight();
      if (!directed) {
        t.emplace_back(a, b, e.weight());
        off[a] += e.weight();
      }
    }
  }
  auto g = directed ? Graph::directed(n, arcs) : Graph::undirected(n, arcs);
  if (!g.is_ok()) return err(loc.file(), g.status().message());
  SparseMatrix w;
  if (explicit_w) {
    for (int i = 0; i < n; ++i)
      if (!has_self[i]) t.emplace_back(i, i, 1.0 - off[i]);
    w.resize(n, n);
    w.setFromTriplets(t.begin(), t.end());
  } else {
    auto ws = scheme_weights(*g, scheme);
    if (!ws.is_ok()) return err(loc.top(file, "weights"), ws.status().message());
    w = std::move(*ws);
  }
  return Topology::from_parts(file.name(), std::move(*g), std::move(addrs), std::move(w), scheme);
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

pb::TopologyFile generator_file(const std::string& name, const GeneratorSpec& spec,
                                WeightScheme scheme, const std::string& host, int base_port) {
  return generator_file(name, spec, scheme,
                        Placement{.host = host, .base_port = base_port, .hosts = {}});
}

pb::TopologyFile generator_file(const std::string& name, const GeneratorSpec& spec,
                                WeightScheme scheme, const Placement& placement) {
  pb::TopologyFile f;
  if (!name.empty()) f.set_name(name);
  auto* g = f.mutable_generator();
  g->set_kind(kind_to_pb(spec.kind));
  if (spec.kind == GeneratorKind::kTorus || spec.kind == GeneratorKind::kGrid) {
    g->set_rows(spec.rows);
    g->set_cols(spec.cols);
  } else if (spec.nodes > 0) {
    g->set_nodes(spec.nodes);
  }
  if (spec.kind == GeneratorKind::kKRing) g->set_k(spec.k);
  if (spec.kind == GeneratorKind::kRandomRegular) g->set_degree(spec.degree);
  if (spec.kind == GeneratorKind::kErdosRenyi) g->set_p(spec.p);
  if (spec.kind == GeneratorKind::kRandomRegular || spec.kind == GeneratorKind::kErdosRenyi)
    g->set_seed(spec.seed);
  if (spec.kind == GeneratorKind::kEdgeList) {
    g->set_edge_list(spec.edge_list_path);
    g->set_directed(spec.directed);
  }
  // base_port is written even when 0 (no addresses): unset would reload as 7000.
  g->set_base_port(placement.base_port);
  if (placement.hosts.empty()) g->set_host(placement.host);
  for (const HostSlots& h : placement.hosts) {
    auto* e = f.add_host();
    e->set_name(h.host);
    e->set_slots(h.slots);
    if (h.base_port > 0) e->set_base_port(h.base_port);
  }
  f.set_weights(scheme_to_pb(scheme));
  return f;
}

std::string to_text(const pb::TopologyFile& file) {
  std::string out;
  gp::TextFormat::Printer printer;
  printer.PrintToString(file, &out);
  return out;
}

Result<std::string> to_json(const pb::TopologyFile& file) {
  std::string out;
  gp::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  auto st = gp::util::MessageToJsonString(file, &out, opts);
  if (!st.ok()) return internal_error("JSON export: " + std::string(st.message()));
  return out;
}

Result<pb::TopologyFile> explicit_file(const Topology& topology) {
  if (topology.is_time_varying())
    return invalid_argument(
        "a time-varying topology has no single W; export it in generator form "
        "(host entries place its nodes on several hosts)");
  pb::TopologyFile f;
  f.set_name(topology.name());
  f.set_directed(topology.is_directed());
  const int n = topology.num_nodes();
  constexpr int kDefaultBasePort = 7000;
  if (topology.addresses().empty() && kDefaultBasePort + static_cast<std::int64_t>(n) - 1 > 65535) {
    return invalid_argument("an explicit file needs an address per node and " + std::to_string(n) +
                            " nodes do not fit ports " + std::to_string(kDefaultBasePort) +
                            "..65535; give a host list or write the generator form");
  }
  for (int i = 0; i < n; ++i) {
    auto* node = f.add_node();
    node->set_id(i);
    // Files always carry addresses; a topology built without them gets loopback ports 7000 + i.
    node->set_address(topology.addresses().empty()
                          ? "127.0.0.1:" + std::to_string(kDefaultBasePort + i)
                          : topology.addresses()[i].to_string());
  }
  // Schemes that are a function of the graph alone are re-derived on load (bit for bit); all
  // others are written out, diagonal included, so the reload has the same fingerprint.
  const WeightScheme s = topology.weight_scheme();
  const bool derived = s == WeightScheme::kDefault || s == WeightScheme::kMetropolisHastings ||
                       s == WeightScheme::kMaxDegree || s == WeightScheme::kUniform ||
                       s == WeightScheme::kLazyMetropolisHastings ||
                       s == WeightScheme::kLazyUniform;
  f.set_weights(derived ? scheme_to_pb(s) : pb::EXPLICIT);
  const auto& w = topology.mixing_matrix(0);
  for (auto [a, b] : topology.graph().edges()) {
    auto* e = f.add_edge();
    e->set_from(a);
    e->set_to(b);
    if (!derived) e->set_weight(w.coeff(b, a));
  }
  if (!derived)
    for (int i = 0; i < n; ++i) {
      auto* e = f.add_edge();
      e->set_from(i);
      e->set_to(i);
      e->set_weight(w.coeff(i, i));
    }
  return f;
}

Result<std::string> explicit_text(const Topology& topology) {
  GOSSIP_ASSIGN_OR_RETURN(auto f, explicit_file(topology));
  return to_text(f);
}

}  // namespace gossip::topology
