"""The version of imagekit, in one place: pyproject reads it, the ledger writes it in every
record, ``imagekit --version`` prints it, and ``imagekit.__version__`` hands it on.

A module of its own (not the package face) so that the ledger and the CLI read it without
importing the face, which stands above every layer; and a literal, not importlib.metadata,
which would cost every command about 50 ms of start-up.
"""

__version__ = "0.1.0"
