"""imagekit: build, audit, mirror and record the container images that serve large models."""

# Also the package's version (pyproject reads it from here): importlib.metadata would cost
# every command about 50 ms of start-up.
__version__ = "0.1.0"

__all__ = ["__version__"]
