"""Time replay --verify on a kept database: wall, this process's CPU (+children)."""
import os, resource, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
from replay_after import replay_verify
owner = sys.argv[1]
parts = [int(p) for p in sys.argv[2].split(",")]
repeat = int(sys.argv[3]) if len(sys.argv) > 3 else 1
for _ in range(repeat):
    for p in parts:
        r0 = resource.getrusage(resource.RUSAGE_SELF); c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        load = os.getloadavg()[0]
        v = replay_verify(owner, p)
        r1 = resource.getrusage(resource.RUSAGE_SELF); c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) + (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
        print(f"parts={p} load={load:.1f} events={v.events} wall={v.seconds:.2f} replay={v.replay_seconds:.2f} compare={v.verify_seconds:.2f} py_cpu={cpu:.2f} equal={v.equal} rate={v.rate:,.0f}", flush=True)
