// The report side of `tpusim validate` (report.h): error statistics and the files a validation run writes.
// Plain standard C++: no simulator code, so the statistics and the file formats are tested on their own.
#include "report.h"

#include "tpusim/explore/pool.h"
#include "tpusim/explore/svg.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace tpusim::validate {

namespace fs = std::filesystem;
namespace svg = explore::svg;

const char* regime_name(Regime r) {
  switch (r) {
    case Regime::Launch: return "launch";
    case Regime::Memory: return "memory";
    case Regime::Compute: return "compute";
  }
  return "?";
}

double rel_error(double predicted, double measured) { return (predicted - measured) / measured; }

bool case_failed(const Case& c) { return !c.error.empty() || !std::isfinite(c.simulated_us); }

ErrorStats error_stats(const std::vector<const Case*>& cases, bool simulated) {
  ErrorStats s;
  std::vector<double> abs_pct;
  double sum_abs = 0, sum_signed = 0;
  size_t within = 0;
  for (const Case* c : cases) {
    // A failed case is left out of both predictions' statistics, so the tpusim and roofline columns of a
    // summary are always over the same cases. A roofline time or a measurement that is not a finite number
    // (which no golden row should give) cannot be scored either, and is counted as a failure rather than
    // turned into an infinite error that would swamp the mean.
    const double e = rel_error(simulated ? c->simulated_us : c->roofline_us, c->measured_us) * 100;
    if (case_failed(*c) || !std::isfinite(e)) {
      ++s.failed;
      continue;
    }
    abs_pct.push_back(std::fabs(e));
    sum_abs += std::fabs(e);
    sum_signed += e;
    // Inclusive, with a little slack: an error of exactly 10% computed as (1.1 m - m) / m comes out a few ulps
    // either side of 10 depending on m, and a boundary case should not flip with the rounding.
    if (std::fabs(e) <= 10 + 1e-9) ++within;
  }
  s.n = abs_pct.size();
  if (s.n == 0) {
    // An empty group has no error, not a zero one: NaN keeps it from reading as perfect (printed as blank / "-").
    s.mape = s.median = s.p90 = s.within10 = s.mean_signed = std::nan("");
    return s;
  }
  std::sort(abs_pct.begin(), abs_pct.end());
  const size_t n = s.n;
  s.mape = sum_abs / n;
  s.mean_signed = sum_signed / n;
  s.within10 = static_cast<double>(within) / n;
  // Median: the middle value of the sorted errors, or the mean of the two middle values when n is even.
  s.median = n % 2 ? abs_pct[n / 2] : (abs_pct[n / 2 - 1] + abs_pct[n / 2]) / 2;
  // 90th percentile by nearest rank: the smallest sorted error with at least 90% of the errors at or below it,
  // i.e. the value at 1-based rank ceil(0.9 n). It is always one of the errors (never interpolated), so "p90 =
  // 25%" means some case really is 25% off. The rank is computed in integers: 0.9 * n in floating point is
  // 0.9000000000000000222 * n and would round 9 * 10 / 10 up to the wrong rank for some n.
  const size_t rank = (9 * n + 9) / 10;  // ceil(9n / 10)
  s.p90 = abs_pct[rank - 1];
  return s;
}

namespace {

// ---- small formatting helpers (the shared ones are tpusim/explore/svg.h's) -----------------------------------

using svg::csv_row;
std::string fmt(const char* f, double v) { return svg::num(f, v); }

std::string shape_text(const Case& c) {  // "m=4096 n=4096 k=4096"
  std::string s;
  for (const auto& [name, v] : c.shape) {
    if (!s.empty()) s += ' ';
    s += name + '=' + std::to_string(v);
  }
  return s;
}

void write_file(const std::string& dir, const std::string& name, const std::string& text) {
  svg::write_file(dir, name, text);
}

// ---- grouping for the summaries ----------------------------------------------------------------------------

constexpr Regime kRegimes[] = {Regime::Launch, Regime::Memory, Regime::Compute};
constexpr const char* kParts[] = {"tune", "held-out", "all"};

bool in_part(const Case& c, const char* part) {
  const std::string p = part;
  return p == "all" || (p == "held-out") == c.held_out;
}

// The classes in the order they first appear (the caller's order of golden files), not sorted by name.
std::vector<std::string> classes_of(const std::vector<Case>& cases) {
  std::vector<std::string> out;
  for (const Case& c : cases)
    if (std::find(out.begin(), out.end(), c.cls) == out.end()) out.push_back(c.cls);
  return out;
}

// One row of a summary: a class (or "all"), a regime (or "all") and a part, scored both ways.
struct Row {
  std::string cls, regime, part;
  ErrorStats sim, roof;
};

// Rows per class: each regime that has cases in that class (all three parts, even an empty one, so every
// class-regime pair has the same three lines), then the class over all regimes; last, every class together.
std::vector<Row> summary_rows(const std::vector<Case>& cases) {
  std::vector<Row> rows;
  auto add = [&](const std::string& cls, const std::string& regime, auto&& pick) {
    for (const char* part : kParts) {
      std::vector<const Case*> g;
      for (const Case& c : cases)
        if (pick(c) && in_part(c, part)) g.push_back(&c);
      rows.push_back({cls, regime, part, error_stats(g, true), error_stats(g, false)});
    }
  };
  for (const std::string& cls : classes_of(cases)) {
    for (Regime r : kRegimes) {
      const bool any = std::any_of(cases.begin(), cases.end(), [&](const Case& c) { return c.cls == cls && c.regime == r; });
      if (any) add(cls, regime_name(r), [&](const Case& c) { return c.cls == cls && c.regime == r; });
    }
    add(cls, "all", [&](const Case& c) { return c.cls == cls; });
  }
  if (!cases.empty()) add("all", "all", [](const Case&) { return true; });
  return rows;
}

std::string md_pct(double v) { return std::isfinite(v) ? fmt("%.1f", v) : "-"; }

}  // namespace

// ---- cases.csv, summary.csv, summary.md ------------------------------------------------------------------

void write_cases(const std::string& dir, const std::vector<Case>& cases) {
  std::string out = csv_row({"class", "regime", "held_out", "shape", "flops", "bytes", "measured_us", "simulated_us",
                             "error_pct", "roofline_us", "roofline_error_pct", "wall_s", "error"});
  for (const Case& c : cases) {
    const bool failed = case_failed(c);
    // Times with 10 significant digits: the goldens have 4 decimals of microseconds and reach tens of
    // milliseconds (12345.6789 us is 9 digits), and a reader should get back the very number in the golden file.
    // Flops and bytes are whole numbers below 2^53, which %.15g prints exactly.
    out += csv_row({c.cls, regime_name(c.regime), c.held_out ? "1" : "0", shape_text(c), fmt("%.15g", c.flops),
                    fmt("%.15g", c.bytes), fmt("%.10g", c.measured_us), failed ? "" : fmt("%.10g", c.simulated_us),
                    failed ? "" : fmt("%.3f", rel_error(c.simulated_us, c.measured_us) * 100),
                    fmt("%.10g", c.roofline_us), fmt("%.3f", rel_error(c.roofline_us, c.measured_us) * 100),
                    fmt("%.4g", c.wall_s), c.error});
  }
  write_file(dir, "cases.csv", out);
}

void write_summary(const std::string& dir, const std::vector<Case>& cases, const std::string& header) {
  const std::vector<Row> rows = summary_rows(cases);

  // summary.csv: n and failed are tpusim's (the roofline is scored on the same cases); within10 is a fraction.
  std::vector<std::string> head = {"class", "regime", "part", "n", "failed"};
  for (const char* who : {"tpusim", "roofline"})
    for (const char* stat : {"mape", "median", "p90", "within10", "mean_signed"}) head.push_back(std::string(who) + "_" + stat);
  std::string csv = csv_row(head);
  for (const Row& r : rows) {
    std::vector<std::string> f = {r.cls, r.regime, r.part, std::to_string(r.sim.n), std::to_string(r.sim.failed)};
    for (const ErrorStats* s : {&r.sim, &r.roof}) {
      f.push_back(fmt("%.3f", s->mape));
      f.push_back(fmt("%.3f", s->median));
      f.push_back(fmt("%.3f", s->p90));
      f.push_back(fmt("%.4f", s->within10));
      f.push_back(fmt("%.3f", s->mean_signed));
    }
    csv += csv_row(f);
  }
  write_file(dir, "summary.csv", csv);

  // summary.md: one table per class (its regimes and the class over all of them), then every class together, then
  // how the run was made. tpusim's columns and the roofline's side by side, so each line shows what the simulator
  // adds over the plain baseline.
  std::string md = "# tpusim validate: simulated against measured kernel times\n\n";
  md += "Absolute percentage errors |simulated - measured| / measured: MAPE (mean), median, p90 (nearest rank), the "
        "share of cases within ±10%, and the bias (mean signed error; > 0: the prediction is slow). Failed cases are "
        "counted, not scored. The roofline is max(flops / peak, bytes / bandwidth) + the fixed kernel overhead.\n";
  const std::string table_head =
      "| regime | part | n | failed | tpusim MAPE % | median % | p90 % | within ±10% | bias % "
      "| roofline MAPE % | median % | p90 % | within ±10% | bias % |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  std::string current;
  for (const Row& r : rows) {
    if (r.cls != current) {
      current = r.cls;
      md += "\n## " + (r.cls == "all" ? std::string("All classes") : r.cls) + "\n\n" + table_head;
    }
    md += "| " + r.regime + " | " + r.part + " | " + std::to_string(r.sim.n) + " | " + std::to_string(r.sim.failed);
    for (const ErrorStats* s : {&r.sim, &r.roof})
      md += " | " + md_pct(s->mape) + " | " + md_pct(s->median) + " | " + md_pct(s->p90) + " | " +
            (std::isfinite(s->within10) ? fmt("%.0f%%", s->within10 * 100) : "-") + " | " +
            (std::isfinite(s->mean_signed) ? fmt("%+.1f", s->mean_signed) : "-");
    md += " |\n";
  }
  md += "\n## How this run was made\n\n" + header;
  if (!header.empty() && header.back() != '\n') md += '\n';
  write_file(dir, "summary.md", md);
}

// ---- scatter.svg ------------------------------------------------------------------------------------------

namespace {

constexpr const char* kBand = "#c4e6c4";  // the +-10% band: a pale green that the points' colours stand out on
const std::string& class_colour(size_t i) { return svg::colour(i); }

}  // namespace

void write_scatter(const std::string& dir, const std::vector<Case>& cases, const std::string& title) {
  // The cases drawn: those with a result, both times positive (a log axis has no place for 0). Both axes share
  // one range of whole decades so that y = x is the diagonal of a square plot.
  auto drawable = [](double a, double b) { return std::isfinite(a) && std::isfinite(b) && a > 0 && b > 0; };
  double lo = INFINITY, hi = -INFINITY;
  size_t off_scale = 0;
  for (const Case& c : cases) {
    if (case_failed(c)) continue;
    if (!drawable(c.measured_us, c.simulated_us)) {
      ++off_scale;
      continue;
    }
    for (double v : {c.measured_us, c.simulated_us}) lo = std::min(lo, v), hi = std::max(hi, v);
    if (drawable(c.measured_us, c.roofline_us)) lo = std::min(lo, c.roofline_us), hi = std::max(hi, c.roofline_us);
  }
  // Layout (SVG user units = pixels): the square plot at (L, T), the legend to its right.
  constexpr double L = 90, T = 60, S = 600, W = 1000, H = 730;
  const std::vector<double> range = {lo, hi};
  const svg::Axis ax = svg::Axis::fit(range, true, L, L + S), ay = svg::Axis::fit(range, true, T + S, T);
  auto px = [&](double us) { return ax.map(us); };
  auto py = [&](double us) { return ay.map(us); };
  // Point coordinates to 0.1 px: finer is invisible, and it keeps 25,000 points to about 1 MB.
  auto c1 = [](double v) { return fmt("%.1f", v); };

  std::string svg = svg::document_begin(W, H, title, L + S / 2);
  svg += svg::frame(ax, ay, "measured time (µs)", "simulated time (µs)", "plot");

  // The +-10% band (between y = 0.9 x and y = 1.1 x), clipped to the plot. On a few decades it is only a few
  // pixels wide, so its edges are drawn as well as its fill.
  const double a = ax.lo, b = ax.hi;
  auto line = [&](double y_a, double y_b, const std::string& style) {  // from (a, y_a) to (b, y_b)
    svg += "<line x1=\"" + c1(px(a)) + "\" y1=\"" + c1(py(y_a)) + "\" x2=\"" + c1(px(b)) + "\" y2=\"" + c1(py(y_b)) + "\" " +
           style + "/>\n";
  };
  svg += "<g clip-path=\"url(#plot)\">\n";
  svg += "<polygon fill=\"" + std::string(kBand) + "\" points=\"" + c1(px(a)) + "," + c1(py(1.1 * a)) + " " + c1(px(b)) +
         "," + c1(py(1.1 * b)) + " " + c1(px(b)) + "," + c1(py(0.9 * b)) + " " + c1(px(a)) + "," + c1(py(0.9 * a)) + "\"/>\n";
  for (double f : {0.9, 1.1}) line(f * a, f * b, "stroke=\"#5aa05a\" stroke-width=\"0.8\" stroke-dasharray=\"4 3\"");

  // The roofline baseline under tpusim's points, faint and grey: one path of zero-length segments with round caps
  // (a dot each, about 14 bytes per point instead of a circle's 40).
  std::string roof;
  for (const Case& c : cases)
    if (!case_failed(c) && drawable(c.measured_us, c.simulated_us) && drawable(c.measured_us, c.roofline_us))
      roof += "M" + c1(px(c.measured_us)) + " " + c1(py(c.roofline_us)) + "h0";
  if (!roof.empty())
    svg += "<path stroke=\"#999\" stroke-opacity=\"0.35\" stroke-width=\"2.5\" stroke-linecap=\"round\" fill=\"none\" d=\"" +
           roof + "\"/>\n";
  line(a, b, "stroke=\"#333\" stroke-width=\"1\"");  // y = x, over the baseline, under tpusim's points

  // tpusim's points: one circle per case, grouped per class so the colour is written once per class.
  const std::vector<std::string> classes = classes_of(cases);
  for (size_t i = 0; i < classes.size(); ++i) {
    svg += "<g fill=\"" + class_colour(i) + "\" fill-opacity=\"0.55\">\n";
    for (const Case& c : cases)
      if (c.cls == classes[i] && !case_failed(c) && drawable(c.measured_us, c.simulated_us))
        svg += "<circle cx=\"" + c1(px(c.measured_us)) + "\" cy=\"" + c1(py(c.simulated_us)) + "\" r=\"2.5\"/>\n";
    svg += "</g>\n";
  }
  svg += "</g>\n";
  svg += svg::frame_border(ax, ay);

  // The legend: per class its colour, then its cases, failures and MAPE on a second, smaller line (long class
  // names and counts do not fit on one); then the baseline, the line and the band. Its swatches are squares, so
  // the file's circles are exactly the cases' points (one each).
  double y = T + 10;
  const double lx = L + S + 30;
  auto legend_text = [&](const std::string& text, const std::string& detail = "") {
    svg += "<text x=\"" + c1(lx + 20) + "\" y=\"" + c1(y + 4) + "\">" + svg::escape(text) + "</text>\n";
    if (!detail.empty()) {
      y += 17;
      svg += "<text x=\"" + c1(lx + 20) + "\" y=\"" + c1(y + 4) + "\" font-size=\"11\" fill=\"#555\">" + svg::escape(detail) +
             "</text>\n";
    }
    y += 24;
  };
  auto detail = [](const ErrorStats& s) {
    std::string t = std::to_string(s.n) + " cases";
    if (s.failed) t += ", " + std::to_string(s.failed) + " failed";
    if (s.n) t += ", MAPE " + fmt("%.1f", s.mape) + "%";
    return t;
  };
  for (size_t i = 0; i < classes.size(); ++i) {
    std::vector<const Case*> g;
    for (const Case& c : cases)
      if (c.cls == classes[i]) g.push_back(&c);
    svg += "<rect x=\"" + c1(lx + 1) + "\" y=\"" + c1(y - 5) + "\" width=\"10\" height=\"10\" fill=\"" +
           class_colour(i) + "\"/>\n";
    legend_text(classes[i], detail(error_stats(g, true)));
  }
  if (!roof.empty()) {
    std::vector<const Case*> all;
    for (const Case& c : cases) all.push_back(&c);
    svg += "<rect x=\"" + c1(lx + 3) + "\" y=\"" + c1(y - 3) + "\" width=\"6\" height=\"6\" fill=\"#999\"/>\n";
    const ErrorStats s = error_stats(all, false);
    legend_text("roofline baseline", "MAPE " + fmt("%.1f", s.mape) + "% over the same cases");
  }
  svg += "<line x1=\"" + c1(lx) + "\" y1=\"" + c1(y) + "\" x2=\"" + c1(lx + 14) + "\" y2=\"" + c1(y) + "\" stroke=\"#333\"/>\n";
  legend_text("y = x");
  svg += "<rect x=\"" + c1(lx) + "\" y=\"" + c1(y - 6) + "\" width=\"14\" height=\"12\" fill=\"" + kBand +
         "\" stroke=\"#5aa05a\" stroke-width=\"0.8\" stroke-dasharray=\"4 3\"/>\n";
  legend_text("within ±10%");
  if (off_scale) legend_text(std::to_string(off_scale) + " not drawn", "(a time <= 0 has no place on a log axis)");
  svg += svg::document_end();
  write_file(dir, "scatter.svg", svg);
}

// ---- progress -----------------------------------------------------------------------------------------------

Progress::Progress(std::ostream& os, size_t total, bool tty, size_t every)
    : line_(std::make_unique<explore::ProgressLine>(os, total, tty, "cases", every)) {}
Progress::~Progress() = default;

void Progress::update(const std::vector<Case>& done_so_far) {
  line_->update(done_so_far.size(), [&] {
    // MAPE of the cases so far, as a plain sum: O(n) per line written and no sort, unlike error_stats.
    size_t failed = 0, scored = 0;
    double sum = 0;
    for (const Case& c : done_so_far) {
      const double e = std::fabs(rel_error(c.simulated_us, c.measured_us)) * 100;
      if (case_failed(c) || !std::isfinite(e)) ++failed;
      else ++scored, sum += e;
    }
    return explore::ProgressLine::Extra{std::to_string(failed) + " failed",
                                        "MAPE " + (scored ? fmt("%.1f", sum / scored) + "%" : std::string("-"))};
  });
}

void Progress::finish() { line_->finish(); }

}  // namespace tpusim::validate
