// Worker processes and the progress line (pool.h).
#include "tpusim/explore/pool.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tpusim::explore {

namespace {

struct Worker {
  pid_t pid = -1;
  int fd = -1;
  size_t task = 0;
  std::string buffer;
  std::vector<bool> reported;  // per item of the task
};

[[noreturn]] void fail(const char* what) { throw std::runtime_error(std::string(what) + ": " + std::strerror(errno)); }

// The child: runs the task's items and writes "<position in task>\t<line>\n" for each.
[[noreturn]] void child(int fd, const std::vector<size_t>& items, const Pool& pool) {
  int code = 0;
  try {
    auto run = pool.start();
    for (size_t p = 0; p < items.size(); ++p) {
      std::string line = run(items[p]);
      std::replace(line.begin(), line.end(), '\n', ' ');
      line = std::to_string(p) + "\t" + line + "\n";
      for (size_t off = 0; off < line.size();) {
        const ssize_t n = write(fd, line.data() + off, line.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) _exit(4);  // the caller went away
        off += static_cast<size_t>(n);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tpusim: worker process: %s\n", e.what());
    code = 3;
  } catch (...) {
    code = 3;
  }
  std::fflush(stdout), std::fflush(stderr);
  _exit(code);
}

}  // namespace

std::vector<std::vector<size_t>> strided_tasks(size_t n, int jobs) {
  const size_t j = static_cast<size_t>(std::max(1, jobs));
  std::vector<std::vector<size_t>> tasks(std::min(j, std::max<size_t>(n, 1)));
  for (size_t i = 0; i < n; ++i) tasks[i % tasks.size()].push_back(i);
  std::erase_if(tasks, [](const std::vector<size_t>& t) { return t.empty(); });
  return tasks;
}

bool run_pool(const std::vector<std::vector<size_t>>& tasks, const Pool& pool) {
  std::vector<Worker> workers;
  size_t next = 0;
  const size_t jobs = static_cast<size_t>(std::max(1, pool.jobs));
  auto kill_all = [&] {
    for (Worker& w : workers) {
      kill(w.pid, SIGKILL);
      close(w.fd);
      int status = 0;
      while (waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {}
    }
    workers.clear();
  };
  auto launch = [&] {
    while (workers.size() < jobs && next < tasks.size()) {
      const size_t t = next++;
      if (tasks[t].empty()) continue;
      int fds[2];
      if (pipe(fds) != 0) { kill_all(); fail("worker processes: pipe"); }
      std::cout.flush(), std::cerr.flush(), std::fflush(stdout), std::fflush(stderr);
      const pid_t pid = fork();
      if (pid < 0) { close(fds[0]), close(fds[1]); kill_all(); fail("worker processes: fork"); }
      if (pid == 0) {
        close(fds[0]);
        for (const Worker& other : workers) close(other.fd);
        child(fds[1], tasks[t], pool);
      }
      close(fds[1]);
      workers.push_back(Worker{pid, fds[0], t, {}, std::vector<bool>(tasks[t].size(), false)});
    }
  };
  launch();
  while (!workers.empty()) {
    std::vector<pollfd> fds;
    for (const Worker& w : workers) fds.push_back(pollfd{w.fd, POLLIN, 0});
    const int ready = poll(fds.data(), fds.size(), 100);
    if (ready < 0 && errno != EINTR) { kill_all(); fail("worker processes: poll"); }
    if (pool.tick && !pool.tick()) {
      kill_all();
      return false;
    }
    if (ready <= 0) continue;
    for (size_t wi = 0; wi < workers.size();) {
      Worker& w = workers[wi];
      if (!(fds[wi].revents & (POLLIN | POLLHUP | POLLERR))) { ++wi; continue; }
      char chunk[65536];
      const ssize_t n = read(w.fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) { ++wi; continue; }
      if (n > 0) {
        w.buffer.append(chunk, static_cast<size_t>(n));
        size_t from = 0;
        for (size_t nl; (nl = w.buffer.find('\n', from)) != std::string::npos; from = nl + 1) {
          const size_t tab = w.buffer.find('\t', from);
          if (tab == std::string::npos || tab > nl) continue;
          const size_t p = std::strtoul(w.buffer.c_str() + from, nullptr, 10);
          const std::vector<size_t>& items = tasks[w.task];
          if (p >= items.size() || w.reported[p]) continue;
          w.reported[p] = true;
          pool.done(items[p], w.buffer.substr(tab + 1, nl - tab - 1));
        }
        w.buffer.erase(0, from);
        ++wi;
        continue;
      }
      // End of the worker's output: it has exited (or is about to).
      close(w.fd);
      int status = 0;
      while (waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {}
      const std::string why = WIFSIGNALED(status)
                                  ? "worker process killed by signal " + std::to_string(WTERMSIG(status))
                                  : "worker process ended early (exit " + std::to_string(WEXITSTATUS(status)) + ")";
      const Worker gone = std::move(w);
      fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(wi));
      workers.erase(workers.begin() + static_cast<std::ptrdiff_t>(wi));
      for (size_t p = 0; p < gone.reported.size(); ++p)
        if (!gone.reported[p]) pool.lost(tasks[gone.task][p], why);
      launch();
      // A new worker is polled from the next round on (fds no longer matches workers past wi).
      break;
    }
  }
  return true;
}

// ---- progress ------------------------------------------------------------------------------------------------

namespace {
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

std::string ProgressLine::hms(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  const long t = std::lround(s), h = t / 3600, m = t / 60 % 60, sec = t % 60;
  char buf[32];
  if (h) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", h, m, sec);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", m, sec);
  return buf;
}

ProgressLine::ProgressLine(std::ostream& os, size_t total, bool tty, std::string what, size_t every)
    : os_(os), total_(total), every_(std::max<size_t>(every, 1)), tty_(tty), what_(std::move(what)), start_(now_s()) {}

void ProgressLine::update(size_t n, const std::function<Extra()>& extra) {
  const double t = now_s(), elapsed = t - start_;
  // A terminal gets at most ten redraws a second (and always the last item): fast items would otherwise spend
  // more time on the terminal than on their work. A log gets a line every `every` items and at the end.
  const bool last = n >= total_;
  if (tty_ ? !last && t - last_print_ < 0.1 : !last && n - last_ < every_) return;
  if (!tty_ && last && n == last_ && !line_.empty()) return;  // the final line was already written
  const double rate = elapsed > 0 ? n / elapsed : 0;
  const Extra e = extra ? extra() : Extra{};
  char buf[256];
  std::snprintf(buf, sizeof buf, "%zu/%zu %s", n, total_, what_.c_str());
  line_ = buf;
  if (!e.after_count.empty()) line_ += ", " + e.after_count;
  std::snprintf(buf, sizeof buf, ", %.1f %s/s, %s left", rate, what_.c_str(),
                hms(rate > 0 && total_ >= n ? (total_ - n) / rate : NAN).c_str());
  line_ += buf;
  if (!e.at_end.empty()) line_ += ", " + e.at_end;
  last_ = n;
  last_print_ = t;
  if (tty_) {
    // Pad with spaces over what is left of a longer previous line (the time left can shrink by a few characters).
    std::string out = "\r" + line_;
    if (line_.size() < width_) out.append(width_ - line_.size(), ' ');
    width_ = line_.size();
    os_ << out << std::flush;
  } else {
    os_ << line_ << '\n' << std::flush;
  }
}

void ProgressLine::finish() {
  if (tty_ && !line_.empty()) os_ << '\n' << std::flush;
}

}  // namespace tpusim::explore
