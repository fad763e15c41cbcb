// Shared by the libFuzzer harnesses (validation/fuzz/README.md): how a harness says a property failed, and a
// scratch file for the parsers that read a path.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace tpusim::fuzz {

// A property that must hold did not: print why and abort, which libFuzzer reports as a crash with the input.
[[noreturn]] inline void property_failed(const std::string& what) {
  std::fprintf(stderr, "fuzz property failed: %s\n", what.c_str());
  std::abort();
}

// One scratch file per process (libFuzzer's -fork and -jobs run several), rewritten for every input and removed
// when the process exits. In /dev/shm where there is one: rewriting a file of a disk file system (truncate, write,
// close) makes ext4 write it back at every close (perf showed the config harness in ext4_writepages).
struct ScratchFile {
  std::string path;
  ~ScratchFile() { std::remove(path.c_str()); }
};
inline const std::string& scratch_path(const char* suffix) {
  static const ScratchFile file{[&] {
    std::error_code ec;
    const std::filesystem::path dir =
        std::filesystem::is_directory("/dev/shm", ec) ? "/dev/shm" : std::filesystem::temp_directory_path();
    return (dir / ("tpusim-fuzz-" + std::to_string(getpid()) + suffix)).string();
  }()};
  return file.path;
}

inline const std::string& write_scratch(const uint8_t* data, size_t size, const char* suffix) {
  const std::string& path = scratch_path(suffix);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  f.close();
  if (!f) property_failed("cannot write the scratch file " + path);
  return path;
}

}  // namespace tpusim::fuzz
