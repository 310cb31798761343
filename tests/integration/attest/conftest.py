"""The signing tests' fixtures (tests/support/signing.py): images to attest and their key pair."""

from tests.support.signing import make_image, pair

__all__ = ["make_image", "pair"]
