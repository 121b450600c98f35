//===- Checkpoint.cpp - parameters and optimizer state on disk --*- C++ -*-===//
//
// Layout (docs/checkpoint.md), little-endian:
//   0   8 bytes  magic "DOPTCKPT"
//   8   u32      format version (1)
//   12  u32      CRC-32 of the header
//   16  u64      header length H (at most 16 MiB)
//   24  H bytes  header, JSON
//   D = 24 + H rounded up to 64: the data; each tensor at D + its offset.
//
//===----------------------------------------------------------------------===//

#include "distopt/Checkpoint/Checkpoint.h"
#include "distopt/StepInterface/StepInterface.h"
#include "distopt/Support/JSON.h"
#include "distopt/Support/Limits.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CRC.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <set>
#include <tuple>
#include <unistd.h>

using namespace llvm;

namespace distopt::checkpoint {

namespace {

constexpr char kMagic[8] = {'D', 'O', 'P', 'T', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr size_t kPreambleBytes = 24;
constexpr uint64_t kMaxHeaderBytes = 16 << 20;
constexpr uint64_t kAlignment = 64;

uint32_t crcOf(const char *data, size_t size) {
  return llvm::crc32(
      ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(data), size));
}

template <typename T> T load(const char *p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

template <typename T> void append(std::string &out, T value) {
  out.append(reinterpret_cast<const char *>(&value), sizeof(T));
}

/// Writes all of [data, data + size) to `fd`, counting bytes against the
/// test's kill point.
struct Writer {
  int fd;
  int64_t written = 0;
  int64_t failAfterBytes;

  bool put(const char *data, size_t size) {
    while (size > 0) {
      size_t chunk = std::min<size_t>(size, 1 << 20);
      if (failAfterBytes >= 0 &&
          written + static_cast<int64_t>(chunk) >= failAfterBytes) {
        chunk = static_cast<size_t>(std::max<int64_t>(
            0, failAfterBytes - written)); // up to the kill point
        if (chunk > 0 && ::write(fd, data, chunk) < 0)
          return false;
        std::raise(SIGKILL);
      }
      ssize_t n = ::write(fd, data, chunk);
      if (n < 0) {
        if (errno == EINTR)
          continue;
        return false;
      }
      data += n;
      size -= static_cast<size_t>(n);
      written += n;
    }
    return true;
  }
};

/// State that differs per rank (PowerSGD's error feedback) is saved once per
/// rank of the run that saved it: every rank exactly once, all copies of one
/// dtype and shape, and no whole copy beside them. A header that says
/// another world size than its copies hold would drop or invent a rank's
/// state on resume.
Error checkPerRankCopies(const Checkpoint &checkpoint) {
  std::map<std::pair<std::string, std::string>, std::vector<const Tensor *>>
      copies;
  std::set<std::pair<std::string, std::string>> whole;
  for (const Tensor &t : checkpoint.tensors) {
    if (t.rank < 0)
      whole.insert({t.role, t.name});
    else
      copies[{t.role, t.name}].push_back(&t);
  }
  for (auto &[key, list] : copies) {
    std::string what = "tensor '" + key.first + " " + key.second + "'";
    if (whole.count(key))
      return createStringError(inconvertibleErrorCode(),
                               what + " is saved both whole and per rank");
    if (static_cast<int64_t>(list.size()) != checkpoint.worldSize)
      return createStringError(
          inconvertibleErrorCode(),
          what + " has " + Twine(list.size()) + " per-rank copies for " +
              Twine(checkpoint.worldSize) + " ranks (the header's world size)");
    for (const Tensor *t : list)
      if (t->dtype != list.front()->dtype || t->shape != list.front()->shape)
        return createStringError(
            inconvertibleErrorCode(),
            what + ": the copies of ranks " + Twine(list.front()->rank) +
                " and " + Twine(t->rank) + " differ in dtype or shape");
  }
  return Error::success();
}

} // namespace

size_t elementBytes(StringRef dtype) {
  // The step interface's element types that the runtime moves (not i1).
  const step::DType *type = step::lookupDType(dtype);
  return type && type->runtimeCode >= 0 ? type->bytes : 0;
}

const Tensor *Checkpoint::find(StringRef role, StringRef name,
                               int64_t rank) const {
  for (const Tensor &t : tensors)
    if (t.role == role && t.name == name && t.rank == rank)
      return &t;
  return nullptr;
}

Error write(StringRef path, const Checkpoint &checkpoint,
            int64_t failAfterBytes) {
  auto fail = [&](const Twine &what) {
    return createStringError(inconvertibleErrorCode(), path + ": " + what);
  };
  // The header, with offsets relative to the data section.
  json::Array tensors;
  uint64_t dataBytes = 0;
  for (const Tensor &t : checkpoint.tensors) {
    dataBytes = alignTo(dataBytes, kAlignment);
    json::Object entry{
        {"role", t.role},
        {"name", t.name},
        {"dtype", t.dtype},
        {"shape", json::Array(t.shape)},
        {"offset", static_cast<int64_t>(dataBytes)},
        {"bytes", static_cast<int64_t>(t.data.size())},
        {"crc32", static_cast<int64_t>(crcOf(t.data.data(), t.data.size()))}};
    if (t.rank >= 0)
      entry["rank"] = t.rank;
    tensors.push_back(std::move(entry));
    dataBytes += t.data.size();
  }
  json::Object header{{"format", "distopt-checkpoint"},
                      {"version", static_cast<int64_t>(kVersion)},
                      {"world_size", checkpoint.worldSize},
                      {"step", checkpoint.step},
                      {"model", checkpoint.model},
                      {"data_bytes", static_cast<int64_t>(dataBytes)},
                      {"tensors", std::move(tensors)}};
  std::string headerText;
  raw_string_ostream(headerText) << json::Value(std::move(header));

  std::string preamble(kMagic, sizeof(kMagic));
  append<uint32_t>(preamble, kVersion);
  append<uint32_t>(preamble, crcOf(headerText.data(), headerText.size()));
  append<uint64_t>(preamble, headerText.size());
  uint64_t dataStart = alignTo(kPreambleBytes + headerText.size(), kAlignment);
  std::string padding(dataStart - kPreambleBytes - headerText.size(), '\0');

  // Into a temporary file beside the target, so that the rename is atomic
  // and a crash at any point leaves the previous checkpoint as it was.
  std::string temporary =
      (path + ".tmp." + Twine(static_cast<int64_t>(::getpid()))).str();
  int fd =
      ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return fail("cannot create " + temporary + ": " + std::strerror(errno));
  Writer writer{fd, 0, failAfterBytes};
  bool ok = writer.put(preamble.data(), preamble.size()) &&
            writer.put(headerText.data(), headerText.size()) &&
            writer.put(padding.data(), padding.size());
  uint64_t at = 0;
  for (const Tensor &t : checkpoint.tensors) {
    if (!ok)
      break;
    std::string gap(alignTo(at, kAlignment) - at, '\0');
    ok = writer.put(gap.data(), gap.size()) &&
         writer.put(t.data.data(), t.data.size());
    at = alignTo(at, kAlignment) + t.data.size();
  }
  int savedErrno = errno;
  ok = ok && ::fsync(fd) == 0;
  savedErrno = ok ? 0 : (savedErrno ? savedErrno : errno);
  ok = (::close(fd) == 0) && ok;
  if (!ok) {
    ::unlink(temporary.c_str());
    return fail("cannot write " + temporary + ": " +
                std::strerror(savedErrno ? savedErrno : errno));
  }
  if (::rename(temporary.c_str(), path.str().c_str()) != 0) {
    int error = errno;
    ::unlink(temporary.c_str());
    return fail(Twine("cannot rename the temporary file into place: ") +
                std::strerror(error));
  }
  // The rename is durable once the directory is.
  SmallString<256> directory(path);
  sys::path::remove_filename(directory);
  if (directory.empty())
    directory = ".";
  int dirFd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd >= 0) {
    ::fsync(dirFd);
    ::close(dirFd);
  }
  return Error::success();
}

Expected<Checkpoint> read(StringRef path) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> file =
      MemoryBuffer::getFile(path, /*IsText=*/false,
                            /*RequiresNullTerminator=*/false);
  if (!file)
    return createStringError(inconvertibleErrorCode(),
                             path +
                                 ": cannot read: " + file.getError().message());
  return decode((*file)->getBuffer(), path);
}

Expected<Checkpoint> decode(StringRef bytes, StringRef path) {
  auto fail = [&](const Twine &what) -> Error {
    return createStringError(inconvertibleErrorCode(), path + ": " + what);
  };
  uint64_t size = bytes.size();
  if (size < kPreambleBytes)
    return fail("truncated: " + Twine(size) +
                " bytes, shorter than the 24-byte preamble");
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    return fail("not a distopt checkpoint (no DOPTCKPT magic)");
  uint32_t version = load<uint32_t>(bytes.data() + 8);
  if (version != kVersion)
    return fail("format version " + Twine(version) +
                "; this distopt-run reads version " + Twine(kVersion));
  uint32_t headerCrc = load<uint32_t>(bytes.data() + 12);
  uint64_t headerBytes = load<uint64_t>(bytes.data() + 16);
  if (headerBytes > kMaxHeaderBytes)
    return fail("a header of " + Twine(headerBytes) +
                " bytes is over the 16 MiB limit (corrupted)");
  if (kPreambleBytes + headerBytes > size)
    return fail("truncated: the header needs " +
                Twine(kPreambleBytes + headerBytes) + " bytes, the file has " +
                Twine(size));
  StringRef headerText = bytes.substr(kPreambleBytes, headerBytes);
  if (crcOf(headerText.data(), headerText.size()) != headerCrc)
    return fail("the header's checksum does not match (corrupted)");

  Expected<json::Value> parsed = parseJSON(headerText);
  if (!parsed)
    return fail("malformed header: " + toString(parsed.takeError()));
  const json::Object *header = parsed->getAsObject();
  auto integer = [&](const json::Object *o, StringRef key,
                     int64_t &out) -> bool {
    std::optional<int64_t> value = o ? o->getInteger(key) : std::nullopt;
    if (!value)
      return false;
    out = *value;
    return true;
  };
  auto string = [&](const json::Object *o, StringRef key,
                    std::string &out) -> bool {
    std::optional<StringRef> value = o ? o->getString(key) : std::nullopt;
    if (!value)
      return false;
    out = value->str();
    return true;
  };
  Checkpoint checkpoint;
  int64_t dataBytes = 0;
  std::string format;
  if (!string(header, "format", format) || format != "distopt-checkpoint" ||
      !integer(header, "world_size", checkpoint.worldSize) ||
      !integer(header, "step", checkpoint.step) ||
      !integer(header, "data_bytes", dataBytes) ||
      !string(header, "model", checkpoint.model) ||
      !header->getArray("tensors"))
    return fail("malformed header: format, world_size, step, model, "
                "data_bytes and tensors are required");
  if (checkpoint.worldSize < 1 || checkpoint.worldSize > kMaxWorldSize ||
      checkpoint.step < 0 || dataBytes < 0)
    return fail("malformed header: world_size " + Twine(checkpoint.worldSize) +
                " (1 to " + Twine(kMaxWorldSize) + "), step " +
                Twine(checkpoint.step) + ", data_bytes " + Twine(dataBytes));
  uint64_t dataStart = alignTo(kPreambleBytes + headerBytes, kAlignment);
  if (dataStart + static_cast<uint64_t>(dataBytes) != size)
    return fail(
        (dataStart + static_cast<uint64_t>(dataBytes) > size ? "truncated"
                                                             : "extended") +
        Twine(": the header describes ") + Twine(dataStart + dataBytes) +
        " bytes, the file has " + Twine(size));

  // Every byte is covered: padding must be zero, so that no bit flip
  // anywhere in the file goes unnoticed.
  auto zero = [&](uint64_t from, uint64_t to) {
    return llvm::all_of(bytes.substr(from, to - from),
                        [](char c) { return c == 0; });
  };
  if (!zero(kPreambleBytes + headerBytes, dataStart))
    return fail("nonzero padding after the header (corrupted)");
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  std::set<std::tuple<std::string, std::string, int64_t>> seen;
  for (const json::Value &value : *header->getArray("tensors")) {
    const json::Object *entry = value.getAsObject();
    Tensor t;
    int64_t offset, length, crc;
    if (!string(entry, "role", t.role) || !string(entry, "name", t.name) ||
        !string(entry, "dtype", t.dtype) || !integer(entry, "offset", offset) ||
        !integer(entry, "bytes", length) || !integer(entry, "crc32", crc) ||
        !entry->getArray("shape"))
      return fail("malformed header: a tensor needs role, name, dtype, "
                  "shape, offset, bytes and crc32");
    std::string what = "tensor '" + t.role + " " + t.name + "'";
    if (const json::Value *rank = entry->get("rank")) {
      std::optional<int64_t> value = rank->getAsInteger();
      if (!value || *value < 0 || *value >= checkpoint.worldSize)
        return fail(what + ": rank must be an integer from 0 to " +
                    Twine(checkpoint.worldSize - 1) +
                    " (the checkpoint's world size is " +
                    Twine(checkpoint.worldSize) + ")");
      t.rank = *value;
    }
    size_t element = elementBytes(t.dtype);
    if (!element)
      return fail(what + ": unknown dtype '" + t.dtype + "'");
    for (const json::Value &d : *entry->getArray("shape")) {
      std::optional<int64_t> dim = d.getAsInteger();
      if (!dim || *dim < 0)
        return fail(what + ": a shape holds non-negative integers");
      t.shape.push_back(*dim);
    }
    int64_t numel = checkedNumElements(t.shape);
    if (numel < 0)
      return fail(what + ": more than 2^53 elements (corrupted)");
    uint64_t expected = element * static_cast<uint64_t>(numel);
    if (length < 0 || static_cast<uint64_t>(length) != expected)
      return fail(what + ": " + Twine(length) + " bytes for " +
                  Twine(expected) + " bytes of shape and dtype");
    if (offset < 0 || offset % kAlignment != 0 ||
        static_cast<uint64_t>(offset) > static_cast<uint64_t>(dataBytes) ||
        static_cast<uint64_t>(length) >
            static_cast<uint64_t>(dataBytes - offset))
      return fail(what + ": data at [" + Twine(offset) + ", " + Twine(offset) +
                  " + " + Twine(length) +
                  ") lies outside the data section of " + Twine(dataBytes) +
                  " bytes");
    const char *data = bytes.data() + dataStart + offset;
    if (crcOf(data, length) != static_cast<uint32_t>(crc))
      return fail(what + ": its checksum does not match (corrupted)");
    if (!seen.insert({t.role, t.name, t.rank}).second)
      return fail(what + " appears twice");
    t.data.assign(data, data + length);
    checkpoint.tensors.push_back(std::move(t));
    extents.push_back({static_cast<uint64_t>(offset),
                       static_cast<uint64_t>(offset + length)});
  }
  llvm::sort(extents);
  uint64_t covered = 0;
  for (auto [begin, end] : extents) {
    if (begin < covered)
      return fail("tensors overlap in the data section (corrupted)");
    if (!zero(dataStart + covered, dataStart + begin))
      return fail("nonzero padding between tensors (corrupted)");
    covered = end;
  }
  if (!zero(dataStart + covered, size))
    return fail("nonzero bytes after the last tensor (corrupted)");
  if (Error error = checkPerRankCopies(checkpoint))
    return fail(toString(std::move(error)));
  return checkpoint;
}

std::string logicalName(StringRef role, StringRef argName, StringRef entry) {
  if (role != "state")
    return entry.str();
  size_t dot = argName.find('.');
  return (entry + (dot == StringRef::npos ? "" : argName.substr(dot))).str();
}

Error checkFits(const Checkpoint &checkpoint, const step::Interface &step) {
  auto fail = [](const Twine &what) -> Error {
    return createStringError(inconvertibleErrorCode(), what);
  };
  std::map<std::tuple<std::string, std::string, int64_t>, const Tensor *> index;
  for (const Tensor &t : checkpoint.tensors)
    index[{t.role, t.name, t.rank}] = &t;
  std::set<const Tensor *> used;
  auto need = [&](StringRef role, const std::string &name, StringRef dtype,
                  const std::vector<int64_t> &shape, int64_t rank) -> Error {
    auto it = index.find({role.str(), name, rank});
    std::string what = "'" + role.str() + " " + name + "'";
    if (it == index.end())
      return fail("has no " + what + " for this step");
    const Tensor &t = *it->second;
    // Both shapes were checked when read (checkedNumElements >= 0).
    if (t.dtype != dtype || t.shape != shape)
      return fail(what + " is " + t.dtype + " of " + Twine(t.shape.size()) +
                  " dims / " + Twine(checkedNumElements(t.shape)) +
                  " elements, the step wants " + dtype + " of " +
                  Twine(checkedNumElements(shape)) + " elements");
    used.insert(&t);
    return Error::success();
  };
  for (const step::Value &arg : step.args) {
    bool saved = arg.role == step::Role::Param ||
                 arg.role == step::Role::MainParam ||
                 arg.role == step::Role::State;
    if (!arg.isTensor() || !saved)
      continue;
    StringRef role = step::roleName(arg.role);
    StringRef dtype = arg.dtype->name;
    if (arg.perRank && checkpoint.worldSize != step.worldSize)
      return fail("'" + arg.name +
                  "' is per-rank state (PowerSGD's error feedback) saved on " +
                  Twine(checkpoint.worldSize) + " ranks; it cannot resume on " +
                  Twine(step.worldSize));
    if (arg.layout.empty()) {
      for (int64_t r = arg.perRank ? 0 : -1,
                   end = arg.perRank ? step.worldSize : 0;
           r < end; ++r)
        if (Error error = need(role, arg.name, dtype, *arg.shape, r))
          return error;
      continue;
    }
    for (const step::LayoutEntry &e : arg.layout)
      if (Error error = need(role, logicalName(role, arg.name, e.name), dtype,
                             e.shape, -1))
        return error;
  }
  for (const Tensor &t : checkpoint.tensors)
    if (!used.count(&t))
      return fail("holds '" + t.role + " " + t.name +
                  "', which this step does not have (a checkpoint of another "
                  "model or optimizer?)");
  return Error::success();
}

} // namespace distopt::checkpoint
