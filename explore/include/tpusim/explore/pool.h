// Worker processes for work that needs a SystemC kernel of its own (docs/architecture.md, pitfalls: one SystemC
// kernel per process, elaborated once), and the progress line of a long batch. `tpusim explore` runs each design
// point in one, `tpusim validate --jobs N` its golden cases.
#pragma once

#include <cstddef>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace tpusim::explore {

// A batch of items run in worker processes. Each task (a list of item indices) runs in one fresh process, forked
// from the caller, which has no SystemC kernel of its own: `start()` is called there once (it elaborates what the
// task's items share and returns the function that runs one item), then that function once per item, in order;
// each returns one line of text (a '\n' in it is replaced by a space). At most `jobs` processes run at a time;
// tasks start in the order given. In the caller:
//   done(item, line)  for each item's line, as it arrives (tasks interleave; items of one task come in order);
//   lost(item, why)   for each item its process ended without reporting ("worker process killed by signal 9");
//   tick()            at least every 100 ms while processes run; returning false stops the batch: the running
//                     processes are killed (SIGKILL) and their unreported items are neither done nor lost.
// Returns true when every task ran (each item done or lost), false when tick() stopped it. Throws
// std::runtime_error when it cannot fork or make a pipe (no process is left running).
struct Pool {
  int jobs = 1;
  std::function<std::function<std::string(size_t)>()> start;
  std::function<void(size_t, const std::string&)> done;
  std::function<void(size_t, const std::string&)> lost;
  std::function<bool()> tick;  // optional
};
bool run_pool(const std::vector<std::vector<size_t>>& tasks, const Pool& pool);

// Items 0..n-1 as `jobs` tasks of every jobs-th item (task w: w, w + jobs, ...), for work whose items all share one
// process's set-up.
std::vector<std::vector<size_t>> strided_tasks(size_t n, int jobs);

// A one-line progress report: on a terminal ("\r" + text, no newline, redrawn at most 10 times a second and always
// at the end), or else a plain line every `every` items and at the end: "<done>/<total> <what>, <rate> <what>/s,
// <time> left", with the caller's texts after the count and at the end ("3/27 points, 1 failed, 1.5 points/s,
// 0:16 left").
class ProgressLine {
 public:
  struct Extra {
    std::string after_count, at_end;  // each added with ", " when not empty
  };
  ProgressLine(std::ostream& os, size_t total, bool tty, std::string what, size_t every = 50);
  // Call after each item; `extra()` is called only when a line is written.
  void update(size_t done, const std::function<Extra()>& extra = {});
  void finish();  // ends the line on a terminal
  static std::string hms(double seconds);  // "1:02:03", "2:03"; "--:--" when not finite

 private:
  std::ostream& os_;
  size_t total_, every_;
  bool tty_;
  std::string what_;
  double start_;
  size_t last_ = 0;
  double last_print_ = -1;
  std::string line_;
  size_t width_ = 0;
};

}  // namespace tpusim::explore
