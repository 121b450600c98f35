//===- distopt-checkpoint.cpp - inspect and compare checkpoints
//------------===//
//
//   distopt-checkpoint info CKPT      validate; print the header and tensors
//   distopt-checkpoint diff A B       compare tensor by tensor (bitwise),
//                                     whatever world size each was saved at
//
// Exit status: 0 valid / equal, 1 otherwise (with the reason on stderr).
//
//===----------------------------------------------------------------------===//

#include "distopt/Checkpoint/Checkpoint.h"

#include "llvm/Support/CRC.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

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
  Expected<checkpoint::Checkpoint> ckpt = checkpoint::read(path);
  if (!ckpt) {
    errs() << "distopt-checkpoint: " << toString(ckpt.takeError()) << "\n";
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

static int diff(StringRef a, StringRef b) {
  Expected<checkpoint::Checkpoint> left = checkpoint::read(a);
  if (!left) {
    errs() << "distopt-checkpoint: " << toString(left.takeError()) << "\n";
    return 1;
  }
  Expected<checkpoint::Checkpoint> right = checkpoint::read(b);
  if (!right) {
    errs() << "distopt-checkpoint: " << toString(right.takeError()) << "\n";
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
    else if (other->data != t.data)
      report(describe(t) + " differs");
  }
  for (const checkpoint::Tensor &t : right->tensors)
    if (!left->find(t.role, t.name, t.rank))
      report(describe(t) + " is only in " + b);
  if (differences == 0)
    outs() << "distopt-checkpoint: " << left->tensors.size()
           << " tensors bitwise equal (saved on " << left->worldSize << " and "
           << right->worldSize << " ranks)\n";
  return differences ? 1 : 0;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  if (argc == 3 && std::strcmp(argv[1], "info") == 0)
    return info(argv[2]);
  if (argc == 4 && std::strcmp(argv[1], "diff") == 0)
    return diff(argv[2], argv[3]);
  errs() << "usage: distopt-checkpoint info CKPT\n"
            "       distopt-checkpoint diff A B\n";
  return 2;
}
