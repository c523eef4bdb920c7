// Training config parsing, defaults, validation and overrides. Field locations for validation
// messages come from protobuf's ParseInfoTree, so a bad value is reported where the user wrote it.
#include "config/train_config.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <sstream>
#include <vector>

#include "common/strings.h"

namespace gossip::config {
namespace {

namespace gp = google::protobuf;

// Collects the text-format parser's errors as "name:line:col: message" (1-based).
class CollectErrors : public gp::io::ErrorCollector {
 public:
  explicit CollectErrors(std::string name) : name_(std::move(name)) {}
  void AddError(int line, gp::io::ColumnNumber column, const std::string& message) override {
    if (!text_.empty()) text_ += "\n";
    text_ +=
        name_ + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message;
  }
  const std::string& text() const { return text_; }

 private:
  std::string name_;
  std::string text_;
};

// One validation failure: dotted field path and what is wrong with it.
struct FieldError {
  std::string path;
  std::string message;
};

std::string fmt(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// "line:col: " of the field at dotted `path` in the parsed source, or "" when it was not written.
std::string location_of(const gp::TextFormat::ParseInfoTree* tree, const gp::Descriptor* desc,
                        const std::string& path) {
  std::string rest = path;
  while (tree != nullptr && desc != nullptr) {
    std::size_t dot = rest.find('.');
    std::string head = rest.substr(0, dot);
    std::size_t index_pos = head.find('[');
    int index = -1;
    if (index_pos != std::string::npos) {
      index = std::stoi(head.substr(index_pos + 1));
      head = head.substr(0, index_pos);
    }
    const gp::FieldDescriptor* field = desc->FindFieldByName(head);
    if (field == nullptr) return "";
    if (dot == std::string::npos) {
      gp::TextFormat::ParseLocation loc =
          tree->GetLocation(field, field->is_repeated() ? std::max(index, 0) : -1);
      if (loc.line < 0) return "";
      return std::to_string(loc.line + 1) + ":" + std::to_string(loc.column + 1) + ": ";
    }
    tree = tree->GetTreeForNested(field, field->is_repeated() ? std::max(index, 0) : -1);
    desc = field->message_type();
    rest = rest.substr(dot + 1);
  }
  return "";
}

void check_finite_range(std::vector<FieldError>& errors, const std::string& path, double v,
                        double lo, bool lo_open, double hi, bool hi_open, const char* expect) {
  bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (!ok) errors.push_back({path, std::string("must be ") + expect + ", got " + fmt(v)});
}

// AdamW's own fields, and no AdamW field on another kind.
void collect_adamw_errors(const pb::Optimizer& o, std::vector<FieldError>& e) {
  if (o.kind() != pb::Optimizer::ADAMW) {
    for (const auto& [set, path] :
         {std::pair{o.has_beta1(), "optimizer.beta1"}, std::pair{o.has_beta2(), "optimizer.beta2"},
          std::pair{o.has_eps(), "optimizer.eps"}}) {
      if (set) e.push_back({path, "set kind ADAMW to use it"});
    }
    return;
  }
  check_finite_range(e, "optimizer.beta1", o.beta1(), 0, false, 1, true, "in [0, 1)");
  check_finite_range(e, "optimizer.beta2", o.beta2(), 0, false, 1, true, "in [0, 1)");
  check_finite_range(e, "optimizer.eps", o.eps(), 0, true, HUGE_VAL, true, "finite and > 0");
}

// Local steps, the outer optimizer, compression, overlap, and which combinations run.
void collect_round_errors(const TrainConfig& c, std::vector<FieldError>& e) {
  if (c.local_steps() == 0) {
    e.push_back({"local_steps", "must be >= 1 (1: communicate every iteration)"});
  } else if (c.local_steps() > 1000000) {
    e.push_back({"local_steps", "must be at most 1000000, got " + std::to_string(c.local_steps())});
  }
  const pb::Outer& outer = c.outer();
  if (outer.kind() == pb::Outer::NONE) {
    if (outer.has_lr()) e.push_back({"outer.lr", "set outer.kind SGD or NESTEROV to use it"});
    if (outer.has_momentum()) {
      e.push_back({"outer.momentum", "set outer.kind SGD or NESTEROV to use it"});
    }
  } else {
    check_finite_range(e, "outer.lr", outer.lr(), 0, true, HUGE_VAL, true, "finite and > 0");
    if (outer.kind() == pb::Outer::NESTEROV) {
      check_finite_range(e, "outer.momentum", outer.momentum(), 0, true, 1, true, "in (0, 1)");
    } else {
      check_finite_range(e, "outer.momentum", outer.momentum(), 0, false, 1, true, "in [0, 1)");
    }
  }
  const pb::Compression& k = c.compression();
  const std::uint32_t block = k.block_floats();
  if (block < 16 || block > 65536 || (block & (block - 1)) != 0) {
    e.push_back({"compression.block_floats",
                 "must be a power of two in [16, 65536], got " + std::to_string(block)});
  }
  const bool allreduce = c.algorithm() == pb::TrainConfig::ALLREDUCE;
  if (allreduce && k.has_choco_step()) {
    e.push_back({"compression.choco_step",
                 "CHOCO-SGD is D-PSGD's; ALLREDUCE compresses with error feedback instead"});
  } else if (!allreduce) {
    check_finite_range(e, "compression.choco_step", k.choco_step(), 0, true, 1, false, "in (0, 1]");
  }
}

// PUSH_SUM (Stochastic Gradient Push) runs per iteration, uncompressed, under fail-stop or (with
// staleness) carry-on: the combinations it supports (docs/daemon.md, "Push-sum").
void collect_push_sum_errors(const TrainConfig& c, std::vector<FieldError>& e) {
  if (c.algorithm() != pb::TrainConfig::PUSH_SUM) {
    if (c.staleness() > 0) {
      e.push_back({"staleness",
                   "bounded staleness needs algorithm: PUSH_SUM (D-PSGD's doubly-stochastic mix "
                   "needs both ends of an edge at the same iteration, and ALLREDUCE runs in lock "
                   "step); leave staleness unset or 0"});
    }
    return;
  }
  const char* why = "PUSH_SUM communicates every iteration, uncompressed; ";
  if (c.local_steps() > 1) {
    e.push_back({"local_steps", std::string(why) + "leave local_steps unset or 1 (got " +
                                    std::to_string(c.local_steps()) + ")"});
  }
  if (c.outer().kind() != pb::Outer::NONE && c.outer().kind() != pb::Outer::KIND_UNSPECIFIED) {
    e.push_back({"outer.kind", std::string(why) + "no outer optimizer"});
  }
  if (c.compression().kind() != pb::Compression::NONE &&
      c.compression().kind() != pb::Compression::KIND_UNSPECIFIED) {
    e.push_back({"compression.kind", std::string(why) + "no compression"});
  }
  if (c.overlap()) e.push_back({"overlap", std::string(why) + "overlap is for local-step rounds"});
  if (c.fault().policy() == pb::Fault::CARRY_ON && c.staleness() == 0) {
    e.push_back({"fault.policy",
                 "CARRY_ON with PUSH_SUM needs staleness >= 1: the asynchronous mode carries on "
                 "without a lost neighbour and reconciles the link when it is back, lock step "
                 "fails stop; set staleness, or fault { policy: FAIL_STOP } (the default)"});
  }
  if (c.fault().standby_nodes_size() > 0) {
    e.push_back({"fault.standby_nodes",
                 "PUSH_SUM has no standby nodes: a node that joins later is admitted by D-PSGD's "
                 "membership protocol; list every node in the topology from the start"});
  }
}

// The `topology` block (gossipd run --from-env). Which generator names exist and what their
// parameters must be is gossip_topology's to say (generators.h); the daemon checks that when it
// builds the topology. Here: what any generator needs.
void collect_topology_errors(const TrainConfig& c, std::vector<FieldError>& e) {
  if (!c.has_topology()) return;
  const pb::TopologyGenerator& t = c.topology();
  if (t.generator().empty()) {
    e.push_back({"topology.generator",
                 "required: a gossip-topo generator, e.g. \"one_peer_exponential\" or \"ring\""});
  } else if (t.generator() == "edge_list") {
    e.push_back({"topology.generator",
                 "edge_list reads a file: write the topology file with gossip-topo and give it "
                 "to gossipd run instead"});
  }
  if (t.base_port() == 0 || t.base_port() > 65535) {
    e.push_back(
        {"topology.base_port", "required: the first port of each host's nodes, in 1..65535, got " +
                                   std::to_string(t.base_port())});
  }
  check_finite_range(e, "topology.p", t.p(), 0, false, 1, false, "in [0, 1]");
}

std::vector<FieldError> collect_errors(const TrainConfig& c) {
  std::vector<FieldError> e;
  constexpr double kInf = HUGE_VAL;
  using pb::Data;
  using pb::Model;

  // Model.
  if (c.model().kind() == Model::KIND_UNSPECIFIED) {
    e.push_back({"model.kind", "required: one of LEAST_SQUARES, LOGISTIC, SOFTMAX, MLP"});
  }
  if (c.model().kind() == Model::MLP && c.model().hidden_size() == 0) {
    e.push_back({"model.hidden", "an MLP needs at least one hidden layer width"});
  }
  if (c.model().kind() != Model::MLP && c.model().hidden_size() > 0) {
    e.push_back({"model.hidden", "hidden layers are for kind MLP only"});
  }
  for (int i = 0; i < c.model().hidden_size(); ++i) {
    if (c.model().hidden(i) == 0 || c.model().hidden(i) > (1u << 20)) {
      e.push_back({"model.hidden[" + std::to_string(i) + "]",
                   "must be in 1..1048576, got " + std::to_string(c.model().hidden(i))});
    }
  }
  check_finite_range(e, "model.l2", c.model().l2(), 0, false, kInf, true, "finite and >= 0");

  // Data.
  const Data& d = c.data();
  if (d.dataset() == Data::DATASET_UNSPECIFIED) {
    e.push_back({"data.dataset",
                 "required: one of FASHION_MNIST, SYNTHETIC_LEAST_SQUARES, SYNTHETIC_LOGISTIC"});
  } else if (d.dataset() == Data::FASHION_MNIST) {
    if (c.model().kind() == Model::LEAST_SQUARES || c.model().kind() == Model::LOGISTIC) {
      e.push_back({"model.kind", "FASHION_MNIST has 10 classes: use SOFTMAX or MLP"});
    }
  } else {
    if (d.num_examples() == 0) e.push_back({"data.num_examples", "must be > 0"});
    if (d.dim() == 0 || d.dim() > (1u << 24)) e.push_back({"data.dim", "must be in 1..16777216"});
    if (d.test_examples() == 0) e.push_back({"data.test_examples", "must be > 0"});
    check_finite_range(e, "data.noise", d.noise(), 0, false, kInf, true, "finite and >= 0");
    if (d.dataset() == Data::SYNTHETIC_LEAST_SQUARES && c.model().kind() != Model::LEAST_SQUARES &&
        c.model().kind() != Model::KIND_UNSPECIFIED) {
      e.push_back(
          {"model.kind", "SYNTHETIC_LEAST_SQUARES is a regression data set: use LEAST_SQUARES"});
    }
    if (d.dataset() == Data::SYNTHETIC_LOGISTIC && c.model().kind() == Model::LEAST_SQUARES) {
      e.push_back(
          {"model.kind", "SYNTHETIC_LOGISTIC has labels 0/1: use LOGISTIC, SOFTMAX or MLP"});
    }
    if (d.dataset() == Data::SYNTHETIC_LEAST_SQUARES && c.shard().scheme() != pb::Shard::IID) {
      e.push_back({"shard.scheme", "regression data sets can only be sharded IID"});
    }
  }

  // Shard.
  if (c.shard().scheme() == pb::Shard::DIRICHLET) {
    check_finite_range(e, "shard.dirichlet_alpha", c.shard().dirichlet_alpha(), 0, true, kInf, true,
                       "finite and > 0");
  }

  if (c.batch_size() == 0) e.push_back({"batch_size", "must be > 0"});
  if (c.batch_size() > (1u << 24)) e.push_back({"batch_size", "must be <= 16777216"});

  // Optimizer.
  const pb::Optimizer& o = c.optimizer();
  if (!o.has_lr()) {
    // No default: a forgotten learning rate would otherwise train nothing (lr 0 is pure gossip).
    e.push_back({"optimizer.lr", "required (the learning rate; 0 for pure gossip)"});
  } else {
    check_finite_range(e, "optimizer.lr", o.lr(), 0, false, kInf, true, "finite and >= 0");
  }
  if (o.kind() == pb::Optimizer::MOMENTUM || o.kind() == pb::Optimizer::NESTEROV) {
    check_finite_range(e, "optimizer.momentum", o.momentum(), 0, true, 1, true, "in (0, 1)");
  } else if (o.momentum() != 0) {
    e.push_back({"optimizer.momentum", "set kind MOMENTUM or NESTEROV to use momentum"});
  }
  check_finite_range(e, "optimizer.weight_decay", o.weight_decay(), 0, false, kInf, true,
                     "finite and >= 0");
  collect_adamw_errors(o, e);
  if (o.schedule() == pb::Optimizer::STEP) {
    if (o.step_size() == 0) e.push_back({"optimizer.step_size", "must be > 0 for schedule STEP"});
    check_finite_range(e, "optimizer.step_factor", o.step_factor(), 0, true, 1, false, "in (0, 1]");
  }
  if (o.schedule() == pb::Optimizer::COSINE) {
    check_finite_range(e, "optimizer.min_lr", o.min_lr(), 0, false, o.lr(), false,
                       "finite and in [0, lr]");
  }

  // Length of the run.
  check_finite_range(e, "epochs", c.epochs(), 0, false, 1e9, false, "finite and in [0, 1e9]");
  if (c.iterations() == 0 && c.epochs() == 0) {
    e.push_back({"iterations", "set iterations or epochs (> 0)"});
  } else if (c.iterations() != 0 && c.epochs() != 0) {
    e.push_back({"epochs", "set either iterations or epochs, not both"});
  }

  if (c.checkpoint().keep() == 0) e.push_back({"checkpoint.keep", "must be > 0"});
  if (c.metrics_every() == 0) e.push_back({"metrics_every", "must be > 0"});

  const pb::Timeouts& t = c.timeouts();
  if (t.connect_ms() == 0) e.push_back({"timeouts.connect_ms", "must be > 0 milliseconds"});
  if (t.deadline_ms() == 0) e.push_back({"timeouts.deadline_ms", "must be > 0 milliseconds"});
  if (t.heartbeat_ms() == 0) e.push_back({"timeouts.heartbeat_ms", "must be > 0 milliseconds"});
  if (t.deadline_ms() > 0 && t.heartbeat_ms() > t.deadline_ms()) {
    e.push_back({"timeouts.heartbeat_ms", "must not exceed timeouts.deadline_ms"});
  }
  if (c.fault().has_admit_margin() && c.fault().admit_margin() == 0) {
    e.push_back({"fault.admit_margin", "must be > 0 iterations"});
  }
  if (c.fault().admit_margin() > 1000000) {
    e.push_back({"fault.admit_margin", "must be at most 1000000 iterations"});
  }
  if (c.fault().standby_nodes_size() > 0 && c.fault().policy() == pb::Fault::FAIL_STOP) {
    e.push_back({"fault.standby_nodes",
                 "needs fault.policy CARRY_ON (a node that joins later is admitted by the "
                 "carry-on protocol; under FAIL_STOP every node must be there from the start)"});
  }
  collect_round_errors(c, e);
  collect_push_sum_errors(c, e);
  collect_topology_errors(c, e);
  return e;
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

// The field path of an override "path=value" (or of "path" alone): trimmed, '-' read as '_'.
std::string override_path(std::string_view assignment) {
  std::string path(trim(assignment.substr(0, assignment.find('='))));
  std::replace(path.begin(), path.end(), '-', '_');
  return path;
}

// One element of an override value in text-format syntax for `field`.
std::string literal(const gp::FieldDescriptor* field, std::string value) {
  value = std::string(trim(value));
  switch (field->cpp_type()) {
    case gp::FieldDescriptor::CPPTYPE_STRING:
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"') return value;
      return quote(value);
    case gp::FieldDescriptor::CPPTYPE_ENUM:
      std::transform(value.begin(), value.end(), value.begin(),
                     [](unsigned char ch) { return std::toupper(ch); });
      return value;
    default:
      return value;
  }
}

}  // namespace

Result<TrainConfig> parse_train_config(std::string_view text, const std::string& name) {
  TrainConfig config;
  gp::TextFormat::Parser parser;
  CollectErrors errors(name);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &config)) {
    return invalid_argument(errors.text().empty() ? name + ": not a valid training config"
                                                  : errors.text());
  }
  return config;
}

namespace {

// Local steps, the outer optimizer and compression (train_config.proto); AdamW's constants.
void fill_round_defaults(TrainConfig& c) {
  pb::Optimizer* o = c.mutable_optimizer();
  if (o->kind() == pb::Optimizer::ADAMW) {
    if (!o->has_beta1()) o->set_beta1(0.9);
    if (!o->has_beta2()) o->set_beta2(0.999);
    if (!o->has_eps()) o->set_eps(1e-8);
  }
  if (!c.has_local_steps()) c.set_local_steps(1);
  pb::Outer* outer = c.mutable_outer();
  if (outer->kind() == pb::Outer::KIND_UNSPECIFIED) outer->set_kind(pb::Outer::NONE);
  if (outer->kind() == pb::Outer::NESTEROV) {
    if (!outer->has_lr()) outer->set_lr(0.7);
    if (!outer->has_momentum()) outer->set_momentum(0.9);
  } else if (outer->kind() == pb::Outer::SGD) {
    if (!outer->has_lr()) outer->set_lr(1.0);
    if (!outer->has_momentum()) outer->set_momentum(0.0);
  }
  pb::Compression* k = c.mutable_compression();
  if (k->kind() == pb::Compression::KIND_UNSPECIFIED) k->set_kind(pb::Compression::NONE);
  if (!k->has_block_floats()) k->set_block_floats(256);
  if (!k->has_choco_step() && c.algorithm() != pb::TrainConfig::ALLREDUCE) k->set_choco_step(1.0);
}

}  // namespace

void fill_defaults(TrainConfig& c) {
  pb::Data* d = c.mutable_data();
  if (d->dataset() == pb::Data::FASHION_MNIST && d->path().empty()) {
    d->set_path("/usr/share/datasets/fashion-mnist");
  }
  if (d->dataset() == pb::Data::SYNTHETIC_LEAST_SQUARES ||
      d->dataset() == pb::Data::SYNTHETIC_LOGISTIC) {
    if (d->num_examples() == 0) d->set_num_examples(10000);
    if (d->dim() == 0) d->set_dim(20);
    if (d->test_examples() == 0) d->set_test_examples(2000);
    if (d->noise() == 0) d->set_noise(0.1);
  }
  if (!d->has_standardize()) d->set_standardize(true);
  if (c.shard().scheme() == pb::Shard::SCHEME_UNSPECIFIED)
    c.mutable_shard()->set_scheme(pb::Shard::IID);
  if (c.shard().dirichlet_alpha() == 0) c.mutable_shard()->set_dirichlet_alpha(0.5);
  pb::Optimizer* o = c.mutable_optimizer();
  if (o->kind() == pb::Optimizer::KIND_UNSPECIFIED) o->set_kind(pb::Optimizer::SGD);
  if (o->schedule() == pb::Optimizer::SCHEDULE_UNSPECIFIED)
    o->set_schedule(pb::Optimizer::CONSTANT);
  if (o->step_factor() == 0) o->set_step_factor(0.1);
  if (c.cpu_threads() == 0) c.set_cpu_threads(1);
  pb::Checkpoint* k = c.mutable_checkpoint();
  if (k->dir().empty()) k->set_dir("checkpoints");
  if (k->keep() == 0) k->set_keep(3);
  if (c.metrics_every() == 0) c.set_metrics_every(1);
  if (c.device() == pb::TrainConfig::DEVICE_UNSPECIFIED) c.set_device(pb::TrainConfig::AUTO);
  pb::Timeouts* t = c.mutable_timeouts();
  if (!t->has_connect_ms()) t->set_connect_ms(30000);
  if (!t->has_deadline_ms()) t->set_deadline_ms(10000);
  // At most the deadline; a deadline of 0 is reported on its own, not as a heartbeat of 0 too.
  if (!t->has_heartbeat_ms()) {
    const std::uint32_t deadline = t->deadline_ms();
    t->set_heartbeat_ms(deadline > 0 ? std::min<std::uint32_t>(1000, deadline) : 1000);
  }
  pb::Fault* f = c.mutable_fault();
  if (f->policy() == pb::Fault::POLICY_UNSPECIFIED) {
    // PUSH_SUM has no carry-on (collect_push_sum_errors): unset means fail-stop there.
    f->set_policy(c.algorithm() == pb::TrainConfig::PUSH_SUM ? pb::Fault::FAIL_STOP
                                                             : pb::Fault::CARRY_ON);
  }
  if (!f->has_admit_margin()) f->set_admit_margin(2);
  fill_round_defaults(c);
  if (c.has_topology()) {
    pb::TopologyGenerator* g = c.mutable_topology();
    if (g->weights().empty()) g->set_weights("default");
    if (g->k() == 0) g->set_k(1);
  }
}

namespace {

// The errors as one InvalidArgument (nothing: ok), each "name:line:col: path: message" (or
// "command line (override): path: message").
Status report_errors(const std::vector<FieldError>& errors, const std::string& name,
                     std::string_view text, const std::vector<std::string>& overrides) {
  if (errors.empty()) return Status::ok();
  // Re-parse the source with a location tree (cheap; configs are small) to point at each field.
  gp::TextFormat::ParseInfoTree tree;
  bool have_tree = false;
  if (!text.empty()) {
    TrainConfig scratch;
    gp::TextFormat::Parser parser;
    parser.WriteLocationsTo(&tree);
    have_tree = parser.ParseFromString(std::string(text), &scratch);
  }
  // The last override of a field (or of a message enclosing it) is where its value came from.
  const auto overridden_by = [&overrides](const std::string& path) -> const std::string* {
    const std::string* found = nullptr;
    for (const std::string& o : overrides) {
      const std::string p = override_path(o);
      const bool inside = path.size() > p.size() && path.compare(0, p.size(), p) == 0 &&
                          (path[p.size()] == '.' || path[p.size()] == '[');
      if (path == p || inside) found = &o;  // the field, one of its elements or a subfield
    }
    return found;
  };
  std::string message;
  for (const FieldError& e : errors) {
    if (!message.empty()) message += "\n";
    if (const std::string* o = overridden_by(e.path)) {
      message += "command line (" + *o + "): " + e.path + ": " + e.message;
      continue;
    }
    std::string loc =
        have_tree ? location_of(&tree, TrainConfig::descriptor(), e.path) : std::string();
    message += name + ":" + loc + (loc.empty() ? " " : "") + e.path + ": " + e.message;
  }
  return invalid_argument(message);
}

}  // namespace

Status validate_train_config(const TrainConfig& config, const std::string& name,
                             std::string_view text, const std::vector<std::string>& overrides,
                             ConfigUse use) {
  std::vector<FieldError> errors = collect_errors(config);
  // Whether a path is one of `fields` or inside one.
  const auto in = [](const std::string& path, std::initializer_list<const char*> fields) {
    for (const char* field : fields) {
      const std::size_t n = std::strlen(field);
      if (path.compare(0, n, field) == 0 && (path.size() == n || path[n] == '.')) return true;
    }
    return false;
  };
  if (use == ConfigUse::kRoundSettings) {
    std::erase_if(errors, [&in](const FieldError& e) {
      return !in(e.path, {"local_steps", "outer", "compression", "overlap"});
    });
  }
  if (use == ConfigUse::kAttachedTrainer) {
    std::erase_if(errors, [&in](const FieldError& e) {
      return in(e.path,
                {"model", "data", "shard", "batch_size", "optimizer", "epochs", "iterations"});
    });
    if (config.iterations() == 0) {
      errors.push_back({"iterations",
                        "attach mode needs iterations (the number of gossip rounds); epochs count "
                        "passes over gossipd's own data shard, which an attached trainer does not "
                        "use"});
    }
  }
  return report_errors(errors, name, text, overrides);
}

Status validate_against_topology(const TrainConfig& config, int num_nodes, const std::string& name,
                                 std::string_view text, const std::vector<std::string>& overrides) {
  std::vector<FieldError> errors;
  const auto& standby = config.fault().standby_nodes();
  for (int k = 0; k < standby.size(); ++k) {
    if (standby[k] >= static_cast<std::uint32_t>(num_nodes)) {
      std::string why = "node ";  // (appended: GCC 12 reports a false -Wrestrict on "x" + ...)
      why += std::to_string(standby[k]);
      why += " is not in the topology (nodes 0..";
      why += std::to_string(num_nodes - 1);
      why += ")";
      errors.push_back({"fault.standby_nodes[" + std::to_string(k) + "]", why});
    }
  }
  std::vector<std::uint32_t> distinct(standby.begin(), standby.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (errors.empty() && static_cast<int>(distinct.size()) >= num_nodes) {
    errors.push_back({"fault.standby_nodes",
                      "names every node of the topology; at least one must "
                      "start the job"});
  }
  return report_errors(errors, name, text, overrides);
}

Result<TrainConfig> load_train_config(const std::string& path, Env& env) {
  GOSSIP_ASSIGN_OR_RETURN(std::string text, env.read_file(path));
  GOSSIP_ASSIGN_OR_RETURN(TrainConfig config, parse_train_config(text, path));
  fill_defaults(config);
  GOSSIP_RETURN_IF_ERROR(validate_train_config(config, path, text));
  return config;
}

Status apply_override(TrainConfig& config, std::string_view assignment) {
  std::size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return invalid_argument("--set " + std::string(assignment) +
                            ": expected field.path=value (e.g. optimizer.lr=0.05)");
  }
  std::string path = override_path(assignment);
  std::string value(trim(assignment.substr(eq + 1)));

  gp::Message* message = &config;
  std::string rest = path;
  const gp::FieldDescriptor* field = nullptr;
  while (true) {
    std::size_t dot = rest.find('.');
    std::string head = rest.substr(0, dot);
    field = message->GetDescriptor()->FindFieldByName(head);
    if (field == nullptr) {
      std::string known;
      const gp::Descriptor* desc = message->GetDescriptor();
      for (int i = 0; i < desc->field_count(); ++i) {
        known += (i ? ", " : "") + desc->field(i)->name();
      }
      return invalid_argument("--set " + path + ": no field '" + head + "' in " +
                              desc->full_name() + " (fields: " + known + ")");
    }
    if (dot == std::string::npos) break;
    if (field->cpp_type() != gp::FieldDescriptor::CPPTYPE_MESSAGE || field->is_repeated()) {
      return invalid_argument("--set " + path + ": '" + head + "' is not a message field");
    }
    message = message->GetReflection()->MutableMessage(message, field);
    rest = rest.substr(dot + 1);
  }

  std::string text;
  if (field->cpp_type() == gp::FieldDescriptor::CPPTYPE_MESSAGE) {
    text =
        field->name() + " " + (value.empty() || value.front() != '{' ? "{ " + value + " }" : value);
  } else if (field->is_repeated()) {
    std::string list;
    std::stringstream items(value);
    std::string item;
    while (std::getline(items, item, ',')) {
      if (trim(item).empty()) continue;
      list += (list.empty() ? "" : ", ") + literal(field, item);
    }
    text = field->name() + ": [" + list + "]";
  } else {
    text = field->name() + ": " + literal(field, value);
  }

  gp::Message* scratch = message->New();
  std::unique_ptr<gp::Message> owner(scratch);
  scratch->CopyFrom(*message);
  message->GetReflection()->ClearField(scratch, field);
  gp::TextFormat::Parser parser;
  CollectErrors errors("--set " + path);
  parser.RecordErrorsTo(&errors);
  if (!parser.MergeFromString(text, scratch)) {
    return invalid_argument("--set " + path + "=" + value + ": bad value (" + errors.text() + ")");
  }
  message->CopyFrom(*scratch);
  return Status::ok();
}

std::string to_text(const TrainConfig& config) {
  std::string out;
  gp::TextFormat::PrintToString(config, &out);
  return out;
}

std::uint64_t total_iterations(const TrainConfig& config, std::size_t shard_size) {
  if (config.iterations() > 0) return config.iterations();
  double its = std::ceil(config.epochs() * static_cast<double>(shard_size) /
                         static_cast<double>(std::max<std::uint32_t>(config.batch_size(), 1)));
  return static_cast<std::uint64_t>(std::max(1.0, its));
}

}  // namespace gossip::config
