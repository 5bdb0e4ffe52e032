"""Convolutional networks evaluated by the seeds, defined with ``torch.nn``.

The layer structure follows the original papers (and torchvision's reference definitions where the
papers leave a choice); weights are random because latency does not depend on their values.
Batch normalisation is kept as its own layer so that the graph level sees what an exporter emits.
"""

from __future__ import annotations

import torch
from torch import nn


def conv_bn_relu(
    in_channels: int,
    out_channels: int,
    kernel: int | tuple[int, int],
    stride: int = 1,
    padding: int | tuple[int, int] = 0,
    groups: int = 1,
    activation: type[nn.Module] = nn.ReLU,
) -> nn.Sequential:
    """Convolution without bias, batch norm, activation: the basic block of most modern CNNs."""
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel, stride, padding, groups=groups, bias=False),
        nn.BatchNorm2d(out_channels),
        activation(),
    )


class LeNet5(nn.Module):
    """LeCun et al. 1998, on 32x32 single-channel images."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        )  # fmt: skip
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, num_classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class AlexNet(nn.Module):
    """Krizhevsky et al. 2012 (single-tower variant, as in torchvision)."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2),
        )  # fmt: skip
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
            nn.Linear(4096, num_classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


VGG_CONFIGS: dict[str, list[int | str]] = {
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [
        64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M",
        512, 512, 512, 512, "M", 512, 512, 512, 512, "M",
    ],
}  # fmt: skip


class VGG(nn.Module):
    """Simonyan and Zisserman 2014, configurations D (vgg16) and E (vgg19), without batch norm."""

    def __init__(self, config: list[int | str], num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for item in config:
            if item == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(channels, int(item), 3, padding=1), nn.ReLU()]
                channels = int(item)
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
            nn.Linear(4096, num_classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (ResNet-18/34)."""

    expansion = 1

    def __init__(self, in_channels: int, channels: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            conv_bn_relu(in_channels, channels, 3, stride, 1),
            nn.Conv2d(channels, channels, 3, 1, 1, bias=False),
            nn.BatchNorm2d(channels),
        )
        self.shortcut = projection(in_channels, channels, stride)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3, 1x1 expand with a residual connection (ResNet-50 v1.5: stride on the 3x3)."""

    expansion = 4

    def __init__(self, in_channels: int, channels: int, stride: int) -> None:
        super().__init__()
        out_channels = channels * self.expansion
        self.body = nn.Sequential(
            conv_bn_relu(in_channels, channels, 1),
            conv_bn_relu(channels, channels, 3, stride, 1),
            nn.Conv2d(channels, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
        )
        self.shortcut = projection(in_channels, out_channels, stride)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


def projection(in_channels: int, out_channels: int, stride: int) -> nn.Module:
    """Identity when shapes match, else a strided 1x1 convolution with batch norm."""
    if stride == 1 and in_channels == out_channels:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), nn.BatchNorm2d(out_channels))


class ResNet(nn.Module):
    """He et al. 2016 for ImageNet."""

    def __init__(self, block: type[BasicBlock | Bottleneck], depths: list[int], num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn_relu(3, 64, 7, 2, 3), nn.MaxPool2d(3, 2, 1))
        stages: list[nn.Module] = []
        in_channels = 64
        for index, depth in enumerate(depths):
            channels = 64 * 2**index
            for block_index in range(depth):
                stride = 2 if index > 0 and block_index == 0 else 1
                stages.append(block(in_channels, channels, stride))
                in_channels = channels * block.expansion
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_channels, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))


class Fire(nn.Module):
    """SqueezeNet's squeeze 1x1 followed by parallel 1x1 and 3x3 expands, concatenated."""

    def __init__(self, in_channels: int, squeeze: int, expand: int) -> None:
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(in_channels, squeeze, 1), nn.ReLU())
        self.expand1x1 = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU())
        self.expand3x3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze(x)
        return torch.cat([self.expand1x1(x), self.expand3x3(x)], 1)


class SqueezeNet11(nn.Module):
    """Iandola et al. 2016, version 1.1."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(64, 16, 64), Fire(128, 16, 64), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(128, 32, 128), Fire(256, 32, 128), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(256, 48, 192), Fire(384, 48, 192), Fire(384, 64, 256), Fire(512, 64, 256),
        )  # fmt: skip
        self.classifier = nn.Sequential(
            nn.Conv2d(512, num_classes, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class MobileNetV1(nn.Module):
    """Howard et al. 2017: depthwise-separable convolutions, width multiplier 1.0."""

    STAGES = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5, (1024, 2), (1024, 1))

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn_relu(3, 32, 3, 2, 1)]
        channels = 32
        for out_channels, stride in self.STAGES:
            layers.append(conv_bn_relu(channels, channels, 3, stride, 1, groups=channels))
            layers.append(conv_bn_relu(channels, out_channels, 1))
            channels = out_channels
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1024, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 linear projection, residual when shapes match."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = in_channels * expand_ratio
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(conv_bn_relu(in_channels, hidden, 1, activation=nn.ReLU6))
        layers += [
            conv_bn_relu(hidden, hidden, 3, stride, 1, groups=hidden, activation=nn.ReLU6),
            nn.Conv2d(hidden, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
        ]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and in_channels == out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    """Sandler et al. 2018, width multiplier 1.0."""

    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))  # fmt: skip

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn_relu(3, 32, 3, 2, 1, activation=nn.ReLU6)]
        channels = 32
        for expand_ratio, out_channels, repeats, stride in self.SETTINGS:
            for index in range(repeats):
                layers.append(InvertedResidual(channels, out_channels, stride if index == 0 else 1, expand_ratio))
                channels = out_channels
        layers.append(conv_bn_relu(channels, 1280, 1, activation=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class InceptionV1Block(nn.Module):
    """GoogLeNet inception module: 1x1, 1x1->3x3, 1x1->3x3 (torchvision's variant), pool->1x1."""

    def __init__(self, in_ch: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, pool: int) -> None:
        super().__init__()
        self.branch1 = conv_bn_relu(in_ch, c1, 1)
        self.branch2 = nn.Sequential(conv_bn_relu(in_ch, c3r, 1), conv_bn_relu(c3r, c3, 3, padding=1))
        self.branch3 = nn.Sequential(conv_bn_relu(in_ch, c5r, 1), conv_bn_relu(c5r, c5, 3, padding=1))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv_bn_relu(in_ch, pool, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class GoogLeNet(nn.Module):
    """Szegedy et al. 2015 (with batch norm, no auxiliary classifiers at inference)."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            conv_bn_relu(3, 64, 7, 2, 3), nn.MaxPool2d(3, 2, ceil_mode=True),
            conv_bn_relu(64, 64, 1), conv_bn_relu(64, 192, 3, padding=1),
            nn.MaxPool2d(3, 2, ceil_mode=True),
        )  # fmt: skip
        self.blocks = nn.Sequential(
            InceptionV1Block(192, 64, 96, 128, 16, 32, 32),
            InceptionV1Block(256, 128, 128, 192, 32, 96, 64),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            InceptionV1Block(480, 192, 96, 208, 16, 48, 64),
            InceptionV1Block(512, 160, 112, 224, 24, 64, 64),
            InceptionV1Block(512, 128, 128, 256, 24, 64, 64),
            InceptionV1Block(512, 112, 144, 288, 32, 64, 64),
            InceptionV1Block(528, 256, 160, 320, 32, 128, 128),
            nn.MaxPool2d(2, 2, ceil_mode=True),
            InceptionV1Block(832, 256, 160, 320, 32, 128, 128),
            InceptionV1Block(832, 384, 192, 384, 48, 128, 128),
        )
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1024, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


class Concat(nn.Module):
    """Run branches on the same input and concatenate their outputs along channels."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([branch(x) for branch in self.branches], 1)


def avg_pool_branch(in_ch: int, out_ch: int) -> nn.Sequential:
    return nn.Sequential(nn.AvgPool2d(3, 1, 1), conv_bn_relu(in_ch, out_ch, 1))


def inception_a(in_ch: int, pool: int) -> Concat:
    return Concat(
        conv_bn_relu(in_ch, 64, 1),
        nn.Sequential(conv_bn_relu(in_ch, 48, 1), conv_bn_relu(48, 64, 5, padding=2)),
        nn.Sequential(conv_bn_relu(in_ch, 64, 1), conv_bn_relu(64, 96, 3, padding=1),
                      conv_bn_relu(96, 96, 3, padding=1)),
        avg_pool_branch(in_ch, pool),
    )  # fmt: skip


def inception_b(in_ch: int) -> Concat:
    return Concat(
        conv_bn_relu(in_ch, 384, 3, 2),
        nn.Sequential(conv_bn_relu(in_ch, 64, 1), conv_bn_relu(64, 96, 3, padding=1),
                      conv_bn_relu(96, 96, 3, 2)),
        nn.MaxPool2d(3, 2),
    )  # fmt: skip


def inception_c(in_ch: int, c7: int) -> Concat:
    def seven(cin: int, cout: int, horizontal: bool) -> nn.Sequential:
        return conv_bn_relu(cin, cout, (1, 7) if horizontal else (7, 1), padding=(0, 3) if horizontal else (3, 0))

    return Concat(
        conv_bn_relu(in_ch, 192, 1),
        nn.Sequential(conv_bn_relu(in_ch, c7, 1), seven(c7, c7, True), seven(c7, 192, False)),
        nn.Sequential(conv_bn_relu(in_ch, c7, 1), seven(c7, c7, False), seven(c7, c7, True),
                      seven(c7, c7, False), seven(c7, 192, True)),
        avg_pool_branch(in_ch, 192),
    )  # fmt: skip


def inception_d(in_ch: int) -> Concat:
    return Concat(
        nn.Sequential(conv_bn_relu(in_ch, 192, 1), conv_bn_relu(192, 320, 3, 2)),
        nn.Sequential(conv_bn_relu(in_ch, 192, 1), conv_bn_relu(192, 192, (1, 7), padding=(0, 3)),
                      conv_bn_relu(192, 192, (7, 1), padding=(3, 0)), conv_bn_relu(192, 192, 3, 2)),
        nn.MaxPool2d(3, 2),
    )  # fmt: skip


def split_3x3(in_ch: int, out_ch: int) -> Concat:
    """InceptionV3's factorised 3x3: parallel 1x3 and 3x1 on the same input."""
    return Concat(
        conv_bn_relu(in_ch, out_ch, (1, 3), padding=(0, 1)),
        conv_bn_relu(in_ch, out_ch, (3, 1), padding=(1, 0)),
    )


def inception_e(in_ch: int) -> Concat:
    return Concat(
        conv_bn_relu(in_ch, 320, 1),
        nn.Sequential(conv_bn_relu(in_ch, 384, 1), split_3x3(384, 384)),
        nn.Sequential(conv_bn_relu(in_ch, 448, 1), conv_bn_relu(448, 384, 3, padding=1), split_3x3(384, 384)),
        avg_pool_branch(in_ch, 192),
    )


class InceptionV3(nn.Module):
    """Szegedy et al. 2016 on 299x299 inputs (no auxiliary classifier at inference)."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_relu(3, 32, 3, 2), conv_bn_relu(32, 32, 3), conv_bn_relu(32, 64, 3, padding=1),
            nn.MaxPool2d(3, 2), conv_bn_relu(64, 80, 1), conv_bn_relu(80, 192, 3), nn.MaxPool2d(3, 2),
            inception_a(192, 32), inception_a(256, 64), inception_a(288, 64),
            inception_b(288),
            inception_c(768, 128), inception_c(768, 160), inception_c(768, 160), inception_c(768, 192),
            inception_d(768),
            inception_e(1280), inception_e(2048),
        )  # fmt: skip
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))
