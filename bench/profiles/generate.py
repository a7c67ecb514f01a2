#!/usr/bin/env python3
"""Writes the gradient profiles of distcomm-bench-* --profile from published layer shapes.

Each model below lists its parameters as torch's model.named_parameters() yields them (the order
the layers are registered, input side first): name and shape. The file gets a header comment
and, per tensor, a '# name shape' comment line followed by the element count. The parameter
totals are checked against the figures the models' own documentation publishes, so a slip in a
shape fails here instead of skewing a benchmark.

    bench/profiles/generate.py           # (re)writes the .txt files next to this script
    bench/profiles/generate.py --check   # exits 1 if a file differs from what it would write

Python 3 standard library only.
"""

import argparse
import math
import pathlib
import sys


def conv(name, cin, cout, k, bias):
    p = [(name + ".weight", (cout, cin, k, k))]
    return p + [(name + ".bias", (cout,))] if bias else p


def linear(name, cin, cout):
    # torch.nn.Linear stores its weight as (out_features, in_features).
    return [(name + ".weight", (cout, cin)), (name + ".bias", (cout,))]


def norm(name, c):
    # BatchNorm2d and LayerNorm: weight and bias (running statistics are buffers, not parameters).
    return [(name + ".weight", (c,)), (name + ".bias", (c,))]


def resnet50():
    # torchvision.models.resnet: ResNet(Bottleneck, [3, 4, 6, 3]), 1000 classes. Bottleneck
    # registers conv1, bn1, conv2, bn2, conv3, bn3, then downsample (1x1 conv + BN) in the first
    # block of each stage; width = planes (groups 1, width_per_group 64), expansion 4.
    p = conv("conv1", 3, 64, 7, False) + norm("bn1", 64)
    inplanes = 64
    for stage, (planes, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)], start=1):
        for b in range(blocks):
            n = "layer%d.%d." % (stage, b)
            p += conv(n + "conv1", inplanes, planes, 1, False) + norm(n + "bn1", planes)
            p += conv(n + "conv2", planes, planes, 3, False) + norm(n + "bn2", planes)
            p += conv(n + "conv3", planes, planes * 4, 1, False) + norm(n + "bn3", planes * 4)
            if b == 0:
                p += conv(n + "downsample.0", inplanes, planes * 4, 1, False)
                p += norm(n + "downsample.1", planes * 4)
            inplanes = planes * 4
    return p + linear("fc", 2048, 1000)


def bert_base():
    # transformers BertModel (with pooler), config of bert-base-uncased: vocab 30522, hidden 768,
    # 12 layers, intermediate 3072, 512 positions, 2 token types.
    h, ff = 768, 3072
    p = [
        ("embeddings.word_embeddings.weight", (30522, h)),
        ("embeddings.position_embeddings.weight", (512, h)),
        ("embeddings.token_type_embeddings.weight", (2, h)),
    ] + norm("embeddings.LayerNorm", h)
    for i in range(12):
        n = "encoder.layer.%d." % i
        for proj in ("query", "key", "value"):
            p += linear(n + "attention.self." + proj, h, h)
        p += linear(n + "attention.output.dense", h, h) + norm(n + "attention.output.LayerNorm", h)
        p += linear(n + "intermediate.dense", h, ff)
        p += linear(n + "output.dense", ff, h) + norm(n + "output.LayerNorm", h)
    return p + linear("pooler.dense", h, h)


def vgg16():
    # torchvision.models.vgg16: configuration "D" without batch norm, 3x3 convolutions with bias,
    # classifier 512*7*7 -> 4096 -> 4096 -> 1000. features.N numbers every module of the
    # Sequential (ReLU and MaxPool2d included), as torch names them.
    p = []
    cin, index = 3, 0
    for v in [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
              512, 512, 512, "M"]:
        if v == "M":
            index += 1
            continue
        p += conv("features.%d" % index, cin, v, 3, True)
        cin, index = v, index + 2  # the conv and its ReLU
    p += linear("classifier.0", 512 * 7 * 7, 4096) + linear("classifier.3", 4096, 4096)
    return p + linear("classifier.6", 4096, 1000)


# file, title, source of the shapes, builder, published tensor count and parameter total.
MODELS = [
    ("resnet50.txt", "ResNet-50 (torchvision.models.resnet50, 1000 classes)",
     "torchvision/models/resnet.py; 25,557,032 parameters per the torchvision model table",
     resnet50, 161, 25557032),
    ("bert-base.txt", "BERT-base uncased (transformers BertModel with pooler)",
     "transformers models/bert/modeling_bert.py with the bert-base-uncased config "
     "(vocab 30522, hidden 768, 12 layers, intermediate 3072, 512 positions)",
     bert_base, 199, 109482240),
    ("vgg16.txt", "VGG-16 without batch norm (torchvision.models.vgg16, 1000 classes)",
     "torchvision/models/vgg.py, configuration D; 138,357,544 parameters per the torchvision "
     "model table",
     vgg16, 32, 138357544),
]


def render(title, source, params):
    counts = [math.prod(shape) for _, shape in params]
    total = sum(counts)
    lines = [
        "# Gradient profile for distcomm-bench-* --profile: %s." % title,
        "# Shapes: %s." % source,
        "# %d tensors, %s parameters (%.1f MiB of float)." % (len(counts), format(total, ","),
                                                             total * 4 / 2**20),
        "# Order: model.named_parameters(), input side first; backward produces the gradients",
        "# roughly in the reverse order. One element count per tensor, each after a '# name",
        "# shape' line. Written by bench/profiles/generate.py: edit that, not this file.",
    ]
    for (name, shape), count in zip(params, counts):
        lines.append("# %s %s" % (name, "x".join(str(d) for d in shape)))
        lines.append(str(count))
    return "\n".join(lines) + "\n", len(counts), total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare the files with what would be written; write nothing")
    parser.add_argument("--dir", type=pathlib.Path, default=pathlib.Path(__file__).parent,
                        help="where the files are (default: next to this script)")
    args = parser.parse_args()

    stale = []
    for file, title, source, build, tensors, parameters in MODELS:
        text, n, total = render(title, source, build())
        if (n, total) != (tensors, parameters):
            sys.exit("generate.py: %s has %d tensors and %d parameters; the published model has "
                     "%d and %d: a shape is wrong" % (file, n, total, tensors, parameters))
        path = args.dir / file
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
            print("%s: %d tensors, %d parameters" % (path, n, total))
    if stale:
        sys.exit("generate.py --check: out of date (run bench/profiles/generate.py): " +
                 " ".join(stale))


if __name__ == "__main__":
    main()
