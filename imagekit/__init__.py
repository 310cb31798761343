"""imagekit: build, audit, mirror and record the container images that serve large models."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("imagekit")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
