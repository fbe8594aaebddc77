"""Train a deep denoising autoencoder on synthetic signals; run settings come from env vars.

Launch scripts on clusters often pass settings through the environment instead of flags:
`MLP_STEPS`, `MLP_BATCH`, `MLP_DEPTH`, `MLP_WIDTH`, `MLP_LR` and `MLP_DETECT_ANOMALY` are
read once at start-up. The loss is printed every 4 steps, a validation MSE at the end.

`MLP_DETECT_ANOMALY=1` turns on `torch.autograd.set_detect_anomaly(True)`, the debugging
mode that records a Python traceback for every forward op and checks every backward
output for NaN. Meant for chasing a NaN once, often left on in the launch script.
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS = int(os.environ.get("MLP_STEPS", "12"))
BATCH = int(os.environ.get("MLP_BATCH", "128"))
DEPTH = int(os.environ.get("MLP_DEPTH", "24"))
WIDTH = int(os.environ.get("MLP_WIDTH", "256"))
LR = float(os.environ.get("MLP_LR", "1e-3"))
DETECT_ANOMALY = os.environ.get("MLP_DETECT_ANOMALY", "0") == "1"
SIGNAL = 96


class Residual(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return x + F.silu(self.fc(self.norm(x)))


class DenoisingAE(nn.Module):
    def __init__(self, signal, width, depth):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(signal, width), *[Residual(width) for _ in range(depth // 2)]
        )
        self.bottleneck = nn.Linear(width, width // 4)
        self.decoder = nn.Sequential(
            nn.Linear(width // 4, width),
            *[Residual(width) for _ in range(depth // 2)],
            nn.Linear(width, signal),
        )

    def forward(self, x):
        return self.decoder(self.bottleneck(self.encoder(x)))


def make_signals(gen, n):
    t = torch.linspace(0, 1, SIGNAL)
    freq = torch.randint(1, 8, (n, 3), generator=gen).float()
    phase = torch.rand(n, 3, generator=gen) * 6.283
    clean = torch.sin(6.283 * freq[:, :, None] * t + phase[:, :, None]).sum(1)
    return clean, clean + 0.3 * torch.randn(clean.shape, generator=gen)


def main():
    torch.autograd.set_detect_anomaly(DETECT_ANOMALY)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = DenoisingAE(SIGNAL, WIDTH, DEPTH)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=1e-4)

    for step in range(1, STEPS + 1):
        clean, noisy = make_signals(gen, BATCH)
        loss = F.mse_loss(model(noisy), clean)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 4 == 0:
            print(f"step {step}: loss {loss.item():.5f}")

    val_clean, val_noisy = make_signals(gen, 256)
    with torch.no_grad():
        print(f"val mse {F.mse_loss(model(val_noisy), val_clean).item():.5f}")


if __name__ == "__main__":
    main()
