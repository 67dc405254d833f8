"""The package's version: CMakeLists.txt's project version, which libsdgp's sdgp_version() returns.
pyproject.toml reads it from here (a literal, parsed without importing the package)."""
__version__ = "0.1.0"
