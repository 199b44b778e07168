import torch, torch.nn.functional as F, horovod.torch as hvd
hvd.init(); torch.set_num_threads(1)
from dynamix_hvd import Dynamix
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
x = torch.randn(5000, 128); y = torch.randint(0, 10, (5000,))
dyn = Dynamix(m, torch.optim.SGD(m.parameters(), lr=0.01), dataset_size=5000, base_batch=32, collector=False)
s = 0
for idx in dyn.batches(0):
    loss = F.cross_entropy(m(x[idx]), y[idx]); dyn.optimizer.zero_grad(); loss.backward(); dyn.optimizer.step()
    s += 1
    if s >= 40: break
dyn._pending.clear(); dyn.close()
