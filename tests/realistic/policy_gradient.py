"""A REINFORCE-style policy trained on a synthetic continuous-control batch: a Gaussian policy
(torch.distributions.Normal, validate_args left at torch's default), gradient clipping with
error_if_nonfinite=True, logging every log_interval steps. torch reads device values for it every step (the
distributions' argument checks, Normal.sample's std check in torch.normal, the clip's non-finite check): syncs
on a GPU a CPU trace cannot tell from torch's reads of host tensors; the emulated device sees them here."""
import argparse

import torch
from torch import nn
from torch.distributions import Normal

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--log-interval", type=int, default=50)
args = parser.parse_args()
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Policy(nn.Module):
    def __init__(self, obs_dim=16, act_dim=4, hidden=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.mu = nn.Linear(hidden, act_dim)
        self.log_std = nn.Parameter(torch.zeros(act_dim))

    def forward(self, obs):
        h = self.body(obs)
        return Normal(self.mu(h), self.log_std.exp())  # expect-run: SYNC001


class Trainer:
    def __init__(self, policy):
        self.policy = policy.to(device)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=3e-4)

    def rollout(self, n=256):
        obs = torch.randn(n, 16, device=device)
        with torch.no_grad():
            actions = self.policy(obs).sample()  # expect-run: SYNC001
        returns = -(actions ** 2).sum(-1) + torch.randn(n, device=device) * 0.1
        return obs, actions, returns

    def update(self, obs, actions, returns):
        dist = self.policy(obs)
        advantages = (returns - returns.mean()) / (returns.std() + 1e-8)
        loss = -(dist.log_prob(actions).sum(-1) * advantages).mean()  # expect-run: SYNC001
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.policy.parameters(), 0.5, error_if_nonfinite=True)  # expect-run: SYNC001
        self.optimizer.step()
        return loss.detach()


trainer = Trainer(Policy())
for step in range(args.steps):
    batch = trainer.rollout()
    loss = trainer.update(*batch)
    if step % args.log_interval == 0:
        print(f"step {step}: loss {loss.item():.4f}")
