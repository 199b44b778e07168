import json, sys, collections
txt = open(sys.argv[1]).read().rstrip().rstrip(",")
if not txt.endswith("]"): txt += "]"
ev = json.loads(txt)
names = {}
for e in ev:
    if e.get("ph") == "M" and e.get("name") == "process_name" and "name" in e.get("args", {}):
        names[e["pid"]] = e["args"]["name"]
mpi = collections.defaultdict(list)
for e in ev:
    if e.get("ph") == "B" and e.get("name") in ("MPI_ALLREDUCE", "ALLREDUCE"):
        mpi[(names.get(e["pid"]), e["name"])].append(e["ts"])
fl = mpi.get(("allreduce.dynamix.flags", "MPI_ALLREDUCE"), [])
grads = set()
for (n, k), ts in mpi.items():
    if n != "allreduce.dynamix.flags" and k == "MPI_ALLREDUCE": grads.update(ts)
same = sum(1 for t in fl if t in grads)
print(f"flags MPI_ALLREDUCE events {len(fl)}, at the same timestamp as a gradient's (fused): {same}; distinct MPI_ALLREDUCE starts overall {len(grads | set(fl))}")
