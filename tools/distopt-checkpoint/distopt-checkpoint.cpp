//===- distopt-checkpoint.cpp - inspect and compare checkpoints -*- C++ -*-===//
//
//   distopt-checkpoint info CKPT      validate; print the header and tensors
//   distopt-checkpoint diff A B       compare tensor by tensor (bitwise),
//                                     whatever world size each was saved at
//   distopt-checkpoint diff --max-ulp N A B
//                                     floating-point tensors may differ by N
//                                     units in the last place (e.g. runs on
//                                     different hardware)
//   distopt-checkpoint diff --max-rel-diff R A B
//                                     or by R normwise, ||A - B|| / ||B|| per
//                                     tensor (steps whose rounding is
//                                     amplified: orthogonalizations)
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

#include "llvm/ADT/APFloat.h"
#include "llvm/Support/CRC.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
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

/// The bytes of an element of a floating-point tensor (0: not one).
static unsigned floatBytes(const checkpoint::Tensor &t) {
  return t.dtype == "f64"                        ? 8
         : t.dtype == "f32"                      ? 4
         : t.dtype == "bf16" || t.dtype == "f16" ? 2
                                                 : 0;
}

/// The largest distance in ulp between two tensors of one floating-point
/// type (-1 for another type or a NaN on one side only).
static int64_t maxUlp(const checkpoint::Tensor &x,
                      const checkpoint::Tensor &y) {
  unsigned bytes = floatBytes(x);
  if (!bytes)
    return -1;
  int64_t worst = 0;
  for (size_t i = 0; i + bytes <= x.data.size(); i += bytes) {
    int64_t d = orderedBits(&x.data[i], bytes) - orderedBits(&y.data[i], bytes);
    worst = std::max(worst, d < 0 ? -d : d);
  }
  return worst;
}

/// Element `i` of a floating-point tensor (f64, f32, bf16, f16).
static double element(const checkpoint::Tensor &t, size_t i) {
  if (t.dtype == "f64") {
    double v;
    std::memcpy(&v, &t.data[8 * i], 8);
    return v;
  }
  if (t.dtype == "f32") {
    float v;
    std::memcpy(&v, &t.data[4 * i], 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, &t.data[2 * i], 2);
  APFloat v(t.dtype == "bf16" ? APFloat::BFloat() : APFloat::IEEEhalf(),
            APInt(16, bits));
  bool lost;
  v.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
  return v.convertToDouble();
}

/// ||x - y|| / ||y|| over the elements whose bits differ (2-norms; 0 when
/// none differ, infinity when y is 0, NaN where an inf or NaN differs);
/// -1 for a type that is not floating point.
static double relativeDifference(const checkpoint::Tensor &x,
                                 const checkpoint::Tensor &y) {
  size_t bytes = floatBytes(x);
  if (!bytes)
    return -1;
  double distance = 0, norm = 0;
  for (size_t i = 0; i < x.data.size() / bytes; ++i) {
    // Equal bits are no difference, also where both are inf or NaN; a NaN
    // or an inf on one side only makes the tensor differ (below).
    if (std::memcmp(&x.data[i * bytes], &y.data[i * bytes], bytes) == 0) {
      double b = element(y, i);
      norm += std::isfinite(b) ? b * b : 0;
      continue;
    }
    double a = element(x, i), b = element(y, i);
    distance += (a - b) * (a - b);
    norm += b * b;
  }
  if (distance == 0)
    return 0;
  return norm == 0 ? INFINITY : std::sqrt(distance / norm);
}

static std::string formatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

/// How far two checkpoints may differ: bit for bit (neither set), by
/// `maxUlp` units in the last place per element, or by `maxRelative`
/// normwise per tensor.
struct Tolerance {
  int64_t maxUlp = 0;
  double maxRelative = -1;
};

static int diff(StringRef a, StringRef b, Tolerance tolerance) {
  int64_t allowedUlp = tolerance.maxUlp;
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
  // The largest difference among those allowed, and where.
  double largest = 0;
  std::string largestIn;
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
    else if (other->data != t.data && tolerance.maxRelative >= 0) {
      double r = relativeDifference(t, *other);
      if (r < 0 || !(r <= tolerance.maxRelative))
        report(describe(t) + " differs" +
               (r >= 0 ? " by " + Twine(formatNumber(r)) + " (normwise)"
                       : Twine()));
      else if (r > largest)
        largest = r, largestIn = describe(t);
    } else if (other->data != t.data) {
      int64_t ulp = allowedUlp > 0 ? maxUlp(t, *other) : -1;
      if (ulp < 0 || ulp > allowedUlp)
        report(describe(t) + " differs" +
               (ulp > 0 ? " by up to " + Twine(ulp) + " ulp" : Twine()));
      else if (ulp > largest)
        largest = static_cast<double>(ulp), largestIn = describe(t);
    }
  }
  for (const checkpoint::Tensor &t : right->tensors)
    if (!left->find(t.role, t.name, t.rank))
      report(describe(t) + " is only in " + b);
  if (differences == 0) {
    outs() << "distopt-checkpoint: " << left->tensors.size();
    if (tolerance.maxRelative >= 0)
      outs() << " tensors equal within " << formatNumber(tolerance.maxRelative)
             << " (normwise)";
    else if (allowedUlp > 0)
      outs() << " tensors equal within " << allowedUlp << " ulp";
    else
      outs() << " tensors bitwise equal";
    outs() << " (saved on " << left->worldSize << " and " << right->worldSize
           << " ranks)\n";
    if (!largestIn.empty())
      outs() << "distopt-checkpoint: largest difference "
             << (tolerance.maxRelative >= 0
                     ? formatNumber(largest)
                     : std::to_string(int64_t(largest)) + " ulp")
             << ", " << largestIn << "\n";
  }
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
    return diff(argv[2], argv[3], Tolerance());
  Tolerance tolerance;
  if (argc == 6 && std::strcmp(argv[1], "diff") == 0 &&
      std::strcmp(argv[2], "--max-ulp") == 0 &&
      !StringRef(argv[3]).getAsInteger(10, tolerance.maxUlp) &&
      tolerance.maxUlp >= 0)
    return diff(argv[4], argv[5], tolerance);
  if (argc == 6 && std::strcmp(argv[1], "diff") == 0 &&
      std::strcmp(argv[2], "--max-rel-diff") == 0 &&
      !StringRef(argv[3]).getAsDouble(tolerance.maxRelative) &&
      tolerance.maxRelative >= 0)
    return diff(argv[4], argv[5], tolerance);
  if (argc == 4 && std::strcmp(argv[1], "fits") == 0)
    return fits(argv[2], argv[3]);
  errs() << "usage: distopt-checkpoint info CKPT\n"
            "       distopt-checkpoint diff [--max-ulp N | --max-rel-diff R] "
            "A B\n"
            "       distopt-checkpoint fits CKPT STEP.json\n";
  return 2;
}
