// gossip-topo: generate, validate, analyze, weight, optimize, compare and export topologies, and
// advise what to run on a link (advise_command.h).
// Every subcommand takes topology files (text format or JSON) or, where it makes sense, a
// generator given on the command line (--kind ring --nodes 32). Exit codes: 0 success, 1 invalid
// input (the message names file:line:column or the node/edge), 2 usage error (an unknown or
// missing option, an option's value, a generator's parameters).
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "common/cli.h"
#include "common/escape.h"
#include "common/json.h"
#include "common/strings.h"
#include "common/units.h"
#include "topology/advise_command.h"
#include "topology/advisor.h"
#include "topology/link_flags.h"
#include "topology/optimize.h"
#include "topology/spectral.h"
#include "topology/topology.h"
#include "topology/topology.pb.h"
#include "topology/topology_file.h"
#include "topology/validate.h"

namespace gossip::topology {
namespace {

// ---------------------------------------------------------------- small helpers

std::string fmt(double v, int precision = 6) {
  if (std::isnan(v)) return "n/a";
  std::ostringstream s;
  s << std::setprecision(precision) << v;
  return s.str();
}

// A Graphviz double-quoted string holding `text` (a name from a topology file): escaped as a log
// line is (common/escape.h: a backslash doubled, a newline as backslash-n, other control bytes as
// backslash-xNN), then each double quote preceded by a backslash, so a name can neither end the
// string nor inject DOT statements.
std::string dot_quote(std::string_view text) {
  std::string out = "\"";
  for (char c : log_escape(text)) {
    if (c == '"') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream s;
  s << std::setprecision(17) << v;
  return s.str();
}

ValidationOptions no_spectrum() {
  ValidationOptions v;
  v.check_spectrum = false;
  return v;
}

// Invalid input (a topology file that breaks a rule, a spectrum that does not converge) or a
// runtime error: exit 1.
int fail(const Status& s) {
  std::cerr << "gossip-topo: " << log_escape(s.message()) << "\n";
  return 1;
}

// A bad command line (an option's value, a generator's parameters, a missing or extra argument):
// exit 2, as CLI11's own usage errors.
int usage(const Status& s) {
  std::cerr << "gossip-topo: " << log_escape(s.message()) << "\n";
  return gossip::kExitUsageError;
}

// ---------------------------------------------------------------- topology source

// Generators above this many edges take seconds to minutes to build and check (about 1-2.5 us
// per edge on a 2-core Zen 4 VM: random_regular 10^6 x 20 in 16 s, 10^7 x 20 in 246 s), so
// gossip-topo says so on stderr before it starts, with the memory the size check allows for.
constexpr double kNoticeEdges = 5e6;
constexpr double kSecondsPerEdge = 2.5e-6;

void note_long_generation(const GeneratorSpec& spec, int n) {
  const double edges = generator_edge_estimate(spec, n);
  if (edges < kNoticeEdges) return;
  const double gb = generator_bytes_estimate(spec, n) / 1e9;
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << "gossip-topo: note: " << generator_kind_name(spec.kind)
    << " with " << n << " nodes has about " << std::setprecision(0) << edges
    << " edges: building and checking it needs up to " << std::setprecision(1) << gb
    << " GB and may take " << std::setprecision(0) << edges * kSecondsPerEdge << " s or more\n";
  std::cerr << o.str();
}

// Either a file or a generator on the command line.
struct Source {
  std::string kind;
  int nodes = 0, rows = 0, cols = 0, k = 1, degree = 0;
  double p = 0;
  std::uint64_t seed = 0;
  std::string host = "127.0.0.1";
  int base_port = 0;
  std::string weights = "default";
  std::string hosts, hostfile;  // generate: a host list instead of --host
  // Whether --hosts / --hostfile were given at all: an empty value (an unset shell variable) is an
  // error, never "no host list" (which would put every node on --host).
  bool hosts_given = false, hostfile_given = false;

  // A subcommand that reads the topology `file` or, given --kind ..., generates one.
  void add(std::string& file, CLI::App* app) {
    app->add_option("file", file, "topology file (or use --kind ...)");
    add(app);
  }
  void add(CLI::App* app) {
    app->add_option("--kind", kind,
                    "generate instead of reading a file: ring, k_ring, torus, grid, hypercube, "
                    "complete, star, exponential, one_peer_exponential, random_regular, "
                    "erdos_renyi");
    add_generator_parameters(app);
    app->add_option("--host", host, "host of every generated node")->capture_default_str();
    app->add_option("--base-port", base_port,
                    "node i listens on base-port + i (0: no addresses, analysis only)")
        ->capture_default_str();
    add_weights(app);
  }
  // The generator's size and shape (generate and every --kind).
  void add_generator_parameters(CLI::App* app) {
    app->add_option("-n,--nodes", nodes, "number of nodes (generators)");
    app->add_option("--rows", rows, "torus/grid rows");
    app->add_option("--cols", cols, "torus/grid columns");
    app->add_option("-k,--k", k, "k_ring: neighbours on each side")->capture_default_str();
    app->add_option("--degree", degree, "random_regular: degree");
    app->add_option("-p,--p", p, "erdos_renyi: edge probability");
    app->add_option("--seed", seed, "random generators: seed")
        ->check(gossip::non_negative_integer())
        ->capture_default_str();
  }
  void add_weights(CLI::App* app) {
    app->add_option("-w,--weights", weights,
                    "weight scheme: metropolis_hastings (mh), max_degree, uniform, lazy, "
                    "lazy_uniform, best_constant, optimized (fdla), default")
        ->capture_default_str();
  }

  Result<GeneratorSpec> spec() const {
    GOSSIP_ASSIGN_OR_RETURN(const GeneratorKind parsed, parse_generator_kind(kind));
    return GeneratorSpec{.kind = parsed,
                         .nodes = nodes,
                         .rows = rows,
                         .cols = cols,
                         .k = k,
                         .degree = degree,
                         .p = p,
                         .seed = seed};
  }

  // Where the nodes live: --host, or the host list of --hosts / --hostfile. Errors name the flag
  // or the hostfile's file:line:column; `bad_input` is set when the hostfile's content is at fault
  // (exit 1) rather than the command line (exit 2).
  Result<Placement> placement(int n, bool& bad_input) const {
    Placement p{.host = host, .base_port = base_port, .hosts = {}};
    bad_input = false;
    std::string flag = "--hosts";
    if (hostfile_given) {
      if (trim(hostfile).empty()) return invalid_argument("--hostfile: empty file name");
      flag = "--hostfile " + hostfile;
      auto text = Env::system().read_file(hostfile);
      bad_input = true;
      if (!text.is_ok()) return text.status();
      GOSSIP_ASSIGN_OR_RETURN(p.hosts, parse_hostfile(*text, hostfile));
      bad_input = false;
      if (p.hosts.empty()) {
        return invalid_argument(flag +
                                ": no hosts in the file (one per line: host [slots=N] "
                                "[base_port=P]); leave out --hostfile to put every node on "
                                "--host");
      }
    } else if (hosts_given) {
      auto list = parse_host_list(hosts);
      if (!list.is_ok()) return list.status().with_context("--hosts");
      p.hosts = std::move(*list);
    }
    if (!p.hosts.empty()) {
      auto addrs = place_nodes(n, p);
      if (!addrs.is_ok()) return addrs.status().with_context(flag);
    }
    return p;
  }

  // Exit code for a failed load(file): 1 when a file was read (its content is the input), 2 when
  // the topology came from the command line (--kind and its parameters, or file and --kind mixed).
  int load_failed(const std::string& file, const Status& s) const {
    return !file.empty() && kind.empty() ? fail(s) : usage(s);
  }

  Result<Topology> load(const std::string& file, bool check_spectrum = true) const {
    ValidationOptions v;
    v.check_spectrum = check_spectrum;
    if (!file.empty()) {
      if (!kind.empty()) return invalid_argument("give a file or --kind, not both");
      return load_topology(file, Env::system(), v);
    }
    if (kind.empty()) return invalid_argument("no topology: give a file or --kind KIND");
    GOSSIP_ASSIGN_OR_RETURN(auto s, spec());
    GOSSIP_ASSIGN_OR_RETURN(auto scheme, parse_weight_scheme(weights));
    GOSSIP_ASSIGN_OR_RETURN(const int n, generator_num_nodes(s));
    note_long_generation(s, n);
    GOSSIP_ASSIGN_OR_RETURN(Topology t, Topology::generate(s, scheme, host, base_port));
    Status st = validate(t, v);
    if (!st.is_ok()) return invalid_argument("invalid topology: " + st.message());
    return t;
  }
};

// The cost model of analyze and compare: the message size and the link (link_flags.h, the flags
// gossip-sim takes too).
struct Model {
  std::string model = "4MB";
  LinkFlags link;
  void add(CLI::App* app) {
    app->add_option("--model-bytes", model, "message (model) size M, e.g. 4MB, 100MiB")
        ->capture_default_str();
    link.add(*app);
  }
  // Units as everywhere (common/units.h): a bare bandwidth is bits/s, a bare size bytes.
  Result<CostModel> get() const {
    CostModel m;
    auto bytes = parse_size_bytes(model);
    if (!bytes.is_ok()) return bytes.status().with_context("--model-bytes");
    GOSSIP_ASSIGN_OR_RETURN(const Link l, link.link());
    m.model_bytes = *bytes;
    m.bandwidth_bytes_per_s = l.bandwidth_bps / 8.0;
    m.latency_s = l.latency_s;
    return m;
  }
};

std::string report_json(const Topology& t, const SpectralReport& r, const Advice& a,
                        const CostModel& cost) {
  std::ostringstream o;
  o << "{\"name\": " << json_quote(t.name()) << ", \"nodes\": " << t.num_nodes()
    << ", \"directed\": " << (t.is_directed() ? "true" : "false")
    << ", \"time_varying\": " << (t.is_time_varying() ? "true" : "false")
    << ", \"period\": " << t.period()
    << ", \"weights\": " << json_quote(weight_scheme_name(t.weight_scheme()))
    << ", \"edges\": " << t.graph().num_edges() << ", \"max_degree\": " << a.max_degree
    << ", \"fingerprint\": " << json_quote(t.fingerprint())
    << ", \"method\": " << json_quote(spectral_method_name(r.method))
    << ", \"method_detail\": " << json_quote(r.detail) << ", \"residual\": " << json_num(r.residual)
    << ", \"seconds\": " << json_num(r.seconds)
    << ", \"symmetric\": " << (r.symmetric ? "true" : "false") << ", \"rho\": " << json_num(r.rho)
    << ", \"gap\": " << json_num(r.gap) << ", \"lambda2\": " << json_num(r.lambda2)
    << ", \"lambda_n\": " << json_num(r.lambda_n)
    << ", \"one_minus_lambda2\": " << json_num(r.one_minus_lambda2)
    << ", \"one_plus_lambda_n\": " << json_num(r.one_plus_lambda_n)
    << ", \"abs_lambda2\": " << json_num(r.abs_lambda2)
    << ", \"rho_per_iteration\": " << json_num(r.rho_per_iteration)
    << ", \"gap_per_iteration\": " << json_num(r.gap_per_iteration)
    << ", \"iterations_1000x\": " << a.iterations_1000x
    << ", \"model_bytes\": " << json_num(cost.model_bytes)
    << ", \"bandwidth_bps\": " << json_num(cost.bandwidth_bytes_per_s * 8)
    << ", \"latency_s\": " << json_num(cost.latency_s)
    << ", \"dpsgd_bytes_per_node\": " << json_num(a.dpsgd_bytes_per_node)
    << ", \"dpsgd_seconds\": " << json_num(a.dpsgd_seconds)
    << ", \"ps_server_bytes\": " << json_num(a.ps_server_bytes)
    << ", \"ps_seconds\": " << json_num(a.ps_seconds)
    << ", \"allreduce_bytes_per_node\": " << json_num(a.allreduce_bytes_per_node)
    << ", \"allreduce_seconds\": " << json_num(a.allreduce_seconds) << "}";
  return o.str();
}

// ---------------------------------------------------------------- subcommands

int cmd_generate(const Source& src, bool explicit_form, bool json, const std::string& name) {
  auto spec = src.spec();
  if (!spec.is_ok()) return usage(spec.status());
  auto scheme = parse_weight_scheme(src.weights);
  if (!scheme.is_ok()) return usage(scheme.status());
  auto n = generator_num_nodes(*spec);
  if (!n.is_ok()) return usage(n.status());
  bool bad_hostfile = false;
  auto placement = src.placement(*n, bad_hostfile);
  if (!placement.is_ok())
    return bad_hostfile ? fail(placement.status()) : usage(placement.status());
  note_long_generation(*spec, *n);
  // Build and validate first, so that a generator that cannot produce a valid topology fails here.
  auto t = Topology::generate(*spec, *scheme, *placement);
  if (!t.is_ok()) return usage(t.status());
  Status st = validate(*t);
  if (!st.is_ok()) return usage(invalid_argument("generated topology is invalid: " + st.message()));
  const std::string nm = name.empty() ? t->name() : name;
  if (explicit_form) {
    t->set_name(nm);
    auto f = explicit_file(*t);
    if (!f.is_ok()) return fail(f.status());
    if (json) {
      auto j = to_json(*f);
      if (!j.is_ok()) return fail(j.status());
      std::cout << *j;
    } else {
      std::cout << to_text(*f);
    }
    return 0;
  }
  auto f = generator_file(nm, *spec, *scheme, *placement);
  if (json) {
    auto j = to_json(f);
    if (!j.is_ok()) return fail(j.status());
    std::cout << *j;
  } else {
    std::cout << "# gossip-topo generate " << generator_kind_name(spec->kind) << ": "
              << t->num_nodes() << " nodes, fingerprint " << t->fingerprint() << "\n"
              << to_text(f);
  }
  return 0;
}

int cmd_validate(const std::vector<std::string>& files, bool json) {
  int rc = 0;
  for (const auto& f : files) {
    SpectralReport rep;
    auto t = load_topology(f, Env::system(), no_spectrum());
    Status st = t.is_ok() ? validate(*t, {}, &rep) : t.status();
    // load_topology's own errors name the file; the spectral check run here must too.
    if (t.is_ok() && !st.is_ok()) st = invalid_argument(f + ": invalid topology: " + st.message());
    if (json) {
      std::cout << "{\"file\": " << json_quote(f)
                << ", \"ok\": " << (st.is_ok() ? "true" : "false");
      if (st.is_ok())
        std::cout << ", \"nodes\": " << t->num_nodes() << ", \"rho\": " << json_num(rep.rho)
                  << ", \"fingerprint\": " << json_quote(t->fingerprint());
      else
        std::cout << ", \"error\": " << json_quote(st.message());
      std::cout << "}\n";
    } else if (st.is_ok()) {
      std::cout << "OK " << log_escape(f) << ": " << t->num_nodes() << " nodes, rho "
                << fmt(rep.rho, 10) << ", fingerprint " << t->fingerprint() << "\n";
    } else {
      std::cerr << "INVALID " << log_escape(st.message()) << "\n";
    }
    if (!st.is_ok()) rc = 1;
  }
  return rc;
}

// The spectral options of analyze and compare: the method, the time limit (0: none), and the
// estimate of a long Lanczos run said on stderr before it starts.
Result<SpectralOptions> spectral_options(const std::string& method, double time_limit_s) {
  GOSSIP_ASSIGN_OR_RETURN(const SpectralMethod m, parse_spectral_method(method));
  if (!(time_limit_s >= 0) || !std::isfinite(time_limit_s)) {
    return invalid_argument(
        "--time-limit: must be a finite number of seconds >= 0 (0: none), got " +
        fmt(time_limit_s));
  }
  SpectralOptions o;
  o.method = m;
  o.time_limit_s = time_limit_s;
  o.note = [](const std::string& text) { std::cerr << "gossip-topo: note: " << text << "\n"; };
  return o;
}

int cmd_analyze(const Source& src, const std::string& file, const std::string& method,
                double time_limit_s, const Model& model, bool json) {
  auto opt = spectral_options(method, time_limit_s);
  if (!opt.is_ok()) return usage(opt.status());
  auto cost = model.get();
  if (!cost.is_ok()) return usage(cost.status());
  // Validation without the spectral rule first; the analysis below is the spectral rule.
  auto t = src.load(file, /*check_spectrum=*/false);
  if (!t.is_ok()) return src.load_failed(file, t.status());
  auto r = analyze(*t, *opt);
  // Over --time-limit (estimated before it started): a request beyond a limit, as memory is.
  if (!r.is_ok() && r.status().code() == StatusCode::kDeadlineExceeded) return usage(r.status());
  if (!r.is_ok()) return fail(r.status());
  const Advice a = advise(*t, *r, *cost);
  if (json) {
    std::cout << report_json(*t, *r, a, *cost) << "\n";
  } else {
    const auto& g = t->graph();
    std::cout << "topology     " << log_escape(t->name().empty() ? file : t->name()) << ": "
              << t->num_nodes() << " nodes, " << g.num_edges()
              << (t->is_directed() ? " arcs" : " edges")
              << (t->is_time_varying()
                      ? ", time-varying (period " + std::to_string(t->period()) + ")"
                      : "")
              << ", weights " << weight_scheme_name(t->weight_scheme()) << "\n";
    std::cout << "degrees      min " << g.min_degree() << ", max " << g.max_degree()
              << " (per-iteration out-degree " << a.max_degree << ")\n";
    std::cout << "fingerprint  " << t->fingerprint() << "\n";
    std::cout << "method       " << spectral_method_name(r->method) << ": " << r->detail << "\n";
    std::cout << "accuracy     residual " << fmt(r->residual, 3) << ", " << fmt(r->seconds * 1e3, 4)
              << " ms\n";
    if (t->is_time_varying())
      std::cout << "rho          " << fmt(r->rho, 17) << "  (of one period's product)\n"
                << "per iter     rho " << fmt(r->rho_per_iteration, 17) << ", gap "
                << fmt(r->gap_per_iteration, 17) << "\n";
    else
      std::cout << "rho          " << fmt(r->rho, 17) << "  (||W - J||_2)\n";
    std::cout << "gap          " << fmt(r->gap, 17) << "\n";
    if (r->symmetric)
      std::cout << "lambda_2     " << fmt(r->lambda2, 17)
                << "  (1 - lambda_2 = " << fmt(r->one_minus_lambda2, 17) << ")\n"
                << "lambda_n     " << fmt(r->lambda_n, 17)
                << "  (1 + lambda_n = " << fmt(r->one_plus_lambda_n, 17) << ")\n";
    else
      std::cout << "|lambda_2|   " << fmt(r->abs_lambda2, 17) << "\n";
    std::cout << "mixing       "
              << (a.iterations_1000x < 0 ? std::string("never")
                                         : std::to_string(a.iterations_1000x))
              << " iterations of pure gossip shrink the consensus error 1000x\n";
    // Every time, size and bandwidth with its unit (common/units.h): the text a user reads.
    std::cout << "cost model   M = " << format_size_bytes(cost->model_bytes)
              << ", B = " << format_bandwidth_bps(cost->bandwidth_bytes_per_s * 8)
              << ", alpha = " << format_duration_s(cost->latency_s) << "\n";
    std::cout << "  D-PSGD         " << format_size_bytes(a.dpsgd_bytes_per_node)
              << " sent per node, " << format_duration_s(a.dpsgd_seconds)
              << " per iteration (overlaps compute)\n";
    std::cout << "  C-PSGD (PS)    " << format_size_bytes(a.ps_server_bytes)
              << " through the server, " << format_duration_s(a.ps_seconds) << " per iteration\n";
    std::cout << "  C-PSGD (ring)  " << format_size_bytes(a.allreduce_bytes_per_node)
              << " per node, " << format_duration_s(a.allreduce_seconds) << " per iteration\n";
  }
  return 0;
}

int cmd_weights(const Source& src, const std::string& file, std::int64_t iteration,
                const std::string& format) {
  if (iteration < 0) return usage(invalid_argument("--iteration must be >= 0"));
  if (format != "dense" && format != "triplets" && format != "json") {
    return usage(invalid_argument("--format must be dense, triplets or json"));
  }
  auto t = src.load(file);
  if (!t.is_ok()) return src.load_failed(file, t.status());
  const auto& w = t->mixing_matrix_rows(iteration);
  const int n = t->num_nodes();
  std::cout << std::setprecision(17);
  if (format == "dense") {
    if (n > 200) return usage(invalid_argument("--format dense refused for n > 200; use triplets"));
    const Eigen::MatrixXd d = Eigen::MatrixXd(w);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) std::cout << (j ? " " : "") << d(i, j);
      std::cout << "\n";
    }
  } else if (format == "triplets") {
    std::cout << "# i j W_ij (x_i <- sum_j W_ij x_j), iteration " << iteration % t->period()
              << "\n";
    for (int i = 0; i < n; ++i)
      for (Eigen::SparseMatrix<double, Eigen::RowMajor>::InnerIterator it(w, i); it; ++it)
        std::cout << i << " " << it.col() << " " << it.value() << "\n";
  } else if (format == "json") {
    std::cout << "{\"nodes\": " << n << ", \"iteration\": " << iteration % t->period()
              << ", \"entries\": [";
    bool first = true;
    for (int i = 0; i < n; ++i)
      for (Eigen::SparseMatrix<double, Eigen::RowMajor>::InnerIterator it(w, i); it; ++it) {
        std::cout << (first ? "" : ", ") << "[" << i << ", " << it.col() << ", "
                  << json_num(it.value()) << "]";
        first = false;
      }
    std::cout << "]}\n";
  }
  return 0;
}

int cmd_optimize(const Source& src, const std::string& file, int iterations, double time_limit,
                 const std::string& output, bool json) {
  if (iterations < 1) return usage(invalid_argument("--iterations must be >= 1"));
  if (!(time_limit > 0) || !std::isfinite(time_limit)) {
    return usage(invalid_argument("--time-limit must be a finite number of seconds > 0"));
  }
  auto t = src.load(file);
  if (!t.is_ok()) return src.load_failed(file, t.status());
  OptimizeOptions o;
  o.max_iterations = iterations;
  o.time_limit_s = time_limit;
  auto r = optimize_weights(t->graph(), o);
  if (!r.is_ok()) return fail(r.status());
  auto opt = Topology::from_parts(t->name(), t->graph(), t->addresses(), r->weights,
                                  WeightScheme::kOptimized);
  if (!opt.is_ok()) return fail(opt.status());
  SpectralReport rep;
  Status st = validate(*opt, {}, &rep);
  if (!st.is_ok()) return fail(internal_error("optimized W failed validation: " + st.message()));
  if (json) {
    std::cout << "{\"rho_metropolis_hastings\": " << json_num(r->rho_metropolis_hastings)
              << ", \"rho_optimized\": " << json_num(rep.rho)
              << ", \"gap_optimized\": " << json_num(rep.gap)
              << ", \"iterations\": " << r->iterations
              << ", \"best_iteration\": " << r->best_iteration << "}\n";
  } else {
    std::cout << "Metropolis–Hastings rho " << fmt(r->rho_metropolis_hastings, 12) << "\n"
              << "optimized (FDLA)    rho " << fmt(rep.rho, 12) << "  (gap " << fmt(rep.gap, 12)
              << ", best of " << r->iterations << " subgradient iterations at " << r->best_iteration
              << ")\n";
  }
  if (!output.empty()) {
    auto text = explicit_text(*opt);
    if (!text.is_ok()) return fail(text.status());
    Status ws = Env::system().write_file_atomic(output, *text);
    if (!ws.is_ok()) return fail(ws);
    if (!json) std::cout << "wrote " << output << "\n";
  }
  return 0;
}

int cmd_compare(const std::vector<std::string>& files, const std::vector<std::string>& kinds,
                int nodes, const std::string& method, double time_limit_s, const Model& model,
                bool json) {
  auto opt = spectral_options(method, time_limit_s);
  if (!opt.is_ok()) return usage(opt.status());
  auto cost = model.get();
  if (!cost.is_ok()) return usage(cost.status());
  std::vector<Topology> topos;
  std::vector<std::string> labels;
  for (const auto& f : files) {
    auto t = load_topology(f, Env::system(), no_spectrum());
    if (!t.is_ok()) return fail(t.status());
    labels.push_back(t->name().empty() ? f : t->name());
    topos.push_back(std::move(*t));
  }
  for (const auto& k : kinds) {
    Source s;
    s.kind = k;
    s.nodes = nodes;
    if (k == "torus" || k == "grid") {
      const int side = static_cast<int>(std::lround(std::sqrt(nodes)));
      if (side * side != nodes)
        return usage(invalid_argument("compare --kinds torus/grid needs a square --nodes"));
      s.rows = s.cols = side;
      s.nodes = 0;
    }
    if (k == "random_regular") s.degree = 4;
    if (k == "k_ring") s.k = 2;
    auto t = s.load("", false);
    if (!t.is_ok()) return usage(t.status().with_context(k));
    labels.push_back(k);
    topos.push_back(std::move(*t));
  }
  if (topos.empty()) return usage(invalid_argument("nothing to compare: give files or --kinds"));
  if (!json)
    std::cout << std::left << std::setw(24) << "topology" << std::right << std::setw(8) << "nodes"
              << std::setw(6) << "deg" << std::setw(14) << "gap/iter" << std::setw(12)
              << "iters 1000x" << std::setw(14) << "D-PSGD ms" << std::setw(14) << "PS ms"
              << std::setw(14) << "allreduce ms" << std::setw(10) << "method"
              << "\n";
  for (std::size_t i = 0; i < topos.size(); ++i) {
    auto r = analyze(topos[i], *opt);
    if (!r.is_ok() && r.status().code() == StatusCode::kDeadlineExceeded)
      return usage(r.status().with_context(labels[i]));
    if (!r.is_ok()) return fail(r.status().with_context(labels[i]));
    const Advice a = advise(topos[i], *r, *cost);
    if (json) {
      std::cout << report_json(topos[i], *r, a, *cost) << "\n";
      continue;
    }
    std::cout << std::left << std::setw(24) << log_escape(labels[i]) << std::right << std::setw(8)
              << a.num_nodes << std::setw(6) << a.max_degree << std::setw(14)
              << fmt(r->gap_per_iteration, 5) << std::setw(12)
              << (a.iterations_1000x < 0 ? std::string("never")
                                         : std::to_string(a.iterations_1000x))
              << std::setw(14) << fmt(a.dpsgd_seconds * 1e3, 5) << std::setw(14)
              << fmt(a.ps_seconds * 1e3, 5) << std::setw(14) << fmt(a.allreduce_seconds * 1e3, 5)
              << std::setw(10) << spectral_method_name(r->method) << "\n";
  }
  return 0;
}

int cmd_export(const Source& src, const std::string& file, bool dot, bool json, bool edges,
               bool pbtxt) {
  if (dot + json + edges + pbtxt != 1)
    return usage(invalid_argument("choose exactly one of --dot, --json, --edges, --pbtxt"));
  auto t = src.load(file);
  if (!t.is_ok()) return src.load_failed(file, t.status());
  const auto& g = t->graph();
  if (dot) {
    const bool d = g.is_directed();
    std::cout << (d ? "digraph" : "graph") << " " << dot_quote(t->name()) << " {\n";
    for (int i = 0; i < t->num_nodes(); ++i) {
      std::cout << "  " << i;
      if (!t->addresses().empty()) {
        std::cout << " [label="
                  << dot_quote(std::to_string(i) + "\n" + t->addresses()[i].to_string()) << "]";
      }
      std::cout << ";\n";
    }
    const auto& w = t->mixing_matrix(0);
    for (auto [a, b] : g.edges())
      std::cout << "  " << a << (d ? " -> " : " -- ") << b << " [label=\"" << fmt(w.coeff(b, a), 4)
                << "\"];\n";
    std::cout << "}\n";
    return 0;
  }
  if (edges) {
    const auto& w = t->mixing_matrix(0);
    std::cout << "# " << t->num_nodes() << " nodes; i j W[j][i]"
              << (g.is_directed() ? " (arcs)" : "") << "\n"
              << std::setprecision(17);
    for (auto [a, b] : g.edges()) std::cout << a << " " << b << " " << w.coeff(b, a) << "\n";
    return 0;
  }
  auto f = explicit_file(*t);
  if (!f.is_ok()) return fail(f.status());
  if (pbtxt) {
    std::cout << to_text(*f);
    return 0;
  }
  auto j = to_json(*f);
  if (!j.is_ok()) return fail(j.status());
  std::cout << *j << "\n";
  return 0;
}

// The command line: eight subcommands and the values they set.
struct CommandLine {
  CLI::App app{
      "gossip-topo: topologies for decentralized SGD — who averages with whom, with what weight, "
      "and how fast that mixes.\n"
      "Topology files are Protobuf text format (or JSON); see docs/topology.md.\n"
      "Examples:\n"
      "  gossip-topo generate ring --nodes 8 --base-port 7000 > ring8.pbtxt\n"
      "  gossip-topo analyze ring8.pbtxt\n"
      "  gossip-topo analyze --kind torus --rows 1000 --cols 1000 --json\n"
      "  gossip-topo compare --kinds ring,torus,hypercube,exponential --nodes 256\n"
      "  gossip-topo optimize barbell.pbtxt -o barbell-opt.pbtxt\n"
      "  gossip-topo export ring8.pbtxt --dot | dot -Tpng > ring8.png\n"
      "  gossip-topo advise --bandwidth 10Mbit/s --latency 5ms --model mlp --compute-time 0.45ms"};
  std::string file, method = "auto", output, name, format = "triplets";
  bool json = false, explicit_form = false, dot = false, edges = false, pbtxt = false;
  std::vector<std::string> files, kinds;
  std::int64_t iteration = 0;
  int iterations = 300;
  double time_limit = 60;              // optimize
  double spectrum_time_limit_s = 600;  // analyze, compare
  Source src;      // analyze, weights, optimize, compare, export: no addresses unless asked
  Source gen_src;  // generate: files are for deployments, so addresses by default
  Model model;
  AdviseOptions advise;  // advise
  CLI::App *gen, *val, *ana, *wts, *opt, *cmp, *exp, *adv;
  CLI::Option *hosts_opt = nullptr, *hostfile_opt = nullptr;

  CommandLine() {
    app.require_subcommand(1);
    gen_src.base_port = 7000;
    define_generate();
    val = app.add_subcommand("validate", "check files against every rule; exit 1 if any fails");
    val->add_option("files", files, "topology files")->required();
    val->add_flag("--json", json, "one JSON object per file");
    define_analyze_and_weights();
    define_optimize();
    define_compare();
    define_export();
    adv = add_advise_command(app, advise);
  }

 private:
  void define_generate() {
    gen = app.add_subcommand("generate", "print a topology file for a generator");
    gen->add_option("kind", gen_src.kind,
                    "ring, k_ring, torus, grid, hypercube, complete, star, exponential, "
                    "one_peer_exponential, random_regular, erdos_renyi")
        ->required();
    gen_src.add_generator_parameters(gen);
    auto* one_host =
        gen->add_option("--host", gen_src.host, "host of every node")->capture_default_str();
    hosts_opt = gen->add_option("--hosts", gen_src.hosts,
                                "host list h1[:slots],h2[:slots],... (IPv6: [fd00::1]:4): node k "
                                "runs on slot k, in order")
                    ->excludes(one_host);
    hostfile_opt = gen->add_option("--hostfile", gen_src.hostfile,
                                   "host list file, one 'host [slots=N] [base_port=P]' per line")
                       ->excludes(one_host)
                       ->excludes(hosts_opt);
    gen->add_option("--base-port", gen_src.base_port,
                    "node i listens on base-port + i; with a host list each host's nodes take "
                    "base-port, base-port + 1, ... (0: no addresses, analysis only)")
        ->capture_default_str();
    gen_src.add_weights(gen);
    gen->add_option("--name", name, "name written into the file");
    gen->add_flag("--explicit", explicit_form,
                  "write explicit nodes and edges (and weights when not re-derivable)");
    gen->add_flag("--json", json, "Protobuf JSON mapping instead of text format");
  }
  // analyze, compare: how to compute the spectrum, and the cost model's parameters.
  void add_spectrum_options(CLI::App* cmd) {
    cmd->add_option("-m,--method", method, "auto, exact, dense or lanczos")->capture_default_str();
    cmd->add_option("--time-limit", spectrum_time_limit_s,
                    "seconds the Lanczos method may take: an estimate above it is refused at "
                    "once (exit 2), a run reaching it stops (0: no limit)")
        ->capture_default_str();
    model.add(cmd);
  }
  void define_analyze_and_weights() {
    ana = app.add_subcommand(
        "analyze", "rho, gap, lambda_2, lambda_n, method and accuracy, mixing time and cost model");
    src.add(file, ana);
    add_spectrum_options(ana);
    ana->add_flag("--json", json, "machine-readable output");
    wts = app.add_subcommand("weights", "print W (row i = weights node i applies)");
    src.add(file, wts);
    wts->add_option("-t,--iteration", iteration, "iteration t for time-varying W(t)");
    wts->add_option("-f,--format", format, "triplets, dense (n <= 200) or json")
        ->capture_default_str();
  }
  void define_optimize() {
    opt = app.add_subcommand(
        "optimize", "FDLA weights by projected subgradient (never worse than Metropolis–Hastings)");
    src.add(file, opt);
    opt->add_option("--iterations", iterations, "subgradient iterations")->capture_default_str();
    opt->add_option("--time-limit", time_limit, "seconds")->capture_default_str();
    opt->add_option("-o,--output", output, "write the optimized topology (explicit weights) here");
    opt->add_flag("--json", json, "machine-readable output");
  }
  void define_compare() {
    cmp = app.add_subcommand("compare", "several topologies side by side");
    cmp->add_option("files", files, "topology files");
    cmp->add_option("--kinds", kinds, "generators to add, e.g. ring,torus,hypercube")
        ->delimiter(',');
    cmp->add_option("-n,--nodes", src.nodes, "nodes for --kinds")->capture_default_str();
    add_spectrum_options(cmp);
    cmp->add_flag("--json", json, "one JSON object per topology");
  }
  void define_export() {
    exp = app.add_subcommand("export", "write a topology as Graphviz, JSON, edge list or text");
    src.add(file, exp);
    exp->add_flag("--dot", dot, "Graphviz (edge labels are weights)");
    exp->add_flag("--json", json, "explicit topology, Protobuf JSON mapping");
    exp->add_flag("--edges", edges, "plain edge list 'i j weight'");
    exp->add_flag("--pbtxt", pbtxt, "explicit topology, text format");
  }
};

// Runs the subcommand that was given.
int run_subcommand(const CommandLine& c) {
  if (c.gen->parsed()) return cmd_generate(c.gen_src, c.explicit_form, c.json, c.name);
  if (c.val->parsed()) return cmd_validate(c.files, c.json);
  if (c.ana->parsed()) {
    return cmd_analyze(c.src, c.file, c.method, c.spectrum_time_limit_s, c.model, c.json);
  }
  if (c.wts->parsed()) return cmd_weights(c.src, c.file, c.iteration, c.format);
  if (c.opt->parsed()) {
    return cmd_optimize(c.src, c.file, c.iterations, c.time_limit, c.output, c.json);
  }
  if (c.cmp->parsed()) {
    return cmd_compare(c.files, c.kinds, c.src.nodes, c.method, c.spectrum_time_limit_s, c.model,
                       c.json);
  }
  if (c.exp->parsed()) return cmd_export(c.src, c.file, c.dot, c.json, c.edges, c.pbtxt);
  if (c.adv->parsed()) return run_advise(c.advise);
  return gossip::kExitUsageError;
}

int topo_main(int argc, char** argv) {
  CommandLine cl;
  if (const auto rc = gossip::parse_command_line(cl.app, argc, argv)) return *rc;
  cl.gen_src.hosts_given = cl.hosts_opt->count() > 0;
  cl.gen_src.hostfile_given = cl.hostfile_opt->count() > 0;
  return run_subcommand(cl);
}

}  // namespace
}  // namespace gossip::topology

int main(int argc, char** argv) {
  const int rc =
      gossip::guard_main("gossip-topo", [&] { return gossip::topology::topo_main(argc, argv); });
  return gossip::finish_stdout("gossip-topo", rc);
}
