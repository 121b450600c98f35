#!/usr/bin/env python3
"""Every field of a step's interface, missing or of the wrong type, and
values that are out of range or inconsistent: distopt-run and
distopt-checkpoint must refuse it with an error that names the field's
JSON path, never crash, and accept a missing field only where the
interface allows it to be absent.

Each variant is embedded as `distopt_step_abi` in a small shared library
built with the system C compiler, and read by `distopt-run --describe`; and
written to a file that `distopt-checkpoint fits CKPT FILE` reads.

usage: interface_errors.py DISTOPT_RUN CC TMPDIR DISTOPT_CHECKPOINT CKPT
"""
import concurrent.futures
import copy
import json
import os
import subprocess
import sys

VALID = {
    "version": 2, "device": "cpu", "world_size": 4, "lr": 0.001, "model": "m",
    "seed": 7,
    "args": [
        {"role": "param", "name": "w", "dtype": "f32", "shape": [4, 4]},
        {"role": "grad", "name": "w", "dtype": "f32", "shape": [4, 4]},
        {"role": "state", "name": "flat0.exp_avg", "dtype": "f32", "shape": [8],
         "shard_of": 32, "init": "zeros", "per_rank": False,
         "layout": [{"name": "w", "offset": 0, "shape": [4, 4]}]},
        {"role": "state", "name": "owned0.exp_avg", "dtype": "f32", "shape": [16],
         "layout": [{"name": "w", "offset": 0, "shape": [4, 4], "owner": 2}]},
        {"role": "lr", "dtype": "f64"},
        {"role": "step", "dtype": "i64"},
    ],
    "results": [
        {"role": "param", "name": "w", "dtype": "f32", "shape": [4, 4], "in_place_arg": 0},
    ],
    "collectives": {"count": 2, "fingerprint": "0x00000000deadbeef"},
    "groups": [{"name": "rows", "size": 2, "color": [0, 0, 1, 1], "key": [0, 1, 0, 1]}],
}
OPTIONAL = {"device", "lr", "model", "seed", "role", "name", "shape", "init", "per_rank",
            "shard_of", "layout", "owner", "in_place_arg", "groups"}
# Inside a layout entry only the owner may be missing; a group needs all
# of its fields.
OPTIONAL_IN_LAYOUT = {"owner"}
WRONG = [None, "text", -1, [1], {"a": 1}]


def paths(value, prefix=()):
    """Every (path, key) in the document: dict keys and list elements."""
    if isinstance(value, dict):
        for key, sub in value.items():
            yield prefix + (key,)
            yield from paths(sub, prefix + (key,))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield prefix + (i,)
            yield from paths(sub, prefix + (i,))


def spell(path):
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (("." if out else "") + p)
    return out


def at(doc, path):
    for p in path[:-1]:
        doc = doc[p]
    return doc, path[-1]


def main():
    run, cc, tmp, checkpoint_tool, ckpt = sys.argv[1:6]
    cases = []  # (label, document, expected path or None when valid)
    for path in paths(VALID):
        if isinstance(path[-1], int):
            continue
        doc = copy.deepcopy(VALID)
        parent, key = at(doc, path)
        del parent[key]
        optional = (OPTIONAL_IN_LAYOUT if "layout" in path[:-1] else
                    set() if "groups" in path[:-1] else OPTIONAL)
        cases.append((f"without {spell(path)}", doc,
                      None if key in optional else spell(path)))
        original = at(VALID, path)[0][key]
        for wrong in WRONG:
            if type(wrong) is type(original) or (isinstance(original, bool) != isinstance(wrong, bool)
                                                 and isinstance(wrong, (int, float)) and
                                                 isinstance(original, (int, float)) and
                                                 not isinstance(original, bool) and wrong >= 0):
                continue
            doc = copy.deepcopy(VALID)
            parent, key = at(doc, path)
            parent[key] = wrong
            cases.append((f"{spell(path)} = {json.dumps(wrong)}", doc, spell(path)))
    # Values of the right type that are out of range or inconsistent.
    def case(label, expect, edit):
        doc = copy.deepcopy(VALID)
        edit(doc)
        cases.append((label, doc, expect))
    case("version 1 (entry points without a status)", "version", lambda d: d.update(version=1))
    case("world size 0", "world_size", lambda d: d.update(world_size=0))
    case("world size 2^40", "world_size", lambda d: d.update(world_size=2 ** 40))
    case("negative lr", "lr", lambda d: d.update(lr=-1))
    case("negative seed", "seed", lambda d: d.update(seed=-1))
    case("unknown dtype", "args[0].dtype", lambda d: d["args"][0].update(dtype="f8"))
    case("unknown role", "args[0].role", lambda d: d["args"][0].update(role="weights"))
    case("unknown init", "args[2].init", lambda d: d["args"][2].update(init="ones"))
    case("negative dimension", "args[0].shape[1]", lambda d: d["args"][0].update(shape=[4, -4]))
    case("2^62 x 8 elements", "args[0].shape", lambda d: d["args"][0].update(shape=[2 ** 62, 8]))
    case("shard of another world size", "args[2].shard_of",
         lambda d: d["args"][2].update(shard_of=48))
    case("entry outside the shard", "args[2].layout[0]",
         lambda d: d["args"][2]["layout"][0].update(offset=30))
    case("entry outside the buffer", "args[3].layout[0]",
         lambda d: d["args"][3]["layout"][0].update(offset=8))
    case("owner beyond the ranks", "args[3].layout[0].owner",
         lambda d: d["args"][3]["layout"][0].update(owner=4))
    case("overlapping entries", "args[3].layout",
         lambda d: d["args"][3]["layout"].append({"name": "v", "offset": 8, "shape": [4], "owner": 2}))
    case("in place in a missing argument", "results[0].in_place_arg",
         lambda d: d["results"][0].update(in_place_arg=6))
    case("an argument in place", "args[0].in_place_arg",
         lambda d: d["args"][0].update(in_place_arg=0))
    case("a shaped learning rate", "args[4].shape", lambda d: d["args"][4].update(shape=[1]))
    case("a scalar with a layout", "args[5]",
         lambda d: d["args"][5].update(layout=[{"name": "x", "offset": 0, "shape": []}]))
    case("a scalar drawn at random", "args[5].init",
         lambda d: d["args"][5].update(init="randn"))
    # The ranks' mean (Dion's low-rank sync) is per-rank state held whole.
    case("a mean that is not per rank", "args[3].rank_mean",
         lambda d: d["args"][3].update(rank_mean=True))
    case("a mean in shards", "args[2].rank_mean",
         lambda d: d["args"][2].update(per_rank=True, rank_mean=True))
    # A process group's layout: a part per color, `size` ranks in each.
    case("a group of 0 ranks", "groups[0].size", lambda d: d["groups"][0].update(size=0))
    case("a group larger than the world", "groups[0].size", lambda d: d["groups"][0].update(size=8))
    case("a group without a name", "groups[0].name", lambda d: d["groups"][0].update(name=""))
    case("a layout for 3 ranks", "groups[0]: color and key need one entry per world rank (4)",
         lambda d: d["groups"][0].update(color=[0, 0, 1]))
    case("a rank beyond its part", "groups[0].key[1]", lambda d: d["groups"][0].update(key=[0, 2, 0, 1]))
    case("a part of 3 ranks", "groups[0].color: part 0 has 3 ranks, expected 2",
         lambda d: d["groups"][0].update(color=[0, 0, 0, 1]))
    case("a negative color", "groups[0].color[0]", lambda d: d["groups"][0].update(color=[-1, 0, 1, 1]))
    # A result is written back into the argument it replaces.
    case("a result of another shape", "results[0]: result 'w' (f32[8]) replaces argument #0, which is f32[4x4]",
         lambda d: d["results"][0].update(shape=[8]))
    case("a result of another dtype", "results[0]: result 'w' (f64[4x4]) replaces argument #0",
         lambda d: d["results"][0].update(dtype="f64"))
    case("nested 100000 deep", "nested deeper than 64", lambda d: d.update(model=None))
    # Names reach the host as C strings: "w\0a" would read "w".
    case("a name holding NUL", "args[0].name", lambda d: d["args"][0].update(name="w\0a"))
    case("a model holding NUL", "model", lambda d: d.update(model="m\0"))
    # Optimizer state that would be saved as if whole: a ZeRO shard stripped
    # of its layout and shard_of, and a parameter's state of another size.
    case("a shard without its layout", "args[2]: state argument 'flat0.exp_avg' (8 elements) belongs to no parameter",
         lambda d: [d["args"][2].pop("layout"), d["args"][2].pop("shard_of")])
    case("state of another size", "args[3]: state argument 'w.exp_avg' (8 elements) is not the size of parameter 'w' (16)",
         lambda d: d["args"][3].update(name="w.exp_avg", shape=[8], layout=[]) or d["args"][3].pop("layout"))

    def check(i, label, doc, expect):
        text = json.dumps(doc)
        if label == "nested 100000 deep":
            text = text.replace('"model": null', '"model": ' + "[" * 100000 + "]" * 100000)
        source = os.path.join(tmp, f"abi{i}.c")
        library = os.path.join(tmp, f"abi{i}.so")
        with open(source, "w") as f:
            f.write("const char distopt_step_abi[] = " + json.dumps(text) + ";\n"
                    "void distopt_step_packed(void **args) { (void)args; }\n")
        subprocess.run([cc, "-shared", "-fPIC", "-nostdlib", "-o", library, source], check=True)
        interface = os.path.join(tmp, f"abi{i}.json")
        with open(interface, "w") as f:
            f.write(text)
        failures = []
        for tool, command in (("distopt-run", [run, "--describe", library]),
                              ("distopt-checkpoint",
                               [checkpoint_tool, "fits", ckpt, interface])):
            out = subprocess.run(command, capture_output=True, text=True)
            if out.returncode < 0:
                ok, why = False, f"crashed with signal {-out.returncode}"
            elif expect is None:
                # An optional field may be missing; what it leaves
                # inconsistent (a shard without its layout) is still a
                # clear error. A valid interface may not fit the checkpoint.
                ok = (out.returncode == 0 or
                      (out.returncode == 1 and ("step interface: args" in out.stderr or
                                                "step interface: results" in out.stderr)) or
                      (tool == "distopt-checkpoint" and out.returncode == 1 and
                       "for this step" in out.stderr))
                why = out.stderr.strip()
            else:
                ok = out.returncode == 1 and expect in out.stderr and "step interface" in out.stderr
                why = out.stderr.strip() or "accepted"
            if not ok:
                failures.append(f"FAIL: {tool}: {label}: {why}")
        return "\n".join(failures) or None

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        results = list(pool.map(lambda c: check(*c), [(i, *c) for i, c in enumerate(cases)]))
    failures = [r for r in results if r]
    for r in failures:
        print(r)
    print(f"{len(cases) - len(failures)} of {len(cases)} variants handled")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
