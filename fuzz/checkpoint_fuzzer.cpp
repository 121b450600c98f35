//===- checkpoint_fuzzer.cpp - libFuzzer: checkpoints past their CRCs -----===//
//
// The input is a header (JSON) and a data section, separated by the first
// NUL byte. The target builds a checkpoint file around them with a valid
// preamble and header checksum, and, when the header parses, the tensors'
// CRC-32s recomputed over the bytes their offsets point at: the fuzzer gets
// past the checksums to the checks of what the header says. Reading it must
// give a checkpoint or an error, never a crash; what reads must write and
// read back the same.
//
//===----------------------------------------------------------------------===//

#include "distopt/Checkpoint/Checkpoint.h"
#include "distopt/Support/JSON.h"

#include "llvm/Support/CRC.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <cstring>

namespace {

uint32_t crcOf(llvm::StringRef bytes) {
  return llvm::crc32(llvm::ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()));
}

/// The header with each tensor's crc32 set to that of the data it points at
/// (where its offset and length lie in `data`).
std::string fixChecksums(llvm::StringRef header, llvm::StringRef data) {
  llvm::Expected<llvm::json::Value> parsed = distopt::parseJSON(header);
  if (!parsed) {
    llvm::consumeError(parsed.takeError());
    return header.str();
  }
  llvm::json::Object *root = parsed->getAsObject();
  llvm::json::Array *tensors = root ? root->getArray("tensors") : nullptr;
  if (!tensors)
    return header.str();
  for (llvm::json::Value &t : *tensors) {
    llvm::json::Object *entry = t.getAsObject();
    if (!entry)
      continue;
    std::optional<int64_t> offset = entry->getInteger("offset");
    std::optional<int64_t> bytes = entry->getInteger("bytes");
    if (offset && bytes && *offset >= 0 && *bytes >= 0 &&
        static_cast<uint64_t>(*offset) <= data.size() &&
        static_cast<uint64_t>(*bytes) <= data.size() - *offset)
      (*entry)["crc32"] = static_cast<int64_t>(
          crcOf(data.substr(*offset, static_cast<size_t>(*bytes))));
  }
  std::string out;
  llvm::raw_string_ostream(out) << *parsed;
  return out;
}

template <typename T> void append(std::string &out, T value) {
  out.append(reinterpret_cast<const char *>(&value), sizeof(T));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef input(reinterpret_cast<const char *>(data), size);
  auto [header, body] = input.split('\0');
  std::string text = fixChecksums(header, body);
  std::string file("DOPTCKPT", 8);
  append<uint32_t>(file, 1);
  append<uint32_t>(file, crcOf(text));
  append<uint64_t>(file, text.size());
  file += text;
  file.resize((file.size() + 63) / 64 * 64, '\0');
  file += body.str();

  auto ckpt = distopt::checkpoint::decode(file, "fuzz");
  if (!ckpt)
    return 0;
  // What reads must write and read back the same.
  llvm::SmallString<128> path;
  if (llvm::sys::fs::createTemporaryFile("distopt-fuzz", "ckpt", path))
    return 0;
  std::string error = distopt::checkpoint::write(path.str().str(), *ckpt);
  if (!error.empty()) {
    llvm::errs() << "a checkpoint that reads does not write: " << error << "\n";
    std::abort();
  }
  auto again = distopt::checkpoint::read(path.str().str());
  llvm::sys::fs::remove(path);
  if (!again) {
    llvm::errs() << "a written checkpoint does not read back: " << again.error()
                 << "\n";
    std::abort();
  }
  if (again->tensors.size() != ckpt->tensors.size() ||
      again->worldSize != ckpt->worldSize || again->step != ckpt->step) {
    llvm::errs() << "a checkpoint changed when written and read back\n";
    std::abort();
  }
  for (size_t i = 0; i < ckpt->tensors.size(); ++i)
    if (again->tensors[i].data != ckpt->tensors[i].data ||
        again->tensors[i].shape != ckpt->tensors[i].shape) {
      llvm::errs() << "tensor " << i << " changed when written and read\n";
      std::abort();
    }
  return 0;
}
