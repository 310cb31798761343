# Patched by the imagekit demo plan: the file-level overlay the field reports ship.
__version__ = "10.0.0"
IMAGEKIT_DEMO_PATCH = "overlay-1"
