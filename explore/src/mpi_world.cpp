// MPI for tpusim explore (mpi_world.h).
#include "mpi_world.h"

#include <cstdlib>
#include <stdexcept>

#ifdef TPUSIM_HAVE_MPI
#include <mpi.h>
#endif

namespace tpusim::explore::mpi {

namespace {
constexpr int kTagRecord = 1, kTagFinished = 2;

int launched_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return std::getenv("PMIX_RANK") ? 2 : 1;
}
}  // namespace

bool built_with_mpi() {
#ifdef TPUSIM_HAVE_MPI
  return true;
#else
  return false;
#endif
}

World init() {
  World w;
  const int n = launched_size();
  if (n <= 1) return w;
#ifdef TPUSIM_HAVE_MPI
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SINGLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  w.active = true;
  return w;
#else
  throw std::runtime_error("explore was started by mpirun with " + std::to_string(n) +
                           " ranks, but this tpusim was built without MPI (install libopenmpi-dev and reconfigure)");
#endif
}

void finalize(const World& w) {
#ifdef TPUSIM_HAVE_MPI
  if (w.active) MPI_Finalize();
#endif
}

std::string broadcast(const World& w, const std::string& text) {
#ifdef TPUSIM_HAVE_MPI
  if (!w.active) return text;
  unsigned long long n = text.size();
  MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  std::string out = w.rank == 0 ? text : std::string(n, '\0');
  // In pieces of at most 1 GiB (an MPI count is an int).
  for (unsigned long long off = 0; off < n; off += 1ull << 30) {
    const int len = static_cast<int>(std::min<unsigned long long>(n - off, 1ull << 30));
    MPI_Bcast(out.data() + off, len, MPI_CHAR, 0, MPI_COMM_WORLD);
  }
  return out;
#else
  return text;
#endif
}

void send_record(const World& w, const std::string& line) {
#ifdef TPUSIM_HAVE_MPI
  if (w.active) MPI_Send(line.data(), static_cast<int>(line.size()), MPI_CHAR, 0, kTagRecord, MPI_COMM_WORLD);
#endif
}

void send_finished(const World& w) {
#ifdef TPUSIM_HAVE_MPI
  if (w.active) MPI_Send(nullptr, 0, MPI_CHAR, 0, kTagFinished, MPI_COMM_WORLD);
#endif
}

std::vector<std::string> receive(const World& w, int& finished) {
  std::vector<std::string> out;
#ifdef TPUSIM_HAVE_MPI
  if (!w.active) return out;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
    if (!flag) break;
    int n = 0;
    MPI_Get_count(&st, MPI_CHAR, &n);
    std::string s(static_cast<size_t>(n), '\0');
    MPI_Recv(s.data(), n, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (st.MPI_TAG == kTagFinished) ++finished;
    else out.push_back(std::move(s));
  }
#endif
  return out;
}

void abort(const World& w, int code) {
#ifdef TPUSIM_HAVE_MPI
  if (w.active) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

}  // namespace tpusim::explore::mpi
