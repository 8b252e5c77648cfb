"""The package version, in a leaf module: the engine writes it into saved
engines and checks it when loading one, without importing the package's
__init__ (which imports the engine)."""

__version__ = "0.1.0"
