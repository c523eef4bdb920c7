// Placement: addresses, host lists and hostfiles. One rule places nodes on hosts (placement.h), so
// a topology file, the command line and a hostfile cannot disagree on where node k lives.
#include "topology/placement.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <map>

#include "common/strings.h"

namespace gossip::topology {
namespace {

// An integer in [lo, hi], the whole of `text`.
bool parse_int(std::string_view text, std::int64_t lo, std::int64_t hi, int& out) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) return false;
  out = static_cast<int>(v);
  return true;
}

}  // namespace

std::string NodeAddress::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<NodeAddress> parse_address(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    return invalid_argument("address '" + std::string(text) + "' is not host:port");
  std::string_view host = text.substr(0, colon);
  const std::string_view port = text.substr(colon + 1);
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3)
      return invalid_argument("address '" + std::string(text) + "': unbalanced [ ] around host");
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return invalid_argument("address '" + std::string(text) +
                            "': write IPv6 hosts in brackets, [::1]:7000");
  }
  int p = 0;
  if (!parse_int(port, 1, 65535, p))
    return invalid_argument("address '" + std::string(text) + "': port '" + std::string(port) +
                            "' is not in 1..65535");
  return NodeAddress{std::string(host), p};
}

Status check_host_name(std::string_view host) {
  const std::string quoted = "host '" + std::string(host) + "'";
  if (host.empty()) return invalid_argument("empty host name");
  if (host.size() > 253) return invalid_argument(quoted + " is longer than 253 characters");
  if (host.find(':') != std::string_view::npos) {
    in6_addr parsed;
    if (inet_pton(AF_INET6, std::string(host).c_str(), &parsed) != 1)
      return invalid_argument(quoted +
                              ": ':' belongs to IPv6 addresses only, and this is none (a host "
                              "carries no port; slots and ports are separate fields)");
    return Status::ok();
  }
  for (const char c : host)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      return invalid_argument(
          quoted + ": '" + std::string(1, c) +
          "' is not allowed (letters, digits, '-', '_', '.'; IPv6 hex and ':')");
  // Labels (RFC 1123): 1 to 63 characters, no '-' at either end; one trailing '.' (a fully
  // qualified name) is allowed.
  std::string_view name = host.back() == '.' ? host.substr(0, host.size() - 1) : host;
  std::string_view last;
  for (std::size_t b = 0; b <= name.size();) {
    const std::size_t e = std::min(name.find('.', b), name.size());
    const std::string_view label = name.substr(b, e - b);
    if (label.empty())
      return invalid_argument(quoted + ": empty label (a '.' at the start or two in a row)");
    if (label.size() > 63)
      return invalid_argument(quoted + ": label '" + std::string(label) +
                              "' is longer than 63 characters");
    if (label.front() == '-' || label.back() == '-')
      return invalid_argument(quoted + ": label '" + std::string(label) +
                              "' starts or ends with '-'");
    last = label;
    b = e + 1;
  }
  // A name whose last label is all digits is no host name, so it must be an IPv4 address; the
  // resolver would otherwise read "1.2.3" as 1.2.0.3 or fail on "999.1.1.1" only when a node dials.
  const bool numeric = std::all_of(
      last.begin(), last.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (numeric) {
    in_addr parsed;
    if (inet_pton(AF_INET, std::string(host).c_str(), &parsed) != 1)
      return invalid_argument(quoted +
                              " is not an IPv4 address (four numbers 0..255 without leading "
                              "zeros, a.b.c.d) and cannot be a host name (its last label is a "
                              "number)");
  }
  return Status::ok();
}

std::string host_key(std::string_view host) {
  const std::string h(host);
  in6_addr v6;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    char text[INET6_ADDRSTRLEN];
    if (inet_ntop(AF_INET6, &v6, text, sizeof text) != nullptr) return text;
  }
  std::string key;
  for (char c : h) key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!key.empty() && key.back() == '.') key.pop_back();
  return key;
}

Result<std::vector<NodeAddress>> place_nodes(int n, const Placement& placement, int* bad_entry) {
  if (bad_entry) *bad_entry = -1;
  std::vector<NodeAddress> out;
  const int base = placement.base_port;
  if (base < 0 || base > 65535)
    return invalid_argument("base_port " + std::to_string(base) + " is not in 0..65535");
  if (placement.hosts.empty()) {
    if (base == 0) return out;
    if (base + std::int64_t{n} - 1 > 65535)
      return invalid_argument("base_port " + std::to_string(base) + " + " + std::to_string(n) +
                              " nodes runs outside the port range 1..65535 (base_port 0: no "
                              "addresses)");
    out.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) out.push_back({placement.host, base + i});
    return out;
  }
  if (base == 0)
    return invalid_argument(
        "base_port 0 means no addresses, but a host list places nodes on ports");
  std::int64_t slots = 0;
  for (std::size_t e = 0; e < placement.hosts.size(); ++e) {
    const HostSlots& h = placement.hosts[e];
    if (bad_entry) *bad_entry = static_cast<int>(e);
    if (Status s = check_host_name(h.host); !s.is_ok()) return s;
    if (h.slots < 1)
      return invalid_argument("host " + h.host + ": slots " + std::to_string(h.slots) +
                              " (must be >= 1)");
    if (h.base_port < 0 || h.base_port > 65535)
      return invalid_argument("host " + h.host + ": base_port " + std::to_string(h.base_port) +
                              " is not in 1..65535");
    slots += h.slots;
  }
  if (bad_entry) *bad_entry = -1;
  if (slots < n)
    return invalid_argument("the host list has " + std::to_string(slots) + " slots (" +
                            std::to_string(placement.hosts.size()) + " hosts) for " +
                            std::to_string(n) +
                            " nodes; node k runs on slot k, so give more hosts or slots");
  out.reserve(static_cast<std::size_t>(n));
  std::map<std::string, std::pair<int, int>> taken;  // host:port -> (node, entry)
  for (std::size_t e = 0; e < placement.hosts.size() && static_cast<int>(out.size()) < n; ++e) {
    const HostSlots& h = placement.hosts[e];
    const int first = h.base_port > 0 ? h.base_port : base;
    const int count =
        static_cast<int>(std::min<std::int64_t>(h.slots, n - std::int64_t(out.size())));
    if (bad_entry) *bad_entry = static_cast<int>(e);
    if (first + std::int64_t{count} - 1 > 65535)
      return invalid_argument("host " + h.host + ": base_port " + std::to_string(first) + " + " +
                              std::to_string(count) + " nodes runs past port 65535");
    for (int s = 0; s < count; ++s) {
      NodeAddress a{h.host, first + s};
      const int node = static_cast<int>(out.size());
      auto [it, fresh] = taken.emplace(NodeAddress{host_key(h.host), a.port}.to_string(),
                                       std::make_pair(node, static_cast<int>(e)));
      if (!fresh)
        return invalid_argument(
            "node " + std::to_string(node) + " (host entry " + std::to_string(e + 1) +
            ") and node " + std::to_string(it->second.first) + " (host entry " +
            std::to_string(it->second.second + 1) + ") would both listen on " + a.to_string() +
            (it->first == a.to_string() ? "" : " (the same as " + it->first + ")") +
            "; list a host once with more slots, or give it another base_port");
      out.push_back(std::move(a));
    }
  }
  if (bad_entry) *bad_entry = -1;
  return out;
}

Result<HostSlots> parse_host_entry(std::string_view text) {
  const std::string quoted = "host entry '" + std::string(text) + "'";
  HostSlots h;
  std::string_view host = text, slots;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos)
      return invalid_argument(quoted + ": unbalanced [ ] around an IPv6 host");
    host = text.substr(1, close - 1);
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return invalid_argument(quoted + ": expected ':SLOTS' after ']'");
      slots = rest.substr(1);
      if (slots.empty()) return invalid_argument(quoted + ": no slot count after ':'");
    }
  } else if (const auto colon = text.find(':'); colon != std::string_view::npos) {
    if (text.find(':', colon + 1) != std::string_view::npos)
      return invalid_argument(quoted + ": write IPv6 hosts in brackets, [fd00::1]:4");
    // Blanks around the ':' are the list's layout, not part of the host or the count.
    host = trim(text.substr(0, colon));
    slots = trim(text.substr(colon + 1));
    if (slots.empty()) return invalid_argument(quoted + ": no slot count after ':'");
  }
  if (Status s = check_host_name(host); !s.is_ok())
    return invalid_argument(quoted + ": " + s.message());
  h.host = std::string(host);
  if (!slots.empty() && !parse_int(slots, 1, 1'000'000'000, h.slots))
    return invalid_argument(quoted + ": slots '" + std::string(slots) +
                            "' is not a whole number >= 1");
  return h;
}

Result<std::vector<HostSlots>> parse_host_list(std::string_view text) {
  std::vector<HostSlots> out;
  std::size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    const std::string_view item = trim(text.substr(start, comma - start));
    if (item.empty())
      return invalid_argument("empty host entry in '" + std::string(text) + "' (entry " +
                              std::to_string(out.size() + 1) + ")");
    GOSSIP_ASSIGN_OR_RETURN(HostSlots h, parse_host_entry(item));
    out.push_back(std::move(h));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<std::vector<HostSlots>> parse_hostfile(std::string_view text, const std::string& filename) {
  std::vector<HostSlots> out;
  int line_no = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    auto nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    ++line_no;
    if (const auto hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    // Fields separated by whitespace, each with its column for messages.
    std::vector<std::pair<std::string_view, int>> fields;
    for (std::size_t i = 0; i < line.size();) {
      while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      const std::size_t b = i;
      while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      if (i > b) fields.emplace_back(line.substr(b, i - b), static_cast<int>(b) + 1);
    }
    if (fields.empty()) continue;
    auto where = [&](int column) {
      return filename + ":" + std::to_string(line_no) + ":" + std::to_string(column) + ": ";
    };
    HostSlots h;
    std::string_view host = fields[0].first;
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
      host = host.substr(1, host.size() - 2);
    if (Status s = check_host_name(host); !s.is_ok())
      return invalid_argument(where(fields[0].second) + s.message());
    h.host = std::string(host);
    bool seen_slots = false, seen_port = false;
    for (std::size_t f = 1; f < fields.size(); ++f) {
      const auto [field, column] = fields[f];
      const auto eq = field.find('=');
      const std::string_view key = field.substr(0, eq);
      const std::string_view value = eq == std::string_view::npos ? "" : field.substr(eq + 1);
      if (key == "slots") {
        if (seen_slots) return invalid_argument(where(column) + "slots given twice");
        seen_slots = true;
        if (!parse_int(value, 1, 1'000'000'000, h.slots))
          return invalid_argument(where(column) + "slots '" + std::string(value) +
                                  "' is not a whole number >= 1");
      } else if (key == "base_port") {
        if (seen_port) return invalid_argument(where(column) + "base_port given twice");
        seen_port = true;
        if (!parse_int(value, 1, 65535, h.base_port))
          return invalid_argument(where(column) + "base_port '" + std::string(value) +
                                  "' is not in 1..65535");
      } else {
        return invalid_argument(where(column) + "'" + std::string(field) +
                                "': expected slots=N or base_port=P after the host");
      }
    }
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace gossip::topology
