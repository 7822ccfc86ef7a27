"""The package version, in a module of its own so that any layer can name it without importing
the whole public API (``plait/__init__.py``)."""

__version__ = "0.1.0"
