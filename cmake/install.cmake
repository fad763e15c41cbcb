# `cmake --install build --prefix DIR`: the runtime as a library others build against (issue 14).
#   lib/libtpusim.so        the C++ API (runtime.h and the isa/sim/compiler/kernels headers it includes): the
#                           project's static libraries in one shared library
#   lib/libtpusim_c.so      the C API (c_api.h)
#   include/tpusim/...      the public headers of every library folder (and the emitter's generated one)
#   bin/tpusim              the command-line program
#   lib/cmake/tpusim/       find_package(tpusim): imported targets tpusim::tpusim (C++) and tpusim::tpusim_c (C)
#   lib/pkgconfig/          tpusim.pc (C) and tpusim-cxx.pc (C++), relocatable (paths from ${pcfiledir})
# examples/ builds against the result (runtime/CMakeLists.txt: the examples test).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The C++ shared library: every object of the static libraries (--whole-archive), so that a client links one
# library; their own dependencies (SystemC, protobuf, ONNX) are shared libraries it needs at run time.
set(_archives tpusim_runtime tpusim_compiler tpusim_kernels tpusim_sim tpusim_isa)
add_library(tpusim_cxx SHARED ${PROJECT_SOURCE_DIR}/runtime/src/library.cpp)
foreach(a IN LISTS _archives)
  list(APPEND _whole $<TARGET_FILE:${a}>)
endforeach()
target_link_options(tpusim_cxx PRIVATE LINKER:--whole-archive ${_whole} LINKER:--no-whole-archive)
target_link_libraries(tpusim_cxx PRIVATE ${_archives})
target_include_directories(tpusim_cxx INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(tpusim_cxx INTERFACE cxx_std_20)
set_target_properties(tpusim_cxx PROPERTIES OUTPUT_NAME tpusim EXPORT_NAME tpusim VERSION ${PROJECT_VERSION}
                                            SOVERSION ${PROJECT_VERSION_MAJOR})
set_target_properties(tpusim_c PROPERTIES EXPORT_NAME tpusim_c VERSION ${PROJECT_VERSION}
                                          SOVERSION ${PROJECT_VERSION_MAJOR})

install(TARGETS tpusim_cxx tpusim_c EXPORT tpusimTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS tpusim RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(dir isa sim compiler_backend kernels runtime)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endforeach()
# The typed emitter's instruction methods, generated from isa.def (isa/CMakeLists.txt), beside emitter.h.
install(FILES ${PROJECT_BINARY_DIR}/isa/include/tpusim/isa/emitter_ops.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tpusim/isa)

set(_cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/tpusim)
install(EXPORT tpusimTargets NAMESPACE tpusim:: DESTINATION ${_cmakedir})
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/tpusimConfig.cmake
     "# find_package(tpusim): tpusim::tpusim (C++ API, runtime.h) and tpusim::tpusim_c (C API, c_api.h).\n"
     "include(\"\${CMAKE_CURRENT_LIST_DIR}/tpusimTargets.cmake\")\n")
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/tpusimConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tpusimConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/tpusimConfigVersion.cmake
        DESTINATION ${_cmakedir})

foreach(pc tpusim tpusim-cxx)
  if(pc STREQUAL "tpusim")
    set(_what "C API of the tpusim runtime (tpusim/runtime/c_api.h)")
    set(_lib tpusim_c)
    set(_cflags "")
  else()
    set(_what "C++ API of the tpusim runtime (tpusim/runtime/runtime.h)")
    set(_lib tpusim)
    set(_cflags " -std=c++20")
  endif()
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/${pc}.pc
       "prefix=\${pcfiledir}/../..\n"
       "libdir=\${prefix}/${CMAKE_INSTALL_LIBDIR}\n"
       "includedir=\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}\n\n"
       "Name: ${pc}\nDescription: ${_what}\nVersion: ${PROJECT_VERSION}\n"
       "Libs: -L\${libdir} -l${_lib}\nCflags: -I\${includedir}${_cflags}\n")
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
