#!/usr/bin/env bash
# Export HEAD to DIR and compile some of its modules with mypyc there (issue 30's experiment).
#
#   benchmarks/mypyc_export.sh DIR [core|hot|none]
#
# none: the export alone (the plain-Python baseline, the same files); core: every
# minruntime/core/*.py compiled; hot: core plus the modules of the ingest path's hot loop
# (ingest/projection, ingest/runs, ingest/podgroups, store/podgroups, store/bulk,
# events/codec). The build happens in DIR only (never in this checkout); the .so files land
# next to DIR's sources, so run against the export with
#
#   PYTHONPATH=DIR/services:DIR:DIR/benchmarks .venv/bin/python DIR/benchmarks/bench_apply.py
#
# (from DIR, MINRUNTIME_STACK_DIR set). One source change is needed for mypyc to compile the
# core and is applied to the export (docs/benchmarks.md, "Compiling the hot code with mypyc"):
# QueueTree._from_shape's `cls.__new__(cls)` (mypyc: internal error) becomes a keyword-only
# path through __init__. Build: about 1 min for core, 2 min for hot on this 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${1:?usage: mypyc_export.sh DIR [core|hot|none]}
set_name=${2:-core}
root=$PWD
rm -rf "$dir"
mkdir -p "$dir"
git archive HEAD services benchmarks tests migrations pyproject.toml alembic.ini schemas |
    tar -x -C "$dir"
if [ -n "${MINRUNTIME_STACK_DIR:-}" ]; then ln -sfn "$MINRUNTIME_STACK_DIR" "$dir/.stack"; fi

"$root/.venv/bin/python" - "$dir/services/minruntime/core/queue_tree.py" <<'EOF'
import sys

path = sys.argv[1]
text = open(path).read()
old_init = "    def __init__(self, queues: Iterable[Queue] = ()) -> None:\n        by_name"
new_init = (
    "    def __init__(self, queues: Iterable[Queue] = (), *, _shape: _Shape | None = None)"
    " -> None:\n        if _shape is not None:\n            self._set_shape(_shape)\n"
    "            return\n        by_name"
)
old_new = "        tree = cls.__new__(cls)\n        tree._set_shape(shape)\n        return tree"
new_new = "        return cls(_shape=shape)"
if old_init not in text or old_new not in text:
    sys.exit("mypyc_export: queue_tree.py changed; update the patch in this script")
open(path, "w").write(text.replace(old_init, new_init).replace(old_new, new_new))
EOF

cd "$dir/services"
case "$set_name" in
none) exit 0 ;;
core) modules=(minruntime/core/*.py) ;;
hot)
    modules=(minruntime/core/*.py minruntime/ingest/projection.py minruntime/ingest/runs.py
        minruntime/ingest/podgroups.py minruntime/store/podgroups.py minruntime/store/bulk.py
        minruntime/events/codec.py)
    ;;
*) echo "mypyc_export: unknown set $set_name (core, hot or none)" >&2; exit 2 ;;
esac

# mypy's settings from pyproject.toml, in a file of their own: setuptools (which mypyc
# drives) refuses this project's pyproject.toml (`project.license` as a string).
cat > mypy.ini <<'EOF'
[mypy]
strict = True
python_version = 3.11
mypy_path = .
plugins = pydantic.mypy

[mypy-faust.*,mode.*,aiokafka.*]
ignore_missing_imports = True

[mypy-kubernetes,kubernetes.*]
follow_imports = skip
follow_imports_for_stubs = True
EOF
time "$root/.venv/bin/mypyc" --config-file mypy.ini "${modules[@]}" >build.log 2>&1 ||
    { tail -20 build.log >&2; exit 1; }
echo "compiled ${#modules[@]} modules in $dir/services ($(find . -name '*.so' -not -path './build/*' | xargs du -cb | tail -1 | cut -f1) bytes of .so)"
