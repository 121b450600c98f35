#!/usr/bin/env python3
"""Writes the parameter specs of examples/specs/ from the models' public
definitions (HF GPT-2 small, torchvision ResNet-50 and ResNet-18, Meta's
LLaMA-7B), checking each total against the published parameter count, and
synthetic specs for benchmarks:

    scripts/gen-specs.py                      # the real models
    scripts/gen-specs.py --synthetic 1000 -o /tmp/s1k.json
"""
import argparse
import json
import os
import random
import sys

ADAMW = {"type": "adamw", "lr": 6e-4, "betas": [0.9, 0.95], "eps": 1e-8,
         "weight_decay": 0.1}


def gpt2_small(d=768, layers=12, vocab=50257, ctx=1024):
    p = [("wte.weight", [vocab, d]), ("wpe.weight", [ctx, d])]
    for i in range(layers):
        h = f"h.{i}."
        p += [(h + "ln_1.weight", [d]), (h + "ln_1.bias", [d]),
              (h + "attn.c_attn.weight", [d, 3 * d]), (h + "attn.c_attn.bias", [3 * d]),
              (h + "attn.c_proj.weight", [d, d]), (h + "attn.c_proj.bias", [d]),
              (h + "ln_2.weight", [d]), (h + "ln_2.bias", [d]),
              (h + "mlp.c_fc.weight", [d, 4 * d]), (h + "mlp.c_fc.bias", [4 * d]),
              (h + "mlp.c_proj.weight", [4 * d, d]), (h + "mlp.c_proj.bias", [d])]
    p += [("ln_f.weight", [d]), ("ln_f.bias", [d])]  # lm_head is tied to wte
    return p, 124_439_808


def llama_7b():
    d, ff, layers, vocab = 4096, 11008, 32, 32000
    p = [("model.embed_tokens.weight", [vocab, d])]
    for i in range(layers):
        l = f"model.layers.{i}."
        p += [(l + f"self_attn.{n}_proj.weight", [d, d]) for n in "qkvo"]
        p += [(l + "mlp.gate_proj.weight", [ff, d]), (l + "mlp.up_proj.weight", [ff, d]),
              (l + "mlp.down_proj.weight", [d, ff]),
              (l + "input_layernorm.weight", [d]),
              (l + "post_attention_layernorm.weight", [d])]
    p += [("model.norm.weight", [d]), ("lm_head.weight", [vocab, d])]
    return p, 6_738_415_616


def resnet(blocks, bottleneck, classes, cifar_stem=False):
    p = []
    def conv(name, out, inp, k):
        p.append((name + ".weight", [out, inp, k, k]))
    def bn(name, c):
        p.extend([(name + ".weight", [c]), (name + ".bias", [c])])
    if cifar_stem:
        conv("conv1", 64, 3, 3)
    else:
        conv("conv1", 64, 3, 7)
    bn("bn1", 64)
    expansion = 4 if bottleneck else 1
    inplanes = 64
    for li, (planes, n) in enumerate(zip([64, 128, 256, 512], blocks), start=1):
        for b in range(n):
            pre = f"layer{li}.{b}."
            stride = 2 if (b == 0 and li > 1) else 1
            if bottleneck:
                conv(pre + "conv1", planes, inplanes, 1); bn(pre + "bn1", planes)
                conv(pre + "conv2", planes, planes, 3); bn(pre + "bn2", planes)
                conv(pre + "conv3", planes * 4, planes, 1); bn(pre + "bn3", planes * 4)
            else:
                conv(pre + "conv1", planes, inplanes, 3); bn(pre + "bn1", planes)
                conv(pre + "conv2", planes, planes, 3); bn(pre + "bn2", planes)
            if b == 0 and (stride != 1 or inplanes != planes * expansion):
                conv(pre + "downsample.0", planes * expansion, inplanes, 1)
                bn(pre + "downsample.1", planes * expansion)
            inplanes = planes * expansion
    p += [("fc.weight", [classes, 512 * expansion]), ("fc.bias", [classes])]
    return p


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def spec(model, params, world_size, optimizer, dtype="f32", main_params=False):
    out = {"model": model, "world_size": world_size, "optimizer": optimizer}
    if main_params:
        out["main_params"] = True
    out["parameters"] = [{"name": n, "shape": s, "dtype": dtype} for n, s in params]
    return out


def synthetic(count, seed=0):
    """`count` tensors with a transformer-like mix of sizes: mostly vectors
    (norms, biases) and matrices from 64 to 1024 on a side."""
    rng = random.Random(seed)
    params = []
    for i in range(count):
        if rng.random() < 0.5:
            params.append((f"t{i}.bias", [rng.choice([64, 256, 768, 1024])]))
        else:
            params.append((f"t{i}.weight", [rng.choice([64, 128, 256, 512, 1024]),
                                            rng.choice([64, 128, 256, 512, 1024])]))
    return spec(f"synthetic-{count}", params, 8, ADAMW)


# GPT-2's training recipe (nanoGPT's, as Megatron and NeMo run it): weight
# decay on the matrices only, gradients clipped at 1.0, 2000 warmup steps
# and a cosine decay to a tenth of the rate over 600,000, 5 micro-batches
# accumulated per step on each of 8 ranks (nanoGPT's 40 on 8 GPUs).
GPT2_RECIPE = {
    "grad_accumulation": 5,
    "param_groups": [{"params": ["*.bias", "*ln_*.weight", "ln_f.weight"],
                      "weight_decay": 0.0}],
    "clip_grad_norm": {"max_norm": 1.0},
    "lr_schedule": {"type": "warmup_cosine", "warmup_steps": 2000,
                    "total_steps": 600000, "min_lr": 6e-5},
}


def write(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--synthetic", type=int, help="number of tensors")
    ap.add_argument("-o", "--output", help="output file (with --synthetic)")
    args = ap.parse_args()
    if args.synthetic:
        write(args.output or f"synthetic-{args.synthetic}.json", synthetic(args.synthetic))
        return 0

    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "specs")
    gpt2, gpt2_total = gpt2_small()
    llama, llama_total = llama_7b()
    r50 = resnet([3, 4, 6, 3], True, 1000)
    r18 = resnet([2, 2, 2, 2], False, 10, cifar_stem=True)
    checks = [("gpt2-small", gpt2, gpt2_total), ("llama-7b", llama, llama_total),
              ("resnet50", r50, 25_557_032), ("resnet18-cifar", r18, 11_173_962)]
    for name, params, total in checks:
        got = sum(numel(s) for _, s in params)
        if got != total:
            sys.exit(f"{name}: {got} parameters, expected {total}")
    sgd = {"type": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4}
    write(os.path.join(out, "gpt2-small.json"), spec("gpt2-small", gpt2, 8, ADAMW, "bf16", True))
    write(os.path.join(out, "gpt2-small-recipe.json"),
          dict(spec("gpt2-small", gpt2, 8, ADAMW, "bf16", True), **GPT2_RECIPE))
    # The same recipe on a 2-layer GPT of width 64 for 2 ranks (scripts/demo),
    # with a short schedule and dynamic loss scaling, so that a few steps
    # show the warmup, the decay and a skipped step.
    tiny, _ = gpt2_small(d=64, layers=2, vocab=65, ctx=64)
    write(os.path.join(out, "gpt-tiny-recipe.json"),
          dict(spec("gpt-tiny", tiny, 2, ADAMW, "bf16", True), **dict(
              GPT2_RECIPE,
              grad_accumulation=2,
              lr_schedule={"type": "warmup_cosine", "warmup_steps": 3,
                           "total_steps": 12, "min_lr": 6e-5},
              loss_scaling={"type": "dynamic", "init_scale": 65536,
                            "growth_interval": 4})))
    write(os.path.join(out, "llama-7b.json"),
          spec("llama-7b", llama, 64, dict(ADAMW, lr=3e-4), "bf16", True))
    write(os.path.join(out, "resnet50.json"), spec("resnet50", r50, 8, sgd))
    write(os.path.join(out, "resnet18-cifar.json"), spec("resnet18-cifar", r18, 4, sgd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
