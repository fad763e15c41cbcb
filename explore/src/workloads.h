// What a design point runs (explore.h): an ONNX file, a model exported by one of workloads/'s exporters (once,
// into a cache), or a built-in single layer whose ONNX graph is built here with the ONNX protobuf API.
#pragma once

#include <iosfwd>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tpusim::explore {

struct WorkloadSpec {
  enum class Kind { File, Exporter, Layer };
  Kind kind = Kind::File;
  std::string name;  // File: the path; Exporter: the script's stem ("resnet"); Layer: "gemm", "conv", "attention"
  std::vector<std::pair<std::string, std::string>> params;  // in the order given (Exporter, Layer)
  std::string text;  // as given
};

// Parses --workload: a path ending in .onnx; "NAME[:k=v,...]" naming a built-in layer (gemm, conv, attention) or
// an exporter (workloads/NAME.py; aliases: resnet18, resnet50, ... = resnet:arch=NAME). Throws
// std::invalid_argument naming what is wrong.
WorkloadSpec parse_workload(const std::string& text);

// Whether `key` (a sweep key without a dot) is a parameter of the workload: a layer's parameter, any option of an
// exporter; a file has none. Throws std::invalid_argument listing the layer's parameters when it is not one.
void check_workload_key(const WorkloadSpec& w, const std::string& key);

// The spec with `overrides` (a point's workload parameters) applied.
WorkloadSpec with_params(const WorkloadSpec& w, const std::map<std::string, std::string>& overrides);

// A built-in layer as a serialized ONNX ModelProto (opset 13; float32 input(s), deterministic weights), and the
// name its program gets ("gemm_m512_n512_k512"). Throws std::invalid_argument for an unknown parameter or a value
// that is not a positive integer (or a shape that does not make sense, e.g. channels not divisible by groups).
std::pair<std::string, std::string> layer_model(const WorkloadSpec& w);

// An exporter's model: exported into `cache`/<name>[-k-v...]/ unless already there (a lock file makes concurrent
// sweeps export it once), found through the exporter's meta.json. Returns the .onnx path. `log` gets a line when it
// exports. Throws std::runtime_error when the exporter fails (with its last line of output).
std::string exported_model(const WorkloadSpec& w, const std::string& cache, std::ostream& log);

// Where exported workloads are cached by default: the build tree's explore-cache/.
std::string default_cache();

}  // namespace tpusim::explore
