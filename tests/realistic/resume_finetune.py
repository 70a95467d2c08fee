"""Fine-tuning from a checkpoint, the way pytorch/examples' imagenet resumes (`--resume`, `--gpu`): the pretrained
weights are loaded with `map_location=f"cuda:{args.gpu}"` when a GPU is there, the backbone frozen, the head and
its optimizer's state restored from the last snapshot, and a snapshot written each epoch. Its per-step `.item()`
goes into a list of losses, and its loader loads in the training process."""
import argparse
import os
import tempfile

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def build_model(num_classes):
    backbone = nn.Sequential(nn.Linear(48, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU())
    return nn.Sequential(backbone, nn.Linear(128, num_classes))


def pretrained_checkpoint(workdir):
    """Stands in for a downloaded checkpoint: saved once, as the pretraining run left it."""
    path = os.path.join(workdir, "pretrained.pth")
    if not os.path.exists(path):
        torch.save({"state_dict": build_model(10).state_dict(), "epoch": 90}, path)
    return path


def save_snapshot(model, optimizer, epoch, path):
    torch.save({"epoch": epoch, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}, path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--workdir", default=tempfile.mkdtemp())
    args = parser.parse_args()
    use_cuda = torch.cuda.is_available()
    loc = f"cuda:{args.gpu}" if use_cuda else "cpu"

    model = build_model(10)
    checkpoint = torch.load(pretrained_checkpoint(args.workdir), map_location=loc)
    model.load_state_dict(checkpoint["state_dict"])
    model[-1] = nn.Linear(128, 5)  # a new head for the new task
    for p in model[0].parameters():
        p.requires_grad = False
    if use_cuda:
        torch.cuda.set_device(args.gpu)
        model = model.cuda(args.gpu)
    optimizer = torch.optim.SGD(model[-1].parameters(), lr=0.01, momentum=0.9)

    snapshot = os.path.join(args.workdir, "snapshot.pth")
    save_snapshot(model, optimizer, 0, snapshot)  # what an interrupted job left behind
    resumed = torch.load(snapshot, map_location=loc)
    model.load_state_dict(resumed["state_dict"])
    optimizer.load_state_dict(resumed["optimizer"])
    start_epoch = resumed["epoch"]

    data = TensorDataset(torch.randn(4096, 48), torch.randint(0, 5, (4096,)))
    loader = DataLoader(data, batch_size=64, shuffle=True)  # expect: DATA001
    criterion = nn.CrossEntropyLoss()
    losses = []
    for epoch in range(start_epoch, args.epochs):
        model.train()
        for images, target in loader:
            if use_cuda:
                images = images.cuda(args.gpu, non_blocking=True)  # expect-run: COPY001
                target = target.cuda(args.gpu, non_blocking=True)  # expect-run: COPY001
            loss = criterion(model(images), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())  # expect: SYNC001
        save_snapshot(model, optimizer, epoch + 1, snapshot)
        print(f"epoch {epoch}: loss {sum(losses[-len(loader):]) / len(loader):.3f}")


if __name__ == "__main__":
    main()
