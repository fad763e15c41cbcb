"""pip's build of the Python module `tpusim` (pyproject.toml): CMake configures the project (or reuses
TPUSIM_CMAKE_BUILD_DIR) and builds the target tpusim_python, whose tpusim*.so is the module."""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCE = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("TPUSIM_CMAKE_BUILD_DIR")
        if build:
            build = os.path.abspath(build)
        else:
            build = os.path.abspath(os.path.join(self.build_temp, "cmake"))
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.check_call(["cmake", "-S", SOURCE, "-B", build, *generator, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DBUILD_TESTING=OFF", f"-DTPUSIM_PYTHON={sys.executable}"])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")
        subprocess.check_call(["cmake", "--build", build, "--target", "tpusim_python", "-j", jobs])
        built = glob.glob(os.path.join(build, "runtime", "python", "tpusim*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one tpusim*.so in {build}/runtime/python, found {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


setup(ext_modules=[Extension("tpusim", sources=[])], cmdclass={"build_ext": CMakeBuild})
