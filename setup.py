"""Build hook for the optional C accelerator; the project's metadata is in pyproject.toml.

``rivulet.protocol._speedups`` decodes records in C. It is optional: when no compiler (or
no Python headers) is available the build prints a warning, the install still succeeds,
and ``rivulet.protocol.records`` uses its pure-Python decoder.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rivulet.protocol._speedups",
            ["rivulet/protocol/_speedups.c"],
            optional=True,
        )
    ]
)
