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

#include "cli.h"
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
    "\n"
    "`tpusim <command> --help` lists a command's options.\n";

// Options every command that builds a chip shares: --config and --set.
po::options_description chip_options(std::string& config, std::vector<std::string>& sets) {
  po::options_description d("chip");
  d.add_options()
      ("config", po::value(&config)->default_value(sim::default_preset()), "preset name or INI file")
      ("set", po::value(&sets)->composing(), "override one parameter: section.key=value (repeatable)");
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

// Parses `args` against `desc` (with FILE as the one positional argument); prints help and returns false on --help.
bool parse(const std::vector<std::string>& args, po::options_description& desc, const std::string& usage,
           po::variables_map& vm, std::string* file = nullptr) {
  desc.add_options()("help,h", "this help");
  po::positional_options_description pos;
  if (file) {
    desc.add_options()("file", po::value(file), "input file");
    pos.add("file", 1);
  }
  try {
    po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
    if (vm.count("help")) {
      std::cout << usage << "\n" << desc << "\n";
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
  void add(po::options_description& desc) {
    desc.add_options()
        ("precision", po::value(&precision)->default_value("bf16"),
         "ONNX models: bf16 (default) or int8 (post-training quantisation: per-channel weights, activation scales "
         "calibrated on --calibrate inputs, else on the --input files)")
        ("calibrate", po::value(&calibrate)->composing(),
         "NAME=FILE.npy: an int8 calibration input (repeatable; one set of model inputs)");
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
                               const std::vector<std::string>& inputs) {
  if (p.precision != "bf16" && p.precision != "int8")
    throw UsageError("--precision must be bf16 or int8, got '" + p.precision + "'");
  const bool onnx = fs::path(file).extension() == ".onnx";
  if (!onnx && (p.precision != "bf16" || !p.calibrate.empty()))
    throw UsageError("--precision and --calibrate apply to ONNX models, not to '" + file + "'");
  if (!onnx || p.precision == "bf16") return client.load_file(file, defines, shapes);
  runtime::CompileOptions opts;
  opts.input_shapes = shapes;
  opts.precision = compiler::Precision::INT8;
  const std::vector<std::string>& specs = p.calibrate.empty() ? inputs : p.calibrate;
  if (specs.empty()) throw UsageError("--precision int8 needs calibration inputs: give --calibrate NAME=FILE.npy");
  opts.calibration.push_back(read_named_npys(specs, p.calibrate.empty() ? "--input" : "--calibrate"));
  return client.compile_onnx_file(file, opts);
}

// The inputs of `--input NAME=FILE.npy`, and with `random` deterministic random data for the others (after
// checking that the program fits the chip, so that a huge program is refused before its inputs are made).
std::map<std::string, runtime::HostTensor> gather_inputs(const runtime::Client& client, const runtime::Executable& exe,
                                                         const std::vector<std::string>& specs, bool random,
                                                         uint64_t seed) {
  std::map<std::string, runtime::HostTensor> inputs = read_named_npys(specs, "--input");
  client.check_fits(exe);
  if (random)
    for (const auto* d : exe.inputs())
      if (!inputs.count(d->name)) inputs[d->name] = runtime::random_tensor(*d, seed + inputs.size());
  return inputs;
}

int cmd_run(const std::vector<std::string>& args) {
  std::string file, config, out_dir, stats_path, trace_path;
  std::vector<std::string> sets, defines, input_specs, shapes;
  uint64_t max_cycles = 0, seed = 1, trace_limit = 0;
  po::options_description desc = chip_options(config, sets);
  desc.add_options()
      ("define,D", po::value(&defines)->composing(), "kernel symbol NAME=VALUE (repeatable)")
      ("input,i", po::value(&input_specs)->composing(), "NAME=FILE.npy (repeatable)")
      ("random-inputs", "fill inputs not given with deterministic random data")
      ("seed", po::value(&seed)->default_value(1), "seed for --random-inputs")
      ("shape", po::value(&shapes)->composing(), "NAME=D0,D1,...: a model input's shape, for dynamic dims")
      ("output-dir,o", po::value(&out_dir),
       "write each output as DIR/NAME.npy (bytes of NAME outside A-Z a-z 0-9 _ . - as %XX: /fc/y -> %2Ffc%2Fy.npy)")
      ("stats", po::value(&stats_path), "write statistics as JSON")
      ("trace", po::value(&trace_path), "write a Chrome trace (open it in Perfetto)")
      ("trace-limit", po::value(&trace_limit)->default_value(sim::kDefaultMaxTraceEvents),
       "stop a traced run that records more events (each about 150 bytes of memory; 0: no limit)")
      ("timing-only", "skip the arithmetic; same cycles, no outputs")
      ("max-cycles", po::value(&max_cycles)->default_value(4'000'000'000), "stop a run that goes on longer");
  PrecisionOptions precision;
  precision.add(desc);
  po::variables_map vm;
  if (!parse(args, desc, "usage: tpusim run FILE [options]", vm, &file)) return 0;

  runtime::Client client(sim::load_config(config, sets));
  runtime::Executable exe = load_model(client, file, parse_defines(defines), parse_shapes(shapes), precision, input_specs);
  auto inputs = gather_inputs(client, exe, input_specs, vm.count("random-inputs") != 0, seed);

  runtime::ExecuteOptions opts;
  opts.functional = !vm.count("timing-only");
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
  }
  if (!stats_path.empty()) written.text(stats_path, r.run.stats.to_json(client.config()));
  if (!trace_path.empty())
    written.file(trace_path, [&](std::ostream& os) { sim::write_chrome_trace(os, r.run.trace, client.config()); });
  written.keep();
  return 0;
}

int cmd_profile(const std::vector<std::string>& args) {
  std::string file, config, trace_path, json_path;
  std::vector<std::string> sets, defines, input_specs, shapes;
  uint64_t max_cycles = 0, seed = 1, trace_limit = 0;
  size_t top = 10;
  po::options_description desc = chip_options(config, sets);
  desc.add_options()
      ("define,D", po::value(&defines)->composing(), "kernel symbol NAME=VALUE (repeatable)")
      ("input,i", po::value(&input_specs)->composing(), "NAME=FILE.npy (repeatable); others get random data")
      ("seed", po::value(&seed)->default_value(1), "seed for the random inputs")
      ("shape", po::value(&shapes)->composing(), "NAME=D0,D1,...: a model input's shape, for dynamic dims")
      ("top", po::value(&top)->default_value(10), "list this many nodes, the longest (0: all)")
      ("all", "list every node (as --top 0)")
      ("trace", po::value(&trace_path), "write a Chrome trace with a track of graph nodes (open it in Perfetto)")
      ("trace-limit", po::value(&trace_limit)->default_value(sim::kDefaultMaxTraceEvents),
       "stop a run that records more trace events (each about 150 bytes of memory; 0: no limit)")
      ("json", po::value(&json_path), "write the profile of every region as JSON")
      ("timing-only", "skip the arithmetic; same cycles")
      ("max-cycles", po::value(&max_cycles)->default_value(4'000'000'000), "stop a run that goes on longer");
  PrecisionOptions precision;
  precision.add(desc);
  po::variables_map vm;
  if (!parse(args, desc, "usage: tpusim profile MODEL.onnx|PROGRAM.tpub|KERNEL.s [options]", vm, &file)) return 0;

  runtime::Client client(sim::load_config(config, sets));
  runtime::Executable exe = load_model(client, file, parse_defines(defines), parse_shapes(shapes), precision, input_specs);
  auto inputs = gather_inputs(client, exe, input_specs, true, seed);
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
    written.text(trace_path, runtime::profile_trace_json(exe.program(), r.run, client.config(), prof));
  written.keep();
  return 0;
}

int cmd_asm(const std::vector<std::string>& args) {
  std::string file, out, config;
  std::vector<std::string> sets, defines;
  po::options_description desc = chip_options(config, sets);
  desc.add_options()
      ("define,D", po::value(&defines)->composing(), "symbol NAME=VALUE (repeatable)")
      ("output,o", po::value(&out)->required(), "the .tpub file to write");
  po::variables_map vm;
  if (!parse(args, desc, "usage: tpusim asm FILE.s -o FILE.tpub [options]", vm, &file)) return 0;
  runtime::Client client(sim::load_config(config, sets));
  isa::save_program(client.assemble_file(file, parse_defines(defines)).program(), out);
  return 0;
}

int cmd_disasm(const std::vector<std::string>& args) {
  std::string file, out;
  po::options_description desc("options");
  desc.add_options()("output,o", po::value(&out), "write the text here instead of standard output");
  po::variables_map vm;
  if (!parse(args, desc, "usage: tpusim disasm FILE.tpub [-o FILE.s]", vm, &file)) return 0;
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
  po::options_description desc = chip_options(config, sets);
  desc.add_options()
      ("output,o", po::value(&out), "the .tpub file to write")
      ("shape", po::value(&shapes)->composing(), "NAME=D0,D1,...: an input's shape, for dynamic dims")
      ("report", po::value(&report_path),
       "simulate the program (timing only) and write a report per graph node: cycles, MXU utilisation, FLOPs, "
       "bytes, roofline bound (- for standard output)")
      ("report-json", po::value(&report_json_path), "the same report as JSON")
      ("max-cycles", po::value(&max_cycles)->default_value(4'000'000'000), "stop a report run that goes on longer");
  PrecisionOptions precision;
  precision.add(desc);
  po::variables_map vm;
  const char* usage = "usage: tpusim compile MODEL.onnx [-o FILE.tpub] [--report FILE] [--report-json FILE] [options]";
  if (!parse(args, desc, usage, vm, &file)) return 0;
  if (out.empty() && report_path.empty() && report_json_path.empty())
    throw UsageError("nothing to write: give -o FILE.tpub, --report FILE or --report-json FILE (" + std::string(usage) +
                     ")");
  runtime::Client client(sim::load_config(config, sets));
  runtime::Executable exe = load_model(client, file, {}, parse_shapes(shapes), precision, {});
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
  for (const auto* d : exe.inputs())
    inputs[d->name] = runtime::HostTensor{d->dtype, d->shape, std::vector<uint8_t>(d->bytes())};
  runtime::ExecuteOptions opts;
  opts.functional = false;
  opts.trace = true;
  opts.max_cycles = max_cycles;
  runtime::ExecuteResult r = client.execute(exe, inputs, opts);
  runtime::Profile prof = runtime::make_profile(prog, r.run, client.config());
  if (report_path == "-") {
    print_compile_report(std::cout, prof, prog, file, out, client.config());
  } else if (!report_path.empty()) {
    std::ostringstream text;
    print_compile_report(text, prof, prog, file, out, client.config());
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
  po::options_description desc("options");
  desc.add_options()
      ("list", "list the presets")
      ("show", po::value(&show)->implicit_value(sim::default_preset()), "every parameter of a preset or INI file")
      ("set", po::value(&sets)->composing(), "override one parameter: section.key=value (repeatable)");
  po::variables_map vm;
  if (!parse(args, desc, "usage: tpusim config --list | --show [NAME] [--set k=v]...", vm)) return 0;
  if (vm.count("show")) {
    print_config(std::cout, sim::load_config(show, sets));
    return 0;
  }
  for (const auto& name : sim::preset_names()) {
    sim::ChipConfig c = sim::load_config(name);
    std::cout << name << (name == sim::default_preset() ? " (default)" : "") << ": " << c.mxu.rows << "x"
              << c.mxu.cols << " MXU at " << c.chip.clock_mhz << " MHz, " << (c.vmem.size_kib >> 10) << " MiB VMEM, "
              << c.hbm.bandwidth_gbs << " GB/s HBM\n";
  }
  return 0;
}

int cmd_demo(const std::vector<std::string>& args) {
  std::string config;
  std::vector<std::string> sets;
  po::options_description desc = chip_options(config, sets);
  po::variables_map vm;
  if (!parse(args, desc, "usage: tpusim demo [--config NAME] [--set k=v]...", vm)) return 0;
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
      {"compile", cmd_compile}, {"config", cmd_config}, {"demo", cmd_demo}, {"profile", cmd_profile}};
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
