package core

// Version is the one version number of TiraStore: the C library reports it
// (tirastore_version), the Python package reads it from there
// (tirastore.__version__), and the package metadata is taken from this line
// by the build (pyproject.toml, [tool.hatch.version]).
const Version = "0.1.0"
