// Workloads of a sweep (workloads.h).
#include "workloads.h"

#include "tpusim/explore/explore.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <iostream>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TPUSIM_EXPORTERS_DIR
#define TPUSIM_EXPORTERS_DIR "workloads"
#endif
#ifndef TPUSIM_EXPLORE_CACHE
#define TPUSIM_EXPLORE_CACHE "build/explore-cache"
#endif
#ifndef TPUSIM_PYTHON
#define TPUSIM_PYTHON "/usr/bin/python3"
#endif

namespace tpusim::explore {

namespace fs = std::filesystem;

namespace {

// The built-in layers and their parameters with defaults, in the order they are listed.
struct LayerDef {
  const char* name;
  std::vector<std::pair<std::string, int64_t>> params;
  const char* what;
};
const std::vector<LayerDef>& layers() {
  static const std::vector<LayerDef> defs = {
      {"gemm", {{"m", 512}, {"n", 512}, {"k", 512}}, "y[m,n] = x[m,k] @ w[k,n] (MatMul with constant weights)"},
      {"conv",
       {{"batch", 1}, {"cin", 64}, {"h", 56}, {"w", 56}, {"cout", 64}, {"kernel", 3}, {"stride", 1}, {"pad", -1},
        {"groups", 1}},
       "y = Conv(x[batch,cin,h,w], w[cout,cin/groups,kernel,kernel]) + bias (pad -1: kernel/2)"},
      {"attention", {{"batch", 1}, {"heads", 8}, {"seq", 128}, {"dim", 64}},
       "softmax(q @ k^T / sqrt(dim)) @ v, q, k, v [batch,heads,seq,dim]"},
  };
  return defs;
}
const LayerDef* find_layer(const std::string& name) {
  for (const LayerDef& d : layers())
    if (name == d.name) return &d;
  return nullptr;
}

// Aliases of exporters: a torchvision classifier's name is resnet.py with --arch NAME.
const std::vector<std::string>& resnet_aliases() {
  static const std::vector<std::string> a = {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
                                             "mobilenet_v2", "tinycnn"};
  return a;
}

std::string exporter_path(const std::string& name) { return std::string(TPUSIM_EXPORTERS_DIR) + "/" + name + ".py"; }

bool plain_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
}

}  // namespace

std::string default_cache() { return TPUSIM_EXPLORE_CACHE; }

std::string layers_help() {
  std::string s;
  for (const LayerDef& d : layers()) {
    s += (s.empty() ? "" : "; ") + std::string(d.name) + ":";
    for (size_t i = 0; i < d.params.size(); ++i)
      s += (i ? "," : "") + d.params[i].first + "=" + std::to_string(d.params[i].second);
  }
  return s;
}

WorkloadSpec parse_workload(const std::string& text) {
  WorkloadSpec w;
  w.text = text;
  if (text.empty()) throw std::invalid_argument("explore needs --workload (an .onnx file, an exporter or a layer)");
  if (fs::path(text).extension() == ".onnx") {
    if (!fs::is_regular_file(text)) throw std::invalid_argument("--workload " + text + ": no such file");
    w.kind = WorkloadSpec::Kind::File;
    w.name = text;
    return w;
  }
  const size_t colon = text.find(':');
  w.name = text.substr(0, colon);
  if (colon != std::string::npos) {
    const std::string rest = text.substr(colon + 1);
    size_t pos = 0;
    while (pos <= rest.size()) {
      size_t comma = rest.find(',', pos);
      const std::string kv = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == kv.size())
        throw std::invalid_argument("--workload " + text + ": expected NAME:key=value,..., got '" + kv + "'");
      w.params.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  if (find_layer(w.name)) {
    w.kind = WorkloadSpec::Kind::Layer;
    for (const auto& [k, v] : w.params) check_workload_key(w, k);
    return w;
  }
  if (std::find(resnet_aliases().begin(), resnet_aliases().end(), w.name) != resnet_aliases().end()) {
    w.params.insert(w.params.begin(), {"arch", w.name});
    w.name = "resnet";
  }
  if (plain_name(w.name) && fs::is_regular_file(exporter_path(w.name))) {
    w.kind = WorkloadSpec::Kind::Exporter;
    return w;
  }
  std::string known = "layers: gemm, conv, attention; exporters:";
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(TPUSIM_EXPORTERS_DIR, ec))
    if (e.path().extension() == ".py" && e.path().stem() != "export_common") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  for (const auto& n : names) known += " " + n;
  throw std::invalid_argument("--workload " + text + ": not an .onnx file, a layer or an exporter (" + known + ")");
}

void check_workload_key(const WorkloadSpec& w, const std::string& key) {
  if (w.kind == WorkloadSpec::Kind::File)
    throw std::invalid_argument("'" + key + "' is not a chip parameter (section.key), and the workload " + w.text +
                                " (an ONNX file) has no parameters");
  if (w.kind == WorkloadSpec::Kind::Exporter) {
    if (!plain_name(key) || key == "out")
      throw std::invalid_argument("'" + key + "' cannot be an option of the exporter " + w.name);
    return;
  }
  const LayerDef* d = find_layer(w.name);
  for (const auto& [k, v] : d->params)
    if (k == key) return;
  std::string list;
  for (const auto& [k, v] : d->params) list += (list.empty() ? "" : ", ") + k;
  throw std::invalid_argument("'" + key + "' is not a parameter of the layer " + w.name + " (" + list +
                              "), nor a chip parameter (section.key)");
}

WorkloadSpec with_params(const WorkloadSpec& w, const std::map<std::string, std::string>& overrides) {
  WorkloadSpec out = w;
  for (const auto& [k, v] : overrides) {
    auto it = std::find_if(out.params.begin(), out.params.end(), [&](const auto& p) { return p.first == k; });
    if (it != out.params.end()) it->second = v;
    else out.params.emplace_back(k, v);
  }
  return out;
}

// ---- built-in layers ---------------------------------------------------------------------------------------

namespace {

void add_value_info(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& dims) {
  v->set_name(name);
  onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto_DataType_FLOAT);
  for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
}

// A float initializer of deterministic values in [-0.5, 0.5) (a fixed pattern: the values matter only to a
// functional run, which they keep in a sensible range).
void add_weights(onnx::GraphProto* g, const std::string& name, const std::vector<int64_t>& dims, float scale) {
  onnx::TensorProto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto_DataType_FLOAT);
  size_t n = 1;
  for (int64_t d : dims) t->add_dims(d), n *= static_cast<size_t>(d);
  std::string raw(n * 4, '\0');
  for (size_t i = 0; i < n; ++i) {
    const float f = scale * (static_cast<float>(i * 37 % 101) / 101.0f - 0.5f);
    std::memcpy(&raw[4 * i], &f, 4);
  }
  t->set_raw_data(std::move(raw));
}

onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, const std::vector<std::string>& in,
                          const std::vector<std::string>& out) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + std::to_string(g->node_size()));
  for (const auto& s : in) n->add_input(s);
  for (const auto& s : out) n->add_output(s);
  return n;
}

void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INTS);
  for (int64_t x : v) a->add_ints(x);
}
void set_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INT);
  a->set_i(v);
}

}  // namespace

std::pair<std::string, std::string> layer_model(const WorkloadSpec& w) {
  const LayerDef* d = find_layer(w.name);
  if (!d) throw std::invalid_argument("no built-in layer " + w.name);
  std::map<std::string, int64_t> p(d->params.begin(), d->params.end());
  for (const auto& [k, v] : w.params) {
    check_workload_key(w, k);
    size_t used = 0;
    int64_t x = 0;
    try {
      x = std::stoll(v, &used);
    } catch (const std::logic_error&) {
      used = 0;
    }
    if (used != v.size() || used == 0 || x < (k == "pad" ? 0 : 1) || x > (int64_t{1} << 24))
      throw std::invalid_argument("layer " + w.name + ": " + k + "=" + v + " is not " +
                                  (k == "pad" ? "an integer >= 0" : "a positive integer") + " (at most 2^24)");
    p[k] = x;
  }
  std::string name = w.name;
  for (const auto& [k, v] : d->params) name += "_" + k + std::to_string(p[k]);
  onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(13);
  m.set_producer_name("tpusim explore");
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name(name);
  if (w.name == "gemm") {
    const int64_t M = p["m"], N = p["n"], K = p["k"];
    add_value_info(g->add_input(), "x", {M, K});
    add_value_info(g->add_output(), "y", {M, N});
    add_weights(g, "w", {K, N}, 1.0f / static_cast<float>(std::max<int64_t>(1, K / 16)));
    add_node(g, "MatMul", {"x", "w"}, {"y"});
  } else if (w.name == "conv") {
    const int64_t B = p["batch"], C = p["cin"], H = p["h"], W = p["w"], O = p["cout"], R = p["kernel"],
                  S = p["stride"], G = p["groups"];
    const int64_t P = p["pad"] < 0 ? R / 2 : p["pad"];
    if (C % G || O % G) throw std::invalid_argument("layer conv: cin and cout must be multiples of groups");
    const int64_t OH = (H + 2 * P - R) / S + 1, OW = (W + 2 * P - R) / S + 1;
    if (H + 2 * P < R || W + 2 * P < R || OH < 1 || OW < 1)
      throw std::invalid_argument("layer conv: the kernel is larger than the padded input");
    add_value_info(g->add_input(), "x", {B, C, H, W});
    add_value_info(g->add_output(), "y", {B, O, OH, OW});
    add_weights(g, "w", {O, C / G, R, R}, 1.0f / static_cast<float>(std::max<int64_t>(1, C / G * R * R / 16)));
    add_weights(g, "b", {O}, 0.1f);
    onnx::NodeProto* n = add_node(g, "Conv", {"x", "w", "b"}, {"y"});
    set_ints(n, "kernel_shape", {R, R});
    set_ints(n, "strides", {S, S});
    set_ints(n, "pads", {P, P, P, P});
    set_int(n, "group", G);
  } else {  // attention
    const int64_t B = p["batch"], NH = p["heads"], L = p["seq"], D = p["dim"];
    for (const char* in : {"q", "k", "v"}) add_value_info(g->add_input(), in, {B, NH, L, D});
    add_value_info(g->add_output(), "y", {B, NH, L, D});
    onnx::TensorProto* sc = g->add_initializer();
    sc->set_name("scale");
    sc->set_data_type(onnx::TensorProto_DataType_FLOAT);
    sc->add_float_data(1.0f / std::sqrt(static_cast<float>(D)));
    set_ints(add_node(g, "Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
    add_node(g, "MatMul", {"q", "kt"}, {"s"});
    add_node(g, "Mul", {"s", "scale"}, {"s2"});
    set_int(add_node(g, "Softmax", {"s2"}, {"p"}), "axis", -1);
    add_node(g, "MatMul", {"p", "v"}, {"y"});
  }
  return {m.SerializeAsString(), name + ".onnx"};
}

// ---- exporters -----------------------------------------------------------------------------------------------

namespace {

// The folder a finished export is in: `dir` when it holds meta.json, else its one subfolder that does.
fs::path model_in(const fs::path& dir, const std::string& what) {
  auto model = [&](const fs::path& d) -> fs::path {
    std::ifstream in(d / "meta.json");
    nlohmann::json meta = nlohmann::json::parse(in, nullptr, false);
    if (meta.is_discarded() || !meta.contains("model")) throw std::runtime_error(what + ": " + (d / "meta.json").string() + " names no model");
    return d / meta["model"].get<std::string>();
  };
  if (fs::is_regular_file(dir / "meta.json")) return model(dir);
  std::vector<fs::path> subs, onnx;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && fs::is_regular_file(e.path() / "meta.json")) subs.push_back(e.path());
    if (e.is_regular_file() && e.path().extension() == ".onnx") onnx.push_back(e.path());
  }
  std::sort(subs.begin(), subs.end());
  if (subs.size() == 1) return model(subs[0]);
  if (subs.empty() && onnx.size() == 1) return onnx[0];  // an exporter without meta.json (mlp.py)
  if (subs.empty()) throw std::runtime_error(what + " wrote no model into " + dir.string());
  std::string list;
  for (const auto& s : subs) list += " " + s.filename().string();
  throw std::runtime_error(what + " wrote several models (" + list.substr(1) +
                           "): choose one with the exporter's option (e.g. gpt2:mode=prefill)");
}

}  // namespace

std::string exported_model(const WorkloadSpec& w, const std::string& cache, std::ostream& log) {
  std::string leaf = w.name;
  std::vector<std::string> args = {TPUSIM_PYTHON, exporter_path(w.name)};
  for (const auto& [k, v] : w.params) {
    std::string safe = v;
    for (char& c : safe)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
    leaf += "-" + k + "-" + safe;
    std::string opt = k;
    std::replace(opt.begin(), opt.end(), '_', '-');
    args.push_back("--" + opt);
    args.push_back(v);
  }
  const fs::path root = cache.empty() ? fs::path(default_cache()) : fs::path(cache), dir = root / leaf;
  const std::string what = "exporter " + w.text;
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return model_in(dir, what).string();
  fs::create_directories(root);
  // One export at a time per cache (another sweep may be exporting the same model).
  const std::string lock_path = (root / ".lock").string();
  const int lock = open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (lock < 0) throw std::runtime_error("cannot open " + lock_path + ": " + std::strerror(errno));
  while (flock(lock, LOCK_EX) != 0 && errno == EINTR) {}
  struct Unlock {
    int fd;
    ~Unlock() { close(fd); }
  } unlock{lock};
  if (fs::is_directory(dir, ec)) return model_in(dir, what).string();
  const fs::path tmp = root / (leaf + ".tmp");
  fs::remove_all(tmp, ec);
  args.push_back("--out");
  args.push_back(tmp.string());
  std::string cmd;
  for (const auto& a : args) cmd += (cmd.empty() ? "" : " ") + a;
  log << "explore: exporting " << w.text << " into " << dir.string() << " (once): " << cmd << std::endl;
  const fs::path out_log = root / (leaf + ".log");
  std::cout.flush();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    const int fd = open(out_log.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream in(out_log);
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    fs::remove_all(tmp, ec);
    throw std::runtime_error(what + " failed (" + cmd + "): " + (last.empty() ? "no output" : last) + " (log: " +
                             out_log.string() + ")");
  }
  fs::rename(tmp, dir);
  return model_in(dir, what).string();
}

}  // namespace tpusim::explore
