"""The compiled emulator core (`emulator/_timing_core.pyx`, Cython to C++): built by
``pip install -e .`` (``make install``); everything else about the package is pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(ext_modules=cythonize([Extension("emulator._timing_core", ["emulator/_timing_core.pyx"],
                                       extra_compile_args=["-O2"])],
                            compiler_directives={"language_level": 3}))
