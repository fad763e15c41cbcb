# The python_pip test: the module installed with pip from the source tree (pyproject.toml, setup.py) into a new
# virtual environment over Debian's interpreter, with no index (nothing downloads) and the project's configured
# build folder reused; then examples/example.py runs with the environment's interpreter from outside the tree.
#   cmake -DSOURCE_DIR=. -DBUILD_DIR=build -DWORK=build/pip-test -DPYTHON=/usr/bin/python3 -P runtime/python/pip_install.cmake
include(${SOURCE_DIR}/cmake/run.cmake)

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(RUN_DIR ${WORK})  # outside the build folder that holds the module too
run(${PYTHON} -m venv --system-site-packages ${WORK}/venv)
set(ENV{TPUSIM_CMAKE_BUILD_DIR} ${BUILD_DIR})
run(${WORK}/venv/bin/python -m pip install --no-build-isolation --no-index --no-cache-dir ${SOURCE_DIR})
set(ENV{SC_COPYRIGHT_MESSAGE} DISABLE)
set(ENV{PYTHONPATH} "")
run(${WORK}/venv/bin/python -c "import tpusim, sys; assert tpusim.__file__.startswith(sys.prefix), tpusim.__file__")
run(${WORK}/venv/bin/python ${SOURCE_DIR}/examples/example.py ${SOURCE_DIR}/examples/matmul.s)
