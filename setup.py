"""Build dynamix_hvd: a CMake-built pybind11 extension (dynamix_hvd._native) plus the
PMPI collective-timing library (dynamix_hvd/lib/libdynamix_pmpi.so).

Honours CMAKE_ARGS (extra -D options) and CMAKE_BUILD_PARALLEL_LEVEL, like the
pybind11 cmake_example."""
import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_namespace_packages, setup
from setuptools.command.build_ext import build_ext


class CMakeExtension(Extension):
    def __init__(self, name: str, sourcedir: str = "") -> None:
        super().__init__(name, sources=[])
        self.sourcedir = os.fspath(Path(sourcedir).resolve())


class CMakeBuild(build_ext):
    def build_extension(self, ext: CMakeExtension) -> None:
        ext_fullpath = Path.cwd() / self.get_ext_fullpath(ext.name)
        extdir = ext_fullpath.parent.resolve()
        cfg = "Debug" if int(os.environ.get("DEBUG", 0)) else "Release"
        try:
            import pybind11
        except ImportError as exc:  # pragma: no cover - build-time message
            raise RuntimeError("building dynamix_hvd needs pybind11: pip install pybind11") from exc
        cmake_args = [
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={extdir}{os.sep}",
            f"-DDYNAMIX_LIB_OUTPUT_DIR={extdir}{os.sep}lib",
            f"-DPYTHON_EXECUTABLE={sys.executable}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DCMAKE_BUILD_TYPE={cfg}",
        ]
        if "CMAKE_ARGS" in os.environ:
            cmake_args += [a for a in os.environ["CMAKE_ARGS"].split(" ") if a]
        build_args = ["--config", cfg]
        if "CMAKE_BUILD_PARALLEL_LEVEL" not in os.environ:
            build_args += [f"-j{os.cpu_count() or 2}"]
        build_temp = Path(self.build_temp) / ext.name
        build_temp.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cmake", ext.sourcedir, *cmake_args], cwd=build_temp, check=True)
        subprocess.run(["cmake", "--build", ".", *build_args], cwd=build_temp, check=True)


# the PMPI library's directory is the CMake build's output: absent from a fresh checkout when packages
# are discovered, it would ship as undeclared data (setuptools' "dynamix_hvd.lib absent from packages")
(Path(__file__).resolve().parent / "dynamix_hvd" / "lib").mkdir(exist_ok=True)

setup(
    # namespace discovery: the data directories (policies, scenarios, traces) are packages of their
    # own to setuptools; package-data in pyproject.toml says which of their files ship
    packages=find_namespace_packages(include=["dynamix_hvd", "dynamix_hvd.*"], exclude=["*.__pycache__"]),
    ext_modules=[CMakeExtension("dynamix_hvd._native")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
