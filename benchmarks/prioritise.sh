#!/usr/bin/env bash
# Give a benchmark CPU priority over the other work of a shared machine, while it runs (root).
#
#   benchmarks/prioritise.sh DATABASE PID [NICE]
#
# Every second, until process PID exits: renice to NICE (default -15) PID with all its
# descendants (the parts of a simulation, a CLI in a subprocess and its parts) and every
# PostgreSQL backend serving DATABASE (a backend's process title names its database:
# "postgres: ROLE DATABASE HOST(PORT) STATE").
#
# A nice value alone is not enough on this machine: the kernel groups processes by session
# (autogroup, /proc/sys/kernel/sched_autogroup_enabled = 1) and shares the cores between the
# groups first, by each group's own nice value, then inside a group by its processes' nice
# values. So the loop also sets to NICE the autogroup of each of those processes: PID's
# session's (start the benchmark with setsid for a session of its own), and each backend's
# (a PostgreSQL backend makes itself a session of its own: a group of one).
#
# With nice -15 against the default 0, the scheduler (CFS) gives a runnable task about 28
# times the CPU share of a runnable task at 0 (a weight of 29,154 against 1,024): on two
# cores the benchmark's processes run nearly as if the machine were theirs, the others' work
# waiting. It does not give them the caches, the memory bandwidth nor the disk.
set -euo pipefail

database=${1:?usage: prioritise.sh DATABASE PID [NICE]}
root=${2:?usage: prioritise.sh DATABASE PID [NICE]}
nice=${3:--15}

descendants() {
    # $1 and every live descendant, from one listing of (pid, parent pid).
    ps -e -o pid=,ppid= | awk -v root="$1" '
        { parent[$1] = $2 }
        END {
            found[root] = 1; changed = 1
            while (changed) {
                changed = 0
                for (pid in parent) if (!(pid in found) && (parent[pid] in found)) {
                    found[pid] = 1; changed = 1
                }
            }
            for (pid in found) print pid
        }'
}

root_group=$(awk '{ print $1 }' "/proc/$root/autogroup" 2>/dev/null || true)
root_nice=$(awk '{ print $3 }' "/proc/$root/autogroup" 2>/dev/null || true)
restore() {
    # PID's group outlives PID when it is a session's that goes on (this loop's, say).
    if [[ -n $root_nice && $(awk '{ print $1 }' /proc/$$/autogroup) == "$root_group" ]]; then
        { echo "$root_nice" >/proc/$$/autogroup; } 2>/dev/null || true
    fi
}
trap restore EXIT
trap 'exit 0' TERM INT

while kill -0 "$root" 2>/dev/null; do
    pids=$(
        ps -o pid=,args= -C postgres | awk -v db="$database" '$2 == "postgres:" && $4 == db { print $1 }'
        descendants "$root"
    )
    for pid in $pids; do
        renice -n "$nice" -p "$pid" >/dev/null 2>&1 || true
        { echo "$nice" >"/proc/$pid/autogroup"; } 2>/dev/null || true
    done
    sleep 1
done
