"""Layers as model libraries write them (timm's BatchNormAct2d, a conv-norm-act block): a BatchNorm subclass that
applies its activation after normalising, and a block that builds its conv from options."""
from torch import nn


class BatchNormAct2d(nn.BatchNorm2d):
    """BatchNorm2d followed by an activation, in one module (as timm's layers have it)."""

    def __init__(self, num_features: int, act_layer=nn.ReLU, **kwargs):
        super().__init__(num_features, **kwargs)
        self.act = act_layer(inplace=True)

    def forward(self, x):
        return self.act(super().forward(x))
