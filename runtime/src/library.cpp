// libtpusim.so (cmake/install.cmake): the C++ API for programs built against an installed tpusim. Its contents
// are the project's static libraries, linked whole; this file only gives the library a source of its own.
#include "tpusim/runtime/runtime.h"
