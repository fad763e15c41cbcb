# The examples test (ctest: examples): installs the build into a fresh prefix, builds examples/ against the
# INSTALLED package (find_package(tpusim) with CMake, and tpusim.pc with pkg-config), and runs the C, C++ and
# Python clients; each checks its own results and exits non-zero on a wrong element.
#   cmake -DBUILD_DIR=build -DSOURCE_DIR=. -DWORK=build/examples-test -DPYTHON=/usr/bin/python3 -DGENERATOR=Ninja \
#         -P examples/run_examples.cmake
include(${SOURCE_DIR}/cmake/run.cmake)

set(prefix ${WORK}/prefix)
file(REMOVE_RECURSE ${WORK})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f lib/libtpusim.so lib/libtpusim_c.so bin/tpusim include/tpusim/runtime/c_api.h
          include/tpusim/runtime/runtime.h include/tpusim/isa/emitter.h include/tpusim/isa/emitter_ops.h lib/cmake/tpusim/tpusimConfig.cmake lib/pkgconfig/tpusim.pc)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()

# CMake: find_package(tpusim) in the prefix only (the build tree is not on any search path).
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples -B ${WORK}/build -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
run(${CMAKE_COMMAND} --build ${WORK}/build)
set(ENV{SC_COPYRIGHT_MESSAGE} DISABLE)
run(${WORK}/build/example_c ${SOURCE_DIR}/examples/matmul.s)
run(${WORK}/build/example_cpp ${SOURCE_DIR}/examples/matmul.s)
run(${WORK}/build/example_emit)
run(${prefix}/bin/tpusim --version)

# pkg-config, the way a Makefile would (the library found at run time through LD_LIBRARY_PATH).
find_program(PKG_CONFIG pkg-config REQUIRED)
find_program(CC NAMES cc gcc REQUIRED)
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs tpusim OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE
                COMMAND_ERROR_IS_FATAL ANY)
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CC} -std=c11 ${SOURCE_DIR}/examples/example.c ${flags} -o ${WORK}/example_c_pkgconfig)
set(ENV{LD_LIBRARY_PATH} ${prefix}/lib)
run(${WORK}/example_c_pkgconfig ${SOURCE_DIR}/examples/matmul.s)

# Python: the module from the build tree (the pip install is the python_pip test).
if(PYTHON AND EXISTS ${BUILD_DIR}/runtime/python)
  set(ENV{PYTHONPATH} ${BUILD_DIR}/runtime/python)
  run(${PYTHON} ${SOURCE_DIR}/examples/example.py ${SOURCE_DIR}/examples/matmul.s)
endif()
