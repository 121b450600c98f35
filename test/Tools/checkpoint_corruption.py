"""Damaged checkpoints give a clear error and exit status 1, never a crash,
a hang or a silent load.

From one valid checkpoint this makes: every truncation at 64-byte steps and
at a few odd lengths; a single-bit flip at every 7th bit position of the
file (header, padding and data); preambles with a wrong magic, a future
version, a header length over the 16 MiB limit or beyond the file; bytes
appended; and headers rewritten (with a valid checksum) to lie: data out of
the file, a shape that does not match the bytes, a dtype no one knows, a
negative dimension, an overflowing shape, a duplicate tensor, a world size
or rank out of range, per-rank copies that do not match the world size, a
header nested 100000 levels deep. Each variant
goes through `distopt-checkpoint info`, which must exit 1 with a message
naming the file; the original must still read. It also writes WORKDIR/
transposed.ckpt, valid but with the first tensor's shape reversed.

usage: checkpoint_corruption.py DISTOPT_CHECKPOINT CKPT WORKDIR
"""
import json
import os
import struct
import subprocess
import sys
import zlib


def run(tool, path):
    proc = subprocess.run([tool, "info", path], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stderr.strip()


def with_header(original, edit, rewrite=lambda text: text):
    """The checkpoint with its header JSON edited (then its text rewritten),
    re-checksummed, and the data moved to where the new header length puts
    it."""
    length = struct.unpack_from("<Q", original, 16)[0]
    header = json.loads(original[24:24 + length])
    edit(header)
    text = rewrite(json.dumps(header, separators=(",", ":"))).encode()
    align = lambda n: (n + 63) // 64 * 64
    data = original[align(24 + length):]
    preamble = (original[:12] + struct.pack("<I", zlib.crc32(text))
                + struct.pack("<Q", len(text)))
    return preamble + text + b"\0" * (align(24 + len(text)) - 24 - len(text)) + data


def main():
    tool, source, workdir = sys.argv[1:4]
    original = open(source, "rb").read()
    code, message = run(tool, source)
    if code != 0:
        print(f"FAIL: the original does not read: {message}")
        return 1

    variants = []
    for cut in sorted(set(list(range(0, len(original), 64)) + [1, 23, 25, len(original) - 1])):
        variants.append((f"truncated to {cut} bytes", original[:cut]))
    for bit in range(0, len(original) * 8, 7):
        flipped = bytearray(original)
        flipped[bit // 8] ^= 1 << (bit % 8)
        variants.append((f"bit {bit} flipped", bytes(flipped)))
    variants.append(("bad magic", b"XOPTCKPT" + original[8:]))
    variants.append(("version 2", original[:8] + struct.pack("<I", 2) + original[12:]))
    variants.append(("header length 2^40", original[:16] + struct.pack("<Q", 1 << 40) + original[24:]))
    variants.append(("header length 17 MiB", original[:16] + struct.pack("<Q", 17 << 20) + original[24:]))
    variants.append(("header length beyond the file",
                     original[:16] + struct.pack("<Q", len(original)) + original[24:]))
    variants.append(("4 KiB appended", original + b"\0" * 4096))

    def tensor_edit(field, value):
        def edit(header):
            header["tensors"][0][field] = value
        return edit

    lies = [
        ("offset beyond the data", tensor_edit("offset", 1 << 20)),
        ("negative offset", tensor_edit("offset", -64)),
        ("bytes beyond the data", tensor_edit("bytes", 1 << 30)),
        ("shape not matching the bytes", tensor_edit("shape", [3, 3])),
        ("unknown dtype", tensor_edit("dtype", "f8")),
        ("negative dimension", tensor_edit("shape", [-1, 4])),
        ("overflowing shape", tensor_edit("shape", [1 << 40, 1 << 40])),
        ("shape of strings", tensor_edit("shape", ["8"])),
        ("missing crc32", lambda h: h["tensors"][0].pop("crc32")),
        ("duplicate tensor", lambda h: h["tensors"].__setitem__(1, dict(h["tensors"][0]))),
        ("world size 0", lambda h: h.__setitem__("world_size", 0)),
        ("world size 2^40", lambda h: h.__setitem__("world_size", 1 << 40)),
        ("a rank beyond the world size", tensor_edit("rank", 9)),
        ("a negative rank", tensor_edit("rank", -2)),
        ("per-rank copies for another world size", tensor_edit("rank", 0)),
        ("no tensors list", lambda h: h.pop("tensors")),
        ("another format", lambda h: h.__setitem__("format", "safetensors")),
        # The header repeats the preamble's version; it was not read.
        ("header version 2", lambda h: h.__setitem__("version", 2)),
        ("no header version", lambda h: h.pop("version")),
    ]
    for name, edit in lies:
        variants.append((f"header lies: {name}", with_header(original, edit)))
    # The parser recursed once per level: a stack overflow, not an error.
    variants.append(("header nested 100000 deep", with_header(
        original, lambda h: h.__setitem__("model", "DEEP"),
        lambda text: text.replace('"DEEP"', "[" * 100000 + "]" * 100000))))

    passed = failed = 0
    path = os.path.join(workdir, "damaged.ckpt")
    # Control: rewriting the header without a lie must still read, or the
    # lies above would be rejected for the wrong reason.
    with open(path, "wb") as f:
        f.write(with_header(original, lambda header: None))
    code, message = run(tool, path)
    if code != 0:
        print(f"FAIL: an unedited rewritten header does not read: {message}")
        return 1
    for name, data in variants:
        with open(path, "wb") as f:
            f.write(data)
        code, message = run(tool, path)
        ok = code == 1 and message.startswith(f"distopt-checkpoint: {path}: ")
        if not ok:
            print(f"FAIL: {name}: exit {code}: {message}")
        passed += ok
        failed += not ok
    # Not damaged but of another shape: the first tensor transposed (a
    # valid file; loading it into the step must name both shapes).
    def transpose(header):
        header["tensors"][0]["shape"] = header["tensors"][0]["shape"][::-1]
    with open(os.path.join(workdir, "transposed.ckpt"), "wb") as f:
        f.write(with_header(original, transpose))
    code, _ = run(tool, source)
    print(f"{len(variants)} damaged variants: {passed} rejected with a clear error, {failed} not;"
          f" original still reads: {code == 0}")
    return 1 if failed or code != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
