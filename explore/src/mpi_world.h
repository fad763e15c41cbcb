// MPI for `tpusim explore` under mpirun (explore.h): the points are spread over the ranks, each rank runs its share
// in its own worker processes, and sends each finished point's record to rank 0, which journals them and writes
// the results. Built with MPI where CMake finds it (TPUSIM_HAVE_MPI); without it, or when the program was not
// started by mpirun, one process with rank 0 of 1.
#pragma once

#include <string>
#include <vector>

namespace tpusim::explore::mpi {

struct World {
  int rank = 0, size = 1;
  bool active = false;  // MPI_Init was called (started by mpirun with more than one rank)
};
// Initialises MPI when the environment says the process was started by mpirun (OMPI_COMM_WORLD_SIZE, PMI_SIZE or
// PMIX_RANK); a build without MPI started that way with more than one rank is an error (std::runtime_error).
World init();
void finalize(const World& w);

// Rank 0 to every rank (each returns rank 0's text).
std::string broadcast(const World& w, const std::string& text);
// Rank != 0: one finished point's record (a line of text) to rank 0; finished(): this rank has no more.
void send_record(const World& w, const std::string& line);
void send_finished(const World& w);
// Rank 0: the records that have arrived (without waiting), and the ranks that said finished (added to `finished`).
std::vector<std::string> receive(const World& w, int& finished);
// Rank 0: an error on another rank ends the job (MPI_Abort) rather than leave rank 0 waiting.
[[noreturn]] void abort(const World& w, int code);

bool built_with_mpi();

}  // namespace tpusim::explore::mpi
