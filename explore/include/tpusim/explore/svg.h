// Small pieces for the reports tpusim writes (tpusim explore, tpusim validate): numbers and text for CSV and XML,
// files replaced in one step, and plots as self-contained SVG (no scripts, nothing external), so that a report
// opens anywhere, offline.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tpusim::explore::svg {

// printf-style formatting of one number; "" for NaN or infinity (a blank CSV field reads back as missing).
std::string num(const char* format, double v);
std::string escape(const std::string& s);  // XML/HTML: & < > "
// RFC 4180: a field with a comma, a quote or a line break is quoted, with its quotes doubled.
std::string csv_field(const std::string& s);
std::string csv_row(const std::vector<std::string>& fields);  // with '\n'
// Writes `text` to dir/name through a temporary file in the same folder and a rename, which replaces the old file
// in one step: a reader (or a run killed mid-write) sees the old file or the new one, never half of one. Creates
// `dir`; throws std::runtime_error or std::filesystem::filesystem_error naming the path.
void write_file(const std::string& dir, const std::string& name, const std::string& text);

// Colours for series, in order (matplotlib's "tab10", easy to tell apart).
const std::vector<std::string>& palette();
// A colour of the palette for series i.
const std::string& colour(size_t i);

// An axis of a plot: data values in [lo, hi] onto pixels [from, to] (to < from for a y axis), linear or log10.
struct Axis {
  bool log = false;
  double lo = 0, hi = 1;
  double from = 0, to = 1;
  std::vector<std::pair<double, std::string>> labels;  // when not empty, the ticks (categories at 0, 1, ...)
  double map(double v) const;
  // An axis over `values` (non-finite ones ignored; a log axis ignores values <= 0): a log axis spans whole
  // decades, a linear one "nice" steps (1, 2 or 5 times a power of ten) from a multiple of its step.
  static Axis fit(const std::vector<double>& values, bool log, double from, double to);
  // Labelled ticks: `labels` when given, else on a log axis each decade, on a linear one each step.
  std::vector<std::pair<double, std::string>> ticks() const;
  // Unlabelled ticks: 2..9 times each decade on a log axis; none on a linear one.
  std::vector<double> minor_ticks() const;
};
std::string decade_label(int e);  // "0.001" .. "100000"; "1e-4", "1e6" beyond

// The start of an SVG document `width` x `height` with a white background and a title centred over the plot.
std::string document_begin(double width, double height, const std::string& title, double title_x);
inline std::string document_end() { return "</svg>\n"; }
// A plot's frame: grid lines at the labelled ticks, tick marks, tick labels and the axis titles, then a clip path
// named `clip_id` for what is drawn inside; the caller draws the data in <g clip-path="url(#clip_id)">, then
// frame_border.
std::string frame(const Axis& x, const Axis& y, const std::string& x_title, const std::string& y_title,
                  const std::string& clip_id);
std::string frame_border(const Axis& x, const Axis& y);

}  // namespace tpusim::explore::svg
