"""Only the optional C extensions live here; everything else is in pyproject.toml.

quorumlog/format/_fastcodec.c is the record codec's hot loop (one call per batch), quorumlog/topic/_fastmessage.c a
consumer's (one call per pull), quorumlog/bookie/_fastbookie.c a bookie's (one call per add request),
quorumlog/doors/kafka/_fastrecords.c the Kafka door's Fetch answers (one call per partition fetched). All are
optional: a machine without a C compiler installs quorumlog anyway, and quorumlog.format.log_entry,
quorumlog.client.topics, quorumlog.bookie.add_items and quorumlog.doors.kafka.door fall back to pure Python.
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
            depends=["quorumlog/topic/_message_layout.h"],
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
        Extension(
            "quorumlog.doors.kafka._fastrecords",
            sources=["quorumlog/doors/kafka/_fastrecords.c"],
            depends=["quorumlog/topic/_message_layout.h", "quorumlog/format/_crc32c.h"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
    ],
)
