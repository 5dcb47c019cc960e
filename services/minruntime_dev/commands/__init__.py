"""The `minruntime stack ...` and `minruntime demo` commands (minruntime.cli names them)."""
