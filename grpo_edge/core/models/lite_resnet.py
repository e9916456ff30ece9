"""LiteResNet: a 12-layer residual CNN, at most 64 channels, for small images (Python 3.6 / torch 1.10 safe).

Shapes: images (B, in_channels, H, W) float -> logits (B, n_classes). 8x8 digits are the main use;
global average pooling makes any H, W >= 1 work.

Default layout (12 weight layers on the main path, counted the ResNet way without the 1x1 projection
shortcuts):
  stem   3x3 conv 16                                    8x8
  stage1 2 blocks x (3x3 conv 16, 3x3 conv 16)          8x8
  stage2 2 blocks x (3x3 conv 32, 3x3 conv 32), stride 2 in the first, 1x1 projection shortcut   4x4
  stage3 1 block  x (3x3 conv 64, 3x3 conv 64), stride 2, 1x1 projection shortcut               2x2
  global average pool -> dropout -> Linear(64, n_classes)
Every conv is followed by BatchNorm; `export_spec` folds BN into the conv weights, so the exported
graph is only Conv / Relu / Add / GlobalAveragePool / Flatten / Gemm, which the ESP32 code generator supports.
"""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from .spec import ExportSpec


class ConvBN(nn.Module):
    """Conv2d (no bias) followed by BatchNorm2d; `fold()` turns the pair into one biased Conv2d."""

    def __init__(self, cin, cout, kernel, stride):
        super(ConvBN, self).__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return self.bn(self.conv(x))

    def fold(self):
        """Replace conv+bn by conv with W' = W * g / s and b' = beta - mean * g / s, s = sqrt(var + eps).
        Exact in eval mode (BN uses its running statistics)."""
        bn, conv = self.bn, self.conv
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)                  # (Cout,)
        fused = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride,
                          padding=conv.padding, bias=True).to(conv.weight.device)
        with torch.no_grad():
            fused.weight.copy_(conv.weight * scale.view(-1, 1, 1, 1))           # (Cout, Cin, k, k)
            fused.bias.copy_(bn.bias - bn.running_mean * scale)
        self.conv = fused
        self.bn = nn.Identity()


class BasicBlock(nn.Module):
    """relu(bn(conv3x3(relu(bn(conv3x3(x))))) + shortcut(x)); (B, Cin, H, W) -> (B, Cout, H/stride, W/stride)."""

    def __init__(self, cin, cout, stride):
        super(BasicBlock, self).__init__()
        self.c1 = ConvBN(cin, cout, 3, stride)
        self.c2 = ConvBN(cout, cout, 3, 1)
        # A 1x1 projection when the shape changes: the generator supports conv but not channel padding.
        self.shortcut = ConvBN(cin, cout, 1, stride) if (stride != 1 or cin != cout) else None

    def forward(self, x):
        h = F.relu(self.c1(x))
        h = self.c2(h)
        s = x if self.shortcut is None else self.shortcut(x)
        return F.relu(h + s)


class LiteResNet(nn.Module):
    """Small residual image classifier.

    forward(images (B, in_channels, H, W)) -> logits (B, n_classes), or (B, out_dim) when out_dim is set
    (out_dim=1 builds a value head with the same trunk).
    channels: width of each stage; blocks: residual blocks per stage (the first block of every stage
    after the first halves H and W). image_size is the H = W used for the export example input.
    """

    arch = "lite-resnet"

    def __init__(self, in_channels=1, n_classes=10, image_size=8, channels=(16, 32, 64), blocks=(2, 2, 1),
                 hidden_dropout=0.0, out_dim=None):
        super(LiteResNet, self).__init__()
        channels, blocks = tuple(int(c) for c in channels), tuple(int(b) for b in blocks)
        if len(channels) != len(blocks) or not channels:
            raise ValueError("channels %r and blocks %r must be non-empty and the same length" % (channels, blocks))
        self.in_channels, self.n_classes, self.image_size = in_channels, n_classes, image_size
        self.channels, self.blocks, self.hidden_dropout = channels, blocks, hidden_dropout
        self.out_dim = out_dim
        self.stem = ConvBN(in_channels, channels[0], 3, 1)
        layers, cin = [], channels[0]
        for s, (c, n) in enumerate(zip(channels, blocks)):
            for b in range(n):
                layers.append(BasicBlock(cin, c, 2 if (s > 0 and b == 0) else 1))
                cin = c
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)     # exports as GlobalAveragePool
        self.drop = nn.Dropout(hidden_dropout)
        self.fc = nn.Linear(cin, n_classes if out_dim is None else out_dim)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        # Zero the last BN of each block so every block starts as the identity (easier early training).
        for m in self.layers:
            nn.init.zeros_(m.c2.bn.weight)

    supports_gradient_checkpointing = False

    def set_gradient_checkpointing(self, interval=2):
        """Not for this model: gradient checkpointing recomputes transformer blocks (micro-gpt, tiny-transformer);
        recomputing its BatchNorm blocks would update their running statistics twice."""
        raise ValueError("gradient checkpointing recomputes transformer blocks (micro-gpt, tiny-transformer); "
                         "a lite-resnet has none to recompute (recomputing a BatchNorm block would update its running statistics twice)")

    def config(self):
        """Constructor kwargs as plain Python values: build_model(self.arch, **self.config()) rebuilds it."""
        return {"in_channels": int(self.in_channels), "n_classes": int(self.n_classes),
                "image_size": int(self.image_size), "channels": list(self.channels), "blocks": list(self.blocks),
                "hidden_dropout": float(self.hidden_dropout),
                "out_dim": None if self.out_dim is None else int(self.out_dim)}

    def num_weight_layers(self):
        """Convs and Linear layers on the main path (projection shortcuts not counted): 12 at defaults."""
        return 1 + 2 * sum(self.blocks) + 1

    def forward(self, images):
        """images (B, C, H, W) -> logits (B, n_classes)."""
        x = F.relu(self.stem(images))          # (B, c0, H, W)
        x = self.layers(x)                     # (B, c_last, H/2^(S-1), W/2^(S-1))
        x = torch.flatten(self.pool(x), 1)     # (B, c_last)
        return self.fc(self.drop(x))           # (B, n_classes)

    def folded(self):
        """An eval-mode copy with every BatchNorm folded into its conv (same outputs as self.eval())."""
        m = copy.deepcopy(self).eval()
        for mod in list(m.modules()):
            if isinstance(mod, ConvBN):
                mod.fold()
        return m

    def export_spec(self, batch_size=1):
        """images (B, in_channels, image_size, image_size) -> logits (B, n_classes), BN folded; batch dynamic."""
        x = torch.randn(batch_size, self.in_channels, self.image_size, self.image_size,
                        device=self.fc.weight.device)
        return ExportSpec(module=self.folded(), example_inputs=(x,), input_names=["images"],
                          output_names=["logits"],
                          dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}})
