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
    # k: a square kernel's side, or (height, width) for a rectangular one.
    kh, kw = (k, k) if isinstance(k, int) else k
    p = [(name + ".weight", (cout, cin, kh, kw))]
    return p + [(name + ".bias", (cout,))] if bias else p


def linear(name, cin, cout):
    # torch.nn.Linear stores its weight as (out_features, in_features).
    return [(name + ".weight", (cout, cin)), (name + ".bias", (cout,))]


def norm(name, c):
    # BatchNorm2d and LayerNorm: weight and bias (running statistics are buffers, not parameters).
    return [(name + ".weight", (c,)), (name + ".bias", (c,))]


def resnet(layers):
    # torchvision.models.resnet: ResNet(Bottleneck, layers), 1000 classes. Bottleneck registers
    # conv1, bn1, conv2, bn2, conv3, bn3, then downsample (1x1 conv + BN) in the first block of
    # each stage; width = planes (groups 1, width_per_group 64), expansion 4.
    p = conv("conv1", 3, 64, 7, False) + norm("bn1", 64)
    inplanes = 64
    for stage, (planes, blocks) in enumerate(zip([64, 128, 256, 512], layers), start=1):
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


def resnet50():
    # torchvision.models.resnet50: ResNet(Bottleneck, [3, 4, 6, 3]).
    return resnet([3, 4, 6, 3])


def resnet101():
    # torchvision.models.resnet101: ResNet(Bottleneck, [3, 4, 23, 3]).
    return resnet([3, 4, 23, 3])


def inception_v3():
    # torchvision.models.inception_v3: Inception3 with aux_logits=True, 1000 classes. Every
    # BasicConv2d is a conv without bias ("conv") and a BatchNorm2d ("bn", eps 0.001); the blocks
    # and, inside each, the branches are listed in the order their __init__ assigns them
    # (AuxLogits after Mixed_6e, before Mixed_7a).
    def basic(name, cin, cout, k):
        return conv(name + ".conv", cin, cout, k, False) + norm(name + ".bn", cout)

    def block(name, cin, convs):
        # convs: (branch, input channels or None for the block's input, output channels, kernel).
        p = []
        for branch, src, out, k in convs:
            p += basic(name + "." + branch, cin if src is None else src, out, k)
        return p

    def inception_a(name, cin, pool_features):
        return block(name, cin, [
            ("branch1x1", None, 64, 1),
            ("branch5x5_1", None, 48, 1), ("branch5x5_2", 48, 64, 5),
            ("branch3x3dbl_1", None, 64, 1), ("branch3x3dbl_2", 64, 96, 3),
            ("branch3x3dbl_3", 96, 96, 3),
            ("branch_pool", None, pool_features, 1)])

    def inception_b(name, cin):
        return block(name, cin, [
            ("branch3x3", None, 384, 3),
            ("branch3x3dbl_1", None, 64, 1), ("branch3x3dbl_2", 64, 96, 3),
            ("branch3x3dbl_3", 96, 96, 3)])

    def inception_c(name, cin, c7):
        return block(name, cin, [
            ("branch1x1", None, 192, 1),
            ("branch7x7_1", None, c7, 1), ("branch7x7_2", c7, c7, (1, 7)),
            ("branch7x7_3", c7, 192, (7, 1)),
            ("branch7x7dbl_1", None, c7, 1), ("branch7x7dbl_2", c7, c7, (7, 1)),
            ("branch7x7dbl_3", c7, c7, (1, 7)), ("branch7x7dbl_4", c7, c7, (7, 1)),
            ("branch7x7dbl_5", c7, 192, (1, 7)),
            ("branch_pool", None, 192, 1)])

    def inception_d(name, cin):
        return block(name, cin, [
            ("branch3x3_1", None, 192, 1), ("branch3x3_2", 192, 320, 3),
            ("branch7x7x3_1", None, 192, 1), ("branch7x7x3_2", 192, 192, (1, 7)),
            ("branch7x7x3_3", 192, 192, (7, 1)), ("branch7x7x3_4", 192, 192, 3)])

    def inception_e(name, cin):
        return block(name, cin, [
            ("branch1x1", None, 320, 1),
            ("branch3x3_1", None, 384, 1), ("branch3x3_2a", 384, 384, (1, 3)),
            ("branch3x3_2b", 384, 384, (3, 1)),
            ("branch3x3dbl_1", None, 448, 1), ("branch3x3dbl_2", 448, 384, 3),
            ("branch3x3dbl_3a", 384, 384, (1, 3)), ("branch3x3dbl_3b", 384, 384, (3, 1)),
            ("branch_pool", None, 192, 1)])

    p = basic("Conv2d_1a_3x3", 3, 32, 3) + basic("Conv2d_2a_3x3", 32, 32, 3)
    p += basic("Conv2d_2b_3x3", 32, 64, 3) + basic("Conv2d_3b_1x1", 64, 80, 1)
    p += basic("Conv2d_4a_3x3", 80, 192, 3)
    p += inception_a("Mixed_5b", 192, 32) + inception_a("Mixed_5c", 256, 64)
    p += inception_a("Mixed_5d", 288, 64) + inception_b("Mixed_6a", 288)
    for name, c7 in [("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)]:
        p += inception_c(name, 768, c7)
    p += basic("AuxLogits.conv0", 768, 128, 1) + basic("AuxLogits.conv1", 128, 768, 5)
    p += linear("AuxLogits.fc", 768, 1000)
    p += inception_d("Mixed_7a", 768) + inception_e("Mixed_7b", 1280)
    p += inception_e("Mixed_7c", 2048)
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
    ("resnet101.txt", "ResNet-101 (torchvision.models.resnet101, 1000 classes)",
     "torchvision/models/resnet.py; 44,549,160 parameters per the torchvision model table",
     resnet101, 314, 44549160),
    ("inception_v3.txt", "Inception-V3 with aux logits (torchvision.models.inception_v3, "
     "1000 classes)",
     "torchvision/models/inception.py (Inception3, aux_logits=True); 27,161,264 parameters per "
     "the torchvision model table",
     inception_v3, 292, 27161264),
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
