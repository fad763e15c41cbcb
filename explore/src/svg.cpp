// Report pieces (svg.h).
#include "tpusim/explore/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace tpusim::explore::svg {

namespace fs = std::filesystem;

std::string num(const char* f, double v) {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + '"';
}

std::string csv_row(const std::vector<std::string>& fields) {
  std::string row;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) row += ',';
    row += csv_field(fields[i]);
  }
  return row + '\n';
}

void write_file(const std::string& dir, const std::string& name, const std::string& text) {
  const fs::path folder = dir.empty() ? fs::path(".") : fs::path(dir);
  fs::create_directories(folder);
  const fs::path path = folder / name, tmp = folder / ("." + name + ".tmp");
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw std::runtime_error("cannot write " + tmp.string());
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    f.close();
    if (!f) throw std::runtime_error("error writing " + tmp.string());
  }
  fs::rename(tmp, path);
}

const std::vector<std::string>& palette() {
  static const std::vector<std::string> p = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                             "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
  return p;
}
const std::string& colour(size_t i) { return palette()[i % palette().size()]; }

std::string decade_label(int e) {
  if (e < -3 || e > 5) return "1e" + std::to_string(e);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", std::max(0, -e), std::pow(10.0, e));  // "0.001", "1", "100000"
  return buf;
}

double Axis::map(double v) const {
  const double a = log ? std::log10(lo) : lo, b = log ? std::log10(hi) : hi, x = log ? std::log10(v) : v;
  return from + (x - a) / (b - a) * (to - from);
}

namespace {
double nice_step(double span, int target) {  // 1, 2 or 5 times a power of ten, giving about `target` steps
  const double raw = span / target, p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}
}  // namespace

Axis Axis::fit(const std::vector<double>& values, bool log, double from, double to) {
  Axis a;
  a.log = log, a.from = from, a.to = to;
  double lo = INFINITY, hi = -INFINITY;
  for (double v : values)
    if (std::isfinite(v) && (!log || v > 0)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (log) {
    if (!(lo <= hi)) lo = 1, hi = 10;  // nothing to draw: still a valid, empty plot
    const int e_lo = static_cast<int>(std::floor(std::log10(lo)));
    const int e_hi = std::max(e_lo + 1, static_cast<int>(std::ceil(std::log10(hi))));
    a.lo = std::pow(10.0, e_lo), a.hi = std::pow(10.0, e_hi);
    return a;
  }
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (lo > 0 && lo < hi * 0.5) lo = 0;  // a range from zero reads better when it is not far off
  if (hi == lo) hi = lo + (lo == 0 ? 1 : std::fabs(lo) * 0.1);
  const double step = nice_step(hi - lo, 5);
  a.lo = std::floor(lo / step) * step, a.hi = std::ceil(hi / step) * step;
  if (a.hi == a.lo) a.hi += step;
  return a;
}

std::vector<std::pair<double, std::string>> Axis::ticks() const {
  if (!labels.empty()) return labels;
  std::vector<std::pair<double, std::string>> t;
  if (log) {
    const int e_lo = static_cast<int>(std::lround(std::log10(lo))), e_hi = static_cast<int>(std::lround(std::log10(hi)));
    for (int e = e_lo; e <= e_hi; ++e) t.emplace_back(std::pow(10.0, e), decade_label(e));
    return t;
  }
  const double step = nice_step(hi - lo, 5);
  for (double v = lo; v <= hi + step * 1e-9; v += step) {
    const double r = std::fabs(v) < step * 1e-9 ? 0 : v;
    t.emplace_back(r, num("%g", r));
  }
  return t;
}

std::vector<double> Axis::minor_ticks() const {
  std::vector<double> t;
  if (!log) return t;
  const int e_lo = static_cast<int>(std::lround(std::log10(lo))), e_hi = static_cast<int>(std::lround(std::log10(hi)));
  for (int e = e_lo; e < e_hi; ++e)
    for (int m = 2; m <= 9; ++m) t.push_back(m * std::pow(10.0, e));
  return t;
}

namespace {
std::string c1(double v) { return num("%.1f", v); }
}  // namespace

std::string document_begin(double w, double h, const std::string& title, double title_x) {
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num("%.0f", w) + "\" height=\"" + num("%.0f", h) +
       "\" viewBox=\"0 0 " + num("%.0f", w) + " " + num("%.0f", h) + "\" font-family=\"sans-serif\" font-size=\"13\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + c1(title_x) + "\" y=\"30\" text-anchor=\"middle\" font-size=\"17\">" + escape(title) + "</text>\n";
  return s;
}

std::string frame(const Axis& x, const Axis& y, const std::string& x_title, const std::string& y_title,
                  const std::string& clip_id) {
  const double L = std::min(x.from, x.to), R = std::max(x.from, x.to), T = std::min(y.from, y.to),
               B = std::max(y.from, y.to);
  std::string s = "<defs><clipPath id=\"" + clip_id + "\"><rect x=\"" + c1(L) + "\" y=\"" + c1(T) + "\" width=\"" +
                  c1(R - L) + "\" height=\"" + c1(B - T) + "\"/></clipPath></defs>\n";
  const auto xt = x.ticks(), yt = y.ticks();
  // Grid: a line at every labelled tick.
  s += "<g stroke=\"#e4e4e4\" stroke-width=\"1\">\n";
  for (const auto& [v, label] : xt)
    s += "<line x1=\"" + c1(x.map(v)) + "\" y1=\"" + c1(T) + "\" x2=\"" + c1(x.map(v)) + "\" y2=\"" + c1(B) + "\"/>";
  for (const auto& [v, label] : yt)
    s += "<line x1=\"" + c1(L) + "\" y1=\"" + c1(y.map(v)) + "\" x2=\"" + c1(R) + "\" y2=\"" + c1(y.map(v)) + "\"/>";
  s += "\n</g>\n<g stroke=\"black\" stroke-width=\"1\">\n";
  // Tick marks: long at labelled ticks, short at minor ones.
  auto xtick = [&](double v, double len) {
    s += "<line x1=\"" + c1(x.map(v)) + "\" y1=\"" + c1(B) + "\" x2=\"" + c1(x.map(v)) + "\" y2=\"" + c1(B + len) + "\"/>";
  };
  auto ytick = [&](double v, double len) {
    s += "<line x1=\"" + c1(L - len) + "\" y1=\"" + c1(y.map(v)) + "\" x2=\"" + c1(L) + "\" y2=\"" + c1(y.map(v)) + "\"/>";
  };
  for (const auto& [v, label] : xt) xtick(v, 6);
  for (double v : x.minor_ticks()) xtick(v, 3);
  for (const auto& [v, label] : yt) ytick(v, 6);
  for (double v : y.minor_ticks()) ytick(v, 3);
  s += "\n</g>\n";
  for (const auto& [v, label] : xt)
    s += "<text x=\"" + c1(x.map(v)) + "\" y=\"" + c1(B + 22) + "\" text-anchor=\"middle\">" + escape(label) + "</text>";
  for (const auto& [v, label] : yt)
    s += "<text x=\"" + c1(L - 10) + "\" y=\"" + c1(y.map(v) + 4) + "\" text-anchor=\"end\">" + escape(label) + "</text>";
  s += "\n<text x=\"" + c1((L + R) / 2) + "\" y=\"" + c1(B + 50) + "\" text-anchor=\"middle\">" + escape(x_title) +
       "</text>\n";
  s += "<text transform=\"translate(" + c1(L - 62) + " " + c1((T + B) / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
       escape(y_title) + "</text>\n";
  return s;
}

std::string frame_border(const Axis& x, const Axis& y) {
  const double L = std::min(x.from, x.to), R = std::max(x.from, x.to), T = std::min(y.from, y.to),
               B = std::max(y.from, y.to);
  return "<rect x=\"" + c1(L) + "\" y=\"" + c1(T) + "\" width=\"" + c1(R - L) + "\" height=\"" + c1(B - T) +
         "\" fill=\"none\" stroke=\"black\" stroke-width=\"1\"/>\n";
}

}  // namespace tpusim::explore::svg
