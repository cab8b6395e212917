"""The compiled emulator core, Cython to C++: the timing passes (`emulator/_timing_core.pyx`)
and the functional pass's hot instructions (`emulator/_functional_core.pyx`). Built by
``pip install -e .`` (``make install``); everything else about the package is pyproject.toml."""

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

setup(ext_modules=cythonize([
    Extension("emulator._timing_core", ["emulator/_timing_core.pyx"], depends=["emulator/_timing_sets.h"],
              extra_compile_args=["-O2"]),
    Extension("emulator._functional_core", ["emulator/_functional_core.pyx"], include_dirs=[numpy.get_include()],
              define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
              depends=["emulator/_functional_kernels.h"], extra_compile_args=["-O3"]),
], compiler_directives={"language_level": 3}))
