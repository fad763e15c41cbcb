// tpusim explore: the sweep engine (explore.h).
#include "tpusim/explore/explore.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

#include "mpi_world.h"
#include "results.h"
#include "tpusim/explore/pool.h"
#include "tpusim/isa/program.h"
#include "tpusim/runtime/profile.h"
#include "tpusim/runtime/runtime.h"
#include "tpusim/sim/config.h"
#include "workloads.h"

namespace tpusim::explore {

namespace fs = std::filesystem;
using json = nlohmann::json;

Sweep parse_sweep(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) throw std::invalid_argument("--sweep expects KEY=V1,V2,..., got '" + spec + "'");
  Sweep s;
  s.key = spec.substr(0, eq);
  const std::string rest = spec.substr(eq + 1);
  for (size_t pos = 0; pos <= rest.size();) {
    const size_t comma = rest.find(',', pos);
    std::string v = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (v.empty()) throw std::invalid_argument("--sweep " + spec + ": an empty value");
    if (std::find(s.values.begin(), s.values.end(), v) != s.values.end())
      throw std::invalid_argument("--sweep " + spec + ": '" + v + "' is given twice");
    s.values.push_back(std::move(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return s;
}

namespace {

constexpr const char* kJournal = "journal.jsonl";
constexpr uint64_t kLayerTraceEvents = 1'000'000;  // a point's trace for its layers' figures: about 150 MB at most

// A point's layers: the graph nodes with work (flops > 0) that ran, as the profile gives them (its "regions" of
// kind "node": name, flops and bytes from the compiler, cycles from the run).
json layers(const runtime::Profile& profile) {
  json out = json::array();
  for (const runtime::RegionProfile& r : profile.regions)
    if (r.kind == isa::kRegionNode && r.flops > 0 && r.cycles() > 0)
      out.push_back({{"name", r.name}, {"flops", r.flops}, {"bytes", r.bytes}, {"cycles", r.cycles()}});
  return out;
}
constexpr int kJournalVersion = 1;

std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) { g_signal = sig; }

enum class KeyKind { Chip, Precision, Workload };
KeyKind kind_of(const std::string& key) {
  if (key.find('.') != std::string::npos) return KeyKind::Chip;
  if (key == "precision") return KeyKind::Precision;
  return KeyKind::Workload;
}

struct Point {
  size_t index = 0;
  std::vector<std::pair<std::string, std::string>> params;  // in sweep order
  std::vector<std::string> sets;                            // --set then the swept chip parameters
  std::string precision;
  std::map<std::string, std::string> workload_params;
  std::string model_path;  // File and Exporter workloads
  std::string program_key; // what the compiled program depends on (program_key()); "" when the chip is invalid
  bool program_shared = false;  // another point still to run has the same program_key
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Everything a point's compiled program depends on: the workload (a file by path, size and modification time; a
// layer by its parameters), the precision, timing-only or not, and the chip as its kernel symbols, which is all the
// compiler sees of it (compiler::Target). Points that differ only in parameters the compiler does not see (HBM
// bandwidth, latencies) share one program.
std::string program_key(const Options& o, const WorkloadSpec& w, const Point& p) {
  std::string k = "workload=";
  if (w.kind == WorkloadSpec::Kind::Layer) {
    k += w.name;
    for (const auto& [n, v] : with_params(w, p.workload_params).params) k += "," + n + "=" + v;
  } else {
    std::error_code ec;
    k += fs::absolute(p.model_path, ec).string() + "," + std::to_string(fs::file_size(p.model_path, ec)) + "," +
         std::to_string(fs::last_write_time(p.model_path, ec).time_since_epoch().count());
  }
  k += "|precision=" + p.precision + (o.functional ? "|functional" : "|timing-only");
  try {
    for (const auto& [n, v] : sim::kernel_symbols(sim::load_config(o.config, p.sets))) k += "|" + n + "=" + std::to_string(v);
  } catch (const std::exception&) {
    return "";  // the point fails when it runs, saying why
  }
  return k;
}

// The sweep as the journal's first line and results.json's "sweep": everything that decides the points' results.
json sweep_header(const Options& o) {
  json h;
  h["tpusim_explore"] = kJournalVersion;
  h["workload"] = o.workload;
  h["config"] = o.config;
  h["sets"] = o.sets;
  h["precision"] = o.precision;
  h["functional"] = o.functional;
  h["max_cycles"] = o.max_cycles;
  h["sweeps"] = json::array();
  for (const Sweep& s : o.sweeps) h["sweeps"].push_back({{"key", s.key}, {"values", s.values}});
  return h;
}

// Checks the options; returns every point, the first sweep varying slowest.
std::vector<Point> make_points(const Options& o, const WorkloadSpec& w) {
  if (o.precision != "bf16" && o.precision != "int8")
    throw std::invalid_argument("--precision must be bf16 or int8, got '" + o.precision + "'");
  std::set<std::string> chip_keys;
  for (const sim::ParamInfo& p : sim::describe(sim::load_config(o.config, o.sets))) chip_keys.insert(p.key);
  std::set<std::string> seen;
  size_t total = 1;
  for (const Sweep& s : o.sweeps) {
    if (!seen.insert(s.key).second) throw std::invalid_argument("--sweep " + s.key + " is given twice");
    if (s.values.empty()) throw std::invalid_argument("--sweep " + s.key + " has no values");
    switch (kind_of(s.key)) {
      case KeyKind::Chip:
        if (!chip_keys.count(s.key))
          throw std::invalid_argument("--sweep " + s.key + ": unknown chip parameter (tpusim config --show lists them)");
        break;
      case KeyKind::Precision:
        for (const auto& v : s.values)
          if (v != "bf16" && v != "int8") throw std::invalid_argument("--sweep precision: '" + v + "' is not bf16 or int8");
        break;
      case KeyKind::Workload: check_workload_key(w, s.key); break;
    }
    total *= s.values.size();
    if (total > 1'000'000) throw std::invalid_argument("the sweep has more than 1,000,000 points");
  }
  std::vector<Point> points(total);
  for (size_t i = 0; i < total; ++i) {
    Point& p = points[i];
    p.index = i;
    p.sets = o.sets;
    p.precision = o.precision;
    size_t rest = i, span = total;
    for (const Sweep& s : o.sweeps) {
      span /= s.values.size();
      const std::string& v = s.values[rest / span];
      rest %= span;
      p.params.emplace_back(s.key, v);
      switch (kind_of(s.key)) {
        case KeyKind::Chip: p.sets.push_back(s.key + "=" + v); break;
        case KeyKind::Precision: p.precision = v; break;
        case KeyKind::Workload: p.workload_params[s.key] = v; break;
      }
    }
  }
  return points;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- one point, in a worker process ------------------------------------------------------------------------

struct PointRunner {
  const Options& opts;
  const WorkloadSpec& workload;
  std::unique_ptr<runtime::Client> client;
  std::string client_sets;

  json run(const Point& p) {
    json rec;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      const sim::ChipConfig cfg = sim::load_config(opts.config, p.sets);
      const std::string key = join(p.sets, " ");
      if (!client) {
        client = std::make_unique<runtime::Client>(cfg);
        client_sets = key;
      } else if (client_sets != key) {
        throw std::logic_error("a worker process got points of two chips");  // tasks are grouped by chip
      }
      runtime::CompileOptions co;
      co.precision = p.precision == "int8" ? compiler::Precision::INT8 : compiler::Precision::BF16;
      co.timing_only = !opts.functional;
      std::string bytes, name;
      if (workload.kind == WorkloadSpec::Kind::Layer) std::tie(bytes, name) = layer_model(with_params(workload, p.workload_params));
      auto compile = [&](const runtime::CompileOptions& c) {
        if (!bytes.empty()) return client->compile_onnx_bytes(bytes, c, name).value();
        return client->compile_onnx(p.model_path, c).value();
      };
      std::map<std::string, runtime::HostTensor> inputs;
      auto make_inputs = [&](const runtime::Executable& e) {
        inputs.clear();
        uint64_t seed = 1;
        for (const isa::TensorDecl* d : e.inputs())
          inputs[d->name] = opts.functional ? runtime::random_tensor(*d, seed++)
                                            : runtime::HostTensor{d->dtype, d->shape, std::vector<uint8_t>(d->bytes())};
      };
      const auto tc = std::chrono::steady_clock::now();
      if (opts.functional && co.precision == compiler::Precision::INT8) {
        runtime::CompileOptions bf = co;  // the inputs' declarations, for calibration inputs
        bf.precision = compiler::Precision::BF16;
        make_inputs(compile(bf));
        co.calibration.push_back(inputs);
      }
      // Timing-only programs (no weights: small) are kept in DIR/.programs/ by program_key: a point whose chip
      // differs from an earlier one's only where the compiler does not look loads it instead of compiling.
      std::string cached;
      if (!opts.functional && p.program_shared) {
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(p.program_key)));
        cached = (fs::path(opts.out) / ".programs" / (std::string(hex) + ".tpub")).string();
      }
      std::optional<runtime::Executable> loaded;
      std::error_code ec;
      if (!cached.empty() && fs::exists(cached, ec)) {
        try {
          loaded = client->load_program(isa::load_program(cached)).value();
        } catch (const std::exception&) {
          loaded.reset();  // unreadable: compile it again
        }
      }
      runtime::Executable exe = loaded ? *loaded : compile(co);
      if (!loaded && !cached.empty()) {
        const std::string tmp = cached + "." + std::to_string(getpid()) + ".tmp";
        fs::create_directories(fs::path(cached).parent_path(), ec);
        try {
          isa::save_program(exe.program(), tmp);
          fs::rename(tmp, cached, ec);
        } catch (const std::exception&) {
          fs::remove(tmp, ec);  // a cache that cannot be written only costs time
        }
      }
      rec["compile_s"] = since(tc);
      rec["program_cached"] = loaded.has_value();
      client->check_fits(exe);
      if (inputs.empty()) make_inputs(exe);
      runtime::ExecuteOptions eo;
      eo.functional = opts.functional;
      eo.max_cycles = opts.max_cycles;
      // Traced, for the layers' figures (the profile's, runtime/profile.h). A trace changes no cycle; it can only
      // stop the run at its limit of events, so a traced run that fails runs again without one (and no layers).
      eo.trace = true;
      eo.max_trace_events = kLayerTraceEvents;
      const auto ts = std::chrono::steady_clock::now();
      std::optional<runtime::ExecuteResult> traced;
      try {
        traced = client->execute(exe, inputs, eo);
      } catch (const std::exception&) {
        eo.trace = false;
      }
      runtime::ExecuteResult r = traced ? std::move(*traced) : client->execute(exe, inputs, eo);
      rec["simulate_s"] = since(ts);
      if (traced) {
        rec["layers"] = layers(runtime::make_profile(exe.program(), r.run, cfg));
        r.run.trace.clear();
      } else {
        rec["layers_error"] = "the run's trace went past " + std::to_string(kLayerTraceEvents) + " events";
      }
      json stats = json::parse(r.run.stats.to_json(cfg));
      stats.erase("instances");  // every unit of every core: large on many-core chips, and no column reads it
      rec["stats"] = std::move(stats);
      double flops = 0, hbm = 0;
      for (const isa::Region& reg : exe.program().regions)
        if (reg.kind == isa::kRegionNode) flops += reg.flops, hbm += reg.bytes;
      rec["program"] = {{"flops", flops}, {"bytes", hbm}, {"instructions", exe.program().code.size()}};
      rec["chip"] = {{"peak_flops", 2.0 * cfg.peak_macs_per_cycle(p.precision == "int8") * cfg.chip.clock_mhz * 1e6},
                     {"hbm_bytes_per_s", cfg.hbm.bandwidth_gbs * 1e9}, {"clock_hz", cfg.chip.clock_mhz * 1e6}};
      rec["status"] = "ok";
      rec["error"] = "";
    } catch (const std::bad_alloc&) {
      rec = {{"status", "error"}, {"error", "out of host memory"}};
    } catch (const std::exception& e) {
      rec = {{"status", "error"}, {"error", e.what()}};
    }
    rec["wall_s"] = since(t0);
    return rec;
  }
};

// ---- the journal ---------------------------------------------------------------------------------------------

// An append-only file of one JSON object per line: the sweep's header, then one record per finished point, each
// written with one write() and synced (fsync) before the point counts as done.
class Journal {
 public:
  // Opens dir/journal.jsonl: a new one (with `header`) unless `resume`; with `resume`, reads its records (the
  // header must equal `header`; a last line cut short by a kill is dropped, and the file truncated before it).
  Journal(const std::string& dir, const json& header, bool resume, std::map<size_t, json>& done, std::ostream& log) {
    path_ = (fs::path(dir) / kJournal).string();
    std::error_code ec;
    const bool exists = fs::exists(path_, ec);
    if (exists && !resume)
      throw std::invalid_argument(dir + " already holds a sweep (" + path_ +
                                  "): --resume continues it, or give another --out");
    fs::create_directories(dir);
    if (exists) {
      std::ifstream in(path_, std::ios::binary);
      std::string line;
      uint64_t good_end = 0, pos = 0;
      size_t lineno = 0, duplicates = 0;
      bool cut = false;
      while (std::getline(in, line)) {
        const bool complete = !in.eof();  // a last line without its '\n' was cut short
        pos += line.size() + (complete ? 1 : 0);
        ++lineno;
        json j = json::parse(line, nullptr, false);
        if (!complete || j.is_discarded() || !j.is_object()) {
          if (!complete || in.peek() == EOF) { cut = true; break; }
          throw std::runtime_error(path_ + ":" + std::to_string(lineno) + ": not a journal line");
        }
        if (lineno == 1) {
          if (j != header)
            throw std::invalid_argument(dir + " holds a different sweep (" + path_ + " line 1: " + j.dump() +
                                        "): give the same workload, config, sets, precision and sweeps, or another --out");
        } else {
          const size_t i = j.value("point", SIZE_MAX);
          if (!done.emplace(i, std::move(j)).second) ++duplicates;
        }
        good_end = pos;
      }
      if (lineno == 0 || (lineno == 1 && cut)) {
        write_header(header);
      } else {
        if (cut && truncate(path_.c_str(), static_cast<off_t>(good_end)) != 0)
          throw std::runtime_error("cannot truncate " + path_ + ": " + std::strerror(errno));
        open_append();
      }
      log << "explore: resuming " << dir << ": " << done.size() << " points already done"
          << (cut ? " (a last line cut short by the interruption was dropped)" : "")
          << (duplicates ? ", " + std::to_string(duplicates) + " duplicate lines ignored" : "") << "\n";
    } else {
      write_header(header);
    }
  }
  ~Journal() {
    if (fd_ >= 0) close(fd_);
  }
  void append(const json& record) {
    const std::string line = record.dump() + "\n";
    for (size_t off = 0; off < line.size();) {
      const ssize_t n = write(fd_, line.data() + off, line.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
      off += static_cast<size_t>(n);
    }
    if (fsync(fd_) != 0) throw std::runtime_error("cannot sync " + path_ + ": " + std::strerror(errno));
  }

 private:
  void open_append() {
    fd_ = open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error("cannot open " + path_ + ": " + std::strerror(errno));
  }
  void write_header(const json& header) {
    fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error("cannot create " + path_ + ": " + std::strerror(errno));
    append(header);
    // The folder's entry for the new file, too.
    const int dfd = open(fs::path(path_).parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) fsync(dfd), close(dfd);
  }
  std::string path_;
  int fd_ = -1;
};

// Groups points of one chip (a worker process elaborates one chip) into tasks of at most `chunk` points, ordered
// so that the first point of each program (program_key) comes before any second one: workers running at the same
// time compile different programs, and later points find theirs compiled.
std::vector<std::vector<size_t>> make_tasks(const std::vector<Point>& points, const std::vector<size_t>& todo, int jobs) {
  std::map<std::string, std::vector<size_t>> by_chip;
  std::vector<std::string> order;
  for (size_t i : todo) {
    const std::string key = join(points[i].sets, " ");
    if (!by_chip.count(key)) order.push_back(key);
    by_chip[key].push_back(i);
  }
  const size_t chunk = std::max<size_t>(1, todo.size() / (static_cast<size_t>(std::max(1, jobs)) * 4));
  std::vector<std::vector<size_t>> tasks;
  for (const auto& key : order) {
    const auto& v = by_chip[key];
    for (size_t a = 0; a < v.size(); a += chunk)
      tasks.emplace_back(v.begin() + static_cast<std::ptrdiff_t>(a),
                         v.begin() + static_cast<std::ptrdiff_t>(std::min(v.size(), a + chunk)));
  }
  std::map<std::string, size_t> seen;
  std::vector<std::pair<size_t, size_t>> rank;  // (how many earlier tasks start with the same program, position)
  for (size_t t = 0; t < tasks.size(); ++t) rank.emplace_back(seen[points[tasks[t][0]].program_key]++, t);
  std::stable_sort(rank.begin(), rank.end());
  std::vector<std::vector<size_t>> sorted;
  for (const auto& [n, t] : rank) sorted.push_back(std::move(tasks[t]));
  return sorted;
}

struct SignalGuard {
  struct sigaction old_int {}, old_term {};
  SignalGuard() {
    g_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  ~SignalGuard() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
};

struct MpiGuard {
  mpi::World w;
  ~MpiGuard() { mpi::finalize(w); }
};

}  // namespace

namespace {
int run_sweep(const Options& opts, std::ostream& log, const mpi::World& w);
}  // namespace

int run(const Options& opts, std::ostream& log) {
  MpiGuard world{mpi::init()};
  if (!world.w.active) return run_sweep(opts, log, world.w);
  // Under mpirun an error on one rank must end them all: the others would wait for it forever.
  try {
    return run_sweep(opts, log, world.w);
  } catch (const std::invalid_argument& e) {
    log << "tpusim: explore: " << e.what() << " (MPI rank " << world.w.rank << ")\n" << std::flush;
    mpi::abort(world.w, 2);
  } catch (const std::exception& e) {
    log << "tpusim: error: " << e.what() << " (MPI rank " << world.w.rank << ")\n" << std::flush;
    mpi::abort(world.w, 1);
  }
}

namespace {

int run_sweep(const Options& opts, std::ostream& log, const mpi::World& w) {
  const bool root = w.rank == 0;
  if (opts.out.empty()) throw std::invalid_argument("explore needs --out DIR");
  if (opts.jobs < 1 || opts.jobs > 256) throw std::invalid_argument("--jobs must be 1 to 256");
  const WorkloadSpec workload = parse_workload(opts.workload);
  std::vector<Point> points = make_points(opts, workload);
  std::vector<std::string> keys;
  for (const Sweep& s : opts.sweeps) keys.push_back(s.key);
  const json header = sweep_header(opts);

  // Rank 0: the journal (and what it already holds); every rank learns which points are done.
  std::map<size_t, json> done;
  std::unique_ptr<Journal> journal;
  if (root) journal = std::make_unique<Journal>(opts.out, header, opts.resume, done, log);
  {
    json ids = json::array();
    for (const auto& [i, r] : done) ids.push_back(i);
    const json got = json::parse(mpi::broadcast(w, ids.dump()));
    if (!root)
      for (size_t i : got) done.emplace(i, json());
  }
  std::vector<size_t> todo;
  for (const Point& p : points)
    if (!done.count(p.index)) todo.push_back(p.index);

  // Exported models: rank 0 exports what is missing (once, into the cache); then every rank finds them there.
  if (workload.kind != WorkloadSpec::Kind::Layer) {
    std::map<std::map<std::string, std::string>, std::string> paths;
    for (int pass = 0; pass < 2; ++pass) {
      if ((pass == 0) == root)
        for (size_t i : todo) {
          Point& p = points[i];
          if (workload.kind == WorkloadSpec::Kind::File) {
            p.model_path = workload.name;
            continue;
          }
          auto it = paths.find(p.workload_params);
          if (it == paths.end())
            it = paths.emplace(p.workload_params, exported_model(with_params(workload, p.workload_params), opts.cache, log)).first;
          p.model_path = it->second;
        }
      mpi::broadcast(w, "");  // a barrier: the exports are there
    }
  }

  {
    std::map<std::string, size_t> uses;
    for (size_t i : todo) ++uses[points[i].program_key = program_key(opts, workload, points[i])];
    for (size_t i : todo) points[i].program_shared = !points[i].program_key.empty() && uses[points[i].program_key] > 1;
  }
  // This rank's share: every size-th point still to do.
  std::vector<size_t> mine;
  for (size_t j = static_cast<size_t>(w.rank); j < todo.size(); j += static_cast<size_t>(w.size)) mine.push_back(todo[j]);

  if (root)
    log << "explore: " << points.size() << " points (" << todo.size() << " to run"
        << (w.size > 1 ? " on " + std::to_string(w.size) + " MPI ranks" : "") << ", " << opts.jobs
        << " worker process" << (opts.jobs > 1 ? "es" : "") << (w.size > 1 ? " each" : "") << "), "
        << (opts.functional ? "functional" : "timing-only") << ", results in " << opts.out << "\n";

  SignalGuard signals;
  size_t failed = 0, finished_now = 0;
  ProgressLine progress(log, todo.size(), opts.tty, "points", std::max<size_t>(1, todo.size() / 20));
  auto record_done = [&](json rec) {  // rank 0: journal, remember, progress
    const size_t i = rec.value("point", SIZE_MAX);
    if (i >= points.size() || done.count(i)) return;  // never twice
    journal->append(rec);
    if (rec.value("status", "") != "ok") ++failed;
    done.emplace(i, std::move(rec));
    ++finished_now;
    progress.update(finished_now, [&] {
      return ProgressLine::Extra{failed ? std::to_string(failed) + " failed" : "", ""};
    });
  };
  auto complete = [&](size_t i, json rec) {  // any rank: a record made whole (point, params) and passed on
    json full;
    full["point"] = i;
    json params = json::object();
    for (const auto& [k, v] : points[i].params) params[k] = v;
    full["params"] = params;
    for (auto& [k, v] : rec.items()) full[k] = v;
    if (root) record_done(std::move(full));
    else mpi::send_record(w, full.dump());
  };
  int ranks_finished = 0;
  auto receive = [&] {
    for (const std::string& line : mpi::receive(w, ranks_finished)) {
      json rec = json::parse(line, nullptr, false);
      if (!rec.is_discarded()) record_done(std::move(rec));
    }
  };

  Pool pool;
  pool.jobs = opts.jobs;
  pool.start = [&]() -> std::function<std::string(size_t)> {
    auto runner = std::make_shared<PointRunner>(PointRunner{opts, workload, nullptr, ""});
    return [&, runner](size_t i) { return runner->run(points[i]).dump(); };
  };
  pool.done = [&](size_t i, const std::string& line) {
    json rec = json::parse(line, nullptr, false);
    if (rec.is_discarded() || !rec.is_object()) rec = {{"status", "error"}, {"error", "a worker process sent an unreadable result"}};
    complete(i, std::move(rec));
  };
  pool.lost = [&](size_t i, const std::string& why) { complete(i, {{"status", "error"}, {"error", why}}); };
  pool.tick = [&] {
    if (root) receive();
    return g_signal == 0;
  };
  bool whole = run_pool(make_tasks(points, mine, opts.jobs), pool);
  if (!root) {
    mpi::send_finished(w);
    return whole ? 0 : 130;
  }
  while (whole && ranks_finished < w.size - 1) {
    receive();
    if (g_signal) whole = false;
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  progress.finish();

  if (whole) {  // the programs kept for later points: none is left to run
    std::error_code ec;
    fs::remove_all(fs::path(opts.out) / ".programs", ec);
  }
  std::vector<Record> records;
  for (auto& [i, r] : done) records.push_back(r);
  const std::vector<std::string> files = write_results(opts.out, keys, records, header);
  size_t ok = 0;
  for (const Record& r : records) ok += r.value("status", "") == "ok";
  log << "explore: " << records.size() << " of " << points.size() << " points done (" << ok << " ok, "
      << records.size() - ok << " failed); wrote " << opts.out << "/" << join(files, ", ") << "\n";
  if (!whole) {
    log << "explore: interrupted: " << points.size() - records.size()
        << " points left; the same command with --resume continues the sweep\n";
    if (w.active) mpi::abort(w, 130);
    return 130;
  }
  return ok > 0 ? 0 : 1;
}

}  // namespace

}  // namespace tpusim::explore
