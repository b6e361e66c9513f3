"""Only the optional C extensions live here; everything else is in pyproject.toml.

quorumlog/format/_fastcodec.c is the record codec's hot loop (one call per batch), quorumlog/topic/_fastmessage.c a
consumer's (one call per pull), quorumlog/bookie/_fastbookie.c a bookie's (one call per add request). All are
optional: a machine without a C compiler installs quorumlog anyway, and quorumlog.format.log_entry,
quorumlog.client.topics and quorumlog.bookie.add_items fall back to pure Python.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "quorumlog.format._fastcodec",
            sources=["quorumlog/format/_fastcodec.c"],
            depends=["quorumlog/format/_crc32c.h"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
        Extension(
            "quorumlog.topic._fastmessage",
            sources=["quorumlog/topic/_fastmessage.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
        Extension(
            "quorumlog.bookie._fastbookie",
            sources=["quorumlog/bookie/_fastbookie.c"],
            depends=["quorumlog/format/_crc32c.h"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
    ],
)
