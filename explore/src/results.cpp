// Results of a sweep (results.h).
#include "results.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "tpusim/explore/svg.h"

namespace tpusim::explore {

namespace {

double num_at(const Record& r, std::initializer_list<const char*> path) {
  const nlohmann::json* j = &r;
  for (const char* k : path) {
    if (!j->is_object() || !j->contains(k)) return NAN;
    j = &(*j)[k];
  }
  return j->is_number() ? j->get<double>() : NAN;
}
double seconds(const Record& r) { return num_at(r, {"stats", "seconds"}); }
double hbm_bytes(const Record& r) {
  return num_at(r, {"stats", "hbm", "bytes_read"}) + num_at(r, {"stats", "hbm", "bytes_written"});
}

}  // namespace

// THE place where a point's figures come from its record: a figure the stats gain is one more line here, and the
// CSV, the JSON, the HTML table and (for energy_j and area_mm2) the Pareto plots follow. Optional columns are
// written only when some point has them: the energy and area model's (docs/energy.md: "energy", "area" and
// "efficiency" in the stats JSON) appear with a simulator that reports them.
const std::vector<Column>& columns() {
  static const std::vector<Column> c = {
      {"latency_cycles", "latency (cycles)", [](const Record& r) { return num_at(r, {"stats", "cycles"}); }},
      {"latency_us", "latency (µs)", [](const Record& r) { return seconds(r) * 1e6; }},
      {"throughput_per_s", "throughput (runs/s)", [](const Record& r) { return 1.0 / seconds(r); }},
      {"tflops", "achieved TFLOP/s",
       [](const Record& r) { return num_at(r, {"program", "flops"}) / seconds(r) / 1e12; }},
      {"mxu_utilization", "MXU MAC utilisation", [](const Record& r) { return num_at(r, {"stats", "mxu", "mac_utilization"}); }},
      {"hbm_bytes", "HBM traffic (bytes)", [](const Record& r) { return hbm_bytes(r); }},
      {"hbm_gbs", "HBM bandwidth used (GB/s)", [](const Record& r) { return hbm_bytes(r) / seconds(r) / 1e9; }},
      {"flops", "FLOPs (compiler)", [](const Record& r) { return num_at(r, {"program", "flops"}); }},
      {"intensity", "arithmetic intensity (FLOP/byte of HBM)",
       [](const Record& r) { return num_at(r, {"program", "flops"}) / hbm_bytes(r); }},
      {"peak_tflops", "chip peak TFLOP/s", [](const Record& r) { return num_at(r, {"chip", "peak_flops"}) / 1e12; }},
      {"energy_j", "energy per run (J)", [](const Record& r) { return num_at(r, {"stats", "energy", "total_j"}); }, true},
      {"power_w", "average power (W)", [](const Record& r) { return num_at(r, {"stats", "energy", "average_power_w"}); },
       true},
      {"area_mm2", "area (mm²)", [](const Record& r) { return num_at(r, {"stats", "area", "total_mm2"}); }, true},
      {"tops_per_w", "MXU TOPS/W", [](const Record& r) { return num_at(r, {"stats", "efficiency", "tops_per_w"}); }, true},
      {"tops_per_mm2", "MXU TOPS/mm²",
       [](const Record& r) { return num_at(r, {"stats", "efficiency", "tops_per_mm2"}); }, true},
      {"compile_s", "compile (s)", [](const Record& r) { return num_at(r, {"compile_s"}); }},
      {"simulate_s", "simulate (s)", [](const Record& r) { return num_at(r, {"simulate_s"}); }},
  };
  return c;
}

std::vector<const Column*> present_columns(const std::vector<Record>& records) {
  std::vector<const Column*> out;
  for (const Column& c : columns()) {
    bool any = !c.optional;
    for (size_t i = 0; !any && i < records.size(); ++i)
      any = records[i].value("status", "") == "ok" && std::isfinite(c.value(records[i]));
    if (any) out.push_back(&c);
  }
  return out;
}

std::vector<size_t> pareto_front(const std::vector<double>& xs, const std::vector<double>& ys) {
  std::vector<size_t> front;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!std::isfinite(xs[i]) || !std::isfinite(ys[i])) continue;
    bool dominated = false;
    for (size_t j = 0; j < xs.size() && !dominated; ++j)
      dominated = j != i && std::isfinite(xs[j]) && std::isfinite(ys[j]) && xs[j] <= xs[i] && ys[j] <= ys[i] &&
                  (xs[j] < xs[i] || ys[j] < ys[i]);
    if (!dominated) front.push_back(i);
  }
  return front;
}

namespace {

using svg::num;

std::string c1(double v) { return num("%.1f", v); }
std::string param(const Record& r, const std::string& key) {
  return r.contains("params") && r["params"].contains(key) ? r["params"][key].get<std::string>() : "";
}
bool ok(const Record& r) { return r.value("status", "") == "ok"; }
std::string point_label(const Record& r, const std::vector<std::string>& keys) {
  std::string s = "point " + std::to_string(r.value("point", 0));
  for (const auto& k : keys) s += " " + k + "=" + param(r, k);
  return s;
}
bool numeric(const std::string& s, double& v) {
  try {
    size_t used = 0;
    v = std::stod(s, &used);
    return used == s.size() && std::isfinite(v);
  } catch (const std::logic_error&) {
    return false;
  }
}
std::string safe_name(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  return s;
}

// A point: a circle with a tooltip naming it (SVG <title>, shown on hover in a browser).
std::string circle(double x, double y, double r, const std::string& fill, const std::string& tip,
                   const std::string& extra = "") {
  return "<circle cx=\"" + c1(x) + "\" cy=\"" + c1(y) + "\" r=\"" + num("%.1f", r) + "\" fill=\"" + fill + "\"" + extra +
         "><title>" + svg::escape(tip) + "</title></circle>\n";
}

constexpr double L = 100, T = 60, PW = 600, PH = 420, W = 980, H = 560;

std::string legend_entry(double y, const std::string& colour, const std::string& text, bool ring = false) {
  const double lx = L + PW + 30;
  std::string s = ring ? "<circle cx=\"" + c1(lx + 6) + "\" cy=\"" + c1(y) + "\" r=\"6\" fill=\"none\" stroke=\"" + colour +
                             "\" stroke-width=\"2\"/>\n"
                       : "<rect x=\"" + c1(lx + 1) + "\" y=\"" + c1(y - 5) + "\" width=\"10\" height=\"10\" fill=\"" +
                             colour + "\"/>\n";
  return s + "<text x=\"" + c1(lx + 20) + "\" y=\"" + c1(y + 4) + "\">" + svg::escape(text) + "</text>\n";
}

// Latency against one swept parameter: the points that share every other parameter joined by a line, one colour
// per such series (up to ten; more series are drawn grey without a legend).
std::string latency_plot(const std::string& key, const std::vector<std::string>& keys, const std::vector<Record>& recs) {
  std::vector<std::string> cats;  // the key's values in sweep order (first seen)
  bool all_numeric = true;
  for (const Record& r : recs) {
    const std::string v = param(r, key);
    if (std::find(cats.begin(), cats.end(), v) == cats.end()) cats.push_back(v);
    double d;
    all_numeric = all_numeric && numeric(v, d) && d > 0;
  }
  auto xval = [&](const Record& r) {
    double d = 0;
    if (all_numeric && numeric(param(r, key), d)) return d;
    return static_cast<double>(std::find(cats.begin(), cats.end(), param(r, key)) - cats.begin());
  };
  std::vector<double> xs, ys;
  for (const Record& r : recs)
    if (ok(r)) xs.push_back(xval(r)), ys.push_back(seconds(r) * 1e6);
  double xmin = INFINITY, xmax = -INFINITY;
  for (double x : xs) xmin = std::min(xmin, x), xmax = std::max(xmax, x);
  const bool xlog = all_numeric && xmax >= 8 * xmin;
  std::vector<double> xr = xs;
  if (all_numeric && !xlog && xmin < xmax)  // a margin, so that no point sits on the frame
    xr.push_back(xmin - 0.05 * (xmax - xmin)), xr.push_back(xmax + 0.05 * (xmax - xmin));
  svg::Axis ax = svg::Axis::fit(xr, xlog, L, L + PW);
  if (!all_numeric) {  // categories at 0, 1, ...: a half step of margin either side
    ax.lo = -0.5, ax.hi = static_cast<double>(cats.size()) - 0.5;
    for (size_t i = 0; i < cats.size(); ++i) ax.labels.emplace_back(static_cast<double>(i), cats[i]);
  }
  double ymin = INFINITY, ymax = -INFINITY;
  for (double y : ys) ymin = std::min(ymin, y), ymax = std::max(ymax, y);
  const svg::Axis ay = svg::Axis::fit(ys, ymax >= 20 * ymin && ymin > 0, T + PH, T);
  std::string s = svg::document_begin(W, H, "latency against " + key, L + PW / 2);
  s += svg::frame(ax, ay, key, "latency (µs)", "clip");
  // Series: the other parameters' values.
  std::map<std::string, std::vector<const Record*>> series;
  std::vector<std::string> order;
  for (const Record& r : recs) {
    if (!ok(r)) continue;
    std::string id;
    for (const auto& k : keys)
      if (k != key) id += (id.empty() ? "" : " ") + k + "=" + param(r, k);
    if (!series.count(id)) order.push_back(id);
    series[id].push_back(&r);
  }
  const bool coloured = order.size() <= svg::palette().size();
  s += "<g clip-path=\"url(#clip)\">\n";
  for (size_t si = 0; si < order.size(); ++si) {
    auto pts = series[order[si]];
    std::sort(pts.begin(), pts.end(), [&](const Record* a, const Record* b) { return xval(*a) < xval(*b); });
    const std::string col = coloured ? svg::colour(si) : "#888";
    std::string path;
    for (const Record* r : pts)
      path += (path.empty() ? "M" : " L") + c1(ax.map(xval(*r))) + " " + c1(ay.map(seconds(*r) * 1e6));
    if (pts.size() > 1)
      s += "<path d=\"" + path + "\" fill=\"none\" stroke=\"" + col + "\" stroke-opacity=\"0.6\" stroke-width=\"1.5\"/>\n";
    for (const Record* r : pts)
      s += circle(ax.map(xval(*r)), ay.map(seconds(*r) * 1e6), 4, col,
                  point_label(*r, keys) + ": " + num("%.4g", seconds(*r) * 1e6) + " us");
  }
  s += "</g>\n" + svg::frame_border(ax, ay);
  double y = T + 10;
  if (coloured && order.size() > 1)
    for (size_t si = 0; si < order.size(); ++si, y += 22) s += legend_entry(y, svg::colour(si), order[si]);
  size_t failed = 0;
  for (const Record& r : recs) failed += !ok(r);
  if (failed) s += "<text x=\"" + c1(L + PW + 30) + "\" y=\"" + c1(y + 4) + "\">" + std::to_string(failed) + " failed point(s) not drawn</text>\n";
  return s + svg::document_end();
}

// Latency against a cost column (area, energy): every point, the Pareto front (lowest latency for its cost)
// ringed and joined.
std::string pareto_plot(const Column& cost, const std::vector<std::string>& keys, const std::vector<Record>& recs) {
  std::vector<double> xs, ys;
  std::vector<const Record*> drawn;
  for (const Record& r : recs)
    if (ok(r) && std::isfinite(cost.value(r)) && std::isfinite(seconds(r))) {
      xs.push_back(cost.value(r)), ys.push_back(seconds(r) * 1e6), drawn.push_back(&r);
    }
  const std::vector<size_t> front = pareto_front(xs, ys);
  const svg::Axis ax = svg::Axis::fit(xs, false, L, L + PW), ay = svg::Axis::fit(ys, false, T + PH, T);
  std::string s = svg::document_begin(W, H, "latency against " + cost.label, L + PW / 2);
  s += svg::frame(ax, ay, cost.label, "latency (µs)", "clip");
  s += "<g clip-path=\"url(#clip)\">\n";
  std::vector<size_t> f = front;
  std::sort(f.begin(), f.end(), [&](size_t a, size_t b) { return xs[a] < xs[b]; });
  std::string path;
  for (size_t i : f) path += (path.empty() ? "M" : " L") + c1(ax.map(xs[i])) + " " + c1(ay.map(ys[i]));
  if (f.size() > 1) s += "<path d=\"" + path + "\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"1.5\"/>\n";
  for (size_t i = 0; i < drawn.size(); ++i)
    s += circle(ax.map(xs[i]), ay.map(ys[i]), 4, svg::colour(0), point_label(*drawn[i], keys));
  for (size_t i : f)
    s += "<circle class=\"pareto\" cx=\"" + c1(ax.map(xs[i])) + "\" cy=\"" + c1(ay.map(ys[i])) +
         "\" r=\"7\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\"/>\n";
  s += "</g>\n" + svg::frame_border(ax, ay);
  s += legend_entry(T + 10, svg::colour(0), "design point");
  s += legend_entry(T + 32, "#d62728", "Pareto front (" + std::to_string(f.size()) + ")", true);
  return s + svg::document_end();
}

// A point's layers (the record's "layers": the graph nodes with work, as the profile gives them) with their
// roofline coordinates: intensity = the compiler's FLOPs over its HBM bytes of the node, FLOP/s = its FLOPs over
// its cycles at the chip's clock. Layers lacking either are left out.
struct Layer {
  std::string name;
  double flops = 0, bytes = 0, cycles = 0, intensity = 0, flops_per_s = 0;
};
std::vector<Layer> layers_of(const Record& r) {
  std::vector<Layer> out;
  const double clock = num_at(r, {"chip", "clock_hz"});
  if (!ok(r) || !r.contains("layers") || !r["layers"].is_array() || !(clock > 0)) return out;
  for (const auto& l : r["layers"]) {
    Layer x{l.value("name", ""), l.value("flops", 0.0), l.value("bytes", 0.0), l.value("cycles", 0.0)};
    if (!(x.flops > 0 && x.bytes > 0 && x.cycles > 0)) continue;
    x.intensity = x.flops / x.bytes, x.flops_per_s = x.flops / (x.cycles / clock);
    out.push_back(std::move(x));
  }
  return out;
}

// The roofline: attained FLOP/s against arithmetic intensity, log-log, each chip's roof min(peak, bandwidth x
// intensity) as a line (one per distinct chip), each point a circle (its program's FLOPs over its measured HBM
// traffic and latency) and each of its layers a smaller dot (layers_of), in the point's colour where there are
// few enough points to tell apart.
std::string roofline_plot(const std::vector<std::string>& keys, const std::vector<Record>& recs) {
  std::vector<double> xs, ys;
  std::vector<const Record*> drawn;
  std::vector<std::vector<Layer>> layers;  // by drawn point
  std::set<std::pair<double, double>> roofs;
  std::vector<double> xr, yr;
  size_t with_layers = 0;
  for (const Record& r : recs) {
    if (!ok(r)) continue;
    const double flops = num_at(r, {"program", "flops"}), bytes = hbm_bytes(r), t = seconds(r);
    const double peak = num_at(r, {"chip", "peak_flops"}), bw = num_at(r, {"chip", "hbm_bytes_per_s"});
    if (std::isfinite(peak) && std::isfinite(bw) && peak > 0 && bw > 0) roofs.insert({peak, bw});
    std::vector<Layer> ls = layers_of(r);
    for (const Layer& l : ls) xr.push_back(l.intensity), yr.push_back(l.flops_per_s);
    with_layers += !ls.empty();
    if (!(flops > 0 && bytes > 0 && t > 0)) continue;
    xs.push_back(flops / bytes), ys.push_back(flops / t), drawn.push_back(&r), layers.push_back(std::move(ls));
  }
  xr.insert(xr.end(), xs.begin(), xs.end()), yr.insert(yr.end(), ys.begin(), ys.end());
  for (const auto& [peak, bw] : roofs) {
    yr.push_back(peak);
    xr.push_back(peak / bw);  // the ridge point
  }
  const svg::Axis ax = svg::Axis::fit(xr, true, L, L + PW), ay = svg::Axis::fit(yr, true, T + PH, T);
  std::string s = svg::document_begin(W, H, "roofline: attained FLOP/s against arithmetic intensity", L + PW / 2);
  s += svg::frame(ax, ay, "arithmetic intensity (FLOP per byte of HBM traffic)", "attained FLOP/s", "clip");
  s += "<g clip-path=\"url(#clip)\">\n";
  for (const auto& [peak, bw] : roofs) {
    const double ridge = peak / bw;
    s += "<path class=\"roof\" d=\"M" + c1(ax.map(ax.lo)) + " " + c1(ay.map(bw * ax.lo)) + " L" + c1(ax.map(ridge)) + " " +
         c1(ay.map(peak)) + " L" + c1(ax.map(ax.hi)) + " " + c1(ay.map(peak)) +
         "\" fill=\"none\" stroke=\"#555\" stroke-opacity=\"0.5\" stroke-width=\"1.2\"/>\n";
  }
  const bool coloured = drawn.size() > 1 && drawn.size() <= svg::palette().size();
  auto colour_of = [&](size_t i) { return coloured ? svg::colour(i) : svg::colour(0); };
  for (size_t i = 0; i < drawn.size(); ++i) {  // the layers under the points
    const std::string point = std::to_string(drawn[i]->value("point", 0));
    for (const Layer& l : layers[i])
      s += circle(ax.map(l.intensity), ay.map(l.flops_per_s), 2.2, coloured ? colour_of(i) : "#777",
                  point_label(*drawn[i], keys) + ", layer " + l.name + ": " + num("%.3g", l.flops_per_s / 1e12) +
                      " TFLOP/s at " + num("%.3g", l.intensity) + " FLOP/byte",
                  " class=\"layer\" fill-opacity=\"0.55\" data-point=\"" + point + "\" data-layer=\"" +
                      svg::escape(l.name) + "\" data-intensity=\"" + num("%.9g", l.intensity) +
                      "\" data-flops-per-s=\"" + num("%.9g", l.flops_per_s) + "\"");
  }
  for (size_t i = 0; i < drawn.size(); ++i)
    s += circle(ax.map(xs[i]), ay.map(ys[i]), 4.5, colour_of(i),
                point_label(*drawn[i], keys) + ": " + num("%.3g", ys[i] / 1e12) + " TFLOP/s at " + num("%.3g", xs[i]) +
                    " FLOP/byte",
                " class=\"point\" stroke=\"#000\" stroke-width=\"0.8\" data-point=\"" +
                    std::to_string(drawn[i]->value("point", 0)) + "\"");
  s += "</g>\n" + svg::frame_border(ax, ay);
  // Legend: the marks, the roofs, then the points' colours (values in the order of the swept keys).
  const double lx = L + PW + 30;
  auto mark = [&](double y, double r, const std::string& extra, const std::string& text) {
    s += "<circle cx=\"" + c1(lx + 6) + "\" cy=\"" + c1(y) + "\" r=\"" + c1(r) + "\" fill=\"" + svg::colour(0) + "\"" +
         extra + "/>\n<text x=\"" + c1(lx + 20) + "\" y=\"" + c1(y + 4) + "\">" + svg::escape(text) + "</text>\n";
  };
  double y = T + 10;
  mark(y, 4.5, " stroke=\"#000\" stroke-width=\"0.8\"", "design point (whole program)");
  if (with_layers) mark(y += 22, 2.2, "", "its layers (graph nodes)");
  y += 22;
  s += "<line x1=\"" + c1(lx) + "\" y1=\"" + c1(y) + "\" x2=\"" + c1(lx + 14) + "\" y2=\"" + c1(y) +
       "\" stroke=\"#555\"/>\n<text x=\"" + c1(lx + 20) + "\" y=\"" + c1(y + 4) + "\">roof of each chip (" +
       std::to_string(roofs.size()) + ")</text>\n";
  if (coloured) {
    std::string names;
    for (const auto& k : keys) names += (names.empty() ? "" : ", ") + k;
    s += "<text x=\"" + c1(lx) + "\" y=\"" + c1(y += 30) + "\">point: " + svg::escape(names) + "</text>\n";
    for (size_t i = 0; i < drawn.size(); ++i) {
      std::string values;
      for (const auto& k : keys) values += (values.empty() ? "" : ", ") + param(*drawn[i], k);
      s += legend_entry(y += 22, colour_of(i), std::to_string(drawn[i]->value("point", 0)) + ": " + values);
    }
  }
  return s + svg::document_end();
}

std::string cell(double v) { return num("%.6g", v); }

}  // namespace

std::vector<std::string> write_results(const std::string& dir, const std::vector<std::string>& keys,
                                       const std::vector<Record>& records, const nlohmann::json& header) {
  const std::vector<const Column*> cols = present_columns(records);
  std::vector<std::string> written;
  auto value = [](const Column& c, const Record& r) { return ok(r) ? c.value(r) : NAN; };

  // results.csv: point, the swept parameters, status, error, the figures; blank fields where a point has none.
  std::vector<std::string> head = {"point"};
  head.insert(head.end(), keys.begin(), keys.end());
  head.push_back("status");
  head.push_back("error");
  for (const Column* c : cols) head.push_back(c->name);
  std::string csv = svg::csv_row(head);
  for (const Record& r : records) {
    std::vector<std::string> f = {std::to_string(r.value("point", 0))};
    for (const auto& k : keys) f.push_back(param(r, k));
    f.push_back(r.value("status", ""));
    f.push_back(r.value("error", ""));
    for (const Column* c : cols) f.push_back(num("%.10g", value(*c, r)));
    csv += svg::csv_row(f);
  }
  svg::write_file(dir, "results.csv", csv);
  written.push_back("results.csv");

  // results.json: the sweep, the columns, and per point the same figures (null where none).
  nlohmann::ordered_json j;
  j["sweep"] = header;
  j["columns"] = nlohmann::ordered_json::array();
  for (const Column* c : cols) j["columns"].push_back({{"name", c->name}, {"label", c->label}});
  j["points"] = nlohmann::ordered_json::array();
  for (const Record& r : records) {
    nlohmann::ordered_json p;
    p["point"] = r.value("point", 0);
    nlohmann::ordered_json ps = nlohmann::ordered_json::object();
    for (const auto& k : keys) ps[k] = param(r, k);
    p["params"] = ps;
    p["status"] = r.value("status", "");
    p["error"] = r.value("error", "");
    for (const Column* c : cols) {
      const double v = value(*c, r);
      p[c->name] = std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
    }
    j["points"].push_back(std::move(p));
  }
  svg::write_file(dir, "results.json", j.dump(2) + "\n");
  written.push_back("results.json");

  // layers.csv: a row per layer of every point that has them (the roofline's dots).
  std::vector<std::string> lhead = {"point"};
  lhead.insert(lhead.end(), keys.begin(), keys.end());
  for (const char* c : {"layer", "flops", "bytes", "cycles", "intensity", "tflops"}) lhead.push_back(c);
  std::string lcsv = svg::csv_row(lhead);
  for (const Record& r : records)
    for (const Layer& l : layers_of(r)) {
      std::vector<std::string> f = {std::to_string(r.value("point", 0))};
      for (const auto& k : keys) f.push_back(param(r, k));
      f.push_back(l.name);
      for (double v : {l.flops, l.bytes, l.cycles, l.intensity, l.flops_per_s / 1e12}) f.push_back(num("%.10g", v));
      lcsv += svg::csv_row(f);
    }
  svg::write_file(dir, "layers.csv", lcsv);
  written.push_back("layers.csv");

  // Plots.
  std::vector<std::pair<std::string, std::string>> plots;  // file, svg
  for (const auto& k : keys) plots.emplace_back("latency_vs_" + safe_name(k) + ".svg", latency_plot(k, keys, records));
  for (const Column* c : cols)
    if (c->name == "area_mm2" || c->name == "energy_j") plots.emplace_back("pareto_" + c->name + ".svg", pareto_plot(*c, keys, records));
  plots.emplace_back("roofline.svg", roofline_plot(keys, records));
  for (const auto& [name, text] : plots) {
    svg::write_file(dir, name, text);
    written.push_back(name);
  }

  // report.html: self-contained (inline SVG and CSS, no scripts, nothing fetched).
  size_t failed = 0;
  for (const Record& r : records) failed += !ok(r);
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>tpusim explore: " +
                  svg::escape(header.value("workload", "")) + "</title>\n<style>body{font-family:sans-serif;margin:2em}"
                  "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;"
                  "text-align:right}th{background:#f0f0f0}td.t{text-align:left}tr.err td{color:#a00}"
                  ".plot{margin:1em 0}</style></head><body>\n";
  h += "<h1>tpusim explore</h1>\n<p>workload <b>" + svg::escape(header.value("workload", "")) + "</b> on <b>" +
       svg::escape(header.value("config", "")) + "</b>";
  if (header.contains("sets") && !header["sets"].empty()) {
    h += " with";
    for (const auto& s : header["sets"]) h += " --set " + svg::escape(s.get<std::string>());
  }
  h += ", " + std::string(header.value("functional", false) ? "functional" : "timing-only") + ", precision " +
       svg::escape(header.value("precision", "")) + ": " + std::to_string(records.size()) + " points, " +
       std::to_string(failed) + " failed.</p>\n<p>Swept:";
  if (header.contains("sweeps"))
    for (const auto& sw : header["sweeps"]) {
      h += " <code>" + svg::escape(sw["key"].get<std::string>()) + "</code> =";
      for (const auto& v : sw["values"]) h += " " + svg::escape(v.get<std::string>());
      h += ";";
    }
  h += "</p>\n<h2>Plots</h2>\n";
  for (const auto& [name, text] : plots) {
    std::string body = text;
    if (body.rfind("<?xml", 0) == 0) body = body.substr(body.find('\n') + 1);
    h += "<div class=\"plot\" id=\"" + name + "\">" + body + "</div>\n";
  }
  h += "<h2>Results</h2>\n<table>\n<tr><th>point</th>";
  for (const auto& k : keys) h += "<th>" + svg::escape(k) + "</th>";
  h += "<th>status</th>";
  for (const Column* c : cols) h += "<th>" + svg::escape(c->label) + "</th>";
  h += "<th>error</th></tr>\n";
  for (const Record& r : records) {
    h += std::string("<tr") + (ok(r) ? "" : " class=\"err\"") + "><td>" + std::to_string(r.value("point", 0)) + "</td>";
    for (const auto& k : keys) h += "<td>" + svg::escape(param(r, k)) + "</td>";
    h += "<td class=\"t\">" + svg::escape(r.value("status", "")) + "</td>";
    for (const Column* c : cols) h += "<td>" + cell(value(*c, r)) + "</td>";
    h += "<td class=\"t\">" + svg::escape(r.value("error", "")) + "</td></tr>\n";
  }
  h += "</table>\n<p>Files: results.csv, results.json, layers.csv (each point's layers) and the plots as SVG, in this "
       "folder.</p>\n</body></html>\n";
  svg::write_file(dir, "report.html", h);
  written.push_back("report.html");
  return written;
}

}  // namespace tpusim::explore
