"""minruntime's development tooling: the local stack (`minruntime stack ...`), the demos
(`minruntime demo`), the cluster stand-ins, the scratch databases of tests and benchmarks.

Not the service: `minruntime` never imports this package (an import-linter contract in
pyproject.toml); the service's command line finds the `stack` and `demo` commands by module
name in its command table (minruntime.cli) and loads them when called.
"""
