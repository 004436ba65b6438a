"""The models real_pipeline.py trains, by name: ResNet-18 (``examples/images.py``'s)
and ResNet-50 and ResNet-101 in torchvision's layout (bottleneck blocks), built from
torch.nn alone (torchvision's builds do not load against every torch build)."""

from __future__ import annotations

from typing import Any

#: The bottleneck blocks of each stage, by model.
BOTTLENECKS = {"resnet50": (3, 4, 6, 3), "resnet101": (3, 4, 23, 3)}
MODELS = ("resnet18", *BOTTLENECKS)
#: Each model as the table names it.
SHOWN = {"resnet18": "ResNet-18", "resnet50": "ResNet-50", "resnet101": "ResNet-101"}


def model_named(name: str, classes: int = 10) -> Any:
    """A new model ``name`` (one of :data:`MODELS`) of ``classes`` outputs."""
    if name == "resnet18":
        from images import resnet18

        return resnet18(classes)
    return bottleneck_resnet(BOTTLENECKS[name], classes)


def bottleneck_resnet(blocks: tuple[int, ...], classes: int) -> Any:
    """``torchvision.models.resnet50``'s layout (``blocks`` per stage), without weights."""
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, inputs: int, width: int, stride: int) -> None:
            super().__init__()
            outputs = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(inputs, width, 1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(),
                nn.Conv2d(width, width, 3, stride, 1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(),
                nn.Conv2d(width, outputs, 1, bias=False),
                nn.BatchNorm2d(outputs),
            )
            self.down = (
                nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs))
                if stride != 1 or inputs != outputs
                else nn.Identity()
            )

        def forward(self, x: Any) -> Any:
            return (self.body(x) + self.down(x)).relu()

    stages, channels = [], 64
    for count, (width, stride) in zip(blocks, ((64, 1), (128, 2), (256, 2), (512, 2))):
        for i in range(count):
            stages.append(Bottleneck(channels, width, stride if i == 0 else 1))
            channels = width * 4
    return nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
        *stages,
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(channels, classes),
    )
