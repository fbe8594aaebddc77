"""A two-conv stack; MAGNETON_TEST_MKLDNN=0 switches oneDNN off at import, as users do."""

import os

import torch

torch.backends.mkldnn.enabled = os.environ.get("MAGNETON_TEST_MKLDNN", "1") == "1"


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.act = torch.nn.ReLU()
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.conv2(self.act(self.conv1(x)))


def setup():
    torch.manual_seed(0)
    return Net().eval(), torch.randn(2, 3, 16, 16)


def main(net, x):
    with torch.no_grad():
        y = net(x)
        flat = y.view(-1)
        y.add_(1.0)  # in place: `flat` must now depend on this add_
        return flat.sum()
