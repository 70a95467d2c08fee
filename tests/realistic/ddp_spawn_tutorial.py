"""The DDP tutorials' launcher (pytorch/examples imagenet, the "Getting started with DDP" tutorial):
`mp.spawn(main_worker, nprocs=torch.cuda.device_count())`, each worker joining an NCCL group, wrapping its model in
DDP and copying its batches with non_blocking=True from an unpinned loader. One GPU: one spawned process."""
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def find_free_port():  # detectron2's launch does the same
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main_worker(gpu, ngpus_per_node, port):
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", world_size=ngpus_per_node, rank=gpu)
    torch.cuda.set_device(gpu)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).cuda(gpu)
    model = nn.parallel.DistributedDataParallel(model, device_ids=[gpu])  # expect-run: DDP003
    data = TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
    loader = DataLoader(data, batch_size=64, shuffle=True)  # expect: DATA001
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    crit = nn.CrossEntropyLoss().cuda(gpu)
    for epoch in range(3):
        for i, (x, y) in enumerate(loader):
            x, y = x.cuda(gpu, non_blocking=True), y.cuda(gpu, non_blocking=True)  # expect-run: COPY001
            loss = crit(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i % 10 == 0 and gpu == 0:
                print(epoch, i, loss.item())


def main():
    ngpus_per_node = torch.cuda.device_count()
    mp.spawn(main_worker, nprocs=ngpus_per_node, args=(ngpus_per_node, find_free_port()))


if __name__ == "__main__":
    main()
