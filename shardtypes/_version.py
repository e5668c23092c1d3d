"""The version of shardtypes: one source for the package, the command line and pyproject.toml."""

__version__ = "0.1.0"
