"""Build hook for the optional C accelerator; the project's metadata is in pyproject.toml.

``rivulet.protocol._speedups`` encodes and decodes record batches (and hashes keys) in C;
``rivulet.server._sendfile`` writes a zero-copy Fetch answer with one release of the GIL. Both
are optional: when no compiler (or no Python headers) is available the build prints a
warning, the install still succeeds, and ``rivulet.protocol.records`` and the client use
their pure-Python code.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rivulet.protocol._speedups",
            ["rivulet/protocol/_speedups.c"],
            optional=True,
        ),
        Extension(
            "rivulet.server._sendfile",
            ["rivulet/server/_sendfile.c"],
            optional=True,
        ),
    ]
)
