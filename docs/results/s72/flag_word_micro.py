import timeit, sys, torch, horovod.torch as hvd
hvd.init()
from dynamix_hvd.horovod import Dynamix
from dynamix_hvd.localstate import LocalState
m = torch.nn.Linear(4, 2)
dyn = Dynamix(m, torch.optim.SGD(m.parameters(), lr=0.1), dataset_size=10**6, base_batch=8, controller="static",
              collector=False, tensorboard=False)
loc = dyn.local
it = iter(dyn.batches(0)); next(it)   # a batch in flight
n = 200000
t = min(timeit.repeat(loc.flag_word, number=n, repeat=7)) / n * 1e9
print(f"{sys.argv[1]} flag_word {t:.0f} ns")
if hasattr(loc, "clear_flags"):
    t = min(timeit.repeat(loc.clear_flags, number=n, repeat=7)) / n * 1e9
    print(f"{sys.argv[1]} clear_flags {t:.0f} ns")
else:
    def inline():
        loc.oom_batch = loc.react_flag = 0
    t = min(timeit.repeat(inline, number=n, repeat=7)) / n * 1e9
    print(f"{sys.argv[1]} inline clear {t:.0f} ns")
