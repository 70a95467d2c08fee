"""REINFORCE in the shape of PyTorch's reinforcement-learning example: a policy network picks an action,
the environment (plain Python, as gym's are) needs it as a Python int, rewards come back as floats and
the discounted returns are computed on the host. `env.step(action.item())` is a read the program
needs, not a sync to remove; the `.item()` read only for the running reward is the one to fix."""
import math
import random

import torch
from torch import nn
from torch.distributions import Categorical


class CartPoleLike:
    """A toy balancing task with CartPole's interface: reset() -> state, step(int) -> (state, reward, done)."""

    def __init__(self, seed=0):
        self.rng = random.Random(seed)
        self.state = None
        self.t = 0

    def reset(self):
        self.t = 0
        self.state = [self.rng.uniform(-0.05, 0.05) for _ in range(4)]
        return self.state

    def step(self, action: int):
        x, v, theta, omega = self.state
        force = 1.0 if action == 1 else -1.0
        omega += 0.05 * (math.sin(theta) * 9.8 - force)
        theta += 0.02 * omega
        v += 0.02 * force
        x += 0.02 * v
        self.state = [x, v, theta, omega]
        self.t += 1
        done = abs(theta) > 0.4 or abs(x) > 2.4 or self.t >= 50
        return self.state, 1.0, done


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))

    def forward(self, x):
        return torch.softmax(self.net(x), dim=-1)


def select_action(policy, state, log_probs):
    probs = policy(torch.tensor(state, dtype=torch.float32).unsqueeze(0))
    dist = Categorical(probs)
    action = dist.sample()
    log_probs.append(dist.log_prob(action))
    return action.item()  # the environment needs a Python int


def finish_episode(optimizer, log_probs, rewards, gamma=0.99):
    returns, running = [], 0.0
    for r in reversed(rewards):
        running = r + gamma * running
        returns.insert(0, running)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + 1e-8)
    loss = torch.cat([-lp * ret for lp, ret in zip(log_probs, returns)]).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def main():
    torch.manual_seed(0)
    env, policy = CartPoleLike(), Policy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    running_reward = 10.0
    for episode in range(100_000):
        state, log_probs, rewards = env.reset(), [], []
        for t in range(1, 10_000):
            state, reward, done = env.step(select_action(policy, state, log_probs))
            rewards.append(reward)
            if done:
                break
        loss = finish_episode(optimizer, log_probs, rewards)
        running_reward = 0.05 * loss.item() + 0.95 * running_reward  # expect: SYNC001
        if episode % 100 == 0:
            print(f"episode {episode}: running reward {running_reward:.2f}")


if __name__ == "__main__":
    main()
