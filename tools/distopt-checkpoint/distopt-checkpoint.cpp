//===- distopt-checkpoint.cpp - inspect and compare checkpoints -*- C++ -*-===//
//
//   distopt-checkpoint info CKPT      validate; print the header and tensors
//   distopt-checkpoint diff A B       compare tensor by tensor (bitwise),
//                                     whatever world size each was saved at
//   distopt-checkpoint diff --max-ulp N A B
//                                     floating-point tensors may differ by N
//                                     units in the last place (e.g. runs on
//                                     different hardware)
//   distopt-checkpoint fits CKPT STEP.json
//                                     whether a step (its interface, from
//                                     distopt-run STEP.so --describe=json)
//                                     can resume from CKPT: it holds every
//                                     tensor the step restores, and no other
//
// Exit status: 0 valid / equal, 1 otherwise (with the reason on stderr).
//
//===----------------------------------------------------------------------===//

#include "distopt/Checkpoint/Checkpoint.h"

#include "llvm/Support/CRC.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstring>

using namespace llvm;
namespace checkpoint = distopt::checkpoint;

static std::string describe(const checkpoint::Tensor &t) {
  std::string text = t.role + " " + t.name;
  if (t.rank >= 0)
    text += " (rank " + std::to_string(t.rank) + ")";
  return text;
}

static int info(StringRef path) {
  auto ckpt = checkpoint::read(path.str());
  if (!ckpt) {
    errs() << "distopt-checkpoint: " << ckpt.error() << "\n";
    return 1;
  }
  outs() << path << ": model '" << ckpt->model << "', step " << ckpt->step
         << ", saved on " << ckpt->worldSize << " ranks, "
         << ckpt->tensors.size() << " tensors\n";
  for (const checkpoint::Tensor &t : ckpt->tensors) {
    outs() << "  " << describe(t) << ": " << t.dtype << "[";
    interleave(t.shape, outs(), ",");
    outs() << "] crc32 "
           << format_hex(crc32(ArrayRef<uint8_t>(
                             reinterpret_cast<const uint8_t *>(t.data.data()),
                             t.data.size())),
                         10)
           << "\n";
  }
  return 0;
}

/// Maps a float's bits to integers ordered like the values, so that the
/// distance of two is their distance in units in the last place.
static int64_t orderedBits(const char *p, unsigned bytes) {
  uint64_t bits = 0;
  std::memcpy(&bits, p, bytes); // little-endian: the low bytes
  uint64_t sign = uint64_t(1) << (8 * bytes - 1);
  int64_t magnitude = static_cast<int64_t>(bits & (sign - 1));
  return bits & sign ? -magnitude : magnitude;
}

/// The largest distance in ulp between two tensors of one floating-point
/// type (-1 for another type or a NaN on one side only).
static int64_t maxUlp(const checkpoint::Tensor &x,
                      const checkpoint::Tensor &y) {
  unsigned bytes = x.dtype == "f64"                        ? 8
                   : x.dtype == "f32"                      ? 4
                   : x.dtype == "bf16" || x.dtype == "f16" ? 2
                                                           : 0;
  if (!bytes)
    return -1;
  int64_t worst = 0;
  for (size_t i = 0; i + bytes <= x.data.size(); i += bytes) {
    int64_t d = orderedBits(&x.data[i], bytes) - orderedBits(&y.data[i], bytes);
    worst = std::max(worst, d < 0 ? -d : d);
  }
  return worst;
}

static int diff(StringRef a, StringRef b, int64_t allowedUlp) {
  auto left = checkpoint::read(a.str());
  if (!left) {
    errs() << "distopt-checkpoint: " << left.error() << "\n";
    return 1;
  }
  auto right = checkpoint::read(b.str());
  if (!right) {
    errs() << "distopt-checkpoint: " << right.error() << "\n";
    return 1;
  }
  int differences = 0;
  auto report = [&](const Twine &what) {
    errs() << "distopt-checkpoint: " << what << "\n";
    ++differences;
  };
  if (left->step != right->step)
    report("step " + Twine(left->step) + " vs " + Twine(right->step));
  for (const checkpoint::Tensor &t : left->tensors) {
    const checkpoint::Tensor *other = right->find(t.role, t.name, t.rank);
    if (!other)
      report(describe(t) + " is only in " + a);
    else if (other->dtype != t.dtype || other->shape != t.shape)
      report(describe(t) + " has another dtype or shape in " + b);
    else if (other->data != t.data) {
      int64_t ulp = allowedUlp > 0 ? maxUlp(t, *other) : -1;
      if (ulp < 0 || ulp > allowedUlp)
        report(describe(t) + " differs" +
               (ulp > 0 ? " by up to " + Twine(ulp) + " ulp" : Twine()));
    }
  }
  for (const checkpoint::Tensor &t : right->tensors)
    if (!left->find(t.role, t.name, t.rank))
      report(describe(t) + " is only in " + b);
  if (differences == 0)
    outs() << "distopt-checkpoint: " << left->tensors.size()
           << (allowedUlp > 0 ? " tensors equal within " +
                                    std::to_string(allowedUlp) + " ulp"
                              : std::string(" tensors bitwise equal"))
           << " (saved on " << left->worldSize << " and " << right->worldSize
           << " ranks)\n";
  return differences ? 1 : 0;
}

static int fits(StringRef ckptPath, StringRef interfacePath) {
  auto ckpt = checkpoint::read(ckptPath.str());
  if (!ckpt) {
    errs() << "distopt-checkpoint: " << ckpt.error() << "\n";
    return 1;
  }
  ErrorOr<std::unique_ptr<MemoryBuffer>> text =
      MemoryBuffer::getFile(interfacePath, /*IsText=*/true);
  if (!text) {
    errs() << "distopt-checkpoint: cannot read " << interfacePath << ": "
           << text.getError().message() << "\n";
    return 1;
  }
  auto step = distopt::step::parseInterface((*text)->getBuffer().str());
  if (!step) {
    errs() << "distopt-checkpoint: " << interfacePath << ": " << step.error()
           << "\n";
    return 1;
  }
  std::string misfit = checkpoint::checkFits(*ckpt, *step);
  if (!misfit.empty()) {
    errs() << "distopt-checkpoint: " << ckptPath << ": " << misfit << "\n";
    return 1;
  }
  outs() << "distopt-checkpoint: " << ckptPath << " fits the step ("
         << ckpt->tensors.size() << " tensors; the step runs on "
         << step->worldSize << (step->worldSize == 1 ? " rank" : " ranks")
         << ")\n";
  return 0;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  if (argc == 3 && std::strcmp(argv[1], "info") == 0)
    return info(argv[2]);
  if (argc == 4 && std::strcmp(argv[1], "diff") == 0)
    return diff(argv[2], argv[3], 0);
  int64_t ulp = 0;
  if (argc == 6 && std::strcmp(argv[1], "diff") == 0 &&
      std::strcmp(argv[2], "--max-ulp") == 0 &&
      !StringRef(argv[3]).getAsInteger(10, ulp) && ulp >= 0)
    return diff(argv[4], argv[5], ulp);
  if (argc == 4 && std::strcmp(argv[1], "fits") == 0)
    return fits(argv[2], argv[3]);
  errs() << "usage: distopt-checkpoint info CKPT\n"
            "       distopt-checkpoint diff [--max-ulp N] A B\n"
            "       distopt-checkpoint fits CKPT STEP.json\n";
  return 2;
}
