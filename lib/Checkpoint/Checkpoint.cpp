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
#include "distopt/Support/Limits.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <set>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

namespace distopt::checkpoint {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

/// "[8, 4]", "[]" for a 0-d tensor.
std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + str(shape[i]);
  return text + "]";
}

uint64_t alignTo(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

constexpr char kMagic[8] = {'D', 'O', 'P', 'T', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr size_t kPreambleBytes = 24;
constexpr uint64_t kMaxHeaderBytes = 16 << 20;
constexpr uint64_t kAlignment = 64;

/// zlib's CRC-32 (polynomial 0xEDB88320, reflected), table-driven.
uint32_t crcOf(const char *data, size_t size) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i)
    crc = table[(crc ^ static_cast<uint8_t>(data[i])) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
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
std::string checkPerRankCopies(const Checkpoint &checkpoint) {
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
      return what + " is saved both whole and per rank";
    if (static_cast<int64_t>(list.size()) != checkpoint.worldSize)
      return what + " has " + str(list.size()) + " per-rank copies for " +
             str(checkpoint.worldSize) + " ranks (the header's world size)";
    for (const Tensor *t : list)
      if (t->dtype != list.front()->dtype || t->shape != list.front()->shape)
        return what + ": the copies of ranks " + str(list.front()->rank) +
               " and " + str(t->rank) + " differ in dtype or shape";
  }
  return "";
}

} // namespace

size_t elementBytes(std::string_view dtype) {
  // The step interface's element types that the runtime moves (not i1).
  const step::DType *type = step::lookupDType(dtype);
  return type && type->runtimeCode >= 0 ? type->bytes : 0;
}

const Tensor *Checkpoint::find(std::string_view role, std::string_view name,
                               int64_t rank) const {
  for (const Tensor &t : tensors)
    if (t.role == role && t.name == name && t.rank == rank)
      return &t;
  return nullptr;
}

std::string write(const std::string &path, const Checkpoint &checkpoint,
                  int64_t failAfterBytes) {
  auto fail = [&](const std::string &what) { return path + ": " + what; };
  // The header, with offsets relative to the data section.
  json::Array tensors;
  uint64_t dataBytes = 0;
  for (const Tensor &t : checkpoint.tensors) {
    dataBytes = alignTo(dataBytes, kAlignment);
    json::Value entry = json::Object{
        {"role", t.role},
        {"name", t.name},
        {"dtype", t.dtype},
        {"shape", t.shape},
        {"offset", static_cast<int64_t>(dataBytes)},
        {"bytes", static_cast<int64_t>(t.data.size())},
        {"crc32", static_cast<int64_t>(crcOf(t.data.data(), t.data.size()))}};
    if (t.rank >= 0)
      entry.set("rank", t.rank);
    tensors.push_back(std::move(entry));
    dataBytes += t.data.size();
  }
  json::Value header =
      json::Object{{"format", "distopt-checkpoint"},
                   {"version", static_cast<int64_t>(kVersion)},
                   {"world_size", checkpoint.worldSize},
                   {"step", checkpoint.step},
                   {"model", checkpoint.model},
                   {"data_bytes", static_cast<int64_t>(dataBytes)},
                   {"tensors", std::move(tensors)}};
  std::string headerText = header.str();

  std::string preamble(kMagic, sizeof(kMagic));
  append<uint32_t>(preamble, kVersion);
  append<uint32_t>(preamble, crcOf(headerText.data(), headerText.size()));
  append<uint64_t>(preamble, headerText.size());
  uint64_t dataStart = alignTo(kPreambleBytes + headerText.size(), kAlignment);
  std::string padding(dataStart - kPreambleBytes - headerText.size(), '\0');

  // Into a temporary file beside the target, so that the rename is atomic
  // and a crash at any point leaves the previous checkpoint as it was.
  std::string temporary = path + ".tmp." + str(::getpid());
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
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    int error = errno;
    ::unlink(temporary.c_str());
    return fail(std::string("cannot rename the temporary file into place: ") +
                std::strerror(error));
  }
  // The rename is durable once the directory is.
  size_t slash = path.rfind('/');
  std::string directory = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  int dirFd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd >= 0) {
    ::fsync(dirFd);
    ::close(dirFd);
  }
  return "";
}

json::Expected<Checkpoint> read(const std::string &path) {
  using Result = json::Expected<Checkpoint>;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat info;
  if (fd < 0 || ::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    std::string why = fd < 0                  ? std::strerror(errno)
                      : S_ISDIR(info.st_mode) ? "Is a directory"
                                              : "not a regular file";
    if (fd >= 0)
      ::close(fd);
    return Result::failure(path + ": cannot read: " + why);
  }
  std::string bytes;
  bytes.resize(static_cast<size_t>(info.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      std::string why = n < 0 ? std::strerror(errno) : "the file shrank";
      ::close(fd);
      return Result::failure(path + ": cannot read: " + why);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return decode(bytes, path);
}

json::Expected<Checkpoint> decode(std::string_view bytes,
                                  const std::string &path) {
  using Result = json::Expected<Checkpoint>;
  auto fail = [&](const std::string &what) {
    return Result::failure(path + ": " + what);
  };
  uint64_t size = bytes.size();
  if (size < kPreambleBytes)
    return fail("truncated: " + str(size) +
                " bytes, shorter than the 24-byte preamble");
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    return fail("not a distopt checkpoint (no DOPTCKPT magic)");
  uint32_t version = load<uint32_t>(bytes.data() + 8);
  if (version != kVersion)
    return fail("format version " + str(version) +
                "; this distopt-run reads version " + str(kVersion));
  uint32_t headerCrc = load<uint32_t>(bytes.data() + 12);
  uint64_t headerBytes = load<uint64_t>(bytes.data() + 16);
  if (headerBytes > kMaxHeaderBytes)
    return fail("a header of " + std::to_string(headerBytes) +
                " bytes is over the 16 MiB limit (corrupted)");
  if (kPreambleBytes + headerBytes > size)
    return fail("truncated: the header needs " +
                str(kPreambleBytes + headerBytes) + " bytes, the file has " +
                str(size));
  std::string_view headerText = bytes.substr(kPreambleBytes, headerBytes);
  if (crcOf(headerText.data(), headerText.size()) != headerCrc)
    return fail("the header's checksum does not match (corrupted)");

  json::Expected<json::Value> parsed = json::parse(headerText);
  if (!parsed)
    return fail("malformed header: " + parsed.error());
  const json::Value *header = parsed->getObject() ? &*parsed : nullptr;
  auto integer = [&](const json::Value *o, std::string_view key,
                     int64_t &out) -> bool {
    const json::Value *v = o ? o->get(key) : nullptr;
    std::optional<int64_t> value = v ? v->getInteger() : std::nullopt;
    if (!value)
      return false;
    out = *value;
    return true;
  };
  auto string = [&](const json::Value *o, std::string_view key,
                    std::string &out) -> bool {
    const json::Value *v = o ? o->get(key) : nullptr;
    const std::string *value = v ? v->getString() : nullptr;
    if (!value)
      return false;
    out = *value;
    return true;
  };
  auto array = [](const json::Value *o,
                  std::string_view key) -> const json::Array * {
    const json::Value *v = o ? o->get(key) : nullptr;
    return v ? v->getArray() : nullptr;
  };
  Checkpoint checkpoint;
  int64_t dataBytes = 0, headerVersion = 0;
  std::string format;
  // The header repeats the preamble's version: both must be this reader's.
  if (!integer(header, "version", headerVersion))
    return fail("malformed header: no version");
  if (headerVersion != kVersion)
    return fail("header format version " + str(headerVersion) +
                "; this distopt reads version " + str(kVersion));
  if (!string(header, "format", format) || format != "distopt-checkpoint" ||
      !integer(header, "world_size", checkpoint.worldSize) ||
      !integer(header, "step", checkpoint.step) ||
      !integer(header, "data_bytes", dataBytes) ||
      !string(header, "model", checkpoint.model) || !array(header, "tensors"))
    return fail("malformed header: format, world_size, step, model, "
                "data_bytes and tensors are required");
  if (checkpoint.worldSize < 1 || checkpoint.worldSize > kMaxWorldSize ||
      checkpoint.step < 0 || dataBytes < 0)
    return fail("malformed header: world_size " + str(checkpoint.worldSize) +
                " (1 to " + str(kMaxWorldSize) + "), step " +
                str(checkpoint.step) + ", data_bytes " + str(dataBytes));
  uint64_t dataStart = alignTo(kPreambleBytes + headerBytes, kAlignment);
  if (dataStart + static_cast<uint64_t>(dataBytes) != size)
    return fail(std::string(dataStart + static_cast<uint64_t>(dataBytes) > size
                                ? "truncated"
                                : "extended") +
                ": the header describes " +
                std::to_string(dataStart + dataBytes) +
                " bytes, the file has " + str(size));

  // Every byte is covered: padding must be zero, so that no bit flip
  // anywhere in the file goes unnoticed.
  auto zero = [&](uint64_t from, uint64_t to) {
    std::string_view span = bytes.substr(from, to - from);
    return std::all_of(span.begin(), span.end(), [](char c) { return c == 0; });
  };
  if (!zero(kPreambleBytes + headerBytes, dataStart))
    return fail("nonzero padding after the header (corrupted)");
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  std::set<std::tuple<std::string, std::string, int64_t>> seen;
  for (const json::Value &value : *array(header, "tensors")) {
    const json::Value *entry = value.getObject() ? &value : nullptr;
    Tensor t;
    int64_t offset, length, crc;
    if (!string(entry, "role", t.role) || !string(entry, "name", t.name) ||
        !string(entry, "dtype", t.dtype) || !integer(entry, "offset", offset) ||
        !integer(entry, "bytes", length) || !integer(entry, "crc32", crc) ||
        !array(entry, "shape"))
      return fail("malformed header: a tensor needs role, name, dtype, "
                  "shape, offset, bytes and crc32");
    std::string what = "tensor '" + t.role + " " + t.name + "'";
    if (const json::Value *rank = entry->get("rank")) {
      std::optional<int64_t> value = rank->getInteger();
      if (!value || *value < 0 || *value >= checkpoint.worldSize)
        return fail(what + ": rank must be an integer from 0 to " +
                    str(checkpoint.worldSize - 1) +
                    " (the checkpoint's world size is " +
                    str(checkpoint.worldSize) + ")");
      t.rank = *value;
    }
    size_t element = elementBytes(t.dtype);
    if (!element)
      return fail(what + ": unknown dtype '" + t.dtype + "'");
    for (const json::Value &d : *array(entry, "shape")) {
      std::optional<int64_t> dim = d.getInteger();
      if (!dim || *dim < 0)
        return fail(what + ": a shape holds non-negative integers");
      t.shape.push_back(*dim);
    }
    int64_t numel = checkedNumElements(t.shape);
    if (numel < 0)
      return fail(what + ": more than 2^53 elements (corrupted)");
    uint64_t expected = element * static_cast<uint64_t>(numel);
    if (length < 0 || static_cast<uint64_t>(length) != expected)
      return fail(what + ": " + str(length) + " bytes for " +
                  std::to_string(expected) + " bytes of shape and dtype");
    if (offset < 0 || offset % kAlignment != 0 ||
        static_cast<uint64_t>(offset) > static_cast<uint64_t>(dataBytes) ||
        static_cast<uint64_t>(length) >
            static_cast<uint64_t>(dataBytes - offset))
      return fail(what + ": data at [" + str(offset) + ", " + str(offset) +
                  " + " + str(length) + ") lies outside the data section of " +
                  str(dataBytes) + " bytes");
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
  std::sort(extents.begin(), extents.end());
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
  std::string perRank = checkPerRankCopies(checkpoint);
  if (!perRank.empty())
    return fail(perRank);
  return checkpoint;
}

std::string logicalName(std::string_view role, std::string_view argName,
                        std::string_view entry) {
  if (role != "state")
    return std::string(entry);
  size_t dot = argName.find('.');
  return std::string(entry) +
         std::string(dot == std::string_view::npos ? "" : argName.substr(dot));
}

std::string checkFits(const Checkpoint &checkpoint,
                      const step::Interface &step) {
  std::map<std::tuple<std::string, std::string, int64_t>, const Tensor *> index;
  for (const Tensor &t : checkpoint.tensors)
    index[{t.role, t.name, t.rank}] = &t;
  std::set<const Tensor *> used;
  auto need = [&](std::string_view role, const std::string &name,
                  std::string_view dtype, const std::vector<int64_t> &shape,
                  int64_t rank) -> std::string {
    auto it = index.find({std::string(role), name, rank});
    std::string what = "'" + std::string(role) + " " + name + "'";
    if (it == index.end())
      return "has no " + what + " for this step";
    const Tensor &t = *it->second;
    if (t.dtype != dtype || t.shape != shape)
      return what + " is " + t.dtype + shapeText(t.shape) +
             ", the step wants " + std::string(dtype) + shapeText(shape);
    used.insert(&t);
    return "";
  };
  for (const step::Value &arg : step.args) {
    bool saved = arg.role == step::Role::Param ||
                 arg.role == step::Role::MainParam ||
                 arg.role == step::Role::State;
    std::string_view role = step::roleName(arg.role);
    std::string_view dtype = arg.dtype->name;
    // A hyperparameter (a 0-d tensor) is kept where the checkpoint has it:
    // one saved with compiled hyperparameters has none.
    if (!arg.isTensor() && arg.role == step::Role::Hyperparameter) {
      if (index.count({std::string(role), arg.name, -1}))
        if (std::string error = need(role, arg.name, dtype, {}, -1);
            !error.empty())
          return error;
      continue;
    }
    // Scalar state (a loss scale) is a 0-d tensor.
    if (!arg.isTensor() && arg.role == step::Role::State &&
        arg.dtype->runtimeCode >= 0) {
      if (std::string error = need(role, arg.name, dtype, {}, -1);
          !error.empty())
        return error;
      continue;
    }
    if (!arg.isTensor() || !saved)
      continue;
    if (arg.savedPerRank() && checkpoint.worldSize != step.worldSize)
      return "'" + arg.name +
             "' is per-rank state (PowerSGD's error feedback) saved on " +
             str(checkpoint.worldSize) + " ranks; it cannot resume on " +
             str(step.worldSize);
    if (arg.layout.empty()) {
      for (int64_t r = arg.savedPerRank() ? 0 : -1,
                   end = arg.savedPerRank() ? step.worldSize : 0;
           r < end; ++r) {
        std::string error = need(role, arg.name, dtype, *arg.shape, r);
        if (!error.empty())
          return error;
      }
      continue;
    }
    for (const step::LayoutEntry &e : arg.layout) {
      std::string error =
          need(role, logicalName(role, arg.name, e.name), dtype, e.shape, -1);
      if (!error.empty())
        return error;
    }
  }
  for (const Tensor &t : checkpoint.tensors)
    if (!used.count(&t))
      return "holds '" + t.role + " " + t.name +
             "', which this step does not have (a checkpoint of another "
             "model or optimizer?)";
  return "";
}

} // namespace distopt::checkpoint
