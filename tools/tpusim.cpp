// tpusim: the command-line program. Thin: parsing and printing; the work is in the libraries.
#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "cli.h"
#include "compare.h"
#include "validate.h"
#include "tpusim/explore/explore.h"
#include "tpusim/isa/assembler.h"
#include "tpusim/runtime/profile.h"
#include "tpusim/runtime/runtime.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace tpusim;

namespace tpusim::cli {
namespace {

const char* kUsage =
    "usage: tpusim <command> [options]\n"
    "\n"
    "commands:\n"
    "  demo                         run the built-in demo (a GEMM kernel and a small MLP) and check the results\n"
    "  run FILE                     run a kernel (.s), a model (.onnx) or a program (.tpub)\n"
    "  asm FILE.s -o FILE.tpub      assemble a kernel into the binary program format\n"
    "  disasm FILE.tpub [-o FILE.s] disassemble a program\n"
    "  compile FILE.onnx -o FILE.tpub  compile an ONNX model (--report: per-node cycles and roofline bounds)\n"
    "  config --list | --show [NAME]   list the chip presets, or show every parameter of one\n"
    "  profile FILE                 run a model, program or kernel and list its graph nodes by time\n"
    "  compare A B                  compare .npy tensors (or folders of them): cosine, relative L2, bf16 ulps\n"
    "  validate --out DIR           simulated against measured H200 kernel times (GEMM goldens): CSV, tables, SVG\n"
    "  explore --workload W --sweep KEY=V1,V2 --out DIR   sweep design points: CSV, JSON, plots, HTML report\n"
    "\n"
    "`tpusim <command> --help` lists a command's options.\n";

// Options every command that builds a chip shares: --config and --set.
// `preset`: the command's default chip (validate's is h200-like, the GPU its goldens were measured on).
po::options_description chip_options(std::string& config, std::vector<std::string>& sets,
                                     const std::string& preset = sim::default_preset()) {
  po::options_description d("the simulated chip");
  d.add_options()
      ("config", po::value(&config)->default_value(preset)->value_name("NAME|FILE.ini"),
       "preset name (tpusim config --list) or INI file")
      ("set", po::value(&sets)->composing()->value_name("SECTION.KEY=VALUE"),
       "override one parameter (repeatable; tpusim config --show lists them)");
  return d;
}

std::map<std::string, int64_t> parse_defines(const std::vector<std::string>& defs) {
  std::map<std::string, int64_t> out;
  for (const auto& d : defs) {
    auto eq = d.find('=');
    if (eq == std::string::npos || eq == 0) throw UsageError("-D expects NAME=VALUE, got '" + d + "'");
    std::string value = d.substr(eq + 1);
    try {
      size_t used = 0;
      out[d.substr(0, eq)] = std::stoll(value, &used, 0);
      if (used != value.size()) throw std::invalid_argument(value);
    } catch (const std::logic_error&) {
      throw UsageError("-D " + d.substr(0, eq) + ": '" + value + "' is not an integer");
    }
  }
  return out;
}

std::map<std::string, std::vector<int64_t>> parse_shapes(const std::vector<std::string>& specs) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& s : specs) {
    auto eq = s.find('=');
    if (eq == std::string::npos) throw UsageError("--shape expects NAME=D0,D1,..., got '" + s + "'");
    std::vector<int64_t> dims;
    std::string rest = s.substr(eq + 1);
    for (size_t pos = 0; pos <= rest.size();) {
      size_t comma = rest.find(',', pos);
      std::string tok = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      try {
        dims.push_back(std::stoll(tok));
      } catch (const std::logic_error&) {
        throw UsageError("--shape " + s + ": '" + tok + "' is not an integer");
      }
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    out[s.substr(0, eq)] = dims;
  }
  return out;
}

// Parses `args` against `shown`, the options --help lists (a description with no caption made of one group per
// purpose: what to run, inputs, outputs, ...), and FILE as the one positional argument (an option of its own,
// hidden from --help); prints help and returns false on --help.
bool parse(const std::vector<std::string>& args, po::options_description& shown, const std::string& usage,
           po::variables_map& vm, std::string* file = nullptr) {
  po::options_description help("help");
  help.add_options()("help,h", "this help");
  shown.add(help);
  po::options_description hidden;
  po::positional_options_description pos;
  if (file) {
    hidden.add_options()("file", po::value(file));
    pos.add("file", 1);
  }
  po::options_description desc;
  desc.add(shown).add(hidden);
  try {
    po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
    if (vm.count("help")) {
      std::cout << usage << "\n" << shown << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(sim::option_error_text(e));
  }
  if (file && file->empty()) throw UsageError("missing FILE: " + usage);
  return true;
}

// The files a command writes. A command that fails part-way removes the regular files it has written (so no
// partial outputs stay behind); each write checks that every byte reached the file (`-o /dev/full` fails).
class Outputs {
 public:
  Outputs() = default;
  Outputs(const Outputs&) = delete;
  Outputs& operator=(const Outputs&) = delete;
  ~Outputs() {
    if (done_) return;
    std::error_code ec;
    for (const auto& p : written_)
      if (fs::is_regular_file(p, ec)) fs::remove(p, ec);
  }
  // Writes `text` to `path` and remembers it; throws (having removed what it wrote) if it cannot.
  void text(const std::string& path, const std::string& text) {
    file(path, [&](std::ostream& os) { os << text; });
  }
  // The same with the text made by `write` as it goes.
  void file(const std::string& path, const std::function<void(std::ostream&)>& write) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot open '" + path + "' for writing: " + std::strerror(errno));
    written_.push_back(path);
    write(out);
    out.close();
    if (!out) throw std::runtime_error("cannot write '" + path + "': " + std::strerror(errno));
  }
  // Remembers a file written by another function (runtime::write_npy, isa::save_program): call before writing.
  void will_write(const std::string& path) { written_.push_back(path); }
  // The command succeeded: keep everything.
  void keep() { done_ = true; }

 private:
  std::vector<std::string> written_;
  bool done_ = false;
};

// --precision and --calibrate, as the options of every command that compiles ONNX models.
struct PrecisionOptions {
  std::string precision = "bf16";
  std::vector<std::string> calibrate;
  bool hbm_intermediates = false;
  bool no_overlap = false;
  int64_t group_pack = 0;
  void add(po::options_description& desc) {
    desc.add_options()
        ("precision", po::value(&precision)->default_value("bf16")->value_name("bf16|int8"),
         "ONNX models: bf16 (default) or int8 (post-training quantisation: per-channel weights, activation scales "
         "calibrated on --calibrate inputs, else on the --input files; timing-only runs and reports need none)")
        ("calibrate", po::value(&calibrate)->composing()->value_name("NAME=FILE.npy"),
         "an int8 calibration input (repeatable; one set of model inputs)")
        ("intermediates-in-hbm", po::bool_switch(&hbm_intermediates),
         "ONNX models: keep every intermediate in HBM (or the chip's shared memory); by default a one-core chip "
         "of at least 16 MiB of VMEM keeps them in half of it")
        ("no-kernel-overlap", po::bool_switch(&no_overlap),
         "ONNX models: a fence between every two kernels; by default a kernel (a LayerNorm, "
         "the fused attention, a GEMM) and the GEMM after it overlap, the GEMM's first weights loading while the "
         "first kernel runs")
        ("group-pack", po::value(&group_pack)->default_value(0)->value_name("P"),
         "ONNX models: grouped convolutions P groups at a time (one GEMM of block-diagonal weights) where P "
         "divides the groups; 0 (default): as the compiler's estimate chooses. For measuring that estimate");
  }
};

std::map<std::string, runtime::HostTensor> read_named_npys(const std::vector<std::string>& specs, const char* option) {
  std::map<std::string, runtime::HostTensor> out;
  for (const auto& spec : specs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos) throw UsageError(std::string(option) + " expects NAME=FILE.npy, got '" + spec + "'");
    out[spec.substr(0, eq)] = runtime::read_npy(spec.substr(eq + 1));
  }
  return out;
}

// Loads FILE as load_file does; an ONNX model is compiled at the chosen precision (int8: calibrated on
// `calibrate`, or on `inputs` when none are given).
runtime::Executable load_model(runtime::Client& client, const std::string& file,
                               const std::map<std::string, int64_t>& defines,
                               const std::map<std::string, std::vector<int64_t>>& shapes, const PrecisionOptions& p,
                               const std::vector<std::string>& inputs, bool timing_only = false) {
  if (p.precision != "bf16" && p.precision != "int8")
    throw UsageError("--precision must be bf16 or int8, got '" + p.precision + "'");
  const bool onnx = fs::path(file).extension() == ".onnx";
  if (!onnx && (p.precision != "bf16" || !p.calibrate.empty() || p.hbm_intermediates || p.no_overlap ||
                p.group_pack != 0))
    throw UsageError("--precision, --calibrate, --intermediates-in-hbm, --no-kernel-overlap and --group-pack apply to "
                     "ONNX models, not to '" + file + "'");
  if (p.group_pack < 0) throw UsageError("--group-pack must be 0 or more, got " + std::to_string(p.group_pack));
  runtime::CompileOptions opts;
  opts.input_shapes = shapes;
  opts.precision = p.precision == "int8" ? compiler::Precision::INT8 : compiler::Precision::BF16;
  // A timing-only run needs no weight values, nor (int8) calibration: the timing-only compile gives the same
  // program's instructions and cycles in a fraction of the time and memory.
  opts.timing_only = onnx && timing_only && p.calibrate.empty();
  opts.vmem_intermediates = !p.hbm_intermediates;
  opts.overlap_kernels = !p.no_overlap;
  opts.group_pack = p.group_pack;
  if (opts.timing_only) return client.compile_onnx_file(file, opts);
  if (!onnx || (p.precision == "bf16" && opts.vmem_intermediates && opts.overlap_kernels && opts.group_pack == 0))
    return client.load_file(file, defines, shapes);
  if (p.precision == "bf16") return client.compile_onnx_file(file, opts);
  const std::vector<std::string>& specs = p.calibrate.empty() ? inputs : p.calibrate;
  if (specs.empty()) throw UsageError("--precision int8 needs calibration inputs: give --calibrate NAME=FILE.npy");
  opts.calibration.push_back(read_named_npys(specs, p.calibrate.empty() ? "--input" : "--calibrate"));
  return client.compile_onnx_file(file, opts);
}

// A timing-only run's input: zeros (it does no arithmetic, so the values do not matter).
runtime::HostTensor zero_tensor(const isa::TensorDecl& d) {
  return runtime::HostTensor{d.dtype, d.shape, std::vector<uint8_t>(d.bytes())};
}

// The file of a tensor named `name` in a folder: `--output-dir` writes it, `--inputs` reads it.
// The file an input or output NAME has in a folder: runtime::npy_file_name, the same mapping both ways.
std::string npy_name(const std::string& name) { return runtime::npy_file_name(name); }

// "a, b, c" (at most 8 items, then "and N more").
std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < 8; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > 8) s += " and " + std::to_string(items.size() - 8) + " more";
  return s;
}

// `--inputs DIR`: every .npy file in DIR is the input of its name (DIR/NAME.npy; other files are ignored), added to
// `inputs`. A file that names no input of the program, an input also given by --input, and (unless `fill`) an
// input with no file are errors.
void read_input_dir(const std::string& dir, const runtime::Executable& exe, bool fill,
                    std::map<std::string, runtime::HostTensor>& inputs) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw std::runtime_error("--inputs " + dir + ": no such folder");
  std::map<std::string, std::string> by_file;  // file name -> input name
  std::vector<std::string> names;
  for (const auto* d : exe.inputs()) {
    by_file[npy_name(d->name)] = d->name;
    names.push_back(d->name);
  }
  std::map<std::string, fs::path> files;  // input name -> file
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".npy" || !entry.is_regular_file()) continue;
    auto it = by_file.find(entry.path().filename().string());
    if (it == by_file.end())
      throw std::runtime_error("--inputs " + dir + ": " + entry.path().filename().string() +
                               " names no input of the program (its inputs: " + join(names) + ")");
    if (inputs.count(it->second))
      throw UsageError("input '" + it->second + "' given twice: by --input and by " + entry.path().string());
    files[it->second] = entry.path();
  }
  std::vector<std::string> missing;
  for (const auto& name : names)
    if (!files.count(name) && !inputs.count(name)) missing.push_back(name);
  if (!missing.empty() && !fill)
    throw std::runtime_error("--inputs " + dir + ": " +
                             (missing.size() == 1
                                  ? "no file " + (fs::path(dir) / npy_name(missing[0])).string() + " for input " +
                                        missing[0]
                                  : "no files for inputs " + join(missing) + " (each as " +
                                        (fs::path(dir) / "NAME.npy").string() + ")"));
  for (const auto& [name, path] : files) inputs[name] = runtime::read_npy(path.string());
}

// How the inputs that no file gives are made.
enum class Fill { None, Random, Zeros };

// The inputs of `--input NAME=FILE.npy` and `--inputs DIR`; then, after checking that the program fits the chip (so
// that a huge program is refused before its inputs are made), the others as `fill` says, their names in `filled`.
std::map<std::string, runtime::HostTensor> gather_inputs(const runtime::Client& client, const runtime::Executable& exe,
                                                         const std::vector<std::string>& specs,
                                                         const std::string& dir, Fill fill, uint64_t seed,
                                                         std::vector<std::string>* filled = nullptr) {
  std::map<std::string, runtime::HostTensor> inputs = read_named_npys(specs, "--input");
  if (!dir.empty()) read_input_dir(dir, exe, fill != Fill::None, inputs);
  client.check_fits(exe);
  if (fill == Fill::None) return inputs;
  for (const auto* d : exe.inputs()) {
    if (inputs.count(d->name)) continue;
    inputs[d->name] = fill == Fill::Zeros ? zero_tensor(*d) : runtime::random_tensor(*d, seed + inputs.size());
    if (filled) filled->push_back(d->name);
  }
  return inputs;
}

// The options of every command that reads inputs: --input, --inputs, and with `random` --random-inputs.
po::options_description input_options(std::vector<std::string>& specs, std::string& dir) {
  po::options_description d("inputs");
  d.add_options()
      ("input,i", po::value(&specs)->composing()->value_name("NAME=FILE.npy"), "one input (repeatable)")
      ("inputs", po::value(&dir)->value_name("DIR"),
       "a folder of inputs, each as DIR/NAME.npy (every .npy file there must name an input)");
  return d;
}

// The options of run and profile that say what program FILE becomes: -D, --shape, --precision, --calibrate.
po::options_description program_options(std::vector<std::string>& defines, std::vector<std::string>& shapes,
                                        PrecisionOptions& precision) {
  po::options_description d("program");
  d.add_options()
      ("define,D", po::value(&defines)->composing()->value_name("NAME=VALUE"), "kernel symbol (repeatable)")
      ("shape", po::value(&shapes)->composing()->value_name("NAME=D0,D1,..."),
       "a model input's shape, for dynamic dimensions (repeatable)");
  precision.add(d);
  return d;
}

// --timing-only (its help: what it does to the command's outputs) and --max-cycles.
po::options_description run_options(uint64_t& max_cycles, const char* timing_only_help) {
  po::options_description d("the run");
  d.add_options()
      ("timing-only", timing_only_help)
      ("max-cycles", po::value(&max_cycles)->default_value(4'000'000'000)->value_name("N"),
       "stop a run that goes on longer");
  return d;
}

int cmd_run(const std::vector<std::string>& args) {
  std::string file, config, out_dir, stats_path, trace_path, input_dir;
  std::vector<std::string> sets, defines, input_specs, shapes;
  uint64_t max_cycles = 0, seed = 1, trace_limit = 0;
  PrecisionOptions precision;
  po::options_description program = program_options(defines, shapes, precision);
  po::options_description given = input_options(input_specs, input_dir);
  given.add_options()
      ("random-inputs", "fill the inputs not given with deterministic random data")
      ("seed", po::value(&seed)->default_value(1)->value_name("N"), "seed for --random-inputs");
  po::options_description outputs("outputs");
  outputs.add_options()
      ("output-dir,o", po::value(&out_dir)->value_name("DIR"),
       "write each output as DIR/NAME.npy (bytes of NAME outside A-Z a-z 0-9 _ . - as %XX: /fc/y -> "
       "%2Ffc%2Fy.npy; without it the outputs are not kept)")
      ("stats", po::value(&stats_path)->value_name("FILE.json"), "write statistics as JSON")
      ("trace", po::value(&trace_path)->value_name("FILE.json"), "write a Chrome trace (open it in Perfetto)")
      ("trace-limit", po::value(&trace_limit)->default_value(sim::kDefaultMaxTraceEvents)->value_name("N"),
       "stop a traced run that records more events (each about 150 bytes of memory; 0: no limit)");
  po::options_description run = run_options(max_cycles, "skip the arithmetic: the same cycles, no outputs; inputs "
                                                          "not given are zeros");
  po::options_description shown;
  shown.add(program).add(given).add(outputs).add(run).add(chip_options(config, sets));
  po::variables_map vm;
  if (!parse(args, shown, "usage: tpusim run KERNEL.s|MODEL.onnx|PROGRAM.tpub [options]", vm, &file)) return 0;

  runtime::Client client(sim::load_config(config, sets));
  const bool timing_only = vm.count("timing-only") != 0;
  runtime::Executable exe =
      load_model(client, file, parse_defines(defines), parse_shapes(shapes), precision, input_specs, timing_only);
  const Fill fill = vm.count("random-inputs") ? Fill::Random : timing_only ? Fill::Zeros : Fill::None;
  std::vector<std::string> filled;
  auto inputs = gather_inputs(client, exe, input_specs, input_dir, fill, seed, &filled);
  if (!filled.empty())
    std::cout << (fill == Fill::Zeros ? "inputs as zeros (--timing-only: no timing depends on values): "
                                      : "inputs as random data (--seed " + std::to_string(seed) + "): ")
              << join(filled) << "\n";

  runtime::ExecuteOptions opts;
  opts.functional = !timing_only;
  opts.trace = !trace_path.empty();
  opts.max_cycles = max_cycles;
  opts.max_trace_events = trace_limit;
  runtime::ExecuteResult r = client.execute(exe, inputs, opts);

  print_summary(std::cout, exe.program(), client.config(), r.run.stats);
  Outputs written;
  if (!out_dir.empty() && opts.functional) {
    fs::create_directories(out_dir);
    // Output names come from the model or program, which may be anyone's: each becomes one file name inside
    // out_dir by runtime::npy_file_name's mapping ("/fc/Relu_output_0" -> "%2Ffc%2FRelu_output_0.npy").
    for (const auto& [name, t] : r.outputs) {
      std::string path = (fs::path(out_dir) / runtime::npy_file_name(name)).string();
      written.will_write(path);
      runtime::write_npy(path, t);
      std::cout << "wrote " << path << "\n";
    }
  } else {
    std::vector<std::string> outs;
    for (const auto* d : exe.outputs()) outs.push_back(runtime::describe(*d));
    std::cout << (timing_only ? "outputs not computed (--timing-only): " : "outputs not kept (--output-dir DIR writes "
                                                                           "each as DIR/NAME.npy): ")
              << join(outs) << "\n";
  }
  if (!stats_path.empty()) written.text(stats_path, r.run.stats.to_json(client.config()));
  if (!trace_path.empty())
    written.file(trace_path, [&](std::ostream& os) { sim::write_chrome_trace(os, r.run.trace, client.config()); });
  written.keep();
  return 0;
}

int cmd_profile(const std::vector<std::string>& args) {
  std::string file, config, trace_path, json_path, input_dir;
  std::vector<std::string> sets, defines, input_specs, shapes;
  uint64_t max_cycles = 0, seed = 1, trace_limit = 0;
  size_t top = 10;
  PrecisionOptions precision;
  po::options_description program = program_options(defines, shapes, precision);
  po::options_description given = input_options(input_specs, input_dir);
  given.add_options()("seed", po::value(&seed)->default_value(1)->value_name("N"),
                      "seed for the inputs not given: random data (zeros with --timing-only)");
  po::options_description report("the profile");
  report.add_options()
      ("top", po::value(&top)->default_value(10)->value_name("N"), "list this many nodes, the longest (0: all)")
      ("all", "list every node (as --top 0)")
      ("json", po::value(&json_path)->value_name("FILE.json"), "write the profile of every region as JSON")
      ("trace", po::value(&trace_path)->value_name("FILE.json"),
       "write a Chrome trace with a track of graph nodes (open it in Perfetto)")
      ("trace-limit", po::value(&trace_limit)->default_value(sim::kDefaultMaxTraceEvents)->value_name("N"),
       "stop a run that records more trace events (each about 150 bytes of memory; 0: no limit)");
  po::options_description run = run_options(max_cycles, "skip the arithmetic; same cycles; inputs not given are zeros");
  po::options_description shown;
  shown.add(program).add(given).add(report).add(run).add(chip_options(config, sets));
  po::variables_map vm;
  if (!parse(args, shown, "usage: tpusim profile MODEL.onnx|PROGRAM.tpub|KERNEL.s [options]", vm, &file)) return 0;

  runtime::Client client(sim::load_config(config, sets));
  runtime::Executable exe = load_model(client, file, parse_defines(defines), parse_shapes(shapes), precision, input_specs,
                                       vm.count("timing-only") != 0);
  const Fill fill = vm.count("timing-only") ? Fill::Zeros : Fill::Random;  // as `run --timing-only`
  auto inputs = gather_inputs(client, exe, input_specs, input_dir, fill, seed);
  runtime::ExecuteOptions opts;
  opts.functional = !vm.count("timing-only");
  opts.trace = true;
  opts.max_cycles = max_cycles;
  opts.max_trace_events = trace_limit;
  runtime::ExecuteResult r = client.execute(exe, inputs, opts);

  runtime::Profile prof = runtime::make_profile(exe.program(), r.run, client.config());
  print_profile(std::cout, prof, exe.program().name, vm.count("all") ? 0 : top);
  Outputs written;
  if (!json_path.empty()) written.text(json_path, runtime::profile_json(prof));
  if (!trace_path.empty())
    written.file(trace_path, [&](std::ostream& os) {
      runtime::write_profile_trace(os, exe.program(), r.run, client.config(), prof);
    });
  written.keep();
  return 0;
}

int cmd_asm(const std::vector<std::string>& args) {
  std::string file, out, config;
  std::vector<std::string> sets, defines;
  po::options_description program("program");
  program.add_options()
      ("define,D", po::value(&defines)->composing()->value_name("NAME=VALUE"), "symbol (repeatable)");
  po::options_description output("output");
  output.add_options()("output,o", po::value(&out)->required()->value_name("FILE.tpub"), "the program to write");
  po::options_description shown;
  shown.add(program).add(output).add(chip_options(config, sets));
  po::variables_map vm;
  if (!parse(args, shown, "usage: tpusim asm FILE.s -o FILE.tpub [options]", vm, &file)) return 0;
  runtime::Client client(sim::load_config(config, sets));
  runtime::Executable exe = client.assemble_file(file, parse_defines(defines));
  const isa::Program& prog = exe.program();
  isa::save_program(prog, out);
  std::cout << "assembled " << file << ": " << prog.code.size() << " instructions, " << prog.hbm_footprint()
            << " bytes of HBM -> " << out << "\n";
  return 0;
}

int cmd_disasm(const std::vector<std::string>& args) {
  std::string file, out;
  po::options_description output("output");
  output.add_options()("output,o", po::value(&out)->value_name("FILE.s"),
                       "write the text here instead of standard output");
  po::options_description shown;
  shown.add(output);
  po::variables_map vm;
  if (!parse(args, shown, "usage: tpusim disasm FILE.tpub [-o FILE.s]", vm, &file)) return 0;
  std::string text = isa::disassemble(isa::load_program(file));
  if (out.empty()) {
    std::cout << text << std::flush;
    if (!std::cout) throw std::runtime_error("cannot write to standard output");
    return 0;
  }
  Outputs written;
  written.text(out, text);
  written.keep();
  return 0;
}

// With --report / --report-json: one timing-only run of the compiled program on the chip (inputs zero-filled: a
// timing-only run does no arithmetic, so their values do not matter), profiled per graph node.
int cmd_compile(const std::vector<std::string>& args) {
  std::string file, out, config, report_path, report_json_path;
  std::vector<std::string> sets, shapes;
  uint64_t max_cycles = 0;
  po::options_description program("program");
  program.add_options()
      ("shape", po::value(&shapes)->composing()->value_name("NAME=D0,D1,..."),
       "an input's shape, for dynamic dimensions (repeatable)");
  PrecisionOptions precision;
  precision.add(program);
  po::options_description outputs("outputs (at least one)");
  outputs.add_options()
      ("output,o", po::value(&out)->value_name("FILE.tpub"), "the program to write")
      ("report", po::value(&report_path)->value_name("FILE|-"),
       "simulate the program (timing only) and write a report per graph node: cycles, MXU utilisation, FLOPs, "
       "bytes, roofline bound (- for standard output)")
      ("report-json", po::value(&report_json_path)->value_name("FILE.json"), "the same report as JSON")
      ("max-cycles", po::value(&max_cycles)->default_value(4'000'000'000)->value_name("N"),
       "stop a report run that goes on longer");
  po::options_description shown;
  shown.add(program).add(outputs).add(chip_options(config, sets));
  po::variables_map vm;
  const char* usage = "usage: tpusim compile MODEL.onnx [-o FILE.tpub] [--report FILE] [--report-json FILE] [options]";
  if (!parse(args, shown, usage, vm, &file)) return 0;
  if (out.empty() && report_path.empty() && report_json_path.empty())
    throw UsageError("nothing to write: give -o FILE.tpub, --report FILE or --report-json FILE (" + std::string(usage) +
                     ")");
  runtime::Client client(sim::load_config(config, sets));
  // Only a report: the timing-only compile (the same instructions and cycles, no weight values, no int8
  // calibration run).
  runtime::Executable exe = load_model(client, file, {}, parse_shapes(shapes), precision, {}, out.empty());
  const isa::Program& prog = exe.program();
  Outputs written;
  if (!out.empty()) {
    written.will_write(out);
    isa::save_program(prog, out);
    std::cout << "compiled " << file << ": " << prog.code.size() << " instructions, " << prog.hbm_footprint()
              << " bytes of HBM -> " << out << "\n";
  }
  if (report_path.empty() && report_json_path.empty()) {
    written.keep();
    return 0;
  }

  client.check_fits(exe);
  std::map<std::string, runtime::HostTensor> inputs;
  for (const auto* d : exe.inputs()) inputs[d->name] = zero_tensor(*d);
  runtime::ExecuteOptions opts;
  opts.functional = false;
  opts.trace = true;
  opts.max_cycles = max_cycles;
  runtime::ExecuteResult r = client.execute(exe, inputs, opts);
  runtime::Profile prof = runtime::make_profile(prog, r.run, client.config());
  if (report_path == "-") {
    print_compile_report(std::cout, prof, prog, file, out, client.config(), r.run.stats);
  } else if (!report_path.empty()) {
    std::ostringstream text;
    print_compile_report(text, prof, prog, file, out, client.config(), r.run.stats);
    written.text(report_path, text.str());
    std::cout << "report: " << prof.cycles << " cycles on " << client.config().chip.name << " -> " << report_path
              << "\n";
  }
  if (!report_json_path.empty()) written.text(report_json_path, compile_report_json(prof, file, out));
  written.keep();
  return 0;
}

int cmd_config(const std::vector<std::string>& args) {
  std::string show;
  std::vector<std::string> sets;
  po::options_description what("what to list");
  what.add_options()
      ("list", "the presets")
      ("show", po::value(&show)->implicit_value(sim::default_preset())->value_name("NAME|FILE.ini"),
       "every parameter of a preset or INI file: value, unit, default, help")
      ("set", po::value(&sets)->composing()->value_name("SECTION.KEY=VALUE"), "override one parameter (repeatable)");
  po::options_description shown;
  shown.add(what);
  po::variables_map vm;
  if (!parse(args, shown, "usage: tpusim config --list | --show [NAME] [--set k=v]...", vm)) return 0;
  if (vm.count("show")) {
    print_config(std::cout, sim::load_config(show, sets));
    return 0;
  }
  for (const auto& name : sim::preset_names()) {
    sim::ChipConfig c = sim::load_config(name);
    std::cout << name << (name == sim::default_preset() ? " (default)" : "") << ": " << c.mxu.rows << "x"
              << c.mxu.cols << " MXU at " << c.chip.clock_mhz << " MHz, " << (c.vmem.size_kib >> 10) << " MiB VMEM, "
              << c.hbm.bandwidth_gbs << " GB/s HBM; model: " << std::lround(sim::area_of(c).total_mm2) << " mm2 at "
              << c.chip.node_nm << " nm, " << std::lround(sim::peak_power(c).total_w()) << " W peak\n";
  }
  return 0;
}

int cmd_validate(const std::vector<std::string>& args) {
  validate::Options o;
  std::ostringstream module_help;
  module_help << "time added to each attention case for the measured software beyond the fused kernel; above 0, "
                 "the causal module's QKV preprocessing is simulated too (default: "
              << validate::kCausalModuleUs << " causal and " << validate::kEncoderModuleUs
              << " encoder for the project's goldens, which time TensorRT-LLM's whole attention modules; 0 for a "
                 "--goldens folder)";
  std::ostringstream tile_help;
  tile_help << "the fused attention kernel's minimum time per tile (each item's, at the chip's clock): TensorRT-LLM's "
               "kernels take about this much per tile however small the tile (default: "
            << validate::kAttentionTileUs << " for the project's goldens, 0 for a --goldens folder)";
  std::ostringstream fp8_help;
  fp8_help << "time added to each fp8 GEMM case for the measured fp8 Linear beyond its GEMM and its quantisation of "
              "x (default: "
           << validate::kFp8ModuleUs << " for the project's goldens, 0 for a --goldens folder)";
  std::ostringstream quantise_help;
  quantise_help << "the rate, in TB/s of x's bf16 bytes (2 m k), of the fp8 module's quantisation of x, whose time "
                   "is added to each fp8 GEMM case (0: none; default: "
                << validate::kFp8QuantiseTbs << " for the project's goldens, 0 for a --goldens folder)";
  po::options_description what("what to validate");
  what.add_options()
      ("suite", po::value(&o.suite)->default_value("gemm")->value_name("gemm|attention|all"), "the golden suite")
      ("sample", po::value(&o.sample)->default_value(0)->value_name("N"),
       "at most N cases, the same share of each class, in a fixed pseudo-random order (0: every case)")
      ("part", po::value(&o.part)->default_value("all")->value_name("all|tune|held-out"),
       "all cases, or only the tuning or the held-out part (one case in five, by a hash of its shape)")
      ("jobs", po::value(&o.jobs)->default_value(1)->value_name("N"),
       "worker processes: cases are shared among N processes, each simulating its own (results are the same)")
      ("max-gflop", po::value(&o.max_gflop)->default_value(0)->value_name("X"),
       "leave out cases of more than X GFLOP, which take seconds to a minute each to simulate (0: none)")
      ("goldens", po::value(&o.goldens)->value_name("DIR"),
       "folder holding gemm.csv (default: the project's validation/goldens/h200, as built)")
      ("attention-module-us", po::value(&o.attention_module_us)->value_name("US"),
       module_help.str().c_str())
      ("attention-tile-us", po::value(&o.attention_tile_us)->value_name("US"), tile_help.str().c_str())
      ("fp8-module-us", po::value(&o.fp8_module_us)->value_name("US"), fp8_help.str().c_str())
      ("fp8-quantise-tbs", po::value(&o.fp8_quantise_tbs)->value_name("TBS"), quantise_help.str().c_str())
      ("warm-up", po::bool_switch(&o.warm_up),
       "time each case as the goldens were measured: its kernels once to warm up, then timed on the L2 they left "
       "(default: each kernel once on an empty L2)")
      ("weight-copies", po::value(&o.weight_copies)->value_name("N"),
       "with --warm-up: GEMM layers run one after the other per measurement, each with its own weights and the "
       "same x (0: as NVIDIA's collector, ceil(L2 bytes / weight bytes) from 1 to 5; default: 0 for the project's "
       "goldens, 1 for a --goldens folder, as the CUDA runner times one kernel on its own inputs)")
      ("out", po::value(&o.out)->value_name("DIR"), "where cases.csv, summary.csv, summary.md and scatter.svg go");
  po::options_description shown;
  shown.add(what).add(chip_options(o.config, o.sets, "h200-like"));
  po::variables_map vm;
  if (!parse(args, shown, "usage: tpusim validate --out DIR [--suite gemm] [--sample N] [--config h200-like]", vm))
    return 0;
  if (o.out.empty()) throw UsageError("validate needs --out DIR (see tpusim validate --help)");
  if (o.jobs < 1 || o.jobs > 256) throw UsageError("validate: --jobs must be 1 to 256");
  if (vm.count("weight-copies") && !o.warm_up) throw UsageError("validate: --weight-copies needs --warm-up");
  o.tty = isatty(fileno(stderr)) != 0;
  try {
    return validate::run(o, std::cerr);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("validate: ") + e.what());
  }
}

int cmd_explore(const std::vector<std::string>& args) {
  explore::Options o;
  std::vector<std::string> sweeps;
  po::options_description what("what to sweep");
  what.add_options()
      ("workload", po::value(&o.workload)->value_name("MODEL.onnx|NAME[:k=v,...]|LAYER:k=v,..."),
       ("an ONNX file; an exporter of workloads/ (resnet, bert, gpt2, mlp; resnet50 = resnet:arch=resnet50), "
        "exported once into a cache; or a built-in layer, its shape's defaults: " + explore::layers_help()).c_str())
      ("sweep", po::value(&sweeps)->composing()->value_name("KEY=V1,V2,..."),
       "a parameter and its values (repeatable; every combination runs, the first --sweep varying slowest): a chip "
       "parameter (section.key), precision, or a workload parameter (a layer's shape, an exporter's option)")
      ("precision", po::value(&o.precision)->default_value("bf16")->value_name("bf16|int8"),
       "matmuls and convolutions in bf16 or int8 (unless swept)")
      ("functional", "compute the numbers too, on random inputs (default: timing-only, which gives the same cycles)")
      ("max-cycles", po::value(&o.max_cycles)->default_value(4'000'000'000)->value_name("N"),
       "fail a point whose run goes on longer");
  po::options_description how("how");
  how.add_options()
      ("jobs,j", po::value(&o.jobs)->default_value(1)->value_name("N"),
       "worker processes (each point runs in one; under mpirun, per rank)")
      ("out", po::value(&o.out)->value_name("DIR"),
       "the results: results.csv, results.json, *.svg, report.html, and journal.jsonl (every finished point)")
      ("resume", "continue the sweep DIR/journal.jsonl holds: points already there are not run again")
      ("cache", po::value(&o.cache)->value_name("DIR"), "where exported workloads go (default: the build tree's explore-cache)");
  po::options_description shown;
  shown.add(what).add(how).add(chip_options(o.config, o.sets));
  po::variables_map vm;
  const char* usage = "usage: tpusim explore --workload W --sweep KEY=V1,V2,... [--sweep ...] --out DIR [--jobs N] "
                      "[--resume] [--config NAME] [--set k=v]...";
  if (!parse(args, shown, usage, vm)) return 0;
  if (o.workload.empty()) throw UsageError(std::string("explore needs --workload (") + usage + ")");
  if (o.out.empty()) throw UsageError(std::string("explore needs --out DIR (") + usage + ")");
  o.functional = vm.count("functional") != 0;
  o.resume = vm.count("resume") != 0;
  o.tty = isatty(fileno(stderr)) != 0;
  try {
    for (const std::string& s : sweeps) o.sweeps.push_back(explore::parse_sweep(s));
    return explore::run(o, std::cerr);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("explore: ") + e.what());
  }
}

int cmd_demo(const std::vector<std::string>& args) {
  std::string config;
  std::vector<std::string> sets;
  po::options_description shown;
  shown.add(chip_options(config, sets));
  po::variables_map vm;
  if (!parse(args, shown, "usage: tpusim demo [--config NAME] [--set k=v]...", vm)) return 0;
  return run_demo(std::cout, sim::load_config(config, sets));
}

}  // namespace
}  // namespace tpusim::cli

// libsystemc refers to sc_main; the sim library defines it (never called), so nothing is needed here.
int main(int argc, char** argv) {
  using namespace tpusim::cli;
  setenv("SC_COPYRIGHT_MESSAGE", "DISABLE", 0);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << "tpusim " << TPUSIM_VERSION << "\n";
    return 0;
  }
  static const std::map<std::string, int (*)(const std::vector<std::string>&)> commands = {
      {"run", cmd_run}, {"asm", cmd_asm}, {"disasm", cmd_disasm},
      {"compile", cmd_compile}, {"config", cmd_config}, {"demo", cmd_demo}, {"profile", cmd_profile},
      {"compare", cmd_compare}, {"validate", cmd_validate}, {"explore", cmd_explore}};
  auto it = commands.find(args[0]);
  try {
    if (it == commands.end()) throw UsageError("unknown command '" + args[0] + "' (see tpusim --help)");
    return it->second(std::vector<std::string>(args.begin() + 1, args.end()));
  } catch (const std::bad_alloc&) {
    std::cerr << "tpusim: error: out of host memory\n";
    return 1;
  } catch (const UsageError& e) {
    std::cerr << "tpusim: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tpusim: error: " << e.what() << "\n";
    return 1;
  }
}
