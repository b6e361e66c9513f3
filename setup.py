"""Only the optional C extension lives here; everything else is in pyproject.toml.

quorumlog/store/_fastcodec.c is the record codec's hot loop (one call per batch). It is optional: a machine
without a C compiler installs quorumlog anyway and quorumlog.store.codec falls back to pure Python.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "quorumlog.store._fastcodec",
            sources=["quorumlog/store/_fastcodec.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
    ],
)
